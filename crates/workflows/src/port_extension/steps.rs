//! port-extension as named steps over one [`Job`]: [`validate`](super::validate) → [`open`] (fetch
//! the source, lock and create the work tree) → [`apply_rules`] → [`apply_patches`] → [`review`]
//! → [`build`] → [`import_sweep`] → [`smoke_test`]. [`run`] calls them in that order; a dry run
//! or `--check` stops after [`review`].

use super::package_tests;
use super::workdir::{Applied, WorkTree};
use super::{
    fetch, rel, resolve_review, review_items, smoke, sweep_summary, validate, BuildSummary, Item,
    Outcome, PortFailure, Request, RunMode, VerifyFailure, ARCH_REQUIRED,
};
use crate::build_ext::{self, BuildFailure, SourceSpec};
use crate::codemod::{self, Catalogue, Mode};
use crate::kb::kb;
use crate::paths;
use crate::python;
use anyhow::{bail, Context, Result};
use fs_err as fs;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// One port: the request, the work tree it happens in (locked for the port's lifetime), and the
/// outcome the steps fill in.
pub struct Job<'r> {
    pub req: &'r Request,
    pub started: Instant,
    /// [`port_dir`]: the work tree, the output dir, the smoke test's site.
    pub base: PathBuf,
    pub wt: WorkTree,
    _lock: crate::cache::Lock,
    pub out: Outcome,
    /// Directories of the wheel's requirements installed beside the env for the import sweep:
    /// on the smoke test's and the package tests' path too.
    pub beside: Vec<PathBuf>,
    /// The build's env, toolkit and plan ([`prepare_build`]).
    pub prepared: Option<Arc<build_ext::Prepared>>,
}

impl Job<'_> {
    /// Where the built wheel is installed for the import sweep, the smoke test and the package's
    /// own tests.
    pub fn smoke_site(&self) -> PathBuf {
        self.base.join("smoke-site")
    }
}

/// What [`apply_rules`] leaves for [`review`]: the files and catalogues it ran, and the review
/// items the rules found before the patches.
pub struct RulesApplied {
    pub files: Vec<PathBuf>,
    pub catalogues: Vec<Catalogue>,
    pub after_rules: Vec<Item>,
}

/// Runs the port. `Ok(Err(_))`: it ran and did not verify (a build failure, review items nobody
/// explained, a smoke test whose numbers are wrong); `Err(_)`: it could not run.
pub fn run(req: &Request) -> Result<Result<Outcome, PortFailure>> {
    let with_env_torch;
    let req = match (&req.target.python, &req.target.torch) {
        (Some(python), None) => {
            let mut target = req.target.clone();
            target.torch = Some(env_torch(python)?);
            with_env_torch = Request {
                target,
                ..req.clone()
            };
            &with_env_torch
        }
        _ => req,
    };
    validate(req)?;
    let mut job = open(req)?;
    let rules = apply_rules(&mut job)?;
    apply_patches(&mut job)?;
    review(&mut job, &rules)?;
    if req.mode != RunMode::Full {
        if req.recipe.recipe_less {
            derive_without_env(&mut job)?;
        }
        if req.mode == RunMode::DryRun {
            job.out.diff = Some(job.wt.diff()?);
        }
        return Ok(Ok(finish(job)));
    }
    if let Some(f) = before_build(&mut job)? {
        return Ok(Err(PortFailure::Verify(f)));
    }
    let tree = SourceSpec::Dir(job.wt.root.join(&req.recipe.build.dir));
    if build_ext::jit::applies(&tree)? {
        return prebuild_jit(job, tree);
    }
    let built = match build(&mut job)? {
        Ok(b) => b,
        Err(f) => return Ok(Err(PortFailure::Build(f))),
    };
    let env_python = match (&job.prepared, &req.target.python) {
        (Some(p), _) => p.env.python.clone(),
        (None, Some(p)) => p.clone(),
        (None, None) => python::ensure_torch_env(&target_torch(req))?.python,
    };
    if let Err(f) = import_sweep(&mut job, &env_python, &built)? {
        return Ok(Err(PortFailure::Build(f)));
    }
    if let Err(f) = smoke_test(&mut job, &env_python, &built)? {
        return Ok(Err(PortFailure::Verify(f)));
    }
    if req.run_tests {
        let site = job.smoke_site();
        match package_tests::run(&job.wt.root, &env_python, &site, &job.beside, &job.base)? {
            Some(Ok(report)) => job.out.tests = Some(report),
            Some(Err(f)) => return Ok(Err(PortFailure::Verify(f))),
            None => {}
        }
    }
    Ok(Ok(finish(job)))
}

/// Before building: a stable-ABI port of a package built at run time is refused; review items
/// nobody explained stop a recipe's port; a recipe-less one stops at what will not compile.
fn before_build(job: &mut Job) -> Result<Option<VerifyFailure>> {
    let req = job.req;
    let tree = SourceSpec::Dir(job.wt.root.join(&req.recipe.build.dir));
    if req.stable_abi.is_some() && build_ext::jit::applies(&tree)? {
        // A prebuild is torch.utils.cpp_extension.load's own build against this torch, never
        // the stable ABI: the outcome must not say stable.
        return Ok(Some(VerifyFailure {
            stage: "stable-abi",
            message: "this package compiles its extension at run time (torch.utils.cpp_extension.load), which builds against the user's torch and its C++ API; a stable-ABI port needs a setup.py build of it: add one (a CppExtension/CUDAExtension of the same sources), or port without --stable-abi".into(),
            smoke: None,
        }));
    }
    if job.out.unexplained > 0 && !req.recipe.recipe_less {
        return Ok(Some(VerifyFailure {
            stage: "review",
            message: format!(
                "{} review item(s) are neither resolved by a patch nor accepted in {}/recipe.toml; run with --dry-run to see them, then add a patch or an [[accepted]] entry with the reason",
                job.out.unexplained,
                req.recipe.dir.display()
            ),
            smoke: None,
        }));
    }
    if req.recipe.recipe_less {
        return stop_early(job);
    }
    Ok(None)
}

/// Step 4b (recipe-less): the calls the target torch no longer binds, read from the releases'
/// schemas, join the review items; then the items the compiler will certainly reject — a header
/// the target lacks, a TH/THC name nothing declares, such a call — stop the port before it
/// compiles, each at file:line with what to do.
fn stop_early(job: &mut Job) -> Result<Option<VerifyFailure>> {
    let python = match &job.req.target.python {
        Some(p) => p.clone(),
        None => python::ensure_torch_env(&target_torch(job.req))?.python,
    };
    let purelib = build_ext::probe_env(&python)?.purelib;
    let schemas = super::signature_changes::from_env(&purelib).unwrap_or_else(|e| {
        crate::errln!("warning: the target torch's operator schemas were not read: {e:#}");
        None
    });
    if let Some(s) = &schemas {
        derive_arguments(job, s)?;
    }
    let era = code_era(job);
    let changed = signature_review(job, schemas, era.as_ref()).unwrap_or_else(|e| {
        crate::errln!(
            "warning: the ATen calls were not checked against the releases' schemas: {e:#}"
        );
        Vec::new()
    });
    for x in &changed {
        crate::errln!("warning: {}", x.warning());
    }
    job.out.unexplained += changed.len();
    job.out.review.extend(changed);
    let include = purelib.join("torch/include");
    let dirs = [include.join("torch/csrc/api/include"), include.clone()];
    let target = target_torch(job.req);
    let say = |m: &str| crate::errln!("archsmith: {m}");
    let mut trees = super::header_history::IncludeTrees::new(&say);
    let mut target_read = false;
    let era = era.map(|(v, _)| v);
    // What became of a header the target lacks, read from the releases' include trees; the
    // target's own tree (some 9,500 files) is walked only when a header is missing.
    let mut gone = |h: &str| {
        let mut went = || -> anyhow::Result<_> {
            if !std::mem::replace(&mut target_read, true) {
                trees.insert_dir(target.clone(), include.clone())?;
            }
            super::header_history::went(h, era.as_ref(), &target, &mut trees)
        };
        went()
            .unwrap_or_else(|e| {
                crate::errln!("warning: when torch dropped <{h}> was not read: {e:#}");
                None
            })
            .map(|w| w.describe(h, &target))
    };
    let mut headers = super::certain_failures::Headers {
        include_dirs: &dirs,
        stable_abi: job.req.stable_abi.is_some(),
        gone: &mut gone,
    };
    let certain = super::certain_failures::find(&job.wt.root, &job.out.review, &mut headers)?;
    if certain.is_empty() {
        return Ok(None);
    }
    let lines: Vec<String> = certain.iter().map(|c| format!("  {c}")).collect();
    Ok(Some(VerifyFailure {
        stage: "review",
        message: format!(
            "the port stops before compiling: {} review item(s) the compiler will reject (fix each in the source, or write a recipe with a patch for it):\n{}",
            certain.len(),
            lines.join("\n")
        ),
        smoke: None,
    }))
}

/// The ATen calls the target torch does not bind whose missing arguments the knowledge base
/// derives, completed in the work tree and counted as rewrites, each said with its reason.
fn derive_arguments(job: &mut Job, schemas: &crate::codemod::aten_schema::Schemas) -> Result<()> {
    use super::signature_changes::{derive_arguments, DERIVED_RULE};
    let derived = derive_arguments(&job.wt.root, schemas)?;
    if derived.is_empty() {
        return Ok(());
    }
    for d in &derived {
        crate::errln!("archsmith: {}", d.describe());
        let file = d.file.display().to_string();
        *job.out.rewrites.entry(DERIVED_RULE.into()).or_default() += d.passed.len();
        *job.out
            .changes
            .entry(file)
            .or_default()
            .entry(DERIVED_RULE.into())
            .or_default() += d.passed.len();
    }
    job.out.why.insert(
        DERIVED_RULE.into(),
        "an ATen operator gained an argument without a default whose value the legacy call implies (knowledge base: aten_derived_argument, checked against the target's native_functions.yaml)".into(),
    );
    job.out.files_changed = job.wt.changed_files()?;
    Ok(())
}

/// A dry run or `--check` (no env is made): the derived arguments from the target's schemas as
/// its PyPI wheel ships them (kept under the cache once read), so the diff shows them too.
fn derive_without_env(job: &mut Job) -> Result<()> {
    let say = |m: &str| crate::errln!("archsmith: {m}");
    let mut releases = super::signature_changes::Releases::new(&say);
    match releases.of(&target_torch(job.req)) {
        Ok(schemas) => derive_arguments(job, schemas),
        Err(e) => {
            crate::errln!("warning: ATen calls not completed from the target's schemas: {e:#}");
            Ok(())
        }
    }
}

/// The release the code was written for and where that was read (`--from-torch`, its
/// requirements). A requirement file that cannot be read costs the era (said), not the checks.
/// Nothing said: the dead APIs the rules found bound it.
fn code_era(job: &Job) -> Option<(crate::version::Version, String)> {
    use super::signature_changes::{era, era_from_dead_apis};
    let stated = era(&job.wt.root, job.req.from_torch.as_ref()).unwrap_or_else(|e| {
        crate::errln!("archsmith: the code's era was not read ({e:#}): the histories start at the oldest release read");
        None
    });
    stated.or_else(|| {
        let fired = job.out.rewrites.keys().map(String::as_str);
        let fired = fired.chain(job.out.review.iter().map(|r| r.rule.as_str()));
        era_from_dead_apis(fired, crate::codemod::builtin())
    })
}

/// The review items of the ATen calls the target torch (its env's schemas) no longer binds.
fn signature_review(
    job: &Job,
    schemas: Option<crate::codemod::aten_schema::Schemas>,
    era: Option<&(crate::version::Version, String)>,
) -> Result<Vec<super::ReviewRow>> {
    use super::signature_changes::{oldest_with_schemas, review, Releases};
    let Some(schemas) = schemas else {
        return Ok(Vec::new()); // a target older than 1.12: no schemas to read
    };
    let say = |m: &str| crate::errln!("archsmith: {m}");
    let mut releases = Releases::new(&say);
    let target = target_torch(job.req);
    releases.insert(target.clone(), schemas);
    let oldest = oldest_with_schemas();
    let start = match era {
        Some((v, from)) => {
            // The first release at or after it (`>=1.13` is 1.13.0).
            let floor = v.clone().max(oldest.clone());
            let start = kb()
                .torch
                .iter()
                .map(|r| r.version.clone())
                .filter(|r| *r >= floor)
                .min()
                .unwrap_or(floor);
            say(&format!("the code was written for torch {v} ({from}): its ATen calls' history starts at {start}{}",
                if *v < oldest { " (the oldest release whose wheel ships operator schemas)" } else { "" }));
            start
        }
        None => oldest,
    };
    review(&job.wt.root, &start, &target, &mut releases)
}

/// The release of `python`'s torch (`2.11.0` for `2.11.0+cu130`), read without importing it.
fn env_torch(python: &std::path::Path) -> Result<crate::version::Version> {
    let info = python::probe::probe(python, python::probe::Depth::Files)?;
    let torch = info.torch.with_context(|| {
        format!(
            "--python {} has no torch: give a Python with torch installed",
            python.display()
        )
    })?;
    Ok(crate::version::Version::new(torch.parts()))
}

/// The torch the port targets: `--torch`, else the newest the knowledge base knows.
fn target_torch(req: &Request) -> crate::version::Version {
    req.target
        .torch
        .clone()
        .unwrap_or_else(|| kb().releases.newest_torch.clone())
}

fn finish(mut job: Job) -> Outcome {
    job.out.seconds = job.started.elapsed().as_secs_f64();
    job.out
}

/// Where a port lives: `<cache>/port/<key>`. A recipe that pins its own source is its name; a
/// recipe-less port, or any port of a `--src` directory, is its name and a hash of the source's
/// identity (the canonical directory, the PyPI spec, the git URL and revision): `--src A/ops` and
/// `--src B/ops` are two ports, each with its work tree, wheels and JIT prebuild.
pub fn port_dir(r: &crate::port_extension::recipe::Recipe, src: Option<&Path>) -> Result<PathBuf> {
    let port = paths::cache_dir().join("port");
    let identity = match src {
        Some(dir) => dir
            .canonicalize()
            .with_context(|| format!("--src {}", dir.display()))?
            .display()
            .to_string(),
        None if !r.recipe_less => return Ok(port.join(&r.name)),
        None => format!("{:?}", r.source_kind()?),
    };
    let hash = crate::stamp::key(&identity);
    Ok(port.join(format!("{}-{}", r.name, &hash[..12])))
}

/// Step 1: the source fetched (recipe's pin or `--src`), the port's directory locked (ports of one
/// recipe share the work tree and the output dir), and the work tree made: a git repository
/// whose one commit is the unported source.
pub fn open(req: &Request) -> Result<Job<'_>> {
    let started = Instant::now();
    let r = &req.recipe;
    let (src_dir, source_label, source_pin) = fetch(r, req.src.as_deref())?;
    // Before the work tree is made: a build would find empty submodules only at a missing header.
    // A dry run or --check compiles nothing: it goes on and says so.
    let go_on = req.skip_missing_submodules || req.mode != RunMode::Full;
    build_ext::source::unfilled_submodules(&SourceSpec::Dir(src_dir.clone()), go_on)?;
    let prepared = prepare_build(req)?;
    let mut base = port_dir(r, req.src.as_deref())?;
    if req.stable_abi.is_some() {
        // Its own work tree and wheels: the ordinary port of the same source stays as it was.
        base.as_mut_os_string().push("-stable-abi");
    }
    fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
    let lock = crate::cache::lock(&base.join(".lock"), &mut || {
        crate::errln!(
            "archsmith: waiting for another port of {} to finish",
            r.name
        )
    })?;
    crate::errln!("archsmith: porting {source_label}");
    let wt = WorkTree::create(&src_dir, &base.join(&r.name))?;
    let out = Outcome {
        recipe: r.name.clone(),
        recipe_less: r.recipe_less,
        source: source_label,
        source_pin,
        work_tree: wt.root.clone(),
        files_scanned: 0,
        files_changed: Vec::new(),
        rewrites: BTreeMap::new(),
        changes: BTreeMap::new(),
        why: BTreeMap::new(),
        patches: Vec::new(),
        review: Vec::new(),
        unexplained: 0,
        stable_abi: None,
        diff: None,
        build: None,
        import_sweep: None,
        jit: None,
        smoke: None,
        tests: None,
        seconds: 0.0,
    };
    Ok(Job {
        req,
        started,
        base,
        wt,
        _lock: lock,
        out,
        beside: Vec::new(),
        prepared,
    })
}

/// A build's env, toolkit and arch plan, resolved before the work tree is made: `--arch` is
/// parsed once, against the env that compiles, and build-ext builds with this plan. None for a
/// dry run or `--check` (nothing compiles: [`validate`] checked `--arch` against the flags), and
/// for a stable-ABI port, whose toolkit depends on the target its rules find (build-ext makes
/// its plan then; [`validate`] checked the flags so that a bad arch still fails first).
fn prepare_build(req: &Request) -> Result<Option<Arc<build_ext::Prepared>>> {
    let (RunMode::Full, None, Some(arch)) = (req.mode, &req.stable_abi, &req.arch) else {
        return Ok(None);
    };
    Ok(Some(Arc::new(build_ext::prepare(&req.target, arch, None)?)))
}

/// Step 2: every catalogue of the recipe (its Python rows for the target torch) applied to the
/// recipe's paths; rewrites counted per rule and per file, with why each rule exists.
pub fn apply_rules(job: &mut Job) -> Result<RulesApplied> {
    let r = &job.req.recipe;
    let root = job.wt.root.clone();
    let rule_paths: Vec<PathBuf> = r.rules.paths.iter().map(|p| root.join(p)).collect();
    if let Some(p) = rule_paths.iter().find(|p| !p.exists()) {
        bail!(
            "recipe {}: rules path {} is not in the source ({}); is this the right source for the recipe?",
            r.name,
            p.strip_prefix(&root).unwrap_or(p).display(),
            job.out.source
        );
    }
    let files = codemod::discover(&rule_paths)?;
    let target = target_torch(job.req);
    let mut catalogues = r
        .catalogue_paths()
        .iter()
        .map(|p| Catalogue::load(p).map(|c| c.for_torch(&target)))
        .collect::<Result<Vec<_>>>()?;
    if let Some(ns) = &job.req.stable_abi {
        // After the legacy rules, on their output: the stable-ABI rules and the bindings.
        let mut stable = codemod::catalogue::stable().clone();
        stable.stable_namespace = Some(ns.clone());
        // ATen calls no rule rewrites: through dispatcher wrappers typed from the schemas of
        // the torch the build compiles against.
        let say = |m: &str| crate::errln!("archsmith: {m}");
        stable.stable_schemas = super::signature_changes::stable_schemas(&target, &say);
        catalogues.push(stable);
    }
    let mut after_rules = Vec::new();
    let legacy = catalogues.len() - usize::from(job.req.stable_abi.is_some());
    let out = &mut job.out;
    for (i, cat) in catalogues.iter().enumerate() {
        if i == legacy {
            // The recipe's own patches fix what the legacy rules leave (printf-style checks,
            // `.type()` comparisons): the same code in both ports, so they apply here, before
            // the stable rules rewrite it; `stable/*.patch` come after those (step 3).
            for p in r.patches(false)? {
                out.patches.push(job.wt.apply(&p)?);
            }
        }
        let rep = codemod::run(cat, &files, Mode::Apply)?;
        if let (Some(ns), Some(v)) = (&job.req.stable_abi, &rep.torch_target_version) {
            let version: crate::version::Version = v.parse()?;
            out.stable_abi = Some(super::StableAbi {
                namespace: ns.clone(),
                torch_target_version: v.clone(),
                torch_target_macro: codemod::catalogue::torch_target_macro(&version),
                cuda_runtime: None,
                driver_floor: None,
                ptx_driver_floor: None,
                platform_tag: None,
            });
        }
        for (k, v) in &rep.rewrites {
            *out.rewrites.entry(k.clone()).or_insert(0) += v;
            if let Some(w) = cat.why(k) {
                out.why.entry(k.clone()).or_insert(w);
            }
        }
        for f in rep.files.iter().filter(|f| f.changed) {
            let per = out.changes.entry(rel(&f.path, &root)).or_default();
            for (k, v) in &f.rewrites {
                *per.entry(k.clone()).or_default() += v;
            }
        }
        after_rules.extend(review_items(&rep, &root));
    }
    out.files_scanned = files.len();
    Ok(RulesApplied {
        files,
        catalogues,
        after_rules,
    })
}

/// Step 3: the recipe's patch files, applied in order to the tree the rules produced; a stable
/// port's `stable/*.patch` (its ordinary patches went in before the stable rules, step 2).
pub fn apply_patches(job: &mut Job) -> Result<()> {
    let patches: Vec<Applied> = job
        .req
        .recipe
        .patches(job.req.stable_abi.is_some())?
        .iter()
        .map(|p| job.wt.apply(p))
        .collect::<Result<_>>()?;
    job.out.patches.extend(patches);
    Ok(())
}

/// Step 4: the rules must have nothing more to do after the patches, and each review item is
/// resolved by a patch, accepted by the recipe, or (recipe-less) listed as a warning.
pub fn review(job: &mut Job, rules: &RulesApplied) -> Result<()> {
    let r = &job.req.recipe;
    let mut remaining = Vec::new();
    for cat in &rules.catalogues {
        let rep = codemod::run(cat, &rules.files, Mode::Check)?;
        if rep.files_changed > 0 {
            let which: Vec<String> = rep
                .files
                .iter()
                .filter(|f| f.changed)
                .map(|f| rel(&f.path, &job.wt.root))
                .collect();
            bail!(
                "after the patches, the rules of {} would still change {}: a patch brings back a legacy form; fix the patch",
                cat.name,
                which.join(", ")
            );
        }
        remaining.extend(review_items(&rep, &job.wt.root));
    }
    let review = resolve_review(
        &rules.after_rules,
        &remaining,
        &job.out.patches,
        &r.accepted,
        r.recipe_less,
    );
    for x in review.iter().filter(|x| r.recipe_less && !x.explained) {
        crate::errln!("warning: {}", x.warning());
    }
    job.out.unexplained = review.iter().filter(|x| !x.explained).count();
    job.out.review = review;
    job.out.files_changed = job.wt.changed_files()?;
    Ok(())
}

/// Step 5: the ported tree built by [`build_ext::run`] for the archs (which audits the wheel
/// against the plan and imports it); the recipe's module must be among what it built.
pub fn build(job: &mut Job) -> Result<Result<build_ext::Outcome, BuildFailure>> {
    let r = &job.req.recipe;
    let build_req = build_request(job, SourceSpec::Dir(job.wt.root.join(&r.build.dir)))?;
    let b = match build_ext::run(&build_req)? {
        Ok(b) => b,
        Err(f) => return Ok(Err(f)),
    };
    let mut images: Vec<String> = b
        .record
        .audit
        .files
        .iter()
        .map(|f| format!("{}: {}", f.path, f.sass.join(" ")))
        .collect();
    if b.record.audit.cpu_only {
        images.push(
            "no device code: the package declares no CUDA code, so the arch list did not apply"
                .into(),
        );
    }
    crate::errln!(
        "archsmith: {} {} for {} ({:.0} s compiling); wheel audited ({}) and imported ({})",
        if b.reused {
            "reused the build of"
        } else {
            "built"
        },
        built_name(r, &b),
        b.record.torch_cuda_arch_list,
        b.record.build_seconds,
        images.join("; "),
        b.record.imported.join(", ")
    );
    if !r.build.module.is_empty() && !b.record.imported.contains(&r.build.module) {
        bail!(
            "the wheel's extension modules are {:?}, not {} as recipe {} expects",
            b.record.imported,
            r.build.module,
            r.name
        );
    }
    job.out.build = Some(BuildSummary::of(b.clone()));
    if let Some(stable) = job.out.stable_abi.as_mut() {
        cuda_runtime_of(stable, &b)?;
    }
    Ok(Ok(b))
}

/// A stable port's CUDA runtime, read from the built wheel: linked in when none of its shared
/// objects needs a `libcudart.so.N`, else the ones they need; and the driver floor of the CUDA
/// major that compiled it (nothing of these for a wheel without device code). Its platform tag,
/// which the build gave the wheel's name, for any stable wheel.
fn cuda_runtime_of(stable: &mut super::StableAbi, b: &build_ext::Outcome) -> Result<()> {
    stable.platform_tag = b
        .wheel
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.rsplit_once('-'))
        .map(|(_, platform)| platform.to_string());
    if b.record.audit.cpu_only {
        return Ok(());
    }
    let mut wheel = crate::wheel::Wheel::open(&b.wheel)?;
    let objects: Vec<String> = wheel
        .names()
        .filter(|n| crate::binary::input::is_shared_object_name(n))
        .map(str::to_string)
        .collect();
    let mut needed = std::collections::BTreeSet::new();
    for name in objects {
        let data = wheel.read(&name)?;
        if let Ok(info) = crate::binary::dynamic::read_links(&data) {
            needed.extend(
                info.needed
                    .iter()
                    .filter(|n| n.starts_with("libcudart.so"))
                    .map(|n| n.to_string()),
            );
        }
    }
    let cuda: crate::version::Version = b.record.cuda.parse()?;
    stable.cuda_runtime = Some(match needed.is_empty() {
        true => format!("linked in (CUDA {})", cuda.major_minor()),
        false => needed.into_iter().collect::<Vec<_>>().join(", "),
    });
    stable.driver_floor = kb()
        .cuda_major(cuda.major())
        .map(|m| m.minor_compat_min_driver.to_string());
    stable.ptx_driver_floor = b
        .record
        .ptx_cover
        .as_ref()
        .and_then(|c| c.jit_driver_floor.clone());
    Ok(())
}

/// What the summary says was built: the recipe's module, else the wheel's extension modules
/// (whether they imported or not), else the wheel's file name: never an empty name.
fn built_name(r: &super::recipe::Recipe, b: &build_ext::Outcome) -> String {
    if !r.build.module.is_empty() {
        return r.build.module.clone();
    }
    let modules = crate::wheel::Wheel::open(&b.wheel)
        .map(|zip| build_ext::check::extension_modules(zip.names()))
        .unwrap_or_default();
    match modules.is_empty() {
        true => b.wheel.file_name().map_or_else(
            || b.wheel.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        ),
        false => modules.join(", "),
    }
}

/// The build-ext request of a port: its work tree's build dir, the port's archs and torch.
fn build_request(job: &Job, source: SourceSpec) -> Result<build_ext::Request> {
    let req = job.req;
    let Some(arch) = req.arch.clone() else {
        bail!("{ARCH_REQUIRED}")
    };
    Ok(build_ext::Request {
        source,
        arch,
        target: req.target.clone(),
        out: job.base.join("dist"),
        cache: None,
        jobs: req.jobs,
        // Packages built at once print plain lines: one bar cannot follow several builds.
        progress: match req.pool {
            Some(_) => crate::build_output::progress::Mode::Plain,
            None => req.progress,
        },
        own_arch_flags: req.own_arch_flags,
        serial_extensions: false,
        cpu_only: false,
        dist: None,
        skip_missing_submodules: req.skip_missing_submodules,
        stable_abi_target: job
            .out
            .stable_abi
            .as_ref()
            .map(|s| s.torch_target_macro.clone()),
        pool: req.pool.clone(),
        prepared: job.prepared.clone(),
    })
}

/// A tree of JIT extensions (torch's load(), no build script): build-ext's prebuild in place of
/// the wheel, the import sweep and the smoke test (its own check loads every extension in a
/// process that could not compile).
fn prebuild_jit(mut job: Job, tree: SourceSpec) -> Result<Result<Outcome, PortFailure>> {
    match build_ext::jit::run(&build_request(&job, tree)?)? {
        Ok(o) => {
            crate::errln!(
                "archsmith: prebuilt {} JIT extension(s) for {}, audited, loaded with no compiler on PATH; TORCH_EXTENSIONS_DIR={}",
                o.extensions.len(),
                o.torch_cuda_arch_list,
                o.extensions_dir.display()
            );
            for note in o.notes() {
                crate::errln!("archsmith: {note}");
            }
            job.out.jit = Some(o);
            Ok(Ok(finish(job)))
        }
        Err(f) => Ok(Err(PortFailure::Build(f))),
    }
}

/// Step 6: every module of the built package imported on the target torch, with the wheel's
/// declared requirements (and with `--with-deps` the source's requirements.txt) installed beside
/// the env, then the modules the package imports but never declared (`skimage` in a
/// `__init__.py`), installed the same way (the knowledge base names their distributions). What
/// cannot be installed is reported with its name and never fails the port; a removed torch/NumPy
/// API the catalogue missed fails it, with file:line.
pub fn import_sweep(
    job: &mut Job,
    python: &std::path::Path,
    built: &build_ext::Outcome,
) -> Result<Result<(), BuildFailure>> {
    let wanted = python::requirements::declared(&built.wheel).and_then(|mut reqs| {
        let txt = job.wt.root.join("requirements.txt");
        if job.req.with_deps && txt.is_file() {
            reqs.extend(python::requirements::from_requirements_txt(&txt)?);
        }
        Ok(reqs)
    });
    let wanted = wanted.unwrap_or_else(|e| {
        crate::errln!("warning: the wheel's requirements could not be read: {e:#}");
        Vec::new()
    });
    let mut sweep = sweep_beside(job, python, built, &wanted, &[])?;
    let undeclared = undeclared_requirements(&sweep);
    if !undeclared.is_empty() {
        let names: Vec<String> = undeclared.iter().map(|r| r.name.to_string()).collect();
        crate::errln!(
            "archsmith: the package imports {} without declaring it: installing beside the env",
            names.join(", ")
        );
        let before = job.beside.clone();
        let again = sweep_beside(job, python, built, &wanted, &undeclared)?;
        if again.imported.len() >= sweep.imported.len() {
            sweep = again;
        } else {
            job.beside = before;
        }
    }
    crate::errln!("archsmith: {}", sweep_summary(&sweep));
    let removed: Vec<String> = sweep
        .failures
        .iter()
        .filter(|f| f.kind == "removed-api")
        .map(|f| f.to_string())
        .collect();
    job.out.import_sweep = Some(sweep);
    if removed.is_empty() {
        return Ok(Ok(()));
    }
    Ok(Err(BuildFailure {
        stage: "import",
        message: format!(
            "the ported package still uses torch/NumPy APIs the target lacks, which no rule rewrote:\n{}\nadd a row to crates/codemod/rules/torch-python.toml (or a patch to the recipe)",
            removed.join("\n")
        ),
        first_error: None,
        log: built.log.clone(),
    }))
}

/// `wanted` (and `needed`, for modules that failed to import) installed beside the env (a failed
/// install is a warning: the sweep then names what is missing), and every module of the wheel
/// imported with them.
fn sweep_beside(
    job: &mut Job,
    python: &std::path::Path,
    built: &build_ext::Outcome,
    wanted: &[pep508_rs::Requirement],
    needed: &[pep508_rs::Requirement],
) -> Result<build_ext::check::Sweep> {
    let installed = python::requirements::install_beside_needed(python, wanted, needed);
    let beside = installed.unwrap_or_else(|e| {
        crate::errln!(
            "warning: the package's requirements could not be installed for the import sweep: {e:#}"
        );
        None
    });
    job.beside = beside.iter().map(|(dir, _)| dir.clone()).collect();
    let site = job.smoke_site();
    build_ext::check::ImportCheck::start(python, &site, &job.beside)?.run(&built.wheel, true)
}

/// The distributions of the third-party modules the sweep found missing, those the knowledge
/// base lists; the others stay in the sweep's `not installed`.
pub fn undeclared_requirements(sweep: &build_ext::check::Sweep) -> Vec<pep508_rs::Requirement> {
    let kb = crate::kb::kb();
    let mut names: Vec<&str> = sweep
        .missing()
        .into_iter()
        .filter_map(|m| kb.distribution_for_import(m))
        .collect();
    names.sort();
    names.dedup();
    names
        .iter()
        .filter_map(|n| n.parse::<pep508_rs::Requirement>().ok())
        .collect()
}

/// Step 7: the recipe's smoke test against the built wheel (recipe-less: the generic test over
/// every extension module that imported, in the build's check or in the port's sweep with what
/// it installed beside the env). With none to test, the smoke test is skipped, saying why.
pub fn smoke_test(
    job: &mut Job,
    python: &std::path::Path,
    built: &build_ext::Outcome,
) -> Result<Result<(), VerifyFailure>> {
    let r = &job.req.recipe;
    let mut args = r.smoke.args.clone();
    if r.recipe_less {
        let modules = smoke_modules(built, job.out.import_sweep.as_ref())?;
        if modules.is_empty() {
            let why = skipped_smoke(job.out.import_sweep.as_ref());
            crate::errln!("archsmith: smoke test skipped: {why}");
            job.out.smoke = Some(serde_json::json!({"ok": true, "skipped": why, "modules": {}}));
            return Ok(Ok(()));
        }
        for m in modules {
            args.extend(["--module".to_string(), m]);
        }
    }
    crate::errln!("archsmith: smoke test {}", r.smoke.script.display());
    let site = job.smoke_site();
    Ok(
        smoke(python, &r.smoke_script(), &args, &site, &job.beside)?.map(|report| {
            job.out.smoke = Some(report);
        }),
    )
}

/// The extension modules the generic smoke test imports: those the build's check imported, and
/// those the port's sweep imported once it had installed what the package imports.
fn smoke_modules(
    built: &build_ext::Outcome,
    sweep: Option<&build_ext::check::Sweep>,
) -> Result<Vec<String>> {
    let zip = crate::wheel::Wheel::open(&built.wheel)?;
    let extensions = build_ext::check::extension_modules(zip.names());
    // A module counts only with its packages: warp-rnnt's `__init__` imports `_C` and then fails
    // on `pkg_resources`, which leaves `_C` imported in the sweep's process but not importable
    // in a fresh one.
    let imported: &[String] = sweep.map_or(&[], |s| &s.imported);
    let mut modules: Vec<String> = built
        .record
        .imported
        .iter()
        .chain(imported.iter().filter(|m| imports_alone(m, imported)))
        .filter(|m| !m.is_empty() && extensions.contains(m))
        .cloned()
        .collect();
    modules.sort();
    modules.dedup();
    Ok(modules)
}

/// Whether `module` imported with every package above it (`a.b._C`: `a` and `a.b` too).
fn imports_alone(module: &str, imported: &[String]) -> bool {
    let mut parent = module;
    std::iter::from_fn(|| {
        parent = parent.rsplit_once('.')?.0;
        Some(parent)
    })
    .all(|p| imported.iter().any(|i| i == p))
}

/// Why no extension module could be smoke-tested: what each failed to import on.
fn skipped_smoke(sweep: Option<&build_ext::check::Sweep>) -> String {
    let Some(sweep) = sweep else {
        return "no extension module imported".into();
    };
    let missing = sweep.missing();
    if missing.is_empty() {
        let first = sweep.failures.first().map(|f| format!(" (first: {f})"));
        format!("no extension module imported{}", first.unwrap_or_default())
    } else {
        format!(
            "no extension module imported: the package imports {} (not installed: not declared by the package, and not among the knowledge base's import names; install it beside the env and rerun)",
            missing.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// warp-rnnt 0.4.0: its `__init__` imports `_C`, then fails on `pkg_resources`; the sweep's
    /// process keeps `warp_rnnt._C`, a fresh one cannot import it without its package.
    #[test]
    fn a_module_counts_as_imported_only_with_its_packages() {
        let imported = ["warp_rnnt._C".to_string(), "top_ext".to_string()];
        assert!(!imports_alone("warp_rnnt._C", &imported));
        assert!(imports_alone("top_ext", &imported));
        let all = ["a".to_string(), "a.b".to_string(), "a.b._C".to_string()];
        assert!(imports_alone("a.b._C", &all));
        assert!(!imports_alone("a.b._C", &all[1..]));
    }

    /// Issue 50: `--src A/ops` then `--src B/ops` shared `port/ops`: the second overwrote the
    /// first's work tree and JIT manifest. Each source is its own port; a recipe stays its name.
    #[test]
    fn two_sources_with_one_folder_name_are_two_ports() {
        let tmp = tempfile::tempdir().unwrap();
        let mut dirs = Vec::new();
        for project in ["a", "b"] {
            let d = tmp.path().join(project).join("ops");
            fs::create_dir_all(&d).unwrap();
            fs::write(
                d.join("setup.py"),
                "from setuptools import setup\nsetup()\n",
            )
            .unwrap();
            dirs.push(d);
        }
        let places: Vec<PathBuf> = dirs
            .iter()
            .map(|d| {
                let r = crate::port_extension::recipe_less(d.to_str().unwrap()).unwrap();
                port_dir(&r, None).unwrap()
            })
            .collect();
        assert_ne!(places[0], places[1]);
        for p in &places {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                name.starts_with("ops-") && name.len() == "ops-".len() + 12,
                "{name}"
            );
        }
        // The same source is the same port (its results are found again).
        let again = crate::port_extension::recipe_less(dirs[0].to_str().unwrap()).unwrap();
        assert_eq!(port_dir(&again, None).unwrap(), places[0]);
        let recipe = crate::port_extension::recipe::Recipe::find("legacy-demo").unwrap();
        assert!(port_dir(&recipe, None)
            .unwrap()
            .ends_with("port/legacy-demo"));
        assert_ne!(
            port_dir(&recipe, Some(&dirs[0])).unwrap(),
            port_dir(&recipe, None).unwrap()
        );
    }
}
