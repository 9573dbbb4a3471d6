//! build-ext as named steps over one [`Job`]: [`resolve`] → [`reuse`] → [`provision`] →
//! [`compile`] → [`collect`] → [`check`] → [`deliver`] → [`stamp`]. [`run`] calls them in that
//! order; each step is the place to look for what it names.

use super::arch_guard::{self, Guard};
use super::check::{self, AuditSummary, ImportCheck, Sweep};
use super::command::{build_command, Setup};
use super::jobs::{self, Parallelism};
use super::scratch::Scratch;
use super::{
    front_end, parse_extension_line, prepare, source, stamp_inputs, BuildFailure, EnvInfo,
    LoadSummary, Outcome, Prepared, Record, Request,
};
use crate::arch::spec::Plan;
use crate::build_output::{log, progress};
use crate::compiler_cache::shared_sources::{SharedSourceCache, SharedSourceStats};
use crate::compiler_cache::{dist::DistStats, CacheKind, CompilerCache};
use crate::process::Stream;
use crate::python;
use crate::toolchain::Toolchain;
use anyhow::{bail, Context, Result};
use fs_err as fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What a build-ext run makes from its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Product {
    /// A wheel, through the package's build script ([`run`]).
    Wheel,
    /// The extensions a tree builds at run time with torch's load(), built ahead of time
    /// ([`super::jit`]).
    JitPrebuild,
}

/// One build, a wheel's or a JIT tree's prebuild: the request and everything decided before
/// anything is built.
pub struct Job<'r> {
    pub req: &'r Request,
    pub started: Instant,
    pub env: EnvInfo,
    pub tc: Toolchain,
    pub plan: Plan,
    /// Asked archs covered by PTX instead of SASS (a stable build's older toolkit).
    pub cover: Option<super::compiling_cuda::PtxCover>,
    pub src: source::Resolved,
    /// What runs the build: the wheel's front end (`uv build`, `pip wheel`), or torch's
    /// cpp_extension for a prebuild.
    pub builder: &'static str,
    pub inputs: stamp_inputs::Inputs,
    /// The stamp: the hash of `inputs`.
    pub key: String,
    /// Empty git submodules the build goes on without (`--skip-missing-submodules`).
    pub submodules: Option<crate::git_submodules::Unfilled>,
}

/// Where a build runs and what it runs with: made by [`provision`].
pub struct Workspace {
    /// Held (locked) until the build ends, then removed.
    pub scratch: Scratch,
    /// The private copy of the source.
    pub tree: PathBuf,
    pub par: Parallelism,
    /// The output dir, absolute.
    pub out: PathBuf,
    pub log_path: PathBuf,
    pub log_file: fs::File,
    pub wheel_dir: PathBuf,
    pub compiler_cache: Option<CompilerCache>,
    /// With extensions built at once and no `--cache`: files several extensions compile, once.
    pub shared_sources: Option<SharedSourceCache>,
    pub guard: Option<Guard>,
}

/// What [`compile`] leaves besides the import check it started: the build's output lines.
pub struct Compiled {
    pub lines: Vec<String>,
    pub build_seconds: f64,
    /// Unix ms when the build command started and ended.
    pub window: (u64, u64),
}

/// What [`collect`] reads after a successful compile.
pub struct Collected {
    pub wheel: PathBuf,
    pub cache_stats: Option<String>,
    pub shared_sources: Option<SharedSourceStats>,
    pub distributed: Option<DistStats>,
    pub arch_guard: Option<arch_guard::Report>,
    pub warnings: Vec<String>,
}

/// What [`check`] found in the built wheel.
pub struct Checked {
    /// Unix ms when the checks started and ended.
    pub window: (u64, u64),
    pub audit: AuditSummary,
    pub sweep: Sweep,
    /// The load check's verdict on the wheel in the build env (the import stays the proof).
    pub load: Option<LoadSummary>,
}

/// Builds (or reuses) the wheel for `req`. `Ok(Err(_))`: the build ran and failed (compile, audit
/// or import), with the first error and the log; `Err(_)`: it could not run (bad input, no env).
pub fn run(req: &Request) -> Result<Result<Outcome, BuildFailure>> {
    let job = resolve(req, Product::Wheel)?;
    if let Some(hit) = reuse(&job) {
        return Ok(Ok(hit));
    }
    let scratch = Scratch::new(&job.key)?;
    // Another run with these inputs may have delivered while this one waited for the lock.
    if let Some(hit) = reuse(&job) {
        return Ok(Ok(hit));
    }
    let mut ws = provision(&job, scratch)?;
    let (compiled, import_check) = match compile(&job, &mut ws)? {
        Ok(c) => c,
        Err(failure) => return Ok(Err(failure.with_submodules(job.submodules.as_ref()))),
    };
    let mut collected = collect(&job, &ws)?;
    if job.req.stable_abi_target.is_some() {
        tag_platform(&mut collected)?;
    }
    if let Some(u) = &job.submodules {
        collected.warnings.push(format!(
            "built without the empty git submodules {} ({})",
            u.paths().join(" "),
            crate::git_submodules::GO_ON_FLAG
        ));
    }
    let checked = check(
        &job,
        &ws,
        import_check,
        &collected.wheel,
        &mut collected.warnings,
    )?;
    let wheel = match deliver(&job, &ws, &collected.wheel, &checked)? {
        Ok(w) => w,
        Err(failure) => return Ok(Err(failure)),
    };
    stamp(&job, ws, wheel, compiled, collected, checked).map(Ok)
}

/// Step 1: the env and its torch, the CUDA (torch's major), the arch plan, the toolchain, the
/// source and its hash, what builds it, and the stamp's inputs.
pub fn resolve(req: &Request, product: Product) -> Result<Job<'_>> {
    let started = Instant::now();
    let submodules = source::unfilled_submodules(&req.source, req.skip_missing_submodules)?;
    let Prepared {
        env,
        tc,
        plan,
        cover,
    } = match &req.prepared {
        Some(p) => Prepared::clone(p),
        None => prepare(&req.target, &req.arch, req.stable_abi_target.as_deref())?,
    };
    let arch_list = plan.torch_cuda_arch_list();
    let src = source::resolve(&req.source)?;
    let builder = match product {
        Product::Wheel => front_end(&env)?,
        // The tree's own code runs torch's cpp_extension.
        Product::JitPrebuild => "torch.utils.cpp_extension",
    };
    let inputs = stamp_inputs::Inputs {
        own_arch_flags: req.own_arch_flags,
        cpu_only: req.cpu_only,
        stable_abi_target: req.stable_abi_target.clone(),
        ..stamp_inputs::Inputs::new(&src.hash, &env, &tc, &arch_list, builder)
    };
    let key = inputs.key();
    Ok(Job {
        req,
        started,
        env,
        tc,
        plan,
        cover,
        src,
        builder,
        inputs,
        key,
        submodules,
    })
}

/// Step 2: the record kept for the wheel in the output dir whose stamp is the job's, as a reuse
/// of it: no log, no cache statistics (nothing ran), this run's time.
pub fn reuse(job: &Job) -> Option<Outcome> {
    let (wheel, record): (PathBuf, Record) = crate::stamp::lookup(&job.req.out, &job.key)?;
    Some(Outcome {
        wheel,
        reused: true,
        stamp: job.key.clone(),
        record,
        log: None,
        total_seconds: job.started.elapsed().as_secs_f64(),
        cache_stats: None,
        shared_sources: None,
        distributed: None,
        torch_range: None,
    })
}

/// Step 3: the source copied into the scratch dir, the jobs model, the output dir and its log,
/// the compiler cache and the arch guard.
pub fn provision(job: &Job, scratch: Scratch) -> Result<Workspace> {
    let req = job.req;
    let tree = source::materialize(&job.src, &scratch.path.join("src"), &job.env.python)?;
    let par = parallelism(job, &tree)?;
    fs::create_dir_all(&req.out)
        .with_context(|| format!("creating the output dir {}", req.out.display()))?;
    let out = req.out.canonicalize()?;
    crate::stamp::remove_stale_partials(&out);
    let log_path = out.join(format!("{}-{}.log", job.src.spec.label(), &job.key[..12]));
    let mut log_file = fs::File::create(&log_path)
        .with_context(|| format!("creating the log {}", log_path.display()))?;
    let wheel_dir = scratch.path.join("wheel");
    fs::create_dir_all(&wheel_dir)?;
    let cache_kind = match (req.cache, &req.dist) {
        (None, Some(_)) => Some(CacheKind::Sccache),
        (kind, _) => kind,
    };
    let compiler_cache = cache_kind
        .map(|kind| CompilerCache::prepare(kind, &job.tc, req.dist.as_ref()))
        .transpose()?;
    let shared_sources = match (par.extensions > 1, &compiler_cache) {
        (true, None) => match SharedSourceCache::prepare(&scratch.path) {
            Ok(c) => Some(c),
            Err(e) => {
                // Not an error: such files then compile in each extension, as setuptools does.
                writeln!(
                    log_file,
                    "# files several extensions share compile in each: no ccache ({e:#})"
                )?;
                None
            }
        },
        _ => None,
    };
    let real = compiler_cache
        .as_ref()
        .map_or_else(|| job.tc.nvcc(), |c| c.wrappers.join("nvcc"));
    let guard = Guard::for_build(
        req.own_arch_flags,
        &scratch.path,
        &job.tc,
        &job.plan,
        real,
        req.pool.as_ref(),
    )?;
    Ok(Workspace {
        scratch,
        tree,
        par,
        out,
        log_path,
        log_file,
        wheel_dir,
        compiler_cache,
        shared_sources,
        guard,
    })
}

/// Jobs, nvcc threads and extensions at once for this source on this machine
/// ([`jobs::parallelism`]); `--serial-extensions` keeps setuptools' one at a time.
fn parallelism(job: &Job, tree: &Path) -> Result<Parallelism> {
    let files = source::tree_files(tree)?;
    let (units, cu) = jobs::count_sources(&files);
    let images = (job.plan.sass().len() + job.plan.ptx().len()) as u32;
    // Measured peaks from an earlier build of these sources, where every .cu file has one; C++
    // compiles of torch headers (not measured) keep their 1.5 GB floor.
    let cu_files: Vec<PathBuf> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "cu"))
        .cloned()
        .collect();
    let cxx_floor = (units > cu).then_some(jobs::CXX_GIB);
    let kept = crate::build_insight::peaks::Peaks::load(
        &crate::build_insight::peaks::default_path_for_env(),
    );
    let learned =
        jobs::learned_gib_per_job(&kept, &cu_files, &job.plan.gencode(), images, cxx_floor);
    let mut par = jobs::parallelism_for(
        crate::host::cores(),
        crate::host::mem_available_gib(),
        (units, cu, images),
        job.req.jobs,
        learned.unwrap_or(jobs::GIB_PER_NVCC_JOB),
    );
    if learned.is_some() && par.reason == "limited by available memory" {
        par.reason = "limited by available memory, by the peaks measured before";
    }
    if job.req.serial_extensions {
        par.extensions = 1;
    }
    if let Some(pool) = &job.req.pool {
        par.in_pool(pool);
    }
    Ok(par)
}

/// Step 4: runs the build with its output streamed to the log and the progress display; a
/// failure names the first compiler (or Python) error, pointing at the user's file.
pub fn compile(
    job: &Job,
    ws: &mut Workspace,
) -> Result<Result<(Compiled, ImportCheck), BuildFailure>> {
    let ninja_dir = super::command::ninja_for(&job.env, false)?;
    let setup = Setup {
        env: &job.env,
        tc: &job.tc,
        plan: &job.plan,
        par: &ws.par,
        builder: job.builder,
        cache: ws.compiler_cache.as_ref(),
        shared_sources: ws.shared_sources.as_ref(),
        guard: ws.guard.as_ref(),
        cpu_only: job.req.cpu_only,
        stable_abi_target: job.req.stable_abi_target.as_deref(),
        ninja_dir: ninja_dir.as_deref(),
        pool: job.req.pool.as_ref(),
    };
    let cmd = build_command(&setup, &ws.tree, &ws.wheel_dir);
    announce(job, ws, &cmd)?;
    // Started now so its `import torch` runs while setup.py imports torch too, on the core the
    // build leaves idle until ninja starts; it only imports the wheel's modules at the end. Where
    // memory is short it starts after the compiles instead: its torch holds about 0.5 GB all
    // along, which under a tight cgroup limit is a compile's margin.
    let import_dir = ws.scratch.path.join("import");
    let early = crate::host::mem_available_gib() >= jobs::EARLY_IMPORT_CHECK_GIB;
    let import_check = early
        .then(|| ImportCheck::start(&job.env.python, &import_dir, &[]))
        .transpose()?;
    let build_started = Instant::now();
    let mut lines: Vec<String> = Vec::new();
    let log_offset = log::lines_in(&ws.log_path);
    let status = progress::Progress::new(job.req.progress).stream_logged(
        &cmd,
        &mut ws.log_file,
        &ws.log_path,
        |line| {
            lines.push(line.to_string());
            at_a_failed_step(line)
        },
    )?;
    if status != Some(0) {
        return Ok(Err(compile_failure(job, ws, &lines, status, log_offset)));
    }
    let compiled = Compiled {
        lines,
        build_seconds: build_started.elapsed().as_secs_f64(),
        window: (
            super::insight::Times::unix_ms(build_started),
            crate::build_insight::compile_record::now_ms(),
        ),
    };
    let import_check = match import_check {
        Some(c) => c,
        None => ImportCheck::start(&job.env.python, &import_dir, &[])?,
    };
    Ok(Ok((compiled, import_check)))
}

/// The build's header in its log, and the line that says what is built with what.
fn announce(job: &Job, ws: &mut Workspace, cmd: &crate::process::Cmd) -> Result<()> {
    let label = job.src.spec.label();
    let arch_list = job.plan.torch_cuda_arch_list();
    let par = &ws.par;
    let slots = match &job.req.pool {
        Some(p) => format!(
            "job slots: a pool of {} shared with the builds beside it ({})",
            p.slots,
            p.fifo.display()
        ),
        None => format!("MAX_JOBS={} nvcc --threads={}", par.jobs, par.nvcc_threads),
    };
    writeln!(
        ws.log_file,
        "# archsmith build-ext {label}\n# TORCH_CUDA_ARCH_LIST={arch_list} {slots}\n# {}\n",
        cmd.display()
    )?;
    crate::errln!(
        "archsmith: building {label} for {arch_list} with torch {} / CUDA {} ({} jobs ({}), nvcc --threads {}); log: {}",
        job.env.torch,
        job.tc.nvcc_version,
        par.jobs,
        par.reason,
        par.nvcc_threads,
        ws.log_path.display()
    );
    Ok(())
}

/// Ends a build at ninja's first failed step, which fails the build: the compiles still running
/// would only delay its first error (their objects go with the scratch directory anyway).
fn at_a_failed_step(line: &str) -> Stream {
    match line.starts_with("FAILED: ") {
        true => Stream::EndSoon(
            "ending the build at its first failed step (above): the compiles still running are stopped",
        ),
        false => Stream::Continue,
    }
}

/// The failure of a build that exited non-zero: its first compiler error (in the user's file, not
/// the scratch copy), else its last Python error, else the end of its output.
fn compile_failure(
    job: &Job,
    ws: &Workspace,
    lines: &[String],
    status: Option<i32>,
    log_offset: usize,
) -> BuildFailure {
    let label = job.src.spec.label();
    let mut first = log::first_compiler_error(lines.iter().map(String::as_str));
    if let Some(e) = first.as_mut() {
        e.log_line += log_offset;
        if let Some(file) = e.file.as_mut() {
            source::user_path(file, &ws.tree, &job.src.spec);
        }
    }
    let killed = log::first_killed_compile(lines.iter().map(String::as_str));
    let message = match (
        &first,
        log::last_python_error(lines.iter().map(String::as_str)),
    ) {
        (Some(_), _) => format!("building {label} failed"),
        (None, _) if killed.is_some() => format!(
            "building {label} failed: {} (log line {})",
            killed
                .as_ref()
                .map(|k| k.explain(&crate::host::memory().limit_sentence(), Some(ws.par.jobs)))
                .unwrap_or_default(),
            killed.as_ref().map_or(0, |k| k.log_line + log_offset)
        ),
        (None, Some(py)) => format!("building {label} failed before compiling: {py}"),
        (None, None) => format!(
            "building {label} failed ({}), with no compiler error in the output; its end:\n{}",
            status.map_or("killed by a signal".into(), |c| format!("exit code {c}")),
            lines[lines.len().saturating_sub(15)..].join("\n")
        ),
    };
    BuildFailure {
        stage: "compile",
        message,
        first_error: first,
        log: Some(ws.log_path.clone()),
    }
}

/// Step 5: after a successful compile, the compiler cache's statistics, what the arch guard saw
/// (a warning when the extension asked for other archs), and the one wheel the build wrote.
pub fn collect(job: &Job, ws: &Workspace) -> Result<Collected> {
    let (cache_stats, distributed) = match ws
        .compiler_cache
        .as_ref()
        .map(|c| c.stats_with_dist())
        .transpose()?
    {
        Some((lines, dist)) => (Some(lines), dist),
        None => (None, None),
    };
    // A report, not the build: statistics that cannot be read leave the row out.
    let shared_sources = ws
        .shared_sources
        .as_ref()
        .and_then(|c| c.stats().ok().flatten());
    let arch_guard = ws.guard.as_ref().map(|g| g.report()).transpose()?;
    let mut warnings = Vec::new();
    if let Some(w) = arch_guard.as_ref().and_then(|r| r.warning(&job.plan)) {
        crate::errln!("warning: {w}");
        warnings.push(w);
    }
    Ok(Collected {
        wheel: find_wheel(&ws.wheel_dir)?,
        cache_stats,
        shared_sources,
        distributed,
        arch_guard,
        warnings,
    })
}

/// A stable-ABI wheel is one to publish: it gets the manylinux tag its files allow, judged as
/// auditwheel judges it with torch's libraries left to torch (`auditwheel repair --exclude`),
/// instead of bdist_wheel's `linux_x86_64`, which PyPI refuses. A wheel no policy takes keeps
/// `linux_x86_64` and says what keeps it there.
fn tag_platform(collected: &mut Collected) -> Result<()> {
    let tag = crate::binary::platform_tag::of_wheel(&collected.wheel)?;
    if tag.tag == "linux_x86_64" {
        let why = match tag.external.is_empty() {
            true => format!("symbol versions {}", tag.limited_by.join(", ")),
            false => format!(
                "libraries no manylinux policy lists: {}",
                tag.external.join(", ")
            ),
        };
        let w = format!("the wheel stays linux_x86_64, which PyPI refuses: it needs {why}");
        crate::errln!("warning: {w}");
        collected.warnings.push(w);
        return Ok(());
    }
    collected.wheel = crate::wheel::retag_platform(&collected.wheel, &tag.tag)?;
    let limited = match tag.limited_by.is_empty() {
        true => String::new(),
        false => format!(" (needs {})", tag.limited_by.join(", ")),
    };
    crate::errln!(
        "archsmith: wheel tagged {}{limited}; {} left to torch",
        tag.tag,
        tag.left_to_peer.join(", ")
    );
    Ok(())
}

fn find_wheel(dir: &Path) -> Result<PathBuf> {
    let mut wheels: Vec<PathBuf> = fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    match wheels.len() {
        1 => Ok(wheels.pop().unwrap_or_default()),
        0 => bail!(
            "the build reported success but wrote no wheel into {}",
            dir.display()
        ),
        n => bail!(
            "the build wrote {n} wheels into {}; expected one",
            dir.display()
        ),
    }
}

/// Step 6: the wheel's SASS/PTX audited against the plan, and its modules imported in the env
/// (again with the wheel's declared requirements installed beside the env when it imports
/// modules the env lacks). Findings go into the warnings; failures are [`deliver`]'s to report.
pub fn check(
    job: &Job,
    ws: &Workspace,
    import_check: ImportCheck,
    wheel: &Path,
    warnings: &mut Vec<String>,
) -> Result<Checked> {
    let started = crate::build_insight::compile_record::now_ms();
    // The wheel is unpacked once, for the load check and the audit both.
    let inputs = crate::verify::load_check::Inputs::read(&[wheel.to_path_buf()]);
    let unpacked = inputs.as_ref().map(|i| i.unpacked()).unwrap_or_default();
    let audit = match job.req.cpu_only {
        true => check::audit_cpu_only(wheel, &job.plan, unpacked),
        false => check::audit_wheel(wheel, &job.plan, source::declares_cuda(&ws.tree)?, unpacked),
    };
    let load = load_summary(&job.env.python, inputs, warnings);
    let mut sweep = import_check.run(wheel, false)?;
    if !sweep.missing().is_empty() {
        match python::requirements::declared(wheel)
            .and_then(|reqs| python::requirements::install_beside(&job.env.python, &reqs))
        {
            Ok(Some((dir, installed))) => {
                warnings.push(format!(
                    "the import check ran with the wheel's requirements {} installed beside the env ({})",
                    installed.join(", "),
                    dir.display()
                ));
                sweep = ImportCheck::start(
                    &job.env.python,
                    &ws.scratch.path.join("import-deps"),
                    &[dir],
                )?
                .run(wheel, false)?;
            }
            Ok(None) => {}
            Err(e) => warnings.push(format!(
                "the wheel's requirements could not be installed for the import check: {e:#}"
            )),
        }
    }
    for f in sweep.failures.iter().filter(|f| f.kind == "missing") {
        warnings.push(format!(
            "{} imports {}, which is not installed and not among the wheel's requirements (Requires-Dist): its own import was not checked",
            f.module,
            f.missing.as_deref().unwrap_or("?")
        ));
    }
    Ok(Checked {
        window: (started, crate::build_insight::compile_record::now_ms()),
        audit,
        sweep,
        load,
    })
}

/// What the load check says of the built wheel in the env it was built for; a check that cannot
/// run is a warning, never a failed build.
fn load_summary(
    python: &Path,
    inputs: Result<crate::verify::load_check::Inputs>,
    warnings: &mut Vec<String>,
) -> Option<LoadSummary> {
    let report = inputs.and_then(|i| crate::verify::load_check::LoadReport::of_inputs(python, &i));
    match report {
        Ok(report) => Some(LoadSummary {
            loads: report.loads,
            files: report.modules.len(),
            problems: report
                .modules
                .iter()
                .filter(|m| !m.loads)
                .map(|m| format!("{}: {}", m.path, m.reason.as_deref().unwrap_or("")))
                .collect(),
            torch_abi: report
                .modules
                .iter()
                .filter_map(|m| {
                    Some(format!(
                        "{}: {}",
                        crate::wheel::member_part(&m.path),
                        m.torch_abi.as_ref()?.verdict
                    ))
                })
                .collect(),
        }),
        Err(e) => {
            warnings.push(format!("the load check could not run: {e:#}"));
            None
        }
    }
}

/// Step 7: the wheel moved into the output dir whatever the checks found (a built wheel is never
/// thrown away), then a failed audit or import reported with where the wheel is.
pub fn deliver(
    job: &Job,
    ws: &Workspace,
    built: &Path,
    checked: &Checked,
) -> Result<Result<PathBuf, BuildFailure>> {
    let wheel = crate::stamp::deliver(built, &ws.out)?;
    let failure = |stage, message| BuildFailure {
        stage,
        message,
        first_error: None,
        log: Some(ws.log_path.clone()),
    };
    if !checked.audit.ok {
        return Ok(Err(failure(
            "audit",
            format!(
                "the wheel does not carry what was planned ({}):\n{}\nthe wheel is kept: {}",
                job.plan.torch_cuda_arch_list(),
                checked.audit.problems.join("\n"),
                wheel.display()
            ),
        )));
    }
    let broken: Vec<String> = checked
        .sweep
        .failures
        .iter()
        .filter(|f| f.kind != "missing")
        .map(|f| f.to_string())
        .collect();
    if !broken.is_empty() {
        return Ok(Err(failure(
            "import",
            format!(
                "the wheel built but does not import:\n{}\nthe wheel is kept: {}",
                broken.join("\n"),
                wheel.display()
            ),
        )));
    }
    Ok(Ok(wheel))
}

/// Step 8: the outcome, recorded next to the delivered wheel under the job's stamp so that an
/// unchanged request returns it ([`reuse`]); the scratch dir goes.
pub fn stamp(
    job: &Job,
    ws: Workspace,
    wheel: PathBuf,
    compiled: Compiled,
    collected: Collected,
    checked: Checked,
) -> Result<Outcome> {
    let lines = &compiled.lines;
    let extensions: Vec<super::ExtensionBuilt> = lines
        .iter()
        .filter_map(|l| parse_extension_line(l))
        .collect();
    let report = super::insight::Build {
        spec: &job.src.spec,
        builder: job.builder,
        tree: &ws.tree,
        log_path: &ws.log_path,
        guard: ws.guard.as_ref(),
        times: super::insight::Times {
            started: super::insight::Times::unix_ms(job.started),
            build: compiled.window,
            checks: checked.window,
        },
        source_sha256: &job.src.hash,
        torch: &job.env.torch.to_string(),
        nvcc: &job.tc.nvcc_version.to_string(),
        torch_cuda_arch_list: &job.plan.torch_cuda_arch_list(),
    };
    let mut warnings = collected.warnings;
    let insight = match super::insight::write(&report, &wheel) {
        Ok(i) => Some(i),
        Err(e) => {
            warnings.push(format!("the build's trace was not written: {e:#}"));
            None
        }
    };
    let record = Record {
        source: job.src.spec.label(),
        torch: job.env.torch.to_string(),
        cuda: job.tc.cuda.to_string(),
        nvcc: job.tc.nvcc_version.to_string(),
        torch_cuda_arch_list: job.plan.torch_cuda_arch_list(),
        ptx_cover: job.cover.clone(),
        jobs: ws.par.jobs,
        nvcc_threads: ws.par.nvcc_threads,
        builder: job.builder.to_string(),
        build_seconds: compiled.build_seconds,
        audit: checked.audit,
        imported: checked.sweep.imported,
        operator_libraries: checked.sweep.operator_libraries,
        load: checked.load,
        warnings,
        arch_guard: collected.arch_guard,
        // The hooks say what ran at once; without their lines (one extension, or a build that
        // is not setuptools' build_ext) one thing built at a time, whatever the slots.
        extensions_at_once: ws.par.extensions.min(extensions.len().max(1) as u32),
        extensions,
        ninja_turned_on: lines
            .iter()
            .any(|l| l.starts_with("archsmith-ext: ninja turned back on")),
        insight,
    };
    crate::stamp::record(&ws.out, &job.inputs, &wheel, &record)?;
    let outcome = Outcome {
        wheel,
        reused: false,
        stamp: job.key.clone(),
        record,
        log: Some(ws.log_path.clone()),
        total_seconds: job.started.elapsed().as_secs_f64(),
        cache_stats: collected.cache_stats,
        shared_sources: collected.shared_sources,
        distributed: collected.distributed,
        torch_range: None,
    };
    drop(ws);
    Ok(outcome)
}
