//! build-torch's first half as named steps: everything decided before anything compiles.
//! [`prepare`] reads the tree, chooses the CUDA, then runs each check in this order: [`arch_list`]
//! → [`official_wheels`] (should you build at all) → torch vs CUDA → [`toolkit`] →
//! [`host_compiler`] → [`build_tools`] → [`python`] → submodules → [`generated_sources`] → install rpath → disk,
//! memory → [`cudnn`] → [`compiler_cache`] → [`plan`] (the environment, every variable checked
//! against the tree, and a stale `CMakeCache.txt`). Errors are for input that is not a tree at all; everything else is a
//! [`Check`] with its fix.

use super::plan::{self, BuildPlan, Jobs};
use super::preflight::{self, Check, Status};
use super::reads;
use super::tree::TorchTree;
use super::{out_dir, Prepared, Request};
use crate::arch::advice::{official_wheel_advice, WheelAdvice};
use crate::arch::spec::{Plan, PlanContext};
use crate::cuda_arch::Cc;
use crate::host::{self, CompilerFamily, HostCompiler};
use crate::kb::kb;
use crate::process::which;
use crate::python::probe::{probe_with, Ask, Depth, PythonInfo};
use crate::toolchain::{self, Toolchain};
use crate::version::Version;
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// cmake (with its version) and ninja, where found or provisioned.
type BuildTools = (Option<(PathBuf, Version)>, Option<PathBuf>);

/// Why a CPU-only build has no CUDA.
const CPU_ONLY: &str = "USE_CUDA=0: a CPU-only build (no arch list, toolkit or cuDNN)";

/// The CUDA side of a build: the release, why, the arch list read its way, the advice, the
/// toolkit. Absent for a CPU-only build.
struct CudaSide {
    cuda: Version,
    reason: String,
    arch_plan: Option<Plan>,
    advice: Vec<WheelAdvice>,
    toolkit: Option<Toolchain>,
}

impl CudaSide {
    /// The CUDA, why it (or why none), and the advice, for [`Prepared`].
    fn parts(side: Option<CudaSide>) -> (Option<Version>, String, Vec<WheelAdvice>) {
        match side {
            Some(s) => (Some(s.cuda), s.reason, s.advice),
            None => (None, CPU_ONLY.to_string(), Vec::new()),
        }
    }
}

/// What the plan takes of the CUDA side: `Some(None)` for a CPU-only build; None where a CUDA
/// build lacks its arch list, toolkit or host compiler (a check has failed and says why).
fn cuda_inputs<'a>(
    side: Option<&'a CudaSide>,
    host_cxx: &'a Option<HostCompiler>,
) -> Option<Option<plan::CudaInputs<'a>>> {
    let Some(s) = side else {
        return Some(None);
    };
    match (&s.arch_plan, &s.toolkit, host_cxx) {
        (Some(arch_plan), Some(toolchain), Some(host_cxx)) => Some(Some(plan::CudaInputs {
            arch_plan,
            toolchain,
            host_cxx,
        })),
        _ => None,
    }
}

/// Tree, advice, toolchain, preflight and plan: everything before compiling.
pub fn prepare(req: &Request, root: &Path) -> Result<Prepared> {
    let started = Instant::now();
    let arch = req.arch_spec()?;
    let tree = TorchTree::inspect(root)?;
    let mut checks = Vec::new();
    let side = match arch {
        Some(arch) => Some(cuda_side(&tree, req, arch, &mut checks)?),
        None => None,
    };
    let tc = side.as_ref().and_then(|s| s.toolkit.as_ref());
    let compilers = host::cxx_compilers();
    let (host_cxx, cxx) = chosen_compilers(&compilers);
    if let Some(check) = host_compiler(&tree, tc, side.is_some(), &host_cxx, &cxx, &compilers) {
        checks.push(check);
    }
    let (cmake, ninja) = build_tools(&tree, &mut checks);
    let switches = switches(&tree, &req.sets, side.is_some());
    let on = |n: &str| switches.get(n).is_some_and(|v| plan::is_on(v));
    let (python, py_info) = python(&tree, req, on("USE_NUMPY"), &mut checks);
    checks.push(preflight::submodules(&tree, &switches).0);
    checks.push(generated_sources(&tree, req));
    checks.push(super::install_rpath::check(&tree.root));
    let arch_plan = side.as_ref().and_then(|s| s.arch_plan.as_ref());
    let jobs = disk_and_memory(
        &tree,
        arch_plan,
        on("USE_FLASH_ATTENTION"),
        req,
        &mut checks,
    );
    let cudnn = side.as_ref().and_then(|s| {
        cudnn(
            tc,
            py_info.as_ref(),
            on("USE_CUDNN"),
            &s.cuda,
            &python,
            &mut checks,
        )
    });
    let launcher = compiler_cache(req, &mut checks);
    let mut reconfigure = Vec::new();
    // A CUDA build needs its arch list, toolkit and nvcc's host compiler; every build a C++ one.
    let cuda_inputs = cuda_inputs(side.as_ref(), &host_cxx);
    let plan = match (cuda_inputs, &cxx) {
        (Some(cuda), Some(c)) => Some(self::plan(
            &plan::Inputs {
                tree: &tree,
                path_first: path_first(tc, &cmake, &ninja),
                cuda,
                cxx: c,
                python: &python,
                jobs: &jobs,
                sets: &req.sets,
                cudnn,
                launcher,
                dist_config: req.dist.as_ref().map(|d| d.config_path()),
            },
            req,
            &mut checks,
            &mut reconfigure,
        )),
        _ => None,
    };
    let (cuda, cuda_reason, advice) = CudaSide::parts(side);
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

/// The CUDA, the arch list, should-you-build, torch vs CUDA and the toolkit, in that order.
fn cuda_side(
    tree: &TorchTree,
    req: &Request,
    arch: &str,
    checks: &mut Vec<Check>,
) -> Result<CudaSide> {
    let (cuda, reason) = choose_cuda(&tree.version, req.cuda.as_ref());
    let arch_plan = arch_list(&tree.version, &cuda, arch, checks);
    let advice = official_wheels(&tree.version, req, arch_plan.as_ref())?;
    checks.push(preflight::torch_cuda(&tree.version, &cuda));
    let toolkit = toolkit(&cuda, checks);
    Ok(CudaSide {
        cuda,
        reason,
        arch_plan,
        advice,
        toolkit,
    })
}

/// The tree's pre-generated sources against the libraries the build compiles them with.
fn generated_sources(tree: &TorchTree, req: &Request) -> Check {
    use super::generated_sources::{check, flatc_on_path, system_include_dirs};
    let prefix = req
        .sets
        .iter()
        .find(|(n, _)| n == "CMAKE_PREFIX_PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var("CMAKE_PREFIX_PATH").ok());
    check(
        &tree.root,
        &system_include_dirs(prefix.as_deref()),
        flatc_on_path,
    )
}

/// The switches as they will be set: the knowledge base's (no GPU-only ones for a CPU-only
/// build), then `--set`.
fn switches(tree: &TorchTree, sets: &[(String, String)], cuda: bool) -> BTreeMap<String, String> {
    let mut switches: BTreeMap<String, String> = kb()
        .torch_switches(&tree.version)
        .iter()
        .filter(|r| cuda || !r.cuda_only)
        .map(|r| (r.name.clone(), r.value.clone()))
        .collect();
    for (n, v) in sets {
        switches.insert(n.clone(), v.clone());
    }
    switches
}

/// Disk for the tree's sources and images, and the jobs the memory allows (flash attention's
/// units need the most, when it builds for CC 8.0 or newer).
fn disk_and_memory(
    tree: &TorchTree,
    arch_plan: Option<&Plan>,
    flash_attention: bool,
    req: &Request,
    checks: &mut Vec<Check>,
) -> Jobs {
    let images = arch_plan.map_or(0, |p| p.sass().len() + p.ptx().len());
    checks.push(preflight::disk(
        tree,
        host::free_disk_gib(&tree.root),
        images,
    ));
    let flash = flash_attention
        && arch_plan.is_some_and(|p| {
            p.sass()
                .iter()
                .chain(p.ptx().iter())
                .any(|a| a.cc().major >= 8)
        });
    let measured = measured_gib_per_job(&tree.root.join("build"), arch_plan.is_some());
    let jobs = plan::jobs(
        host::cores(),
        host::mem_available_gib(),
        flash,
        req.jobs,
        measured,
    );
    checks.push(preflight::memory(&jobs));
    jobs
}

/// GiB a job as the compile meter measured this build directory's compiles in earlier runs: the
/// larger of the C++ and (for a CUDA build) the nvcc figure; None until each kind has enough.
fn measured_gib_per_job(build_dir: &std::path::Path, cuda: bool) -> Option<f64> {
    use crate::build_insight::{compile_record, peaks};
    let text = std::fs::read_to_string(plan::compile_log(build_dir)).ok()?;
    let records = compile_record::parse(&text);
    let of = |tool| peaks::measured_gib_per_job(&records, tool, plan::MEASURED_AT_LEAST);
    let cxx = of("c++")?;
    match cuda {
        true => Some(cxx.max(of("nvcc")?)),
        false => Some(cxx),
    }
}

/// A `--dry-run` of a release not cloned yet: what needs no tree (the CUDA, the arch list, torch
/// vs CUDA, the should-you-build advice) and what the clone would fetch, without fetching it. The
/// rest of preflight (host compiler, build tools, Python, submodules, disk, memory, cuDNN, the
/// variables against the build files) reads the tree, so it runs once the tree is there.
#[derive(Debug, serde::Serialize)]
pub struct BeforeClone {
    pub torch: Version,
    /// None for a CPU-only build.
    pub cuda: Option<Version>,
    pub cuda_reason: String,
    pub advice: Vec<WheelAdvice>,
    pub checks: Vec<Check>,
    /// The command the build would run first.
    pub clone: String,
    pub into: PathBuf,
    pub torch_cuda_arch_list: Option<String>,
}

impl BeforeClone {
    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.status == Status::Fail)
    }
}

/// [`BeforeClone`] for `--dry-run --torch VER` when VER is not cloned yet; None otherwise.
pub fn before_clone(req: &Request) -> Result<Option<BeforeClone>> {
    let (Some(torch), true, None) = (&req.version, req.dry_run, &req.src) else {
        return Ok(None);
    };
    let (into, url, tag) = super::clone_target(torch)?;
    if into.join("version.txt").is_file() {
        return Ok(None);
    }
    let mut checks = Vec::new();
    let (cuda, cuda_reason, advice, arch_plan) = match req.arch_spec()? {
        Some(arch) => {
            let (cuda, reason) = choose_cuda(torch, req.cuda.as_ref());
            let arch_plan = arch_list(torch, &cuda, arch, &mut checks);
            let advice = official_wheels(torch, req, arch_plan.as_ref())?;
            checks.push(preflight::torch_cuda(torch, &cuda));
            (Some(cuda), reason, advice, arch_plan)
        }
        None => (None, CPU_ONLY.to_string(), Vec::new(), None),
    };
    Ok(Some(BeforeClone {
        torch: torch.clone(),
        cuda,
        cuda_reason,
        advice,
        checks,
        clone: format!("git clone --recursive --depth 1 --shallow-submodules --branch {tag} {url}"),
        into,
        torch_cuda_arch_list: arch_plan.map(|p| p.torch_cuda_arch_list()),
    }))
}

/// The arch list, read the way this torch and this CUDA read it.
fn arch_list(torch: &Version, cuda: &Version, arch: &str, checks: &mut Vec<Check>) -> Option<Plan> {
    let ctx = PlanContext::new(Some(torch.clone()), Some(cuda.clone()));
    match Plan::parse(&ctx, arch) {
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
    }
}

/// Should you build at all: whether the release's official wheels already run on each `--gpu`,
/// else on each planned arch.
fn official_wheels(
    torch: &Version,
    req: &Request,
    arch_plan: Option<&Plan>,
) -> Result<Vec<WheelAdvice>> {
    let targets: Vec<(String, Cc)> = if req.gpus.is_empty() {
        arch_plan
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
            .map(|g| kb().resolve_gpu(g))
            .collect::<Result<_>>()?
    };
    Ok(official_wheel_advice(torch, &targets))
}

/// The CUDA toolkit of that release, with the libraries torch's own build links: found on the
/// machine, or from PyPI (13.x) or Debian's archive (12.4, 11.8).
fn toolkit(cuda: &Version, checks: &mut Vec<Check>) -> Option<Toolchain> {
    match toolchain::ensure_for_torch_build(cuda) {
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
    }
}

/// The host compiler against nvcc's ceiling and the tree's floor; for a CUDA build with no
/// toolkit there is no ceiling to ask, so nothing (the toolkit's check already failed).
fn host_compiler(
    tree: &TorchTree,
    tc: Option<&Toolchain>,
    cuda_build: bool,
    host_cxx: &Option<HostCompiler>,
    cxx: &Option<HostCompiler>,
    compilers: &[HostCompiler],
) -> Option<Check> {
    match (host_cxx, cxx) {
        (Some(h), Some(c)) if tc.is_some() || !cuda_build => {
            Some(preflight::host_compiler(tc, tree, h, c, compilers))
        }
        (None, _) | (_, None) => Some(Check::fail(
            "host compiler",
            "no g++ or clang++ on PATH",
            "install g++ (apt-get install g++) or set CXX",
        )),
        _ => None,
    }
}

/// cmake and ninja (the system's, else PyPI's under archsmith's tools).
fn build_tools(tree: &TorchTree, checks: &mut Vec<Check>) -> BuildTools {
    let tools = toolchain::buildtools::ensure(&crate::paths::cache_dir().join("tools"), &mut |m| {
        crate::errln!("archsmith: {m}")
    });
    let (cmake, ninja) = match &tools {
        Ok(t) => (
            Some((t.cmake.clone(), t.cmake_version.clone())),
            Some(t.ninja.clone()),
        ),
        Err(_) => (None, None),
    };
    checks.push(preflight::build_tools(
        tree,
        cmake.as_ref().map(|(p, v)| (p.as_path(), v)),
        ninja.as_deref(),
    ));
    (cmake, ninja)
}

/// The Python the build runs (`--python`, else the host's) and the modules the front end needs.
fn python(
    tree: &TorchTree,
    req: &Request,
    numpy: bool,
    checks: &mut Vec<Check>,
) -> (PathBuf, Option<PythonInfo>) {
    let python = match &req.python {
        Some(p) => p.clone(),
        None => crate::python::host_python().unwrap_or_else(|_| PathBuf::from("python3")),
    };
    let modules = preflight::python_modules(tree.front_end, numpy);
    let module_names: Vec<&str> = modules.iter().map(|(m, _)| *m).collect();
    let ask = Ask {
        modules: &module_names,
        gpu_smoke: false,
        ..Ask::default()
    };
    match probe_with(&python, Depth::Files, &ask) {
        Ok(info) => {
            checks.push(preflight::python(tree, &info, &modules));
            (python, Some(info))
        }
        Err(e) => {
            checks.push(Check::fail(
                "python",
                format!("{e:#}"),
                "--python PATH to a working Python",
            ));
            (python, None)
        }
    }
}

/// cuDNN's headers and library, in the toolkit or the Python env's NVIDIA wheels.
fn cudnn(
    tc: Option<&Toolchain>,
    py_info: Option<&PythonInfo>,
    use_cudnn: bool,
    cuda: &Version,
    python: &Path,
    checks: &mut Vec<Check>,
) -> Option<(PathBuf, PathBuf)> {
    let purelib = py_info.map(|i| i.purelib.clone());
    let found = tc.and_then(|tc| preflight::find_cudnn(tc.cuda_home(), purelib.as_deref()));
    checks.push(preflight::cudnn(use_cudnn, found.as_ref(), cuda, python));
    found
}

/// `--cache`'s launcher and its directory variable.
fn compiler_cache(req: &Request, checks: &mut Vec<Check>) -> Option<(PathBuf, (String, String))> {
    let kind = req.cache_kind()?;
    match crate::compiler_cache::launcher(kind) {
        Ok(l) => Some((l, kind.dir_var())),
        Err(e) => {
            checks.push(Check::fail(
                "compiler cache",
                format!("{e:#}"),
                "leave out --cache, or put sccache/ccache on PATH",
            ));
            None
        }
    }
}

/// `PATH` entries put first: the toolkit's bin, unless PATH already finds that nvcc (a system
/// toolkit in /usr/bin must not jump ahead of everything else on PATH), then the build tools.
fn path_first(
    tc: Option<&Toolchain>,
    cmake: &Option<(PathBuf, Version)>,
    ninja: &Option<PathBuf>,
) -> Vec<PathBuf> {
    let mut first = Vec::new();
    if let Some(tc) = tc {
        if which("nvcc").and_then(|p| std::fs::canonicalize(p).ok())
            != std::fs::canonicalize(tc.nvcc()).ok()
        {
            first.push(tc.bin_dir());
        }
    }
    for p in [cmake.as_ref().map(|(p, _)| p.clone()), ninja.clone()]
        .into_iter()
        .flatten()
    {
        if let Some(d) = p.parent().map(Path::to_path_buf) {
            if !first.contains(&d) {
                first.push(d);
            }
        }
    }
    first
}

/// The plan, every variable checked against what the tree's build files read, and an existing
/// `build/CMakeCache.txt` compared with it (a different one is reconfigured, the same resumed).
fn plan(
    inputs: &plan::Inputs,
    req: &Request,
    checks: &mut Vec<Check>,
    reconfigure: &mut Vec<String>,
) -> BuildPlan {
    let tree = inputs.tree;
    let files = reads::BuildFiles::read(tree);
    let p = plan::compute(
        inputs,
        &files,
        &out_dir(&req.out).join(".build-torch-wheel"),
    );
    checks.push(preflight::variables_read(&p, tree, files.len()));
    if let Ok(text) = std::fs::read_to_string(p.build_dir.join("CMakeCache.txt")) {
        *reconfigure = preflight::stale_configuration(&text, &p);
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
    p
}

/// The CUDA to build with: `--cuda`, else the newest toolkit on this machine the release
/// supports, else the release's default PyPI CUDA.
fn choose_cuda(torch: &Version, given: Option<&Version>) -> (Version, String) {
    if let Some(c) = given {
        return (c.clone(), "--cuda".into());
    }
    let supported = |c: &Version| preflight::torch_cuda(torch, c).status != Status::Fail;
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
    let row = kb().torch_row(torch);
    let newest = row.and_then(|r| r.cuda_variants.iter().max().cloned());
    match row.and_then(|r| r.pypi_cuda.clone()).or(newest) {
        Some(c) => (
            c,
            format!("torch {torch}'s default CUDA (no toolkit it supports is on this machine)"),
        ),
        None => (
            kb().releases.newest_cuda.clone(),
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
