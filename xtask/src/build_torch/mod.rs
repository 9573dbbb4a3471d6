//! `build-torch`: PyTorch from source for exactly the chosen archs. Advise (does an official wheel
//! already run there?), plan (one environment, every variable checked against the tree), preflight
//! (what would fail hours in, in seconds), drive (ninja progress, full log, first real error,
//! resumable), verify (the wheel's device code and the live module), stamp (an unchanged request
//! returns the existing wheel at once).
//!
//! Layout: [`tree`] reads the source tree, [`reads`] is the variable cross-check, [`plan`] the
//! environment, [`preflight`] the checks, [`drive`] the build itself. The should-you-build advice is
//! the arch model's ([`crate::arch::advice::official_wheel_advice`]); the verification is
//! [`crate::verify::torch_wheel`], the same check `verify env` runs.

pub mod drive;
pub mod plan;
pub mod preflight;
pub mod reads;
pub mod report;
pub mod tree;

use crate::arch::advice::{official_wheel_advice, WheelAdvice};
use crate::arch::spec::{Plan, PlanContext};
use crate::build_output::progress::Mode;
use crate::compiler_cache::CacheKind;
use crate::cuda_arch::Cc;
use crate::host::{self, CompilerFamily, HostCompiler};
use crate::kb::KnowledgeBase;
use crate::process::which;
use crate::python::probe::{probe_with, Ask, Depth};
use crate::toolchain;
use crate::verify::torch_wheel;
use crate::version::Version;
use anyhow::{bail, Context, Result};
use plan::{BuildPlan, Jobs};
use preflight::{Check, Status};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tree::{NotATorchTree, TorchTree};

/// Where `--version` clones from (a local repository in tests).
pub const GIT_URL_VAR: &str = "ARCHSMITH_PYTORCH_GIT";
pub const DEFAULT_GIT_URL: &str = "https://github.com/pytorch/pytorch";

#[derive(Debug, Clone)]
pub struct Request {
    pub arch: String,
    pub src: Option<PathBuf>,
    /// A release to clone (`2.6.0`), instead of `src`.
    pub version: Option<String>,
    pub cuda: Option<Version>,
    pub python: Option<PathBuf>,
    pub gpus: Vec<String>,
    pub out: PathBuf,
    pub jobs: Option<u32>,
    pub cache: Option<CacheKind>,
    /// Send the compiles to an sccache-dist scheduler (implies `--cache sccache`).
    pub dist: Option<crate::compiler_cache::dist::Dist>,
    pub sets: Vec<(String, String)>,
    pub dry_run: bool,
    pub stop_after_configure: bool,
    pub progress: Mode,
}

/// Everything decided before anything compiles.
#[derive(Debug, Serialize)]
pub struct Prepared {
    pub tree: TorchTree,
    pub cuda: Version,
    /// Why that CUDA (given, or chosen).
    pub cuda_reason: String,
    pub advice: Vec<WheelAdvice>,
    pub checks: Vec<Check>,
    /// Absent when a check that the plan needs failed.
    pub plan: Option<BuildPlan>,
    /// What differs in an existing `build/CMakeCache.txt` (it is then reconfigured).
    pub reconfigure: Vec<String>,
    pub preflight_seconds: f64,
}

impl Prepared {
    pub fn failed(&self) -> bool {
        self.plan.is_none() || self.checks.iter().any(|c| c.status == Status::Fail)
    }
}

/// The source tree: `--src`, or a clone of `--version` into archsmith's cache.
pub fn source_tree(req: &Request) -> Result<PathBuf> {
    match (&req.src, &req.version) {
        (Some(_), Some(_)) => bail!(NotATorchTree("give --src DIR or --version VER, not both".into())),
        (Some(src), None) => Ok(src.clone()),
        (None, Some(v)) => clone_release(v),
        (None, None) => bail!(NotATorchTree(
            "no source: give --src DIR (a PyTorch checkout or unpacked source tarball) or --version VER (cloned with its submodules into archsmith's cache)".into()
        )),
    }
}

/// `git clone --recursive --depth 1 --branch vVER` into `cache/sources/pytorch-vVER`, once.
fn clone_release(version: &str) -> Result<PathBuf> {
    let tag = format!("v{}", version.trim_start_matches('v'));
    let url = std::env::var(GIT_URL_VAR).unwrap_or_else(|_| DEFAULT_GIT_URL.to_string());
    let parent = crate::paths::cache_dir().join("sources");
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let name = format!("pytorch-{tag}");
    crate::cache::provision(
        &parent,
        &name,
        &format!("pytorch {tag}"),
        &|dir| Ok(dir.join("version.txt").is_file().then(|| dir.to_path_buf())),
        &mut |staging, progress| {
            progress(&format!("cloning {url} at {tag} with submodules"));
            crate::process::Cmd::new("git")
                .args(["clone", "--recursive", "--depth", "1", "--shallow-submodules", "--branch", &tag])
                .arg(&url)
                .arg(staging)
                .run_progress()
                .with_context(|| format!("cloning {url} at {tag} (needs network, or {GIT_URL_VAR} pointing at a local mirror)"))
        },
        &mut |m| eprintln!("archsmith: {m}"),
    )
}

/// The CUDA to build with: `--cuda`, else the newest toolkit on this machine the release
/// supports, else the release's default PyPI CUDA.
fn choose_cuda(kb: &KnowledgeBase, torch: &Version, given: Option<&Version>) -> (Version, String) {
    if let Some(c) = given {
        return (c.clone(), "--cuda".into());
    }
    let supported = |c: &Version| preflight::torch_cuda(kb, torch, c).status != Status::Fail;
    let found = toolchain::discover().unwrap_or_default();
    if let Some(c) = found
        .iter()
        .filter(|t| t.usable)
        .filter_map(|t| t.cuda.clone())
        .filter(|c| supported(c))
        .max()
    {
        return (
            c,
            format!("the newest CUDA toolkit on this machine that torch {torch} builds with; --cuda to choose"),
        );
    }
    let row = kb.torch_row(torch);
    let newest = row.and_then(|r| r.cuda_variants.iter().max().cloned());
    match row.and_then(|r| r.pypi_cuda.clone()).or(newest) {
        Some(c) => (
            c,
            format!("torch {torch}'s default CUDA (no toolkit it supports is on this machine)"),
        ),
        None => (
            kb.releases.newest_cuda.clone(),
            "the newest known CUDA".into(),
        ),
    }
}

/// The compilers the plan uses: nvcc's host compiler from `CUDAHOSTCXX`, else `CXX`, else `g++`
/// (then `clang++`); the C++ compiler from `CXX`, else the same.
fn chosen_compilers(all: &[HostCompiler]) -> (Option<HostCompiler>, Option<HostCompiler>) {
    let from_env = |var: &str| -> Option<HostCompiler> {
        let v = std::env::var(var).ok().filter(|v| !v.is_empty())?;
        let path = if v.contains('/') {
            PathBuf::from(&v)
        } else {
            which(&v)?
        };
        let name = path.file_name()?.to_string_lossy().into_owned();
        let family = if name.contains("clang") {
            CompilerFamily::Clang
        } else {
            CompilerFamily::Gcc
        };
        Some(host::describe_compiler(name, path, family))
    };
    let default = || {
        all.iter()
            .find(|c| c.name == "g++")
            .or_else(|| all.iter().find(|c| c.name == "clang++"))
            .cloned()
    };
    let cxx = from_env("CXX").or_else(default);
    let host = from_env("CUDAHOSTCXX").or_else(|| cxx.clone());
    (host, cxx)
}

/// Tree, advice, toolchain, preflight and plan: everything before compiling. Errors are for input
/// that is not a tree at all; everything else is a check.
pub fn prepare(kb: &KnowledgeBase, req: &Request, root: &Path) -> Result<Prepared> {
    let started = Instant::now();
    let tree = TorchTree::inspect(root)?;
    let (cuda, cuda_reason) = choose_cuda(kb, &tree.version, req.cuda.as_ref());
    let mut checks = Vec::new();

    // The arch list, read the way this torch and this CUDA read it.
    let ctx = PlanContext::new(kb, Some(tree.version.clone()), Some(cuda.clone()));
    let arch_plan = match Plan::parse(kb, &ctx, &req.arch) {
        Ok(p) => {
            checks.push(Check::ok(
                "arch list",
                format!(
                    "TORCH_CUDA_ARCH_LIST={} (nvcc {cuda} compiles every one)",
                    p.torch_cuda_arch_list()
                ),
            ));
            Some(p)
        }
        Err(e) => {
            let text = format!("{e:#}");
            let (detail, fix) = match text.split_once("; ") {
                Some((d, f)) => (d.to_string(), f.to_string()),
                None => (text.clone(), "correct --arch".to_string()),
            };
            checks.push(Check::fail("arch list", detail, fix));
            None
        }
    };

    // Should you build at all: per --gpu, else per planned arch.
    let targets: Vec<(String, Cc)> = if req.gpus.is_empty() {
        arch_plan
            .as_ref()
            .map(|p| {
                p.sass()
                    .iter()
                    .map(|a| (format!("CC {}", a.cc()), a.cc()))
                    .collect()
            })
            .unwrap_or_default()
    } else {
        req.gpus
            .iter()
            .map(|g| kb.resolve_gpu(g))
            .collect::<Result<_>>()?
    };
    let advice = official_wheel_advice(kb, &tree.version, &targets);

    checks.push(preflight::torch_cuda(kb, &tree.version, &cuda));

    let tc = match toolchain::ensure(&cuda) {
        Ok(tc) => {
            checks.push(Check::ok(
                "CUDA toolkit",
                format!("nvcc {} at {}", tc.nvcc_version, tc.cuda_home().display()),
            ));
            Some(tc)
        }
        Err(e) => {
            checks.push(Check::fail(
                "CUDA toolkit",
                format!("{e:#}"),
                format!(
                    "install CUDA {cuda} (or point CUDA_HOME at it), or choose another with --cuda"
                ),
            ));
            None
        }
    };

    let compilers = host::cxx_compilers();
    let (host_cxx, cxx) = chosen_compilers(&compilers);
    match (&tc, &host_cxx, &cxx) {
        (Some(tc), Some(h), Some(c)) => {
            checks.push(preflight::host_compiler(kb, tc, &tree, h, c, &compilers))
        }
        (_, None, _) | (_, _, None) => checks.push(Check::fail(
            "host compiler",
            "no g++ or clang++ on PATH",
            "install g++ (apt-get install g++) or set CXX",
        )),
        _ => {}
    }

    let tools =
        crate::toolchain::buildtools::ensure(&crate::paths::cache_dir().join("tools"), &mut |m| {
            eprintln!("archsmith: {m}")
        });
    let (cmake, ninja) = match &tools {
        Ok(t) => (
            Some((t.cmake.clone(), t.cmake_version.clone())),
            Some(t.ninja.clone()),
        ),
        Err(_) => (None, None),
    };
    checks.push(preflight::build_tools(
        &tree,
        cmake.as_ref().map(|(p, v)| (p.as_path(), v)),
        ninja.as_deref(),
    ));

    // The switches as they will be set: the knowledge base's, then --set.
    let mut switches: BTreeMap<String, String> = kb
        .torch_switches(&tree.version)
        .iter()
        .map(|r| (r.name.clone(), r.value.clone()))
        .collect();
    for (n, v) in &req.sets {
        switches.insert(n.clone(), v.clone());
    }
    let on = |n: &str| switches.get(n).is_some_and(|v| plan::is_on(v));

    let python = match &req.python {
        Some(p) => p.clone(),
        None => crate::python::host_python().unwrap_or_else(|_| PathBuf::from("python3")),
    };
    let modules = preflight::python_modules(tree.front_end, on("USE_NUMPY"));
    let module_names: Vec<&str> = modules.iter().map(|(m, _)| *m).collect();
    let py_info = probe_with(
        &python,
        Depth::Files,
        &Ask {
            modules: &module_names,
            gpu_smoke: false,
            ..Ask::default()
        },
    );
    match &py_info {
        Ok(info) => checks.push(preflight::python(kb, &tree, info, &modules)),
        Err(e) => checks.push(Check::fail(
            "python",
            format!("{e:#}"),
            "--python PATH to a working Python",
        )),
    }

    let (sub_check, _missing) = preflight::submodules(kb, &tree, &switches);
    checks.push(sub_check);

    let images = arch_plan
        .as_ref()
        .map_or(0, |p| p.sass().len() + p.ptx().len());
    checks.push(preflight::disk(
        &tree,
        host::free_disk_gib(&tree.root),
        images,
    ));
    let flash = on("USE_FLASH_ATTENTION")
        && arch_plan.as_ref().is_some_and(|p| {
            p.sass()
                .iter()
                .chain(p.ptx().iter())
                .any(|a| a.cc().major >= 8)
        });
    let jobs: Jobs = plan::jobs(host::cores(), host::mem_available_gib(), flash, req.jobs);
    checks.push(preflight::memory(&jobs));

    let purelib = py_info.as_ref().ok().map(|i| i.purelib.clone());
    let cudnn = tc
        .as_ref()
        .and_then(|tc| preflight::find_cudnn(tc.cuda_home(), purelib.as_deref()));
    checks.push(preflight::cudnn(
        on("USE_CUDNN"),
        cudnn.as_ref(),
        &cuda,
        &python,
    ));

    let launcher = match req.cache_kind() {
        None => None,
        Some(kind) => match crate::compiler_cache::launcher(kind) {
            Ok(l) => Some((l, kind.dir_var())),
            Err(e) => {
                checks.push(Check::fail(
                    "compiler cache",
                    format!("{e:#}"),
                    "leave out --cache, or put sccache/ccache on PATH",
                ));
                None
            }
        },
    };

    let mut reconfigure = Vec::new();
    let plan = match (&arch_plan, &tc, &host_cxx, &cxx) {
        (Some(arch_plan), Some(tc), Some(h), Some(c)) => {
            let files = reads::BuildFiles::read(&tree);
            // The toolkit's bin first, unless PATH already finds that nvcc (a system toolkit in
            // /usr/bin must not jump ahead of everything else on PATH).
            let mut path_first = Vec::new();
            if which("nvcc").and_then(|p| std::fs::canonicalize(p).ok())
                != std::fs::canonicalize(tc.nvcc()).ok()
            {
                path_first.push(tc.bin_dir());
            }
            for p in [cmake.as_ref().map(|(p, _)| p.clone()), ninja.clone()]
                .into_iter()
                .flatten()
            {
                if let Some(d) = p.parent().map(Path::to_path_buf) {
                    if !path_first.contains(&d) {
                        path_first.push(d);
                    }
                }
            }
            let p = plan::compute(
                &plan::Inputs {
                    kb,
                    tree: &tree,
                    arch_plan,
                    toolchain: tc,
                    host_cxx: h,
                    cxx: c,
                    python: &python,
                    jobs: &jobs,
                    sets: &req.sets,
                    cudnn: cudnn.clone(),
                    launcher,
                    dist_config: req.dist.as_ref().map(|d| d.config_path()),
                    path_first,
                },
                &files,
                &out_dir(&req.out).join(".build-torch-wheel"),
            );
            checks.push(preflight::variables_read(&p, &tree, files.len()));
            if let Ok(text) = std::fs::read_to_string(p.build_dir.join("CMakeCache.txt")) {
                reconfigure = preflight::stale_configuration(&text, &p);
                if !reconfigure.is_empty() {
                    checks.push(Check::warn(
                        "build directory",
                        format!("{} holds another configuration: {}", p.build_dir.display(), reconfigure.join("; ")),
                        "archsmith reconfigures it (CMakeCache.txt and CMakeFiles/ removed; objects kept, ninja rebuilds what changed)",
                    ));
                } else {
                    checks.push(Check::ok(
                        "build directory",
                        format!("{}: same configuration, resumed", p.build_dir.display()),
                    ));
                }
            }
            Some(p)
        }
        _ => None,
    };
    Ok(Prepared {
        tree,
        cuda,
        cuda_reason,
        advice,
        checks,
        plan,
        reconfigure,
        preflight_seconds: started.elapsed().as_secs_f64(),
    })
}

impl Request {
    /// `--cache`, or sccache where `--dist` asks for a cluster without naming a cache.
    pub fn cache_kind(&self) -> Option<CacheKind> {
        match (self.cache, &self.dist) {
            (None, Some(_)) => Some(CacheKind::Sccache),
            (kind, _) => kind,
        }
    }
}

/// `--out` made absolute: the build runs in the tree, not where the user stands.
fn out_dir(out: &Path) -> PathBuf {
    if out.is_absolute() {
        out.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(out))
            .unwrap_or_else(|_| out.to_path_buf())
    }
}

/// What a finished run produced.
#[derive(Debug, Serialize)]
pub struct Outcome {
    pub prepared: Prepared,
    /// The delivered wheel (None for `--dry-run` and `--stop-after configure`).
    pub wheel: Option<PathBuf>,
    /// An unchanged stamp returned the existing wheel.
    pub reused: bool,
    pub stamp: Option<String>,
    pub log: Option<PathBuf>,
    pub build_seconds: f64,
    pub cache_stats: Option<String>,
    /// With `--dist`: compiles per build server, and failed distributions.
    pub distributed: Option<crate::compiler_cache::dist::DistStats>,
    pub slowest_steps: Vec<(String, f64)>,
    pub verify: Option<torch_wheel::Report>,
    /// The build ran and failed: its first error and the log (the caller exits 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_failed: Option<drive::BuildFailed>,
}

/// What goes into the stamp: what decides the wheel's contents.
#[derive(Debug, Serialize, serde::Deserialize)]
struct StampInputs {
    schema: u32,
    source: String,
    front_end: String,
    nvcc: String,
    python: String,
    env: BTreeMap<String, String>,
}

/// Source identity: the commit (and whether the work tree differs) of a checkout; for a tarball,
/// a hash of every file's path, size and modification time (metadata only: fast on 15,000 files).
fn source_identity(tree: &TorchTree) -> String {
    if let Some(g) = &tree.git {
        if !g.dirty {
            return format!("git {}", g.head);
        }
    }
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut stack = vec![tree.root.clone()];
    let mut entries = Vec::new();
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(md) = e.metadata() else { continue };
            if md.is_dir() {
                if !matches!(name.as_str(), "build" | "dist" | ".git" | "__pycache__")
                    && !name.ends_with(".egg-info")
                {
                    stack.push(e.path());
                }
            } else {
                let mtime = md
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                let rel = e
                    .path()
                    .strip_prefix(&tree.root)
                    .map(|p| p.display().to_string())
                    .unwrap_or(name);
                entries.push(format!("{rel}\0{}\0{mtime}", md.len()));
            }
        }
    }
    entries.sort();
    for e in &entries {
        h.update(e.as_bytes());
        h.update(b"\n");
    }
    let head = tree
        .git
        .as_ref()
        .map(|g| format!("git {} dirty ", g.head))
        .unwrap_or_default();
    format!("{head}tree {}", crate::stamp::hex(&h.finalize()))
}

fn stamp_inputs(p: &Prepared, plan: &BuildPlan) -> StampInputs {
    StampInputs {
        schema: 1,
        source: source_identity(&p.tree),
        front_end: plan.front_end.name().into(),
        nvcc: plan.nvcc_version.clone(),
        python: plan.python.display().to_string(),
        // Jobs and launchers change how fast, not what.
        env: plan
            .env
            .iter()
            .filter(|v| v.kind == plan::VarKind::Build)
            .filter(|v| {
                !matches!(v.name.as_str(), "MAX_JOBS" | "CMAKE_BUILD_PARALLEL_LEVEL")
                    && !v.name.ends_with("_COMPILER_LAUNCHER")
            })
            .map(|v| (v.name.clone(), v.value.clone()))
            .collect(),
    }
}

/// Runs build-torch: prepare, and unless `--dry-run` or preflight failed, build, verify, deliver.
pub fn run(kb: &KnowledgeBase, req: &Request) -> Result<Outcome> {
    let root = source_tree(req)?;
    let prepared = prepare(kb, req, &root)?;
    let mut outcome = Outcome {
        wheel: None,
        reused: false,
        stamp: None,
        log: None,
        build_seconds: 0.0,
        cache_stats: None,
        distributed: None,
        slowest_steps: Vec::new(),
        verify: None,
        build_failed: None,
        prepared,
    };
    // A failed preflight is an outcome too: its checks carry the fixes (the caller exits 2).
    if req.dry_run || outcome.prepared.failed() {
        return Ok(outcome);
    }
    let plan = outcome.prepared.plan.clone().context("no plan")?;
    let out = out_dir(&req.out);
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    crate::stamp::remove_stale_partials(&out);
    let inputs = stamp_inputs(&outcome.prepared, &plan);
    let key = crate::stamp::key(&inputs);
    outcome.stamp = Some(key.clone());
    if !req.stop_after_configure {
        if let Some((wheel, verify)) =
            crate::stamp::lookup::<Option<torch_wheel::Report>>(&out, &key)
        {
            outcome.wheel = Some(wheel);
            outcome.reused = true;
            outcome.verify = verify;
            return Ok(outcome);
        }
    }
    let driven = match drive::drive(&outcome.prepared, &plan, req, &out)? {
        Ok(d) => d,
        Err(failed) => {
            outcome.log = Some(failed.log.clone());
            outcome.build_failed = Some(failed);
            return Ok(outcome);
        }
    };
    outcome.log = Some(driven.log);
    outcome.build_seconds = driven.seconds;
    outcome.cache_stats = driven.cache_stats;
    outcome.distributed = driven.distributed;
    outcome.slowest_steps = driven.slowest;
    let Some(built) = driven.wheel else {
        return Ok(outcome);
    };
    let wheel = crate::stamp::deliver(&built, &out)?;
    let _ = std::fs::remove_dir_all(&plan.wheel_dir);
    if let Some(ninja_log) = driven.ninja_log {
        let name = wheel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let _ = std::fs::copy(ninja_log, out.join(format!("{name}.ninja_log")));
    }
    let venv_python = match drive::verify_env(&plan, &wheel, &out) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("archsmith: could not make a Python to import the wheel in ({e:#}); the import checks are skipped");
            None
        }
    };
    let report = torch_wheel::check_wheel(
        kb,
        &torch_wheel::Request {
            wheel: wheel.clone(),
            arch: plan.torch_cuda_arch_list.clone(),
            cuda: Some(outcome.prepared.cuda.clone()),
            python: venv_python,
        },
    )?;
    crate::stamp::record(&out, &inputs, &wheel, &Some(&report))?;
    outcome.wheel = Some(wheel);
    outcome.verify = Some(report);
    Ok(outcome)
}
