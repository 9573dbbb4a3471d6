//! `build-ext`: build a torch C++/CUDA extension for exactly the planned archs, audit the wheel,
//! import it, and remember the result.
//!
//! The steps, in order (each fails with a message that says what to do):
//! 1. the Python env (archsmith's torch env, or `--python`) and its torch, read from
//!    `torch/version.py` without importing torch;
//! 2. CUDA: torch's own release unless `--cuda`; a different major is an error before anything
//!    is compiled (torch's cpp_extension would refuse it later, after minutes of work);
//! 3. the arch plan, validated for this torch and CUDA;
//! 4. the source (directory, sdist, `pypi:NAME==VER`) and its hash → the stamp. An output dir
//!    that already holds a wheel with this stamp returns it at once ([`stamp`]);
//! 5. a private copy of the source in a scratch dir under the cache, `uv build
//!    --no-build-isolation` (or `pip wheel --no-build-isolation --no-deps` when there is no uv)
//!    with `TORCH_CUDA_ARCH_LIST`, `CUDA_HOME`, `MAX_JOBS` and nvcc `--threads` ([`plan`]); output
//!    streamed to a log under the output dir and to a progress bar ([`progress`]);
//! 6. the wheel audited with the binary reader against the plan, then unpacked into a scratch
//!    dir and imported in the env by a process started with the build ([`check`]);
//! 7. only then is the wheel moved into the output dir, with its record next to it.
//!
//! Nothing is written into the output dir before step 7 except the log, so an interrupted build
//! leaves no partial wheel there.

pub mod arch_guard;
pub mod check;
pub mod jobs;
pub mod source;
pub mod stamp_inputs;

use crate::arch::spec::{Plan, PlanContext};
use crate::build_output::{log, progress};
use crate::kb::kb;
use crate::paths;
use crate::process::Cmd;
use crate::python;
use crate::toolchain::{self, Toolchain};
use crate::version::Version;
use anyhow::{bail, Context, Result};
use fs_err as fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub use crate::compiler_cache::CacheKind;
pub use source::SourceSpec;

/// What to build and how.
#[derive(Debug, Clone)]
pub struct Request {
    pub source: SourceSpec,
    pub arch: String,
    pub torch: Option<Version>,
    pub cuda: Option<Version>,
    pub python: Option<PathBuf>,
    pub out: PathBuf,
    pub cache: Option<CacheKind>,
    pub jobs: Option<u32>,
    pub progress: progress::Mode,
    /// Let the extension's own nvcc arch flags through instead of the plan's ([`arch_guard`]).
    pub own_arch_flags: bool,
    /// Build a package's extensions one after another, as setuptools does, instead of
    /// [`jobs::Parallelism::extensions`] at once.
    pub serial_extensions: bool,
    /// Send compiles to an sccache-dist scheduler ([`dist`]); implies `--cache sccache`.
    pub dist: Option<crate::compiler_cache::dist::Dist>,
}

/// A finished (or reused) build.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    pub wheel: PathBuf,
    /// True when the stamp matched and nothing was built.
    pub reused: bool,
    pub stamp: String,
    pub source: String,
    pub torch: String,
    pub cuda: String,
    pub nvcc: String,
    pub torch_cuda_arch_list: String,
    pub jobs: u32,
    pub nvcc_threads: u32,
    pub builder: String,
    pub log: Option<PathBuf>,
    pub build_seconds: f64,
    pub total_seconds: f64,
    pub audit: check::AuditSummary,
    pub imported: Vec<String>,
    pub warnings: Vec<String>,
    pub cache_stats: Option<String>,
    /// What the arch guard saw: compiles, and the archs the extension asked for instead of the
    /// plan's. None with `--own-arch-flags` (and for a reused wheel recorded before the guard).
    #[serde(default)]
    pub arch_guard: Option<arch_guard::Report>,
    /// Extensions built at once (1: one after another), and each one's time where they ran
    /// concurrently (the build hooks' `archsmith-ext:` lines).
    #[serde(default = "one")]
    pub extensions_at_once: u32,
    #[serde(default)]
    pub extensions: Vec<ExtensionBuilt>,
    /// The package switched ninja off and the hooks switched it back on.
    #[serde(default)]
    pub ninja_turned_on: bool,
    /// With `--dist`: compiles per build server, and failed distributions (sccache's statistics).
    #[serde(default)]
    pub distributed: Option<crate::compiler_cache::dist::DistStats>,
}

fn one() -> u32 {
    1
}

/// One extension of a package built concurrently with others.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ExtensionBuilt {
    pub name: String,
    pub seconds: f64,
    pub ok: bool,
}

/// `archsmith-ext: done NAME (k/total, Ns)` / `FAILED …` lines of the build hooks.
pub fn parse_extension_line(line: &str) -> Option<ExtensionBuilt> {
    let rest = line.strip_prefix("archsmith-ext: ")?;
    let (ok, rest) = if let Some(r) = rest.strip_prefix("done ") {
        (true, r)
    } else {
        (false, rest.strip_prefix("FAILED ")?)
    };
    let (name, tail) = rest.rsplit_once(" (")?;
    let seconds = tail
        .trim_end_matches(')')
        .rsplit_once(", ")?
        .1
        .strip_suffix('s')?
        .parse()
        .ok()?;
    Some(ExtensionBuilt {
        name: name.to_string(),
        seconds,
        ok,
    })
}

/// Why a build failed, with what the user needs to act: the first compiler error and the log.
#[derive(Debug, serde::Serialize)]
pub struct BuildFailure {
    /// `compile`, `audit` or `import`.
    pub stage: &'static str,
    pub message: String,
    pub first_error: Option<log::CompilerError>,
    pub log: Option<PathBuf>,
}

impl std::fmt::Display for BuildFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message)?;
        if let Some(e) = &self.first_error {
            let loc = match (&e.file, e.line) {
                (Some(file), Some(line)) => format!("{file}:{line}: "),
                (Some(file), None) => format!("{file}: "),
                _ => String::new(),
            };
            write!(
                f,
                "\nfirst error: {loc}{} (log line {})",
                e.message, e.log_line
            )?;
        }
        if let Some(log) = &self.log {
            write!(f, "\nfull log: {}", log.display())?;
        }
        Ok(())
    }
}

impl std::error::Error for BuildFailure {}

/// What the env holds, read without importing torch.
#[derive(Debug, Clone)]
pub struct EnvInfo {
    pub python: PathBuf,
    pub python_version: String,
    pub purelib: PathBuf,
    pub has_pip: bool,
    /// `torch.__version__`, e.g. `2.15.0+cu132`.
    pub torch: Version,
    /// `torch.version.cuda`; None for CPU-only torch.
    pub torch_cuda: Option<Version>,
}

/// Reads the env's Python version, site-packages and torch version with the one probe
/// ([`python::probe`], files only: torch is not imported); an env without torch is an error.
pub fn probe_env(python: &Path) -> Result<EnvInfo> {
    let info = python::probe(python, python::Depth::Files)?;
    let Some(torch) = info.torch else {
        bail!(
            "{} has no torch{}: install torch there, or drop --python to let archsmith make an env",
            python.display(),
            info.error.map(|e| format!(" ({e})")).unwrap_or_default()
        );
    };
    Ok(EnvInfo {
        python: python.to_path_buf(),
        python_version: info.python.to_string(),
        purelib: info.purelib,
        has_pip: info.has_pip,
        torch,
        torch_cuda: info.cuda,
    })
}

/// The CUDA to build with: `requested` if given, else torch's own; a different major is an error.
pub fn choose_cuda(
    torch: &Version,
    torch_cuda: Option<&Version>,
    requested: Option<&Version>,
) -> Result<Version> {
    let Some(tc) = torch_cuda else {
        bail!(
            "torch {torch} in this env is a CPU-only build (torch.version.cuda is None): CUDA extensions need a CUDA torch; use archsmith's env (drop --python) or install a +cuXYZ torch"
        );
    };
    match requested {
        None => Ok(tc.major_minor()),
        Some(r) if r.major() != tc.major() => bail!(
            "--cuda {r} does not match torch {torch}, which was built with CUDA {tc}: an extension must be compiled with the same CUDA major as torch (torch's cpp_extension refuses a mismatch). Use --cuda {} or a torch built for CUDA {}",
            tc.major_minor(),
            r.major()
        ),
        Some(r) => Ok(r.clone()),
    }
}

fn base_version(v: &Version) -> Version {
    Version::new(v.parts())
}

/// The env, toolchain and plan for a request: steps 1–3, before anything is built.
pub struct Prepared {
    pub env: EnvInfo,
    pub tc: Toolchain,
    pub plan: Plan,
}

/// Resolves the env (archsmith's for `torch`, or `python`), the CUDA (checked against torch's
/// major before the toolchain is touched) and the arch plan.
pub fn prepare(
    python: Option<&Path>,
    torch: Option<&Version>,
    cuda: Option<&Version>,
    arch: &str,
) -> Result<Prepared> {
    let python = match python {
        Some(p) => p.to_path_buf(),
        None => {
            let torch = torch
                .cloned()
                .unwrap_or_else(|| kb().releases.newest_torch.clone());
            python::ensure_torch_env(&torch)?.python
        }
    };
    let env = probe_env(&python)?;
    if let Some(want) = torch {
        if !env.torch.matches_prefix(want) {
            bail!(
                "--torch {want} but {} has torch {}: drop one of --torch/--python",
                python.display(),
                env.torch
            );
        }
    }
    let cuda = choose_cuda(&env.torch, env.torch_cuda.as_ref(), cuda)?;
    let ctx = PlanContext::new(kb(), Some(base_version(&env.torch)), Some(cuda.clone()));
    let plan = Plan::parse(kb(), &ctx, arch).with_context(|| format!("--arch {arch}"))?;
    let tc = toolchain::ensure(&cuda)?;
    Ok(Prepared { env, tc, plan })
}

/// The front end: `uv build` when uv is at hand (on PATH, or bootstrapped into archsmith's tools),
/// else `pip wheel` when the env has pip. Both call the same PEP 517 hooks without isolation; uv
/// comes first because pip also runs `prepare_metadata_for_build_wheel`, i.e. `setup.py` (and its
/// `import torch`) once more: 3.4 s a build here (a no-op rebuild takes 7.05 s with pip, 3.7 s
/// with uv). `ARCHSMITH_NO_UV=1` selects pip.
pub fn front_end(env: &EnvInfo) -> &'static str {
    if !env.has_pip || python::installer::uv_binary().is_some() {
        "uv build"
    } else {
        "pip wheel"
    }
}

/// Builds (or reuses) the wheel for `req`.
pub fn run(req: &Request) -> Result<Outcome> {
    let started = Instant::now();
    let Prepared { env, tc, plan } = prepare(
        req.python.as_deref(),
        req.torch.as_ref(),
        req.cuda.as_ref(),
        &req.arch,
    )?;
    let arch_list = plan.torch_cuda_arch_list();
    let src = source::resolve(&req.source, &env.python)?;
    let builder = front_end(&env);
    let stamp_inputs = stamp_inputs::Inputs {
        own_arch_flags: req.own_arch_flags,
        ..stamp_inputs::Inputs::new(&src.hash, &env, &tc, &arch_list, builder)
    };
    let key = stamp_inputs.key();
    if let Some(hit) = reuse(&req.out, &key, started) {
        return Ok(hit);
    }
    build(req, &env, &tc, &plan, &src, stamp_inputs, builder, started)
}

/// The outcome recorded for the wheel in `out` whose stamp is `key`, as a reuse of it: no log and
/// no cache statistics (nothing ran), this run's time.
fn reuse(out: &Path, key: &str, started: Instant) -> Option<Outcome> {
    let (wheel, mut hit): (PathBuf, Outcome) = crate::stamp::lookup(out, key)?;
    hit.wheel = wheel;
    hit.reused = true;
    hit.total_seconds = started.elapsed().as_secs_f64();
    hit.log = None;
    hit.cache_stats = None;
    Some(hit)
}

#[allow(clippy::too_many_arguments)]
fn build(
    req: &Request,
    env: &EnvInfo,
    tc: &Toolchain,
    plan: &Plan,
    src: &source::Resolved,
    inputs: stamp_inputs::Inputs,
    builder: &str,
    started: Instant,
) -> Result<Outcome> {
    let key = inputs.key();
    let scratch = Scratch::new(&key)?;
    // Another run with these inputs may have delivered while this one waited for the lock.
    if let Some(hit) = reuse(&req.out, &key, started) {
        return Ok(hit);
    }
    let tree = source::materialize(src, &scratch.path.join("src"), &env.python)?;
    let mut warnings = Vec::new();
    let files = source::tree_files(&tree)?;
    let (units, cu) = jobs::count_sources(&files);
    let images = (plan.sass().len() + plan.ptx().len()) as u32;
    let mut par = jobs::parallelism(
        crate::host::cores(),
        crate::host::mem_available_gib(),
        units,
        cu,
        images,
        req.jobs,
    );
    if req.serial_extensions {
        par.extensions = 1;
    }

    fs::create_dir_all(&req.out)
        .with_context(|| format!("creating the output dir {}", req.out.display()))?;
    let out = req.out.canonicalize()?;
    crate::stamp::remove_stale_partials(&out);
    let log_path = out.join(format!("{}-{}.log", src.spec.label(), &key[..12]));
    let mut log_file = fs::File::create(&log_path)
        .with_context(|| format!("creating the log {}", log_path.display()))?;

    let wheel_dir = scratch.path.join("wheel");
    fs::create_dir_all(&wheel_dir)?;
    let cache_kind = match (req.cache, &req.dist) {
        (None, Some(_)) => Some(CacheKind::Sccache),
        (kind, _) => kind,
    };
    let compiler_cache = match cache_kind {
        Some(kind) => Some(crate::compiler_cache::CompilerCache::prepare(
            kind,
            tc,
            req.dist.as_ref(),
        )?),
        None => None,
    };
    let guard = if req.own_arch_flags {
        None
    } else {
        let real = compiler_cache
            .as_ref()
            .map_or_else(|| tc.nvcc(), |c| c.wrappers.join("nvcc"));
        Some(arch_guard::Guard::prepare(&scratch.path, tc, plan, real)?)
    };
    let cmd = build_command(
        env,
        tc,
        plan,
        &par,
        builder,
        &tree,
        &wheel_dir,
        compiler_cache.as_ref(),
        guard.as_ref(),
    );
    writeln!(
        log_file,
        "# archsmith build-ext {}\n# TORCH_CUDA_ARCH_LIST={} MAX_JOBS={} nvcc --threads={}\n# {}\n",
        src.spec.label(),
        plan.torch_cuda_arch_list(),
        par.jobs,
        par.nvcc_threads,
        cmd.display()
    )?;
    eprintln!(
        "archsmith: building {} for {} with torch {} / CUDA {} ({} jobs ({}), nvcc --threads {}); log: {}",
        src.spec.label(),
        plan.torch_cuda_arch_list(),
        env.torch,
        tc.nvcc_version,
        par.jobs,
        par.reason,
        par.nvcc_threads,
        log_path.display()
    );
    // Started now so its `import torch` runs while setup.py imports torch too, on the core the
    // build leaves idle until ninja starts; it only imports the wheel's modules at the end.
    let import_check = check::ImportCheck::start(&env.python, &scratch.path.join("import"), &[])?;
    let build_started = Instant::now();
    let mut ui = progress::Progress::new(req.progress);
    let mut lines: Vec<String> = Vec::new();
    let mut write_err = None;
    let status = cmd.stream_lines(|line| {
        if let Err(e) = writeln!(log_file, "{line}") {
            write_err.get_or_insert(e);
        }
        ui.line(line);
        lines.push(line.to_string());
    })?;
    ui.finish();
    if let Some(e) = write_err {
        return Err(e).with_context(|| format!("writing {}", log_path.display()));
    }
    let build_seconds = build_started.elapsed().as_secs_f64();
    let tree_str = tree.display().to_string();
    if status != Some(0) {
        let mut first = log::first_compiler_error(lines.iter().map(String::as_str));
        if let Some(e) = first.as_mut() {
            // Point at the user's file, not the scratch copy.
            if let Some(f) = &e.file {
                if let Some(rel) = f.strip_prefix(&tree_str) {
                    let rel = rel.trim_start_matches('/');
                    e.file = Some(match &src.spec {
                        SourceSpec::Dir(d) => d.join(rel).display().to_string(),
                        _ => rel.to_string(),
                    });
                }
            }
        }
        let message =
            match (
                &first,
                log::last_python_error(lines.iter().map(String::as_str)),
            ) {
                (Some(_), _) => format!("building {} failed", src.spec.label()),
                (None, Some(py)) => format!(
                    "building {} failed before compiling: {py}",
                    src.spec.label()
                ),
                (None, None) => {
                    format!(
                "building {} failed ({}), with no compiler error in the output; its end:\n{}",
                src.spec.label(),
                status.map_or("killed by a signal".into(), |c| format!("exit code {c}")),
                lines.iter().rev().take(15).rev().cloned().collect::<Vec<_>>().join("\n")
            )
                }
            };
        return Err(BuildFailure {
            stage: "compile",
            message,
            first_error: first,
            log: Some(log_path),
        }
        .into());
    }
    let (cache_stats, distributed) = match compiler_cache
        .as_ref()
        .map(|c| c.stats_with_dist())
        .transpose()?
    {
        Some((lines, dist)) => (Some(lines), dist),
        None => (None, None),
    };
    let arch_guard = guard.as_ref().map(|g| g.report()).transpose()?;
    if let Some(w) = arch_guard.as_ref().and_then(|r| r.warning(plan)) {
        eprintln!("warning: {w}");
        warnings.push(w);
    }
    let built = find_wheel(&wheel_dir)?;
    // 6. audit and import. A built wheel is never thrown away: it is delivered whatever follows,
    // and a failure names where it is.
    let audit = check::audit_wheel(&built, plan);
    let sweep = import_check.run(&built, false)?;
    let sweep = if sweep.missing().is_empty() {
        sweep
    } else {
        // The package imports modules the env lacks: its declared requirements, installed beside
        // the env, may bring them.
        match python::requirements::declared(&built)
            .and_then(|reqs| python::requirements::install_beside(&env.python, &reqs))
        {
            Ok(Some((dir, installed))) => {
                warnings.push(format!(
                    "the import check ran with the wheel's requirements {} installed beside the env ({})",
                    installed.join(", "),
                    dir.display()
                ));
                check::ImportCheck::start(&env.python, &scratch.path.join("import-deps"), &[dir])?
                    .run(&built, false)?
            }
            Ok(None) => sweep,
            Err(e) => {
                warnings.push(format!(
                    "the wheel's requirements could not be installed for the import check: {e:#}"
                ));
                sweep
            }
        }
    };
    for f in sweep.failures.iter().filter(|f| f.kind == "missing") {
        warnings.push(format!(
            "{} imports {}, which is not installed and not among the wheel's requirements (Requires-Dist): its own import was not checked",
            f.module,
            f.missing.as_deref().unwrap_or("?")
        ));
    }
    let wheel = crate::stamp::deliver(&built, &out)?;
    if !audit.ok {
        return Err(BuildFailure {
            stage: "audit",
            message: format!(
                "the wheel does not carry what was planned ({}):\n{}\nthe wheel is kept: {}",
                plan.torch_cuda_arch_list(),
                audit.problems.join("\n"),
                wheel.display()
            ),
            first_error: None,
            log: Some(log_path),
        }
        .into());
    }
    let broken: Vec<String> = sweep
        .failures
        .iter()
        .filter(|f| f.kind != "missing")
        .map(|f| f.to_string())
        .collect();
    if !broken.is_empty() {
        return Err(BuildFailure {
            stage: "import",
            message: format!(
                "the wheel built but does not import:\n{}\nthe wheel is kept: {}",
                broken.join("\n"),
                wheel.display()
            ),
            first_error: None,
            log: Some(log_path),
        }
        .into());
    }
    let imported = sweep.imported;
    let outcome = Outcome {
        wheel,
        reused: false,
        stamp: key.clone(),
        source: src.spec.label(),
        torch: env.torch.to_string(),
        cuda: tc.cuda.to_string(),
        nvcc: tc.nvcc_version.to_string(),
        torch_cuda_arch_list: plan.torch_cuda_arch_list(),
        jobs: par.jobs,
        nvcc_threads: par.nvcc_threads,
        builder: builder.to_string(),
        log: Some(log_path),
        build_seconds,
        total_seconds: started.elapsed().as_secs_f64(),
        audit,
        imported,
        warnings,
        cache_stats,
        arch_guard,
        extensions_at_once: par.extensions,
        extensions: lines
            .iter()
            .filter_map(|l| parse_extension_line(l))
            .collect(),
        ninja_turned_on: lines
            .iter()
            .any(|l| l.starts_with("archsmith-ext: ninja turned back on")),
        distributed,
    };
    crate::stamp::record(&out, &inputs, &outcome.wheel, &outcome)?;
    drop(scratch);
    Ok(outcome)
}

/// The build command with its environment. No shell: every value is one argument or variable.
#[allow(clippy::too_many_arguments)]
pub fn build_command(
    env: &EnvInfo,
    tc: &Toolchain,
    plan: &Plan,
    par: &jobs::Parallelism,
    builder: &str,
    tree: &Path,
    wheel_dir: &Path,
    cache: Option<&crate::compiler_cache::CompilerCache>,
    guard: Option<&arch_guard::Guard>,
) -> Cmd {
    let mut cmd = if builder == "pip wheel" {
        Cmd::new(&env.python)
            .args([
                "-m",
                "pip",
                "wheel",
                "-v",
                "--no-build-isolation",
                "--no-deps",
                "--no-cache-dir",
                "-w",
            ])
            .arg(wheel_dir)
            .arg(tree)
    } else {
        let uv = python::installer::uv_binary().unwrap_or_else(|| PathBuf::from("uv"));
        python::installer::uv_cmd(&uv)
            .args(["build", "--wheel", "--no-build-isolation", "--python"])
            .arg(&env.python)
            .arg("--out-dir")
            .arg(wheel_dir)
            .arg(tree)
    };
    for (k, v) in build_env(env, tc, plan, par, cache, guard) {
        cmd = cmd.env(k, v);
    }
    cmd.dir(tree)
}

/// The variables a build gets (on top of the caller's environment).
pub fn build_env(
    env: &EnvInfo,
    tc: &Toolchain,
    plan: &Plan,
    par: &jobs::Parallelism,
    cache: Option<&crate::compiler_cache::CompilerCache>,
    guard: Option<&arch_guard::Guard>,
) -> Vec<(String, String)> {
    let prepend = |name: &str, first: Vec<String>| {
        let mut parts = first;
        if let Ok(old) = std::env::var(name) {
            if !old.is_empty() {
                parts.push(old);
            }
        }
        parts.join(":")
    };
    let env_bin = env
        .python
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    // The arch guard's nvcc first, then the compiler-cache wrappers, then the toolkit, then the
    // env's bin dir (ninja: torch's BuildExtension runs `ninja` from PATH), then the caller's PATH.
    let mut path_head: Vec<String> = guard
        .map(|g| g.bin_dir().display().to_string())
        .into_iter()
        .chain(cache.map(|c| c.wrappers.display().to_string()))
        .collect();
    let mut vars: Vec<(String, String)> = Vec::new();
    for (k, v) in tc.env_vars() {
        match k {
            "PATH" => path_head.push(v),
            "LD_LIBRARY_PATH" => vars.push((k.to_string(), prepend("LD_LIBRARY_PATH", vec![v]))),
            _ => vars.push((k.to_string(), v)),
        }
    }
    path_head.push(env_bin);
    vars.push(("PATH".into(), prepend("PATH", path_head)));
    vars.push(("TORCH_CUDA_ARCH_LIST".into(), plan.torch_cuda_arch_list()));
    // CMake-built extensions: CMake's own search finds a system nvcc (/usr/bin/nvcc) before PATH's.
    vars.push(("CUDACXX".into(), tc.nvcc().display().to_string()));
    vars.push(("MAX_JOBS".into(), par.jobs.to_string()));
    // Extensions that gate CUDA on torch.cuda.is_available() build it anyway on a GPU-less host.
    vars.push(("FORCE_CUDA".into(), "1".into()));
    vars.push(("PYTHONUNBUFFERED".into(), "1".into()));
    if par.nvcc_threads > 1 {
        let mut flags = std::env::var("NVCC_APPEND_FLAGS").unwrap_or_default();
        if !flags.is_empty() {
            flags.push(' ');
        }
        flags.push_str(&format!("--threads={}", par.nvcc_threads));
        vars.push(("NVCC_APPEND_FLAGS".into(), flags));
    }
    // Library headers (cuBLAS, cuSPARSE, cuSOLVER, cuDNN, NCCL…): a CUDA_HOME made of the compiler
    // wheels lacks them, but the torch env holds NVIDIA's wheels of the very libraries torch loads
    // at run time, headers included. CPATH is searched after every -I, so CUDA_HOME still wins for
    // the toolkit's own headers.
    let (inc, lib) = nvidia_wheel_dirs(kb(), &env.purelib, tc.cuda.major());
    if !inc.is_empty() {
        vars.push(("CPATH".into(), append("CPATH", inc)));
    }
    if !lib.is_empty() {
        vars.push(("LIBRARY_PATH".into(), append("LIBRARY_PATH", lib)));
    }
    if let Some(c) = cache {
        vars.extend(c.env(&scratch_root()));
    }
    if let Some(g) = guard {
        vars.extend(g.env());
    }
    if par.extensions > 1 {
        // The build hooks (env_scripts/build_hooks/sitecustomize.py) build that many extensions at
        // once, MAX_JOBS shared out between them, and turn ninja back on where a package
        // switched it off. Where the hooks cannot be found the build runs as setuptools would.
        if let Ok(root) = crate::data::data_root() {
            let hooks = root.join("env_scripts").join("build_hooks");
            vars.push((
                "PYTHONPATH".into(),
                prepend("PYTHONPATH", vec![hooks.display().to_string()]),
            ));
            vars.push((
                "ARCHSMITH_PARALLEL_EXTENSIONS".into(),
                par.extensions.to_string(),
            ));
            vars.push((
                "ARCHSMITH_EXT_MAX_JOBS".into(),
                (par.jobs / par.extensions).max(1).to_string(),
            ));
            vars.push(("ARCHSMITH_FORCE_NINJA".into(), "1".into()));
        }
    }
    vars
}

fn append(name: &str, dirs: Vec<String>) -> String {
    let mut parts = Vec::new();
    if let Ok(old) = std::env::var(name) {
        if !old.is_empty() {
            parts.push(old);
        }
    }
    parts.extend(dirs);
    parts.join(":")
}

/// `include` and `lib` dirs of the NVIDIA wheels in site-packages: this major's shared directory
/// (`nvidia/cu13`, the knowledge base's `wheel_prefix`) first, then the per-library ones (`cudnn`,
/// `nccl`, …) in name order. Another major's directory (`nvidia/cu12` left by an older torch) is
/// skipped: its headers would shadow this toolkit's.
pub fn nvidia_wheel_dirs(
    kb: &crate::kb::KnowledgeBase,
    purelib: &Path,
    cuda_major: u32,
) -> (Vec<String>, Vec<String>) {
    let root = purelib.join("nvidia");
    let dir_of = |prefix: &str| prefix.strip_prefix("nvidia/").map(str::to_string);
    let own = kb
        .cuda_major(cuda_major)
        .and_then(|r| dir_of(&r.wheel_prefix));
    let others: Vec<String> = kb
        .cuda_majors
        .iter()
        .filter_map(|r| dir_of(&r.wheel_prefix))
        .filter(|d| Some(d) != own.as_ref())
        .collect();
    let mut names: Vec<String> = fs::read_dir(&root)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.retain(|n| !others.contains(n));
    names.sort_by_key(|n| (Some(n) != own.as_ref(), n.clone()));
    let pick = |sub: &str| {
        names
            .iter()
            .map(|n| root.join(n).join(sub))
            .filter(|d| d.is_dir())
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
    };
    (pick("include"), pick("lib"))
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

/// Where scratch build dirs live: `cache_dir()/builds/ext/STAMP16/`.
pub fn scratch_root() -> PathBuf {
    paths::cache_dir().join("builds").join("ext")
}

/// A private build directory under the cache, named by the stamp and held under a file lock for
/// the build's lifetime; removed when dropped (also after a failure). The path is the same for
/// every build of one stamp, so compiler caches see the same command lines (and with
/// `CCACHE_BASEDIR` at [`scratch_root`], builds of other stamps share hits too). Dirs of killed
/// runs (lock free) are removed by the next run.
struct Scratch {
    path: PathBuf,
    _lock: crate::cache::Lock,
}

impl Scratch {
    fn new(key: &str) -> Result<Scratch> {
        let base = scratch_root();
        fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
        let lock_of = |name: &str| base.join(format!("{name}.lock"));
        for e in fs::read_dir(&base)?.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            if let Ok(Some(_free)) = crate::cache::try_lock(&lock_of(&name)) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
        let name = &key[..16];
        let lock = crate::cache::lock(&lock_of(name), &mut || {
            eprintln!("archsmith: waiting for another build of the same inputs to finish")
        })?;
        let path = base.join(name);
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path)?;
        Ok(Scratch { path, _lock: lock })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::env::var_os("ARCHSMITH_KEEP_SCRATCH").is_none() {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extension_lines_of_the_build_hooks() {
        let e = parse_extension_line("archsmith-ext: done multiext._fill (4/4, 2s)").unwrap();
        assert_eq!(
            (e.name.as_str(), e.seconds, e.ok),
            ("multiext._fill", 2.0, true)
        );
        let f = parse_extension_line("archsmith-ext: FAILED a (b) (1/3, 17s)").unwrap();
        assert_eq!((f.name.as_str(), f.seconds, f.ok), ("a (b)", 17.0, false));
        assert!(parse_extension_line("archsmith-ext: start x (1/2)").is_none());
        assert!(parse_extension_line("done x (1/2, 3s)").is_none());
    }

    #[test]
    fn nvidia_wheel_dirs_take_this_majors_layout_first_and_skip_anothers() {
        let site = tempfile::tempdir().unwrap();
        for d in ["cu13", "cudnn", "cuda_nvcc"] {
            fs::create_dir_all(site.path().join("nvidia").join(d).join("include")).unwrap();
        }
        let names = |major| {
            nvidia_wheel_dirs(kb(), site.path(), major)
                .0
                .iter()
                .map(|p| {
                    Path::new(p)
                        .parent()
                        .unwrap()
                        .file_name()
                        .unwrap()
                        .to_string_lossy()
                        .into_owned()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(names(13), ["cu13", "cudnn"]);
        assert_eq!(names(12), ["cuda_nvcc", "cudnn"]);
    }

    #[test]
    fn cuda_must_match_torchs_major() {
        let t: Version = "2.15.0+cu132".parse().unwrap();
        let tc: Version = "13.2".parse().unwrap();
        assert_eq!(
            choose_cuda(&t, Some(&tc), None).unwrap().to_string(),
            "13.2"
        );
        let r: Version = "13.0".parse().unwrap();
        assert_eq!(
            choose_cuda(&t, Some(&tc), Some(&r)).unwrap().to_string(),
            "13.0"
        );
        let r: Version = "12.8".parse().unwrap();
        let e = choose_cuda(&t, Some(&tc), Some(&r))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("same CUDA major") && e.contains("--cuda 13.2"),
            "{e}"
        );
        let e = choose_cuda(&t, None, None).unwrap_err().to_string();
        assert!(e.contains("CPU-only"), "{e}");
    }
}
