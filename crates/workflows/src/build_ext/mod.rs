//! `build-ext`: build a torch C++/CUDA extension for exactly the planned archs, audit the wheel,
//! import it, and remember the result.
//!
//! The steps are functions in [`steps`], called in this order by [`run`] over one [`steps::Job`];
//! each fails with a message that says what to do:
//! 1. [`steps::resolve`]: the Python env (archsmith's torch env, or `--python`) and its torch,
//!    read from `torch/version.py` without importing torch; CUDA: torch's own release unless
//!    `--cuda`, and a different major is an error before anything is compiled (torch's
//!    cpp_extension would refuse it later, after minutes of work); the arch plan, validated for
//!    this torch and CUDA; the source (directory, sdist, `pypi:NAME==VER`) and its hash → the stamp;
//! 2. [`steps::reuse`]: an output dir that already holds a wheel with this stamp returns it at once;
//! 3. [`steps::provision`]: a private copy of the source in a scratch dir under the cache
//!    ([`scratch`]), the jobs model ([`jobs`]), the log, the compiler cache and the arch guard
//!    ([`arch_guard`]);
//! 4. [`steps::compile`]: `uv build --no-build-isolation` (or `pip wheel --no-build-isolation
//!    --no-deps` when there is no uv) with the environment of [`command`]; output streamed to a log
//!    under the output dir and to a progress bar;
//! 5. [`steps::collect`]: compiler-cache statistics, the arch guard's report, the wheel;
//! 6. [`steps::check`]: the wheel audited with the binary reader against the plan, then imported in
//!    the env by a process started with the build ([`check`]);
//! 7. [`steps::deliver`]: only then is the wheel moved into the output dir;
//! 8. [`steps::stamp`]: its record next to it ([`stamp_inputs`]).
//!
//! Nothing is written into the output dir before step 7 except the log, so an interrupted build
//! leaves no partial wheel there.

pub mod arch_guard;
pub mod check;
pub mod command;
pub mod compiling_cuda;
pub mod hf_kernels;
pub mod insight;
pub mod jit;
pub mod job_pool;
pub mod jobs;
pub mod record;
pub mod scratch;
pub mod source;
pub mod stamp_inputs;
pub mod steps;
pub mod variants;

use crate::arch::spec::{Plan, PlanContext};
use crate::build_output::{log, progress};
use crate::kb::kb;
use crate::output::Table;
use crate::python;
use crate::toolchain::{self, Toolchain};
use crate::version::Version;
use anyhow::{bail, Context, Result};
use fs_err as fs;
use std::path::{Path, PathBuf};

pub use crate::compiler_cache::CacheKind;
pub use record::{ExtensionBuilt, LoadSummary, Record};
pub use scratch::scratch_root;
pub use source::SourceSpec;
pub use steps::run;

/// What a build-ext run made: a wheel, or a JIT tree's prebuild.
pub enum Built {
    Wheel(Box<Outcome>),
    Jit(Box<jit::Outcome>),
}

/// Builds `req.source`: a tree of JIT extensions is prebuilt ([`jit::applies`]), anything else
/// built into a wheel.
pub fn build(req: &Request) -> Result<Result<Built, BuildFailure>> {
    if jit::applies(&req.source)? {
        return Ok(jit::run(req)?.map(|o| Built::Jit(Box::new(o))));
    }
    if let SourceSpec::Dir(p) = &req.source {
        if !source::has_build_script(p) {
            bail!(
                "{} has neither setup.py nor pyproject.toml, and no Python file in it calls torch's load()/load_inline(): give the extension's root directory",
                p.display()
            );
        }
    }
    Ok(run(req)?.map(|o| Built::Wheel(Box::new(o))))
}

/// What to build and how.
#[derive(Debug, Clone)]
pub struct Request {
    pub source: SourceSpec,
    pub arch: crate::arch::spec::ArchSpec,
    /// `--torch`, `--cuda`, `--python`.
    pub target: crate::python::TargetEnv,
    pub out: PathBuf,
    pub cache: Option<CacheKind>,
    pub jobs: Option<u32>,
    pub progress: progress::Mode,
    /// Let the extension's own nvcc arch flags through instead of the plan's ([`arch_guard`]).
    pub own_arch_flags: bool,
    /// Build a package's extensions one after another, as setuptools does, instead of
    /// [`jobs::Parallelism::extensions`] at once.
    pub serial_extensions: bool,
    /// The build is meant to compile no GPU code (a package's own CPU-only switch, such as
    /// torch-cluster's `FORCE_ONLY_CPU=1`): no `FORCE_CUDA`, and the wheel must carry no device code.
    pub cpu_only: bool,
    /// Send compiles to an sccache-dist scheduler ([`dist`]); implies `--cache sccache`.
    pub dist: Option<crate::compiler_cache::dist::Dist>,
    /// Build a directory whose git submodules are empty anyway ([`source::unfilled_submodules`]):
    /// what includes them fails and is reported, the rest is built.
    pub skip_missing_submodules: bool,
    /// A port to torch's stable ABI: the `TORCH_TARGET_VERSION` value (`0x020a000000000000`)
    /// every extension is compiled with, on CPython's limited API, into an `abi3` wheel (the
    /// build hooks set them; crates/workflows/src/build_ext/build_hooks/sitecustomize.py).
    pub stable_abi_target: Option<String>,
    /// A pool of job slots and memory this build shares with others built at once (a tree's
    /// packages, [`job_pool`]): its compiles take their slots from it, not from `MAX_JOBS`.
    pub pool: Option<job_pool::PoolShare>,
    /// The env, toolkit and arch plan the caller already resolved for `target` and `arch` (a
    /// port does, before it copies the source): built with as they are, `arch` not parsed again.
    pub prepared: Option<std::sync::Arc<Prepared>>,
}

impl BuildFailure {
    /// The failure with the empty submodules named, when the build went on without them: the
    /// likely cause of a missing header.
    pub fn with_submodules(mut self, skipped: Option<&crate::git_submodules::Unfilled>) -> Self {
        if let Some(u) = skipped {
            self.message += &format!(
                " (built without the empty git submodules {}: --skip-missing-submodules)",
                u.paths().join(" ")
            );
        }
        self
    }
}

/// A finished (or reused) build: the wheel, what it is recorded as ([`Record`]), and what this
/// run did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    pub wheel: PathBuf,
    /// True when the stamp matched and nothing was built.
    pub reused: bool,
    pub stamp: String,
    #[serde(flatten)]
    pub record: Record,
    /// This run's log; None for a reuse (nothing ran).
    pub log: Option<PathBuf>,
    pub total_seconds: f64,
    pub cache_stats: Option<String>,
    /// Compiles of files that several extensions share, and how many of them another extension's
    /// compile of the same file served ([`crate::compiler_cache::shared_sources`]). None when no
    /// extension shared a file, with `--cache`, or without ccache.
    pub shared_sources: Option<crate::compiler_cache::shared_sources::SharedSourceStats>,
    /// With `--dist`: compiles per build server, and failed distributions (sccache's statistics).
    pub distributed: Option<crate::compiler_cache::dist::DistStats>,
    /// With `--torch-range`: the wheel's shared objects over those torch releases by their real
    /// exports ([`Outcome::check_torch_range`]).
    pub torch_range: Option<crate::verify::load_check::release_range::RangeReport>,
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
            write!(f, "\nfirst error: {e}")?;
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
    /// torch's companions and build front end installed beside it: distribution → version.
    pub packages: std::collections::BTreeMap<String, String>,
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
        packages: info.packages,
    })
}

/// Refuses an env whose older torch cannot build an extension with what is installed beside it
/// (torch ≤ 2.1's cpp_extension imports `pkg_resources`, gone from setuptools 82), before anything
/// compiles; a pin that breaks only torch's numpy interop is said and the build goes on.
fn check_env_pins(env: &EnvInfo) -> Result<()> {
    use crate::kb::PinEvidence;
    for unmet in python::torch_env::unmet_pins(&env.torch, &env.packages) {
        let said = unmet.message(&env.torch);
        let fix = unmet.fix(&env.python);
        match unmet.pin.evidence {
            PinEvidence::CppExtensionImportsPkgResources => bail!("{said}. Run `{fix}`"),
            PinEvidence::NumpyOneCApi => crate::errln!("archsmith: warning: {said}. Run `{fix}`"),
        }
    }
    Ok(())
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
#[derive(Debug, Clone)]
pub struct Prepared {
    pub env: EnvInfo,
    pub tc: Toolchain,
    pub plan: Plan,
    /// Asked archs a stable build's older toolkit covers by PTX (the plan is its `built`).
    pub cover: Option<compiling_cuda::PtxCover>,
}

/// Resolves the env (archsmith's for `torch`, or `python`), the CUDA (checked against torch's
/// major before the toolchain is touched) and the arch plan. `stable_target`: a stable-ABI
/// build's `TORCH_TARGET_VERSION`; it links the CUDA runtime in and so is free of torch's CUDA
/// major ([`compiling_cuda::oldest_covering_release`]).
pub fn prepare(
    target: &crate::python::TargetEnv,
    arch: &str,
    stable_target: Option<&str>,
) -> Result<Prepared> {
    let stable_release = stable_target.and_then(crate::codemod::catalogue::torch_target_release);
    let (python, torch, cuda) = (
        target.python.as_deref(),
        target.torch.as_ref(),
        target.cuda.as_ref(),
    );
    crate::kb::user_input::torch_and_cuda(torch, cuda)?;
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
    check_env_pins(&env)?;
    let compiling_cuda::CompilingCuda {
        cuda,
        whence,
        cover,
    } = compiling_cuda::compiling_cuda(&env, cuda, stable_release.as_ref(), arch)?;
    let ctx = PlanContext::new(Some(base_version(&env.torch)), Some(cuda.clone()));
    let plan = Plan::parse(&ctx, cover.as_ref().map_or(arch, |c| c.built.as_str()))
        .with_context(|| format!("--arch {}", crate::kb::user_input::echo(arch)))?;
    let tc = ensure_toolchain(&env, &cuda)?;
    match (whence, &env.torch_cuda) {
        (Some(whence), Some(torch_cuda)) if stable_release.is_some() => crate::errln!(
            "archsmith: stable ABI: compiling with CUDA {} {whence} (torch's is {}; the runtime is linked in)",
            tc.nvcc_version,
            torch_cuda.major_minor()
        ),
        (Some(whence), Some(torch_cuda)) => crate::errln!(
            "archsmith: no CUDA {} toolkit here; building with CUDA {} {whence} (same major: torch accepts it)",
            torch_cuda.major_minor(),
            tc.nvcc_version
        ),
        _ => {}
    }
    if let Some(cover) = &cover {
        crate::errln!("archsmith: stable ABI: {}", cover.said);
    }
    Ok(Prepared {
        env,
        tc,
        plan,
        cover,
    })
}

/// The toolchain of `cuda`, provisioned; where none can be had, the error says what fits the
/// env's torch.
fn ensure_toolchain(env: &EnvInfo, cuda: &Version) -> Result<Toolchain> {
    toolchain::ensure(cuda).map_err(|e| {
        // A torch of a CUDA major PyPI has no nvcc for: what fits this torch, not a CUDA 13.
        match (
            e.downcast_ref::<toolchain::system::NoToolkit>(),
            e.downcast_ref::<crate::offline::Refused>(),
            &env.torch_cuda,
        ) {
            (Some(none), _, Some(torch_cuda)) => anyhow::anyhow!(
                "no CUDA {} toolkit found. Looked at:{}\n{}",
                none.cuda,
                none.looked,
                crate::arch::advice::toolkit_advice(&env.torch, torch_cuda, &[], None)
            ),
            // Offline, with no toolkit of the major to reuse: the same advice after the refusal.
            (None, Some(refused), Some(torch_cuda)) if !toolchain::from_pypi(torch_cuda) => {
                anyhow::anyhow!(
                    "{refused}\n{}",
                    crate::arch::advice::toolkit_advice(&env.torch, torch_cuda, &[], None)
                )
            }
            _ => e,
        }
    })
}

/// The front end: `uv build` when uv is at hand (on PATH, or bootstrapped into archsmith's tools),
/// else `pip wheel` when the env has pip. Both call the same PEP 517 hooks without isolation; uv
/// comes first because pip also runs `prepare_metadata_for_build_wheel`, i.e. `setup.py` (and its
/// `import torch`) once more, which nearly doubles a no-op rebuild (measured in docs/build-ext.md).
/// `ARCHSMITH_NO_UV=1` selects pip.
/// An env with no pip and no uv at hand (one uv made, on a host where uv cannot be fetched) has
/// no front end: the error says how to give it one.
pub fn front_end(env: &EnvInfo) -> Result<&'static str> {
    if python::installer::uv_binary().is_some() {
        Ok("uv build")
    } else if env.has_pip {
        Ok("pip wheel")
    } else {
        bail!(
            "{} has no pip and uv is not on PATH, so nothing can run the extension's build: put uv on PATH, or give the env pip (`{} -m ensurepip`)",
            env.python.display(),
            env.python.display()
        )
    }
}

/// `include` and `lib` dirs of the NVIDIA wheels in site-packages: this major's shared directory
/// (`nvidia/cu13`, the knowledge base's `wheel_prefix`) first, then the per-library ones (`cudnn`,
/// `nccl`, …) in name order. Another major's directory (`nvidia/cu12` left by an older torch) is
/// skipped: its headers would shadow this toolkit's.
pub fn nvidia_wheel_dirs(purelib: &Path, cuda_major: u32) -> (Vec<String>, Vec<String>) {
    let root = purelib.join("nvidia");
    let dir_of = |prefix: &str| prefix.strip_prefix("nvidia/").map(str::to_string);
    let own = kb()
        .cuda_major(cuda_major)
        .and_then(|r| dir_of(&r.wheel_prefix));
    let others: Vec<String> = kb()
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

impl Outcome {
    /// On which torch releases of `spec` (`torch>=2.11,<2.16`) the built wheel's shared objects
    /// load, each one stable or tied, by the releases' real exports.
    pub fn check_torch_range(&mut self, spec: &str) -> Result<()> {
        let report = crate::verify::load_check::release_range::RangeReport::check(
            spec,
            std::slice::from_ref(&self.wheel),
        )?;
        self.torch_range = Some(report);
        Ok(())
    }

    /// The nvcc compile with the highest measured peak resident memory, for the summary.
    fn heaviest_compile(&self) -> Option<(&'static str, String)> {
        let (file, peak, ms) = self.record.arch_guard.as_ref()?.heaviest.as_ref()?;
        let name = std::path::Path::new(file)
            .file_name()
            .map_or(file.clone(), |n| n.to_string_lossy().into_owned());
        Some((
            "heaviest nvcc",
            format!(
                "{name}: {:.2} GiB peak resident (measured), {:.0} s",
                *peak as f64 / (1024.0 * 1024.0 * 1024.0),
                *ms as f64 / 1000.0
            ),
        ))
    }

    /// Built (and how long) or up to date.
    fn verdict(&self) -> String {
        match self.reused {
            true => format!(
                "up to date (stamp {}), {:.2} s",
                &self.stamp[..12],
                self.total_seconds
            ),
            false => format!(
                "built in {:.0} s (compile {:.0} s)",
                self.total_seconds, self.record.build_seconds
            ),
        }
    }

    /// The aligned summary people read.
    pub fn table(&self) -> String {
        let o = self;
        let mut t = Table::headerless();
        t.row(["wheel".to_string(), o.wheel.display().to_string()]);
        t.row(["result".to_string(), o.verdict()]);
        t.row(["source".to_string(), o.record.source.clone()]);
        t.row([
            "torch / CUDA".to_string(),
            format!("{} / nvcc {}", o.record.torch, o.record.nvcc),
        ]);
        t.row([
            "TORCH_CUDA_ARCH_LIST".to_string(),
            o.record.torch_cuda_arch_list.clone(),
        ]);
        if let Some(cover) = &o.record.ptx_cover {
            t.row(["PTX cover".to_string(), cover.said.clone()]);
        }
        t.row([
            "jobs".to_string(),
            format!(
                "MAX_JOBS={}, nvcc --threads={} ({})",
                o.record.jobs, o.record.nvcc_threads, o.record.builder
            ),
        ]);
        for (what, detail) in o.record.audit.rows() {
            t.row([what.to_string(), detail]);
        }
        let imports: Vec<String> = o
            .record
            .imported
            .iter()
            .map(|m| match o.record.operator_libraries.contains(m) {
                true => format!("{m} (operator library)"),
                false => m.clone(),
            })
            .collect();
        t.row(["imports".to_string(), imports.join(", ")]);
        if let Some(l) = &o.record.load {
            let verdict = match l.loads {
                true => format!("all {} shared objects load after import torch", l.files),
                false => l.problems.join("; "),
            };
            t.row(["load check".to_string(), verdict]);
            for line in &l.torch_abi {
                t.row(["torch ABI".to_string(), line.clone()]);
            }
        }
        for f in o.torch_range.iter().flat_map(|r| &r.files) {
            if let Some(v) = &f.torch {
                t.row(["torch range".to_string(), v.verdict.clone()]);
            }
        }
        for (what, detail) in o.heaviest_compile().into_iter().chain(
            o.record
                .insight
                .as_ref()
                .map(|i| i.written.rows())
                .unwrap_or_default(),
        ) {
            t.row([what.to_string(), detail]);
        }
        if let Some(s) = &o.cache_stats {
            t.row(["compiler cache".to_string(), s.clone()]);
        }
        if let Some(s) = &o.shared_sources {
            t.row(["shared files".to_string(), s.to_string()]);
        }
        if let Some(l) = &o.log {
            t.row(["log".to_string(), l.display().to_string()]);
        }
        for w in &o.record.warnings {
            t.row(["warning".to_string(), w.clone()]);
        }
        t.render()
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
            nvidia_wheel_dirs(site.path(), major)
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
