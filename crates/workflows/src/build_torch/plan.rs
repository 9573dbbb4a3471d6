//! The build plan: one environment, computed from the arch model, the toolchain, the knowledge base
//! and the tree, that the whole build (configure, every later ninja step, the wheel) runs under.
//! `--dry-run` prints it as a sourceable env plus the command; `--json` as data.
//!
//! Every variable of kind [`VarKind::Build`] must be read by the tree's build or by CMake itself
//! ([`super::reads`]); the plan carries where each is read, and preflight fails on one that is not.

use super::reads::{BuildFiles, Reader};
use super::tree::{FrontEnd, TorchTree};
use crate::arch::spec::Plan;
use crate::build_insight::compile_meter;
use crate::build_insight::memory_gate::Gate;
use crate::host::HostCompiler;
use crate::kb::kb;
use crate::toolchain::Toolchain;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Memory one compile job of torch takes, in GiB: ordinary C++ and CUDA translation units peak at
/// 1.5–3 GB (the build-ext measurements); FlashAttention's units for sm_80 and newer at ~5 GB
/// each (flash-attention's own setup.py budgets 5 GB a job, Dao-AILab/flash-attention#2493).
pub const GIB_PER_JOB: f64 = 2.5;
pub const GIB_PER_JOB_FLASH: f64 = 5.0;
/// Memory left for the rest of the machine.
pub const RESERVE_GIB: f64 = 2.0;
/// Disk a CUDA build of torch takes: ~10 GB for the CPU side and the wheel (the README's floor),
/// plus ~2 GB of objects per device image (measured on ATen's CUDA objects: docs/build-torch.md).
pub const DISK_BASE_GIB: f64 = 10.0;
pub const DISK_PER_IMAGE_GIB: f64 = 2.0;
/// The tree those figures were taken on: torch 2.6.0's own C/C++ and CUDA translation units as [`SourceCount::of`] counts them
/// (third_party not counted), so that a tree of another size scales them.
pub const DISK_CALIBRATION: super::tree::SourceCount = super::tree::SourceCount {
    cxx: 2215,
    cuda: 371,
};

/// GiB a CUDA build of a tree with `sources` takes for `images` device images: the torch 2.6.0
/// figures scaled by how many C/C++ and CUDA translation units the tree has next to 2.6.0's.
pub fn disk_need_gib(sources: super::tree::SourceCount, images: usize) -> f64 {
    let cxx = sources.cxx as f64 / DISK_CALIBRATION.cxx as f64;
    let cuda = sources.cuda as f64 / DISK_CALIBRATION.cuda as f64;
    DISK_BASE_GIB * cxx + DISK_PER_IMAGE_GIB * images as f64 * cuda
}

/// Whose variable it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VarKind {
    /// Read by the tree's build (checked against the tree).
    Build,
    /// For the processes around it (compiler-cache directories): not the tree's.
    Process,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlanVar {
    pub name: String,
    pub value: String,
    pub why: String,
    pub kind: VarKind,
    /// Where the tree (or CMake) reads it; None for [`VarKind::Process`] or when nothing does.
    pub read_by: Option<Reader>,
}

/// Parallelism and the model behind it.
#[derive(Debug, Clone, Serialize)]
pub struct Jobs {
    pub jobs: u32,
    pub gib_per_job: f64,
    pub mem_available_gib: f64,
    pub cores: u32,
    pub reason: String,
}

/// How many of a kind's compiles a build directory must have measured before their largest peak
/// sizes its jobs instead of the first-build figure.
pub const MEASURED_AT_LEAST: usize = 5;

/// `jobs = min(cores, floor((MemAvailable − 2 GiB) / per-job))`, at least 1, per-job 5 GiB when
/// FlashAttention is on and an sm_80+ image is planned (its kernels are only built for those),
/// else `measured` where this build directory's compiles were measured (the largest peak with
/// headroom: [`crate::build_insight::peaks::measured_gib_per_job`]), else 2.5 GiB. `--jobs`
/// replaces the count (preflight then checks it fits in memory). A compile larger than its job
/// waits in the build's memory pool rather than being killed.
pub fn jobs(
    cores: u32,
    mem_available_gib: f64,
    flash: bool,
    jobs_override: Option<u32>,
    measured: Option<f64>,
) -> Jobs {
    let (per_job, basis) = match (flash, measured) {
        (true, _) => (GIB_PER_JOB_FLASH, "GiB a job".to_string()),
        (false, Some(m)) => (
            (m * 100.0).ceil() / 100.0,
            "GiB a job, the largest compile measured in this build directory +15%".to_string(),
        ),
        (false, None) => (GIB_PER_JOB, "GiB a job".to_string()),
    };
    let by_mem = ((mem_available_gib - RESERVE_GIB) / per_job)
        .floor()
        .max(1.0) as u32;
    let cores = cores.max(1);
    let (jobs, reason) = match jobs_override {
        Some(j) => (j.max(1), "--jobs".to_string()),
        None if by_mem < cores => (
            by_mem,
            format!(
                "limited by memory: ({mem_available_gib:.1} − {RESERVE_GIB}) GiB / {per_job} {basis}"
            ),
        ),
        None => (cores, "one job per core".to_string()),
    };
    Jobs {
        jobs,
        gib_per_job: per_job,
        mem_available_gib,
        cores,
        reason,
    }
}

/// What a CUDA build adds to the plan; absent for a CPU-only build (`--set USE_CUDA=0`).
pub struct CudaInputs<'a> {
    pub arch_plan: &'a Plan,
    pub toolchain: &'a Toolchain,
    /// The compiler nvcc uses for host code (`CUDAHOSTCXX`).
    pub host_cxx: &'a HostCompiler,
}

/// Everything the plan is computed from.
pub struct Inputs<'a> {
    pub tree: &'a TorchTree,
    pub cuda: Option<CudaInputs<'a>>,
    /// The C/C++ compilers.
    pub cxx: &'a HostCompiler,
    pub python: &'a Path,
    pub jobs: &'a Jobs,
    /// `--set NAME=VALUE`, in order.
    pub sets: &'a [(String, String)],
    /// cuDNN's include directory and library, when found.
    pub cudnn: Option<(PathBuf, PathBuf)>,
    /// The compiler-cache launcher and its directory variable.
    pub launcher: Option<(PathBuf, (String, String))>,
    /// With `--dist`: sccache's client config naming the scheduler (written when the build runs).
    pub dist_config: Option<PathBuf>,
    /// `PATH` entries put first: the toolkit's bin, the build tools.
    pub path_first: Vec<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BuildPlan {
    pub torch: String,
    pub front_end: FrontEnd,
    /// None, and no device images, for a CPU-only build (`USE_CUDA=0`).
    pub torch_cuda_arch_list: Option<String>,
    pub sass: Vec<String>,
    pub ptx: Vec<String>,
    pub cuda: Option<String>,
    pub nvcc: Option<PathBuf>,
    pub nvcc_version: Option<String>,
    pub python: PathBuf,
    pub jobs: Jobs,
    pub env: Vec<PlanVar>,
    /// Prepended to `PATH` for every step.
    pub path_first: Vec<PathBuf>,
    /// The build directory the front end uses (`SRC/build`).
    pub build_dir: PathBuf,
    /// Configure only (`--stop-after configure`).
    pub configure_command: Vec<String>,
    /// Configure (when needed), build and produce the wheel into `wheel_dir`.
    pub wheel_command: Vec<String>,
    pub wheel_dir: PathBuf,
}

impl BuildPlan {
    pub fn var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|v| v.name == name)
            .map(|v| v.value.as_str())
    }

    /// The build-kind variables nothing reads.
    pub fn unread(&self) -> Vec<&PlanVar> {
        self.env
            .iter()
            .filter(|v| v.kind == VarKind::Build && v.read_by.is_none())
            .collect()
    }

    /// The plan as a POSIX shell script to source: `export` lines (each with why, and where the
    /// tree reads it), then the command as a comment (sourcing sets the environment; it never
    /// starts a multi-hour build by surprise).
    pub fn shell_script(&self, root: &Path, stop_after_configure: bool) -> String {
        use crate::toolchain::shell_quote;
        let mut s = String::from(
            "# archsmith build-torch plan: source it, then run the command at the end\n",
        );
        let path: Vec<String> = self
            .path_first
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        s += &format!(
            "export PATH={}\"${{PATH:+:$PATH}}\"\n",
            shell_quote(&path.join(":"))
        );
        for v in &self.env {
            let read = v
                .read_by
                .as_ref()
                .map(|r| format!(" [read: {}]", r.describe()))
                .unwrap_or_default();
            s += &format!(
                "export {}={}  # {}{read}\n",
                v.name,
                shell_quote(&v.value),
                v.why
            );
        }
        let cmd = if stop_after_configure {
            &self.configure_command
        } else {
            &self.wheel_command
        };
        s += &format!(
            "# command: cd {} && {}\n",
            shell_quote(&root.display().to_string()),
            cmd.iter()
                .map(|w| shell_quote(w))
                .collect::<Vec<_>>()
                .join(" ")
        );
        s
    }
}

/// The plan's variables, in the order they are set; setting one again replaces it.
#[derive(Default)]
struct Vars(Vec<PlanVar>);

impl Vars {
    fn set(&mut self, name: &str, value: String, why: impl Into<String>, kind: VarKind) {
        self.0.retain(|v| v.name != name);
        self.0.push(PlanVar {
            name: name.to_string(),
            value,
            why: why.into(),
            kind,
            read_by: None,
        });
    }

    fn build(&mut self, name: &str, value: String, why: impl Into<String>) {
        self.set(name, value, why, VarKind::Build);
    }
}

/// The compile meter's launcher in `build_dir` (written when the build runs).
pub fn meter_launcher(build_dir: &Path) -> PathBuf {
    build_dir.join("archsmith-compile-meter")
}

/// The records of the compiles the meter measured in `build_dir`.
pub fn compile_log(build_dir: &Path) -> PathBuf {
    build_dir.join("archsmith-compiles.jsonl")
}

/// Computes the plan and the reader of each build variable: the arch list and the knowledge
/// base's switches, one CUDA root, the compilers, nvcc's flags and cuDNN, jobs and the wheel's
/// version, the compiler cache, then `--set`; each variable's reader in the tree; the commands.
pub fn compute(i: &Inputs, files: &BuildFiles, wheel_dir: &Path) -> BuildPlan {
    let mut vars = Vars::default();
    if let Some(c) = &i.cuda {
        vars.build(
            "TORCH_CUDA_ARCH_LIST",
            c.arch_plan.torch_cuda_arch_list(),
            "the archs, explicit numbers both of torch's parsers read alike",
        );
    }
    for row in kb().torch_switches(&i.tree.version) {
        // GPU-only switches mean nothing to a CPU-only build (CMake forces them off).
        if i.cuda.is_some() || !row.cuda_only {
            vars.build(&row.name, row.value.clone(), row.why.clone());
        }
    }
    let nvcc = i
        .cuda
        .as_ref()
        .map(|c| cuda_root_vars(&mut vars, c.toolchain));
    compiler_vars(&mut vars, i);
    if let Some(c) = &i.cuda {
        nvcc_flag_and_library_vars(&mut vars, i, c);
    }
    job_and_version_vars(&mut vars, i);
    launcher_vars(&mut vars, i);
    for (name, value) in i.sets {
        vars.build(name, value.clone(), "--set");
    }
    let mut env = vars.0;
    // `--set NAME=` (empty) leaves NAME unset: for a variable a patched tree no longer reads.
    env.retain(|v| !v.value.is_empty() || !i.sets.iter().any(|(n, _)| *n == v.name));
    for v in &mut env {
        if v.kind == VarKind::Build {
            v.read_by = files.reader(&v.name);
        }
    }
    let (configure_command, wheel_command) = commands(i.tree.front_end, i.python, wheel_dir);
    BuildPlan {
        torch: i.tree.version_text.clone(),
        front_end: i.tree.front_end,
        torch_cuda_arch_list: i.cuda.as_ref().map(|c| c.arch_plan.torch_cuda_arch_list()),
        sass: i.cuda.as_ref().map_or_else(Vec::new, |c| {
            c.arch_plan.sass().iter().map(|a| a.sm()).collect()
        }),
        ptx: i.cuda.as_ref().map_or_else(Vec::new, |c| {
            c.arch_plan.ptx().iter().map(|a| a.compute()).collect()
        }),
        cuda: i.cuda.as_ref().map(|c| c.toolchain.cuda.to_string()),
        nvcc,
        nvcc_version: i
            .cuda
            .as_ref()
            .map(|c| c.toolchain.nvcc_version.to_string()),
        python: i.python.to_path_buf(),
        jobs: i.jobs.clone(),
        env,
        path_first: i.path_first.clone(),
        build_dir: i.tree.root.join("build"),
        configure_command,
        wheel_command,
        wheel_dir: wheel_dir.to_path_buf(),
    }
}

/// CUDA locations, all from one canonical root: two roots are pytorch#106971's "conflicting CUDA
/// installs" and nvcc/header mismatches. Returns that root's nvcc.
fn cuda_root_vars(vars: &mut Vars, tc: &Toolchain) -> PathBuf {
    let root =
        std::fs::canonicalize(tc.cuda_home()).unwrap_or_else(|_| tc.cuda_home().to_path_buf());
    let nvcc = root.join("bin/nvcc");
    let r = root.display().to_string();
    let n = nvcc.display().to_string();
    vars.build(
        "CUDA_HOME",
        r.clone(),
        format!("CUDA {} ({})", tc.nvcc_version, source_label(tc)),
    );
    vars.build("CUDA_PATH", r.clone(), "the same root, for FindCUDAToolkit");
    vars.build(
        "CUDAToolkit_ROOT",
        r,
        "the same root, for find_package(CUDAToolkit)",
    );
    vars.build(
        "CUDA_NVCC_EXECUTABLE",
        n.clone(),
        "that root's nvcc, not another on PATH",
    );
    vars.build("CUDACXX", n, "CMake's CUDA compiler: the same nvcc");
    nvcc
}

/// nvcc's host compiler (a CUDA build) and the C/C++ compilers.
fn compiler_vars(vars: &mut Vars, i: &Inputs) {
    let named = |c: &HostCompiler| {
        format!(
            "{} {}",
            c.name,
            c.version
                .as_ref()
                .map(|v| v.to_string())
                .unwrap_or_default()
        )
    };
    if let Some(c) = &i.cuda {
        vars.build(
            "CUDAHOSTCXX",
            c.host_cxx.path.display().to_string(),
            format!("nvcc's host compiler: {}", named(c.host_cxx)),
        );
    }
    if let Some(cc) = i.cxx.c_compiler() {
        vars.build("CC", cc.display().to_string(), "the C compiler beside CXX");
    }
    vars.build(
        "CXX",
        i.cxx.path.display().to_string(),
        format!("the C++ compiler: {}", named(i.cxx)),
    );
}

/// The knowledge base's nvcc options for this CUDA, and cuDNN where preflight found it.
fn nvcc_flag_and_library_vars(vars: &mut Vars, i: &Inputs, c: &CudaInputs) {
    let mut nvcc_flags: Vec<String> = Vec::new();
    let mut why = Vec::new();
    for o in kb().nvcc_options(&c.toolchain.cuda) {
        nvcc_flags.extend(o.flags.iter().cloned());
        why.push(format!("{}: {}", o.flags.join(" "), o.why));
    }
    vars.build("TORCH_NVCC_FLAGS", nvcc_flags.join(" "), why.join("; "));
    if let Some((inc, lib)) = &i.cudnn {
        vars.build(
            "CUDNN_INCLUDE_DIR",
            inc.display().to_string(),
            "cuDNN headers found by preflight",
        );
        vars.build(
            "CUDNN_LIBRARY",
            lib.display().to_string(),
            "cuDNN library found by preflight",
        );
    }
}

/// Jobs, the build type, the wheel's version, and ninja for scikit-build-core trees.
fn job_and_version_vars(vars: &mut Vars, i: &Inputs) {
    let j = i.jobs.jobs.to_string();
    vars.build(
        "MAX_JOBS",
        j.clone(),
        format!("{} ({})", i.jobs.jobs, i.jobs.reason),
    );
    vars.build(
        "CMAKE_BUILD_PARALLEL_LEVEL",
        j,
        "the same count for cmake --build steps",
    );
    vars.build("CMAKE_BUILD_TYPE", "Release".into(), "an optimized wheel");
    // The local tag official wheels carry: `+cu124`, or `+cpu` for a CPU-only build.
    let device = match &i.cuda {
        Some(c) => format!("cu{}{}", c.toolchain.cuda.major(), c.toolchain.cuda.minor()),
        None => "cpu".to_string(),
    };
    vars.build(
        "PYTORCH_BUILD_VERSION",
        format!("{}+{device}", i.tree.release_version()),
        "the wheel's version: the tree's release and the CUDA it was built with (cpu: none)",
    );
    vars.build(
        "PYTORCH_BUILD_NUMBER",
        "0".into(),
        "required with PYTORCH_BUILD_VERSION; 0 keeps `.postN` off the version",
    );
    if i.tree.front_end == FrontEnd::ScikitBuildCore {
        vars.build(
            "CMAKE_GENERATOR",
            "Ninja".into(),
            "ninja, whose [N/M] lines are the progress",
        );
    }
}

/// Every C, C++ and CUDA compile goes through archsmith's compile meter (its launcher in the
/// build directory): each waits in the build's memory pool, is measured, and its record goes to
/// the build's compile log for the trace and the peaks kept. `--cache`: the meter runs the
/// compiler cache's launcher (a CMake launcher list), with its directory; `--dist`: sccache's
/// client config and its own server port.
fn launcher_vars(vars: &mut Vars, i: &Inputs) {
    let build_dir = i.tree.root.join("build");
    let meter = meter_launcher(&build_dir).display().to_string();
    let langs: &[&str] = match i.cuda {
        Some(_) => &["C", "CXX", "CUDA"],
        None => &["C", "CXX"],
    };
    let launcher = match &i.launcher {
        Some((cache, _)) => format!("{meter};{}", cache.display()),
        None => meter,
    };
    for lang in langs {
        vars.build(
            &format!("CMAKE_{lang}_COMPILER_LAUNCHER"),
            launcher.clone(),
            match i.launcher {
                Some(_) => "archsmith's compile meter, then --cache's launcher",
                None => "archsmith's compile meter: the memory pool and each compile's peak",
            },
        );
    }
    vars.set(
        compile_meter::LOG_VAR,
        compile_log(&build_dir).display().to_string(),
        "where each compile's record goes (time, peak memory)",
        VarKind::Process,
    );
    let gate = Gate::new(
        build_dir.join("archsmith-memory-ledger"),
        Gate::budget_for(i.jobs.mem_available_gib, RESERVE_GIB),
    );
    for (name, value) in gate.env() {
        vars.set(
            &name,
            value,
            "the memory pool every compile waits in",
            VarKind::Process,
        );
    }
    let Some((_, (dir_var, dir))) = &i.launcher else {
        return;
    };
    vars.set(
        compile_meter::THROUGH_CACHE_VAR,
        "1".into(),
        "the meter runs a compiler cache: no peak is taken of a hit or of sccache's server",
        VarKind::Process,
    );
    vars.set(
        dir_var,
        dir.clone(),
        "the compiler cache's own directory",
        VarKind::Process,
    );
    if let Some(conf) = &i.dist_config {
        vars.set(
            "SCCACHE_CONF",
            conf.display().to_string(),
            "--dist: sccache's client config, naming the sccache-dist scheduler",
            VarKind::Process,
        );
        vars.set(
            "SCCACHE_SERVER_PORT",
            crate::compiler_cache::DIST_SERVER_PORT.into(),
            "--dist: the sccache server started with that config",
            VarKind::Process,
        );
    }
}

/// The front end's configure-only command and its wheel command.
fn commands(front_end: FrontEnd, python: &Path, wheel_dir: &Path) -> (Vec<String>, Vec<String>) {
    let py = python.display().to_string();
    let wd = wheel_dir.display().to_string();
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match front_end {
        FrontEnd::SetupPy => (
            words(&[&py, "setup.py", "build", "--cmake-only"]),
            words(&[&py, "setup.py", "bdist_wheel", "--dist-dir", &wd]),
        ),
        FrontEnd::ScikitBuildCore => (
            words(&["cmake", "-S", ".", "-B", "build", "-G", "Ninja"]),
            words(&[
                &py,
                "-m",
                "pip",
                "wheel",
                "--no-build-isolation",
                "--no-deps",
                "-v",
                ".",
                "--wheel-dir",
                &wd,
                "-Cbuild-dir=build",
            ]),
        ),
    }
}

fn source_label(tc: &Toolchain) -> String {
    tc.source.label()
}

/// Parses `--set NAME=VALUE`.
pub fn parse_set(s: &str) -> Result<(String, String), String> {
    let (n, v) = s
        .split_once('=')
        .ok_or_else(|| format!("--set {s}: expected NAME=VALUE, e.g. --set USE_CUDNN=0"))?;
    let ok = !n.is_empty()
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !n.starts_with(|c: char| c.is_ascii_digit());
    if !ok {
        return Err(format!("--set {s}: `{n}` is not a variable name"));
    }
    Ok((n.to_string(), v.to_string()))
}

/// Whether a value is one of CMake's boolean constants.
pub fn is_bool(value: &str) -> bool {
    matches!(
        value.to_ascii_uppercase().as_str(),
        "0" | "1" | "ON" | "OFF" | "YES" | "NO" | "TRUE" | "FALSE" | "Y" | "N"
    )
}

/// Whether a switch value means on (CMake's truthy constants as torch's build reads them).
pub fn is_on(value: &str) -> bool {
    matches!(
        value.to_ascii_uppercase().as_str(),
        "1" | "ON" | "YES" | "TRUE" | "Y"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_model() {
        // 2 cores, 20 GiB: cores bound it.
        let j = jobs(2, 20.0, true, None, None);
        assert_eq!((j.jobs, j.gib_per_job), (2, 5.0));
        // 16 cores, 30 GiB with FlashAttention: (30 − 2) / 5 = 5.
        assert_eq!(jobs(16, 30.0, true, None, None).jobs, 5);
        // without: (30 − 2) / 2.5 = 11.
        assert_eq!(jobs(16, 30.0, false, None, None).jobs, 11);
        // never below one; --jobs wins.
        assert_eq!(jobs(16, 1.0, true, None, None).jobs, 1);
        assert_eq!(jobs(16, 30.0, true, Some(12), None).jobs, 12);
        // Measured in this build directory (torch 2.6.0's heaviest CPU unit: 1,240 MiB, +15%):
        // (64 − 2) / 1.40 = 44 jobs where 2.5 GiB gives 24; FlashAttention keeps its 5 GiB.
        let measured = jobs(64, 64.0, false, None, Some(1240.0 * 1.15 / 1024.0));
        assert_eq!((measured.jobs, measured.gib_per_job), (44, 1.4));
        assert!(measured.reason.contains("measured in this build directory"));
        assert_eq!(jobs(64, 64.0, false, None, None).jobs, 24);
        assert_eq!(jobs(64, 64.0, true, None, Some(1.43)).gib_per_job, 5.0);
    }

    #[test]
    fn set_parsing() {
        assert_eq!(
            parse_set("USE_CUDNN=0").unwrap(),
            ("USE_CUDNN".into(), "0".into())
        );
        assert_eq!(parse_set("X=a=b").unwrap(), ("X".into(), "a=b".into()));
        assert!(parse_set("USE_CUDNN").unwrap_err().contains("NAME=VALUE"));
        assert!(parse_set("1X=0").is_err());
        assert!(parse_set("A B=0").is_err());
        assert!(is_on("ON") && is_on("1") && !is_on("0") && !is_on("OFF"));
    }
}
