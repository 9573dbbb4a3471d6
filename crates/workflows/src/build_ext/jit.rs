//! build-ext on a tree whose C++/CUDA code is built just in time by torch's
//! `torch.utils.cpp_extension.load`/`load_inline`: each extension is built ahead of time, for
//! exactly the plan, into the directory and under the names torch's JIT uses, so a process with
//! `TORCH_EXTENSIONS_DIR` set to it loads them with no compiler, ninja or `CUDA_HOME`.
//!
//! Steps, over the same [`Job`] as a wheel build ([`super::steps::resolve`]: env, toolkit, plan,
//! source, stamp):
//! 1. [`open`]: a private copy of the source and its calls, read from the tree's syntax
//!    ([`find`], [`jit_calls`]), each reduced to the code that runs it (a module import, or a
//!    top-level function with no arguments); what cannot be reached is reported, not guessed;
//! 2. [`compile`]: the tree's own code runs those triggers (crates/workflows/src/build_ext/jit_hook/
//!    prebuild_driver.py) in the environment of a build-ext compile (the toolkit, the arch guard's
//!    nvcc, `TORCH_CUDA_ARCH_LIST`, ninja), with archsmith's load() hook recording each compile, so
//!    names, sources and flags resolve exactly as at run time: through the tree's own wrappers;
//! 3. [`audit`]: every module built carries exactly the plan (the binary reader);
//! 4. [`publish`]: `archsmith-jit.json`, the keys the hook matches (the hook itself, a `.pth` in
//!    the env that does nothing unless `TORCH_EXTENSIONS_DIR` holds that manifest, is installed
//!    before step 2 by [`install_hook`]);
//! 5. [`check_offline_load`]: the triggers again, in a fresh process with an empty `PATH` and no
//!    `CUDA_HOME`: every extension must load from the prebuild (a compile there would fail).
//!
//! Why a hook at all: torch's `_jit_compile` runs ninja in every fresh process (its version table
//! lives in memory), so an up-to-date build directory alone still needs ninja and `CUDA_HOME`.

use super::arch_guard::Guard;
use super::check::{audit_wheel, SoAudit};
use super::command::Setup;
use super::scratch::Scratch;
use super::steps::{Job, Product};
use super::{source, BuildFailure, Request, SourceSpec};
use crate::build_output::{log, progress};
use crate::codemod::python_source::jit_calls::{self, CallSite, SourceFile};
use crate::output::Table;
use crate::process::Cmd;
use anyhow::{bail, Context, Result};
use fs_err as fs;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The manifest the hook reads, at the root of the extensions directory.
pub const MANIFEST: &str = "archsmith-jit.json";
/// The extensions directory under build-ext's `--out`.
pub const EXTENSIONS_DIR: &str = "torch-extensions";
const HOOK_MODULE: &str = "archsmith_jit_hook.py";
const HOOK_PTH: &str = "archsmith-jit-hook.pth";

/// True when `source` is a directory whose build script compiles nothing (there is none, or its
/// setup.py/pyproject.toml names no extension: a pure-Python package) and whose Python calls
/// torch's load()/load_inline(): build-ext prebuilds it instead of building a wheel.
pub fn applies(source: &SourceSpec) -> Result<bool> {
    let SourceSpec::Dir(dir) = source else {
        return Ok(false);
    };
    if compiles_extensions(dir) {
        return Ok(false);
    }
    Ok(!find(dir)?.sites.is_empty())
}

/// The build script names a compiled extension (setuptools' `ext_modules`, torch's
/// `*Extension`, CMake, scikit-build, meson, a Rust or Cython build).
fn compiles_extensions(dir: &Path) -> bool {
    static WORDS: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"ext_modules|Extension\s*\(|(?i:cmake|scikit[-_]build|skbuild|meson|maturin|setuptools[-_]rust|cythonize)",
        )
        .expect("build words")
    });
    ["setup.py", "pyproject.toml", "setup.cfg"].iter().any(|f| {
        fs::read(dir.join(f)).is_ok_and(|text| WORDS.is_match(&String::from_utf8_lossy(&text)))
    })
}

/// One extension the prebuild built.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub name: String,
    /// The module file's stem (`name`, or `name_vN` when one process built it twice).
    pub module: String,
    pub file: String,
    /// Its build directory, relative to the extensions directory when inside it.
    pub dir: String,
    pub key: String,
    pub with_cuda: bool,
    pub sources: Vec<String>,
    #[serde(default)]
    pub sass: Vec<String>,
    #[serde(default)]
    pub ptx: Vec<String>,
}

/// What a trigger did in a run of the driver.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TriggerRun {
    pub module: String,
    pub call: Option<String>,
    pub ok: bool,
    pub error: Option<String>,
    /// What the tree's code warned while it ran (a wrapper that caught a failed build or import
    /// and fell back to slow code says so only there).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Third-party modules the env lacks, stubbed while the trigger ran (the build did not need
    /// them; the program will).
    #[serde(default)]
    pub stubbed: Vec<String>,
}

/// A prebuild that ran.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// `TORCH_EXTENSIONS_DIR` to set at run time.
    pub extensions_dir: PathBuf,
    pub manifest: PathBuf,
    pub extensions: Vec<Entry>,
    pub sites: Vec<CallSite>,
    pub wrappers: Vec<String>,
    pub triggers: Vec<TriggerRun>,
    /// Triggers built at once in one pool of job slots (1: one after another).
    pub triggers_at_once: u32,
    /// Each trigger's time where they built at once (the pool's `done`/`FAILED` lines).
    pub trigger_times: Vec<super::ExtensionBuilt>,
    /// With `--skip-missing-submodules`: the triggers that could not be built, and the empty
    /// submodules it went on without.
    pub not_built: Vec<NotBuilt>,
    pub skipped_submodules: Vec<String>,
    /// The hook's `.pth` in the env.
    pub hook: PathBuf,
    /// The triggers rerun with no compiler, ninja or CUDA_HOME: every extension loaded.
    pub loaded_offline: Vec<TriggerRun>,
    pub torch: String,
    pub nvcc: String,
    pub torch_cuda_arch_list: String,
    pub log: PathBuf,
    pub total_seconds: f64,
}

impl Outcome {
    /// What people must know beyond the table: calls not reached, the pool, what was not built,
    /// what the tree's code warned, the modules stubbed.
    pub fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in self.sites.iter().filter(|s| s.unreached.is_some()) {
            let why = s.unreached.as_deref().unwrap_or("");
            out.push(format!(
                "not reached: {}:{}: {} {why}",
                s.file, s.line, s.calls
            ));
        }
        if self.triggers_at_once > 1 {
            let times: Vec<String> = self
                .trigger_times
                .iter()
                .map(|t| format!("{} {:.0} s", t.name, t.seconds))
                .collect();
            out.push(format!(
                "triggers built {} at a time in one pool of job slots: {}",
                self.triggers_at_once,
                times.join(", ")
            ));
        }
        for n in &self.not_built {
            let first = n
                .first_error
                .as_ref()
                .map(|e| format!("; first error: {e}"));
            out.push(format!(
                "not built: {}: {}{} (built without the empty git submodules {})",
                n.trigger,
                n.error,
                first.unwrap_or_default(),
                self.skipped_submodules.join(" ")
            ));
        }
        for r in &self.triggers {
            let at = r.label();
            for w in &r.warnings {
                out.push(format!("warning: {at} warned: {w}"));
            }
            if !r.stubbed.is_empty() {
                let stubs = r.stubbed.join(", ");
                out.push(format!(
                    "note: {at} ran with stubs for {stubs} (not in the env)"
                ));
            }
        }
        out
    }
}

/// Step 1: the call sites of `tree` and the triggers that reach them.
pub fn find(tree: &Path) -> Result<jit_calls::Scan> {
    Ok(find_among(tree, &source::tree_files(tree)?))
}

/// [`find`] over the files of `tree` already listed (`rels`, as [`source::tree_files`] gives them).
fn find_among(tree: &Path, rels: &[PathBuf]) -> jit_calls::Scan {
    let mut files = Vec::new();
    for rel in rels
        .iter()
        .filter(|r| r.extension().is_some_and(|e| e == "py"))
    {
        let Ok(text) = fs::read_to_string(tree.join(rel)) else {
            continue; // not UTF-8: not a module Python would import either
        };
        files.push(SourceFile {
            rel: rel.clone(),
            text,
        });
    }
    jit_calls::scan(tree, &files)
}

/// Prebuilds every JIT extension of `req.source` into `req.out/torch-extensions`.
pub fn run(req: &Request) -> Result<Result<Outcome, BuildFailure>> {
    let pre = open(req)?;
    let hook = install_hook(&pre.job.env.purelib)?;
    let compiled = compile(&pre)?;
    let trigger_times = compiled
        .lines
        .iter()
        .filter_map(|l| super::parse_extension_line(l))
        .collect();
    let Compiled {
        runs,
        recorded,
        lines,
        at_once,
    } = compiled;
    let not_built = match settle(&pre, &runs, &recorded, &lines) {
        Ok(n) => n,
        Err(failure) => return Ok(Err(*failure)),
    };
    let mut extensions = to_entries(&recorded, &pre.ext_dir)?;
    if let Some(f) = audit(&mut extensions, &pre.ext_dir, &pre.job.plan, &pre.log_path) {
        return Ok(Err(f));
    }
    let arch_list = pre.job.plan.torch_cuda_arch_list();
    publish(&pre.ext_dir, &extensions, &arch_list, &pre.job.env)?;
    let built_triggers = built_triggers_file(&pre, &not_built)?;
    let loaded_offline = check_offline_load(
        &pre.job.env.python,
        &pre.tree,
        &built_triggers,
        &pre.ext_dir,
    )?;
    if let Some(bad) = loaded_offline.iter().find(|r| !r.ok) {
        return Ok(Err(BuildFailure {
            stage: "import",
            message: format!(
                "the prebuilt extensions did not load without a compiler: {} failed: {}",
                bad.label(),
                bad.error.as_deref().unwrap_or("")
            ),
            first_error: None,
            log: Some(pre.log_path),
        }));
    }
    Ok(Ok(Outcome {
        manifest: pre.ext_dir.join(MANIFEST),
        extensions_dir: pre.ext_dir,
        extensions,
        sites: pre.scan.sites,
        wrappers: pre.scan.wrappers,
        triggers: runs,
        triggers_at_once: at_once,
        trigger_times,
        not_built,
        skipped_submodules: pre.job.submodules.map(|u| u.paths()).unwrap_or_default(),
        hook,
        loaded_offline,
        torch: pre.job.env.torch.to_string(),
        nvcc: pre.job.tc.nvcc_version.to_string(),
        torch_cuda_arch_list: arch_list,
        log: pre.log_path,
        total_seconds: pre.job.started.elapsed().as_secs_f64(),
    }))
}

/// After the compile: any failure fails the prebuild, unless it went on without empty git
/// submodules (`--skip-missing-submodules`): then the triggers that failed are the ones not
/// built, and only a prebuild that built nothing fails.
fn settle(
    pre: &Prebuild,
    runs: &[TriggerRun],
    recorded: &[Recorded],
    lines: &[String],
) -> Result<Vec<NotBuilt>, Box<BuildFailure>> {
    let Some(failure) = prebuild_failure(pre, runs, recorded, lines) else {
        return Ok(Vec::new());
    };
    let Some(skipped) = &pre.job.submodules else {
        return Err(Box::new(failure));
    };
    let not_built = not_built(pre, runs, recorded, lines);
    if recorded.iter().all(|r| r.module.is_none()) || not_built.is_empty() {
        return Err(Box::new(failure.with_submodules(Some(skipped))));
    }
    Ok(not_built)
}

/// The triggers that failed, or whose compile failed (even where the tree's wrapper caught it):
/// each with its error and the first compiler error of its output.
fn not_built(
    pre: &Prebuild,
    runs: &[TriggerRun],
    recorded: &[Recorded],
    lines: &[String],
) -> Vec<NotBuilt> {
    let first_errors = first_error_per_trigger(pre, lines);
    runs.iter()
        .filter_map(|r| {
            let label = r.label();
            let compile = recorded
                .iter()
                .find(|c| c.error.is_some() && c.trigger.as_deref() == Some(label.as_str()));
            let error = match (compile, r.ok) {
                (Some(c), _) => format!("building {} failed: {}", c.name, c.error.as_deref()?),
                (None, false) => r.error.clone().unwrap_or_default(),
                (None, true) => return None,
            };
            Some(NotBuilt {
                first_error: first_errors
                    .iter()
                    .find(|(t, _)| *t == label)
                    .map(|(_, e)| e.clone()),
                trigger: label,
                error,
            })
        })
        .collect()
}

/// Each trigger's output ends with its result line, whether it ran alone or in the pool (a
/// child's output is replayed whole): the first compiler error of each trigger's stretch.
fn first_error_per_trigger(pre: &Prebuild, lines: &[String]) -> Vec<(String, log::CompilerError)> {
    let (mut out, mut start) = (Vec::new(), 0);
    for (i, line) in lines.iter().enumerate() {
        let Some(run) = parse_trigger_line(line) else {
            continue;
        };
        if let Some(mut e) = first_error(pre, &lines[start..i]) {
            e.log_line += start;
            out.push((run.label(), e));
        }
        start = i + 1;
    }
    out
}

/// The first compiler error of `lines`, its file named as the user knows it (not archsmith's
/// copy of the tree).
fn first_error(pre: &Prebuild, lines: &[String]) -> Option<log::CompilerError> {
    let mut e = log::first_compiler_error(lines.iter().map(String::as_str))?;
    if let Some(file) = e.file.as_mut() {
        source::user_path(file, &pre.tree, &pre.job.src.spec);
    }
    Some(e)
}

/// The triggers file of the offline load check: every trigger, less those not built.
fn built_triggers_file(pre: &Prebuild, not_built: &[NotBuilt]) -> Result<PathBuf> {
    if not_built.is_empty() {
        return Ok(pre.triggers_file.clone());
    }
    let built: Vec<&jit_calls::Trigger> = pre
        .triggers
        .iter()
        .filter(|t| {
            !not_built
                .iter()
                .any(|n| n.trigger == trigger_label(&t.module, t.call.as_deref()))
        })
        .collect();
    let path = pre.scratch.path.join("built-triggers.json");
    fs::write(&path, serde_json::to_vec(&built)?)?;
    Ok(path)
}

/// `module` or `module.call()`: how the driver names a trigger (`ARCHSMITH_JIT_TRIGGER`).
fn trigger_label(module: &str, call: Option<&str>) -> String {
    match call {
        Some(c) => format!("{module}.{c}()"),
        None => module.to_string(),
    }
}

/// A trigger a prebuild that went on without empty git submodules could not build.
#[derive(Debug, Clone, Serialize)]
pub struct NotBuilt {
    pub trigger: String,
    pub error: String,
    pub first_error: Option<log::CompilerError>,
}

/// One prebuild: the build-ext [`Job`] (env, toolkit, plan, source, stamp), and what [`open`]
/// found in its copy of the source.
struct Prebuild<'r> {
    job: Job<'r>,
    /// Held (locked) until the prebuild ends, then removed.
    scratch: Scratch,
    /// archsmith's copy of the source, where the triggers run.
    tree: PathBuf,
    scan: jit_calls::Scan,
    /// Translation units and `.cu` files in the copy ([`super::jobs::count_sources`]).
    sources: (u32, u32),
    triggers: Vec<jit_calls::Trigger>,
    triggers_file: PathBuf,
    ext_dir: PathBuf,
    log_path: PathBuf,
}

/// Step 1: the env, toolkit and plan as for a wheel ([`super::steps::resolve`]), a private copy
/// of the source, its calls and triggers (none reachable: an error that lists each call and why),
/// the output dirs.
fn open(req: &Request) -> Result<Prebuild<'_>> {
    if req.stable_abi_target.is_some() {
        bail!("a JIT prebuild is torch's own cpp_extension build against this torch, never the stable ABI: build the same sources from a setup.py for a stable-ABI wheel");
    }
    let job = super::steps::resolve(req, Product::JitPrebuild)?;
    let scratch = Scratch::new(&job.key)?;
    let tree = source::materialize(&job.src, &scratch.path.join("src"), &job.env.python)?;
    // One walk of the copy: the calls, and the translation units the jobs model counts.
    let files = source::tree_files(&tree)?;
    let scan = find_among(&tree, &files);
    let sources = super::jobs::count_sources(&files);
    let triggers = scan.triggers();
    if triggers.is_empty() {
        bail!(
            "{}: no load()/load_inline() call the prebuild can reach:{}",
            job.src.path.display(),
            unreached_list(&scan.sites)
        );
    }
    fs::create_dir_all(&req.out)?;
    let out = req.out.canonicalize()?;
    let ext_dir = out.join(EXTENSIONS_DIR);
    fs::create_dir_all(&ext_dir)?;
    let triggers_file = scratch.path.join("triggers.json");
    fs::write(&triggers_file, serde_json::to_vec(&triggers)?)?;
    let log_path = out.join(format!("jit-{}.log", &job.key[..12]));
    Ok(Prebuild {
        job,
        scratch,
        tree,
        scan,
        sources,
        triggers,
        triggers_file,
        ext_dir,
        log_path,
    })
}

/// Step 2: the triggers run in a build-ext compile's environment, the hook recording each
/// compile: what each trigger did, the record, the output lines.
fn compile(pre: &Prebuild) -> Result<Compiled> {
    let (req, env, tc, plan) = (pre.job.req, &pre.job.env, &pre.job.tc, &pre.job.plan);
    let guard = Guard::for_build(
        req.own_arch_flags,
        &pre.scratch.path,
        tc,
        plan,
        tc.nvcc(),
        req.pool.as_ref(),
    )?;
    // Triggers build at once in the driver's pool (the pool a package's extensions share), so
    // the build hooks' own extensions-at-once stays off (its patch of cpp_extension would also
    // stand before the load() hook's).
    let images = plan.sass().len() as u32;
    let (cores, mem) = (crate::host::cores(), crate::host::mem_available_gib());
    let (units, cu_files) = pre.sources;
    let mut par = super::jobs::parallelism(cores, mem, units, cu_files, images, req.jobs);
    if let Some(pool) = &req.pool {
        par.in_pool(pool);
    }
    let at_once = triggers_at_once(&par, pre.triggers.len(), req.serial_extensions);
    par.extensions = 1;
    let ninja_dir = super::command::ninja_for(env, true)?;
    let setup = Setup {
        env,
        tc,
        plan,
        par: &par,
        builder: pre.job.builder,
        cache: None,
        shared_sources: None,
        guard: guard.as_ref(),
        cpu_only: false,
        stable_abi_target: None,
        ninja_dir: ninja_dir.as_deref(),
        pool: req.pool.as_ref(),
    };
    let record = pre.scratch.path.join("prebuild.jsonl");
    crate::errln!(
        "archsmith: prebuilding {} JIT trigger(s) of {} for {} with torch {} / CUDA {}; log: {}",
        pre.triggers.len(),
        pre.job.src.spec.label(),
        plan.torch_cuda_arch_list(),
        env.torch,
        tc.nvcc_version,
        pre.log_path.display()
    );
    let mut cmd = driver(&env.python, &pre.tree, &pre.triggers_file)?
        .env("TORCH_EXTENSIONS_DIR", &pre.ext_dir)
        .env("ARCHSMITH_JIT_PREBUILD", &record);
    cmd = setup
        .apply_env(cmd)
        .env("ARCHSMITH_PARALLEL_TRIGGERS", at_once.to_string())
        .env(
            "ARCHSMITH_TRIGGER_MAX_JOBS",
            (par.jobs / at_once).max(1).to_string(),
        );
    let (runs, lines) = prebuild(&cmd, &pre.log_path, req.progress)?;
    Ok(Compiled {
        runs,
        recorded: read_record(&record)?,
        lines,
        at_once,
    })
}

/// What step 2 did: each trigger's run, the hook's record of each compile, the output lines (the
/// log's, header included), and how many triggers built at once.
struct Compiled {
    runs: Vec<TriggerRun>,
    recorded: Vec<Recorded>,
    lines: Vec<String>,
    at_once: u32,
}

/// How many triggers build at once: as many as a package's extensions would (one per core,
/// within memory: each may run an nvcc on torch headers), no more than there are, one with
/// `--serial-extensions`.
fn triggers_at_once(par: &super::jobs::Parallelism, triggers: usize, serial: bool) -> u32 {
    if serial {
        return 1;
    }
    par.extensions.min(triggers as u32).max(1)
}

fn unreached_list(sites: &[CallSite]) -> String {
    if sites.is_empty() {
        return " the tree has none".into();
    }
    sites
        .iter()
        .map(|s| {
            format!(
                "\n  {}:{}: {} {}",
                s.file,
                s.line,
                s.calls,
                s.unreached.as_deref().unwrap_or("")
            )
        })
        .collect()
}

/// The driver over `triggers`, run from the tree (a relative `sources=` resolves as it would
/// for a user who runs the code from the repository's root).
fn driver(python: &Path, tree: &Path, triggers: &Path) -> Result<Cmd> {
    let dir = crate::data::data_root()?.join(crate::data::JIT_HOOK);
    Ok(Cmd::new(python)
        .arg(dir.join("prebuild_driver.py"))
        .arg(triggers)
        .env("PYTHONUNBUFFERED", "1")
        .dir(tree))
}

/// Step 2: runs the driver, its output to the log and the progress display.
fn prebuild(
    cmd: &Cmd,
    log_path: &Path,
    mode: progress::Mode,
) -> Result<(Vec<TriggerRun>, Vec<String>)> {
    let mut log_file = fs::File::create(log_path)?;
    // The header is in `lines` too, so an error's line there is its line in the log file.
    let header = format!(
        "# archsmith build-ext (JIT prebuild)\n# {}\n\n",
        cmd.display()
    );
    log_file.write_all(header.as_bytes())?;
    let mut lines: Vec<String> = header.lines().map(String::from).collect();
    let mut runs = Vec::new();
    progress::Progress::new(mode).stream_logged(cmd, &mut log_file, log_path, |line| {
        runs.extend(parse_trigger_line(line));
        lines.push(line.to_string());
        crate::process::Stream::Continue
    })?;
    Ok((runs, lines))
}

impl TriggerRun {
    /// `module` or `module.call()`.
    pub fn label(&self) -> String {
        trigger_label(&self.module, self.call.as_deref())
    }
}

fn parse_trigger_line(line: &str) -> Option<TriggerRun> {
    serde_json::from_str(line.strip_prefix("archsmith-jit-trigger: ")?).ok()
}

/// One line of the hook's record: a built extension, or a compile that failed.
#[derive(Debug, Clone, Deserialize)]
struct Recorded {
    name: String,
    key: String,
    with_cuda: bool,
    sources: Vec<String>,
    build_directory: PathBuf,
    module: Option<String>,
    file: Option<String>,
    error: Option<String>,
    /// The trigger that was running (the driver's `ARCHSMITH_JIT_TRIGGER`).
    #[serde(default)]
    trigger: Option<String>,
}

fn read_record(path: &Path) -> Result<Vec<Recorded>> {
    let Ok(text) = fs::read_to_string(path) else {
        return Ok(Vec::new());
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("{}: {l}", path.display())))
        .collect()
}

/// A compile that failed (even where the tree's wrapper caught it and fell back), or a trigger
/// that failed before any compile: the first compiler error of the log, else the trigger's error.
fn prebuild_failure(
    pre: &Prebuild,
    runs: &[TriggerRun],
    recorded: &[Recorded],
    lines: &[String],
) -> Option<BuildFailure> {
    let failed_compile = recorded.iter().find(|r| r.error.is_some());
    let failed_trigger = runs.iter().find(|r| !r.ok);
    let message = match (failed_compile, failed_trigger) {
        (Some(r), _) => format!(
            "building the JIT extension {} failed: {}",
            r.name,
            r.error.as_deref().unwrap_or_default()
        ),
        (None, Some(t)) => format!(
            "running {}{} failed before it built anything: {}",
            t.module,
            t.call.as_deref().map(|c| format!(".{c}()")).unwrap_or_default(),
            t.error.as_deref().unwrap_or_default()
        ),
        (None, None) if recorded.is_empty() => {
            "the triggers ran but no load()/load_inline() call happened (a condition in the code skipped it?)"
                .to_string()
        }
        (None, None) => return None,
    };
    Some(BuildFailure {
        stage: "compile",
        message,
        first_error: first_error(pre, lines),
        log: Some(pre.log_path.clone()),
    })
}

fn to_entries(recorded: &[Recorded], ext_dir: &Path) -> Result<Vec<Entry>> {
    let mut out: Vec<Entry> = Vec::new();
    for r in recorded {
        let (Some(module), Some(file)) = (&r.module, &r.file) else {
            continue;
        };
        if out.iter().any(|e| e.key == r.key) {
            continue; // the same call reached twice
        }
        // A build directory of the tree's own choosing (inside its package, in archsmith's copy)
        // does not travel: its module goes into the extensions directory under the name.
        let dir = match r.build_directory.strip_prefix(ext_dir) {
            Ok(rel) => rel.to_path_buf(),
            Err(_) => {
                let to = ext_dir.join(&r.name);
                fs::create_dir_all(&to)?;
                fs::copy(r.build_directory.join(file), to.join(file))?;
                PathBuf::from(&r.name)
            }
        };
        out.push(Entry {
            name: r.name.clone(),
            module: module.clone(),
            file: file.clone(),
            dir: dir.display().to_string(),
            key: r.key.clone(),
            with_cuda: r.with_cuda,
            sources: r
                .sources
                .iter()
                .map(|s| {
                    Path::new(s)
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default()
                })
                .collect(),
            sass: Vec::new(),
            ptx: Vec::new(),
        });
    }
    Ok(out)
}

/// Step 3: each module built carries the plan (a CUDA extension) or no device code (a C++ one).
fn audit(
    entries: &mut [Entry],
    ext_dir: &Path,
    plan: &crate::arch::spec::Plan,
    log_path: &Path,
) -> Option<BuildFailure> {
    for e in entries.iter_mut() {
        let path = ext_dir.join(&e.dir).join(&e.file);
        let a = audit_wheel(&path, plan, e.with_cuda, Vec::new());
        if let Some(SoAudit { sass, ptx, .. }) = a.files.first() {
            e.sass = sass.clone();
            e.ptx = ptx.clone();
        }
        let mut problems = a.problems;
        problems.extend(a.extra);
        if !problems.is_empty() {
            return Some(BuildFailure {
                stage: "audit",
                message: format!(
                    "{} does not carry exactly {}: {}",
                    path.display(),
                    plan.torch_cuda_arch_list(),
                    problems.join("; ")
                ),
                first_error: None,
                log: Some(log_path.to_path_buf()),
            });
        }
    }
    None
}

/// Step 4: the manifest (written atomically) and the hook in the env's site-packages.
fn publish(ext_dir: &Path, entries: &[Entry], arch_list: &str, env: &super::EnvInfo) -> Result<()> {
    let manifest = serde_json::json!({
        "format": 1,
        "written_by": "archsmith build-ext",
        "torch": env.torch.to_string(),
        "arch_list": arch_list,
        "extensions": entries,
    });
    crate::codemod::write_atomic(
        &ext_dir.join(MANIFEST),
        serde_json::to_string_pretty(&manifest)?.as_bytes(),
    )
}

/// The `.pth` line: every Python start of the env runs it, so it imports the hook only where the
/// hook has work (a prebuild recording, or a `TORCH_EXTENSIONS_DIR` holding the manifest). Inert,
/// it costs two environment look-ups: `os` is imported by `site` already, and importing the hook
/// module (importlib.abc, hashlib, json) cost every `python -c pass` 25 ms and 5 MB (issue 50).
pub const HOOK_PTH_LINE: &str = "import os; (os.environ.get('ARCHSMITH_JIT_PREBUILD') or os.path.isfile(os.path.join(os.environ.get('TORCH_EXTENSIONS_DIR') or '/nonexistent', 'archsmith-jit.json'))) and __import__('archsmith_jit_hook')";

/// The hook into site-packages `purelib`, before the prebuild runs (a copy an earlier archsmith
/// left there would otherwise be the one the driver's Python imports first, through its `.pth`).
pub fn install_hook(purelib: &Path) -> Result<PathBuf> {
    let hook = crate::data::data_root()?
        .join(crate::data::JIT_HOOK)
        .join(HOOK_MODULE);
    let code = fs::read(&hook)?;
    crate::codemod::write_atomic(&purelib.join(HOOK_MODULE), &code)?;
    let pth = purelib.join(HOOK_PTH);
    crate::codemod::write_atomic(
        &pth,
        format!("# archsmith's load() hook: inert unless TORCH_EXTENSIONS_DIR holds archsmith-jit.json\n{HOOK_PTH_LINE}\n").as_bytes(),
    )?;
    Ok(pth)
}

/// Step 5: the triggers again in a process that could not compile: an empty `PATH` (no ninja, no
/// nvcc, no c++), no `CUDA_HOME`, the extensions directory set.
fn check_offline_load(
    python: &Path,
    tree: &Path,
    triggers: &Path,
    ext_dir: &Path,
) -> Result<Vec<TriggerRun>> {
    let empty = tree.parent().unwrap_or(tree).join("empty-path");
    fs::create_dir_all(&empty)?;
    let out = driver(python, tree, triggers)?
        .env("PATH", &empty)
        .env_remove("CUDA_HOME")
        .env_remove("CUDA_PATH")
        .env_remove("PYTORCH_NVCC")
        .env_remove("ARCHSMITH_JIT_PREBUILD")
        .env("TORCH_EXTENSIONS_DIR", ext_dir)
        .output()?;
    let runs: Vec<TriggerRun> = out.stdout.lines().filter_map(parse_trigger_line).collect();
    if runs.is_empty() {
        bail!("the offline load check printed nothing: {}", out.stderr);
    }
    Ok(runs)
}

impl Outcome {
    /// A JIT prebuild's result: what was built, where, and what to set.
    pub fn table(&self) -> String {
        let o = self;
        let mut t = Table::new(["extension", "sources", "device code", "dir"]);
        for e in &o.extensions {
            let code = [e.sass.clone(), e.ptx.clone()].concat().join(" ");
            let code = if e.with_cuda {
                code
            } else {
                "none (C++ only)".into()
            };
            t.row([e.name.clone(), e.sources.join(" "), code, e.dir.clone()]);
        }
        let mut text = t.render();
        for line in o.notes() {
            text += &format!("{line}\n");
        }
        let n = o.loaded_offline.len();
        text += &format!("loaded with no compiler on PATH: {n} trigger(s)\n");
        text += &format!(
            "at run time: TORCH_EXTENSIONS_DIR={}\n",
            o.extensions_dir.display()
        );
        text + &format!("load() hook: {}\n", o.hook.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pure-Python setup.py (KNN_CUDA's) leaves a tree of JIT calls to the prebuild; one that
    /// names an extension is built as a wheel.
    #[test]
    fn only_a_build_script_that_compiles_something_takes_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(
            d.join("ops.py"),
            "from torch.utils.cpp_extension import load\n_C = load('ops', ['ops.cpp'])\n",
        )
        .unwrap();
        let spec = SourceSpec::Dir(d.to_path_buf());
        assert!(applies(&spec).unwrap(), "no build script");
        fs::write(
            d.join("setup.py"),
            "from setuptools import setup, find_packages\nsetup(name='knn', packages=find_packages())\n",
        )
        .unwrap();
        assert!(applies(&spec).unwrap(), "a pure-Python setup.py");
        for compiled in [
            "setup(ext_modules=[CUDAExtension('x', ['x.cu'])])",
            "from skbuild import setup\n",
            "setup(ext_modules=cythonize('x.pyx'))",
        ] {
            fs::write(d.join("setup.py"), compiled).unwrap();
            assert!(!applies(&spec).unwrap(), "{compiled}");
        }
        fs::remove_file(d.join("setup.py")).unwrap();
        fs::write(d.join("ops.py"), "print('no JIT here')\n").unwrap();
        assert!(!applies(&spec).unwrap(), "no call");
    }
}
