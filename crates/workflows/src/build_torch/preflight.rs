//! Preflight: everything that would fail hours into a torch build, checked in seconds before
//! anything compiles, each failure with the fix. The checks are plain functions over what
//! [`super::prepare`] found, so tests drive each with real and with constructed inputs.

use super::plan::{is_on, BuildPlan};
use super::tree::TorchTree;
use crate::host::{CompilerFamily, HostCompiler};
use crate::kb::kb;
use crate::python::probe::PythonInfo;
use crate::toolchain::Toolchain;
use crate::version::Version;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Builds, but the user should know.
    Warn,
    /// Would fail (or silently build the wrong thing): the build does not start.
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    /// What to do, for a warning or a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Ok,
            detail: detail.into(),
            fix: None,
        }
    }
    pub fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
    pub fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// The torch release supports building with this CUDA: at least the release's source-build floor,
/// and no newer major than its newest official variant (torch 2.6 predates CUDA 13).
pub fn torch_cuda(torch: &Version, cuda: &Version) -> Check {
    const NAME: &str = "torch vs CUDA";
    let Some(row) = kb().torch_row(torch) else {
        return Check::warn(
            NAME,
            format!("torch {torch} is not in the knowledge base: its CUDA range is unchecked"),
            "check the release notes of that torch for the CUDA releases it builds with",
        );
    };
    if let Some((detail, fix)) = crate::kb::user_input::torch_cuda_refusal(kb(), torch, cuda) {
        return Check::fail(NAME, detail, fix);
    }
    let newest = row.cuda_variants.iter().chain(&row.pypi_cuda).max();
    if let Some(newest) = newest {
        if cuda.major_minor() > newest.major_minor() {
            return Check::warn(
                NAME,
                format!(
                    "CUDA {cuda} is newer than any official build of torch {torch} (newest cu{}{})",
                    newest.major(),
                    newest.minor()
                ),
                format!(
                    "expected to work within CUDA {}.x; --cuda {newest} is the tested one",
                    newest.major()
                ),
            );
        }
    }
    Check::ok(NAME, format!("torch {torch} builds with CUDA {cuda}"))
}

/// nvcc accepts the host compiler (its `crt/host_config.h` ceiling, from the knowledge base), and
/// the compiler is at least the tree's own floor. `others` are the compilers on PATH, to name one
/// that would work.
pub fn host_compiler(
    tc: Option<&Toolchain>,
    tree: &TorchTree,
    host: &HostCompiler,
    cxx: &HostCompiler,
    others: &[HostCompiler],
) -> Check {
    const NAME: &str = "host compiler";
    let Some(host_major) = host.major() else {
        return Check::fail(
            NAME,
            format!("{}: could not read its version", host.path.display()),
            "set CUDAHOSTCXX (or CXX) to a working g++ or clang++",
        );
    };
    let limits = tc.and_then(|tc| {
        kb().cuda_row(&tc.cuda)
            .map(|r| r.host_compiler_limits(&tc.nvcc_version))
    });
    let limit = limits.and_then(|l| match host.family {
        CompilerFamily::Gcc => l.max_gcc,
        CompilerFamily::Clang => l.max_clang,
    });
    if let (Some(tc), Some(limit)) = (tc, limit.filter(|l| host_major > *l)) {
        return too_new_for_nvcc(tc, host, host_major, limit, others);
    }
    if let (Some(min), Some(v)) = (&tree.gcc_min, &cxx.version) {
        if cxx.family == CompilerFamily::Gcc && v < min {
            return Check::fail(
                NAME,
                format!(
                    "{} is older than torch {} demands (GCC ≥ {min}, CMakeLists.txt)",
                    describe(cxx),
                    tree.version_text
                ),
                format!("set CXX to a g++ ≥ {min}"),
            );
        }
    }
    let Some(tc) = tc else {
        return Check::ok(NAME, format!("{} (CPU-only: no nvcc)", describe(cxx)));
    };
    Check::ok(
        NAME,
        format!(
            "nvcc {} with {}{}",
            tc.nvcc_version,
            describe(host),
            match limit {
                Some(l) => format!(" (accepts ≤ {l})"),
                None => String::new(),
            }
        ),
    )
}

/// `g++ 14 (/usr/bin/g++)`.
fn describe(c: &HostCompiler) -> String {
    format!(
        "{} {} ({})",
        c.name,
        c.version
            .as_ref()
            .map(|v| v.to_string())
            .unwrap_or_else(|| "?".into()),
        c.path.display()
    )
}

/// The host compiler is newer than nvcc accepts: the fix names an installed one that fits, or
/// the package to install.
fn too_new_for_nvcc(
    tc: &Toolchain,
    host: &HostCompiler,
    host_major: u32,
    limit: u32,
    others: &[HostCompiler],
) -> Check {
    let family = match host.family {
        CompilerFamily::Gcc => "GCC",
        CompilerFamily::Clang => "Clang",
    };
    let fits = others
        .iter()
        .find(|c| c.family == host.family && c.major().is_some_and(|m| m <= limit));
    let fix = match fits {
        Some(c) => format!(
            "{} is installed and accepted: rerun with CUDAHOSTCXX={} (nvcc's host compiler; the rest of torch may keep {})",
            describe(c), c.path.display(), host.name
        ),
        None => format!(
            "install a {family} ≤ {limit} (Debian/Ubuntu: apt-get install g++-{limit}) and rerun with CUDAHOSTCXX=/usr/bin/g++-{limit}, or use a CUDA release whose nvcc accepts {family} {host_major}"
        ),
    };
    Check::fail(
        "host compiler",
        format!(
            "{} is newer than nvcc {} accepts ({family} ≤ {limit}: `#error -- unsupported GNU version!` at the first .cu file)",
            describe(host), tc.nvcc_version
        ),
        fix,
    )
}

/// cmake and ninja present and new enough for the tree.
pub fn build_tools(
    tree: &TorchTree,
    cmake: Option<(&Path, &Version)>,
    ninja: Option<&Path>,
) -> Check {
    const NAME: &str = "cmake, ninja";
    let Some((cmake, version)) = cmake else {
        return Check::fail(
            NAME,
            "no cmake found",
            "put cmake ≥ 3.27 on PATH (pip install cmake)",
        );
    };
    if let Some(min) = tree.cmake_min.as_ref().filter(|m| version < *m) {
        return Check::fail(
            NAME,
            format!(
                "cmake {version} ({}) is older than torch {} demands ({min})",
                cmake.display(),
                tree.version_text
            ),
            format!("pip install 'cmake>={min}' or put a newer cmake first on PATH"),
        );
    }
    let Some(ninja) = ninja else {
        return Check::fail(NAME, "no ninja found", "pip install ninja");
    };
    Check::ok(
        NAME,
        format!(
            "cmake {version} ({}), ninja ({})",
            cmake.display(),
            ninja.display()
        ),
    )
}

/// The Python modules a front end imports before CMake runs, with the pip package of each.
pub fn python_modules(
    front_end: super::tree::FrontEnd,
    numpy: bool,
) -> Vec<(&'static str, &'static str)> {
    let mut m = vec![
        ("yaml", "pyyaml"),
        ("typing_extensions", "typing_extensions"),
    ];
    match front_end {
        super::tree::FrontEnd::SetupPy => {
            m.extend([("setuptools", "setuptools"), ("wheel", "wheel")])
        }
        super::tree::FrontEnd::ScikitBuildCore => {
            m.extend([("scikit_build_core", "scikit-build-core"), ("pip", "pip")])
        }
    }
    if numpy {
        m.push(("numpy", "numpy"));
    }
    m
}

/// The build Python: in the tree's range, and with the modules the front end needs.
pub fn python(tree: &TorchTree, info: &PythonInfo, modules: &[(&str, &str)]) -> Check {
    const NAME: &str = "python";
    let py = info.interpreter.display();
    if let Some(min) = tree.python_min.as_ref().filter(|m| info.python < **m) {
        return Check::fail(
            NAME,
            format!(
                "{py} is Python {}; torch {} needs ≥ {min}",
                info.python, tree.version_text
            ),
            format!("--python PATH to a Python ≥ {min}"),
        );
    }
    let missing: Vec<&(&str, &str)> = modules
        .iter()
        .filter(|(m, _)| !info.modules.get(*m).copied().unwrap_or(false))
        .collect();
    if !missing.is_empty() {
        return Check::fail(
            NAME,
            format!(
                "{py} lacks {} (the front end imports {} before CMake runs)",
                missing
                    .iter()
                    .map(|(m, _)| *m)
                    .collect::<Vec<_>>()
                    .join(", "),
                if missing.len() == 1 { "it" } else { "them" }
            ),
            format!(
                "{py} -m pip install {}",
                missing
                    .iter()
                    .map(|(_, p)| *p)
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        );
    }
    if let Some(max) = kb()
        .torch_row(&tree.version)
        .map(|r| &r.python_max)
        .filter(|max| info.python.major_minor() > **max)
    {
        return Check::warn(
            NAME,
            format!(
                "Python {} is newer than any official torch {} wheel (≤ {max})",
                info.python, tree.version_text
            ),
            format!("--python with Python ≤ {max} is the tested range"),
        );
    }
    Check::ok(NAME, format!("{py}: Python {}", info.python))
}

/// The `third_party/` directories the enabled switches need, and which are missing.
pub fn submodules(tree: &TorchTree, switches: &BTreeMap<String, String>) -> (Check, Vec<String>) {
    const NAME: &str = "submodules";
    let on = |n: &str| switches.get(n).is_some_and(|v| is_on(v));
    let system_libs = on("USE_SYSTEM_LIBS");
    let mut needed = Vec::new();
    let mut missing = Vec::new();
    let mut offs: Vec<String> = Vec::new();
    let mut debian: Vec<String> = Vec::new();
    for row in kb().torch_submodules(&tree.version) {
        if !row.needs.iter().all(|n| on(n)) {
            continue;
        }
        if row.system.as_deref().is_some_and(on) || (system_libs && row.system_libs) {
            continue;
        }
        needed.push(row.path.clone());
        if !tree.has_submodule(&row.path) {
            missing.push(row.path.clone());
            // USE_CUDA=0 is no fix for a CUDA build.
            if let Some(sw) = row.needs.last().filter(|s| *s != "USE_CUDA") {
                let off = format!("--set {sw}=0");
                if !offs.contains(&off) {
                    offs.push(off);
                }
            }
            if let Some(d) = &row.debian {
                debian.push(d.clone());
            }
        }
    }
    if missing.is_empty() {
        return (
            Check::ok(
                NAME,
                format!("{} third_party directories present", needed.len()),
            ),
            missing,
        );
    }
    let bring = how_to_bring(tree, &missing);
    let mut fix = bring.clone();
    if !offs.is_empty() {
        fix += &format!("; or switch the features off: {}", offs.join(" "));
    }
    let detail = format!(
        "{} of {} needed third_party directories missing: {}",
        missing.len(),
        needed.len(),
        missing.join(" ")
    );
    // With USE_SYSTEM_LIBS the remaining ones have no system switch upstream: only a tree patched
    // to use the system libraries (Debian's 1040-cmake-strip-3rdparty.patch) configures without
    // them. Preflight cannot tell a patched tree from an unpatched one, so it says so and goes on.
    if system_libs {
        return (
            Check::warn(
                NAME,
                detail,
                format!(
                    "USE_SYSTEM_LIBS=1: upstream has no system switch for these, so configure finds them only in a tree patched for the system libraries ({}), as Debian's is; otherwise {bring}",
                    debian.join(" ")
                ),
            ),
            missing,
        );
    }
    fix += &format!(
        "; or take the libraries from the system (--set USE_SYSTEM_LIBS=1 with {}), as Debian's packaging does",
        debian.join(" ")
    );
    (Check::fail(NAME, detail, fix), missing)
}

/// How to get the missing submodules: `git submodule update` in a checkout, the release tarball
/// (or a recursive clone) for a tree that is not one.
fn how_to_bring(tree: &TorchTree, missing: &[String]) -> String {
    if tree.git.is_some() {
        crate::git_submodules::fill_command(&tree.root, missing)
    } else {
        format!(
            "this tree is not a git checkout (a source tarball without submodules): use pytorch's release tarball pytorch-v{v}.tar.gz from its GitHub release (it includes them) or `git clone --recursive --branch v{v} https://github.com/pytorch/pytorch`",
            v = tree.version
        )
    }
}

/// Free disk for the build directory and the wheel.
pub fn disk(tree: &TorchTree, free_gib: Option<f64>, images: usize) -> Check {
    const NAME: &str = "disk";
    let build_dir = &tree.root;
    let need = super::plan::disk_need_gib(tree.sources, images);
    let sources = tree.sources;
    match free_gib {
        None => Check::warn(NAME, format!("could not read free space at {}", build_dir.display()), format!("make sure ~{need:.0} GiB are free")),
        Some(f) if f < need => Check::fail(
            NAME,
            format!("{f:.1} GiB free at {}; a CUDA build of this tree ({} C/C++ and {} CUDA sources) for {images} image(s) needs ~{need:.0} GiB", build_dir.display(), sources.cxx, sources.cuda),
            "free space there, or build from a copy of the tree on a larger disk",
        ),
        Some(f) => Check::ok(NAME, format!("{f:.1} GiB free, ~{need:.1} GiB needed ({} C/C++ and {} CUDA sources, {images} image(s))", sources.cxx, sources.cuda)),
    }
}

/// Memory for the job count (only a `--jobs` can exceed it: the computed count fits by construction).
pub fn memory(jobs: &super::plan::Jobs) -> Check {
    const NAME: &str = "memory";
    let need = jobs.jobs as f64 * jobs.gib_per_job + super::plan::RESERVE_GIB;
    if need > jobs.mem_available_gib && jobs.jobs > 1 {
        let fits =
            (((jobs.mem_available_gib - super::plan::RESERVE_GIB) / jobs.gib_per_job).floor()
                as u32)
                .max(1);
        return Check::fail(
            NAME,
            format!(
                "{} jobs × {} GiB need ~{need:.0} GiB; {:.1} GiB available: compilers get OOM-killed (exit 137) hours in",
                jobs.jobs, jobs.gib_per_job, jobs.mem_available_gib
            ),
            format!("--jobs {fits} (or leave --jobs out: archsmith computes it from memory)"),
        );
    }
    Check::ok(
        NAME,
        format!(
            "{} jobs ({}), {:.1} GiB available",
            jobs.jobs, jobs.reason, jobs.mem_available_gib
        ),
    )
}

/// cuDNN's header and library, looked for where torch's FindCUDNN looks and in the build Python's
/// `nvidia-cudnn-cuXX` wheel.
pub fn find_cudnn(cuda_home: &Path, purelib: Option<&Path>) -> Option<(PathBuf, PathBuf)> {
    let mut roots: Vec<(PathBuf, PathBuf)> = Vec::new();
    if let (Some(i), Some(l)) = (
        std::env::var_os("CUDNN_INCLUDE_DIR"),
        std::env::var_os("CUDNN_LIB_DIR"),
    ) {
        roots.push((i.into(), l.into()));
    }
    roots.push((cuda_home.join("include"), cuda_home.join("lib64")));
    if let Some(p) = purelib {
        roots.push((p.join("nvidia/cudnn/include"), p.join("nvidia/cudnn/lib")));
    }
    roots.push(("/usr/include".into(), "/usr/lib/x86_64-linux-gnu".into()));
    roots.push((
        "/usr/include/x86_64-linux-gnu".into(),
        "/usr/lib/x86_64-linux-gnu".into(),
    ));
    for (inc, lib) in roots {
        if !(inc.join("cudnn_version.h").is_file() || inc.join("cudnn.h").is_file()) {
            continue;
        }
        let Ok(rd) = std::fs::read_dir(&lib) else {
            continue;
        };
        let mut libs: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n == "libcudnn.so" || n.starts_with("libcudnn.so."))
            })
            .collect();
        libs.sort();
        if let Some(l) = libs.into_iter().next() {
            return Some((inc, l));
        }
    }
    None
}

pub fn cudnn(
    enabled: bool,
    found: Option<&(PathBuf, PathBuf)>,
    cuda: &Version,
    python: &Path,
) -> Check {
    const NAME: &str = "cuDNN";
    if !enabled {
        return Check::ok(NAME, "USE_CUDNN=0: not needed");
    }
    match found {
        Some((inc, lib)) => Check::ok(NAME, format!("{} , {}", inc.display(), lib.display())),
        None => Check::fail(
            NAME,
            "USE_CUDNN=1 but no cuDNN headers and library were found (CUDA_HOME, CUDNN_INCLUDE_DIR/CUDNN_LIB_DIR, /usr, the build Python's nvidia-cudnn wheel): torch would build without cuDNN and say so only in its configure log",
            format!(
                "{} -m pip install nvidia-cudnn-cu{} (archsmith finds it there), or --set USE_CUDNN=0",
                python.display(),
                cuda.major()
            ),
        ),
    }
}

/// Every build variable of the plan is read by the tree or by CMake.
pub fn variables_read(plan: &BuildPlan, tree: &TorchTree, files: usize) -> Check {
    const NAME: &str = "variables read";
    let unread = plan.unread();
    if unread.is_empty() {
        let n = plan
            .env
            .iter()
            .filter(|v| v.kind == super::plan::VarKind::Build)
            .count();
        return Check::ok(
            NAME,
            format!(
                "all {n} read by torch {}'s build ({files} build files) or by CMake",
                tree.version_text
            ),
        );
    }
    Check::fail(
        NAME,
        format!(
            "no build file of torch {} reads {} (nor does CMake): a typo, or a switch this release does not have",
            tree.version_text,
            unread.iter().map(|v| format!("{}={} ({})", v.name, v.value, v.why)).collect::<Vec<_>>().join(", ")
        ),
        "correct a --set typo; for a variable archsmith sets that this (patched?) tree no longer reads, --set NAME= leaves it unset; `grep -rw NAME CMakeLists.txt cmake/ setup.py tools/` in the tree shows what it reads",
    )
}

/// An existing configuration in the build directory that differs from the plan, as `NAME: was →
/// now` lines. The front ends reuse `CMakeCache.txt` as it is (setup.py does not even rerun
/// configure), so a changed arch list or compiler would be silently ignored.
pub fn stale_configuration(cache_text: &str, plan: &BuildPlan) -> Vec<String> {
    let env: Vec<(&str, &str)> = plan
        .env
        .iter()
        .map(|v| (v.name.as_str(), v.value.as_str()))
        .collect();
    stale_configuration_of(cache_text, &env)
}

fn stale_configuration_of(cache_text: &str, env: &[(&str, &str)]) -> Vec<String> {
    let mut cached: BTreeMap<&str, &str> = BTreeMap::new();
    for line in cache_text.lines() {
        if line.starts_with('#') || line.starts_with("//") {
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            let name = key.split(':').next().unwrap_or(key);
            cached.insert(name, value);
        }
    }
    let mut diffs = Vec::new();
    let mut compare = |cache_key: &str, want: &str, boolean: bool| {
        if let Some(have) = cached.get(cache_key) {
            let same = if boolean {
                is_on(have) == is_on(want)
            } else {
                *have == want
            };
            if !same {
                diffs.push(format!("{cache_key}: {have} → {want}"));
            }
        }
    };
    for &(name, value) in env {
        match name {
            "TORCH_CUDA_ARCH_LIST" => compare("TORCH_CUDA_ARCH_LIST", value, false),
            "CUDAHOSTCXX" => compare("CMAKE_CUDA_HOST_COMPILER", value, false),
            "CXX" => compare("CMAKE_CXX_COMPILER", value, false),
            "CUDACXX" => compare("CMAKE_CUDA_COMPILER", value, false),
            n if (n.starts_with("USE_") || n.starts_with("BUILD_"))
                && super::plan::is_bool(value) =>
            {
                compare(n, value, true)
            }
            _ => {}
        }
    }
    diffs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build_torch::tree::FrontEnd;
    use crate::kb::kb;
    use crate::toolchain::Source;

    fn gxx(name: &str, version: &str) -> HostCompiler {
        HostCompiler {
            name: name.into(),
            path: PathBuf::from("/usr/bin").join(name),
            family: CompilerFamily::Gcc,
            version: Some(version.parse().unwrap()),
        }
    }

    fn tree(version: &str) -> TorchTree {
        TorchTree {
            root: "/src".into(),
            version_text: version.into(),
            version: version.parse().unwrap(),
            front_end: FrontEnd::SetupPy,
            git: None,
            python_min: Some("3.9.0".parse().unwrap()),
            cmake_min: Some("3.18".parse().unwrap()),
            gcc_min: Some("9.3".parse().unwrap()),
            sources: super::super::plan::DISK_CALIBRATION,
        }
    }

    fn toolchain(nvcc: &str) -> Toolchain {
        let v: Version = nvcc.parse().unwrap();
        Toolchain {
            cuda: v.major_minor(),
            nvcc_version: v,
            cuda_home: "/usr".into(),
            source: Source::System {
                found_via: "test".into(),
            },
        }
    }

    #[test]
    fn a_gcc_newer_than_nvcc_accepts_fails_naming_one_that_fits() {
        let (g12, g11) = (gxx("g++", "12.2.0"), gxx("g++-11", "11.3.0"));
        let all = [g12.clone(), gxx("g++-12", "12.2.0"), g11.clone()];
        let c = host_compiler(
            Some(&toolchain("11.8.89")),
            &tree("2.6.0"),
            &g12,
            &g12,
            &all,
        );
        assert_eq!(c.status, Status::Fail);
        assert!(c.detail.contains("GCC ≤ 11"), "{}", c.detail);
        assert!(
            c.fix
                .as_deref()
                .unwrap()
                .contains("CUDAHOSTCXX=/usr/bin/g++-11"),
            "{c:?}"
        );
        // None installed that fits: how to get one.
        let c = host_compiler(
            Some(&toolchain("11.8.89")),
            &tree("2.6.0"),
            &g12,
            &g12,
            &all[..2],
        );
        assert!(
            c.fix.as_deref().unwrap().contains("apt-get install g++-11"),
            "{c:?}"
        );
        // nvcc's host compiler g++-11, torch's C++ g++ 12: fine.
        let c = host_compiler(
            Some(&toolchain("11.8.89")),
            &tree("2.6.0"),
            &g11,
            &g12,
            &all,
        );
        assert_eq!(c.status, Status::Ok, "{c:?}");
        // The tree's own floor.
        let old = gxx("g++-8", "8.5.0");
        let c = host_compiler(
            Some(&toolchain("12.4.131")),
            &tree("2.6.0"),
            &old,
            &old,
            &[],
        );
        assert_eq!(c.status, Status::Fail);
        assert!(c.detail.contains("GCC ≥ 9.3"), "{}", c.detail);
        // CPU-only: no nvcc ceiling, the floor still holds.
        let c = host_compiler(None, &tree("2.6.0"), &old, &old, &[]);
        assert!(c.detail.contains("GCC ≥ 9.3"), "{}", c.detail);
        let c = host_compiler(None, &tree("2.6.0"), &g12, &g12, &[]);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(c.detail.contains("CPU-only"), "{}", c.detail);
    }

    #[test]
    fn use_system_libs_covers_only_the_libraries_it_switches() {
        let mut switches: BTreeMap<String, String> = kb()
            .torch_switches(&"2.6.0".parse().unwrap())
            .iter()
            .map(|r| (r.name.clone(), r.value.clone()))
            .collect();
        let (c, missing) = submodules(&tree("2.6.0"), &switches);
        assert_eq!(c.status, Status::Fail);
        assert!(missing.contains(&"third_party/cpuinfo".to_string()));
        switches.insert("USE_SYSTEM_LIBS".into(), "1".into());
        let (c, missing) = submodules(&tree("2.6.0"), &switches);
        assert_eq!(c.status, Status::Warn);
        // 2.6.0's USE_SYSTEM_LIBS sets USE_SYSTEM_CPUINFO, BUILD_CUSTOM_PROTOBUF=OFF, … but not TensorPipe.
        for gone in [
            "third_party/cpuinfo",
            "third_party/protobuf",
            "third_party/pybind11",
        ] {
            assert!(!missing.contains(&gone.to_string()), "{gone}");
        }
        assert!(missing.contains(&"third_party/tensorpipe".to_string()));
        switches.insert("USE_SYSTEM_TENSORPIPE".into(), "1".into());
        let (_, missing) = submodules(&tree("2.6.0"), &switches);
        assert!(!missing.contains(&"third_party/tensorpipe".to_string()));
    }

    #[test]
    fn torch_and_cuda_ranges() {
        let v = |s: &str| s.parse::<Version>().unwrap();
        assert_eq!(torch_cuda(&v("2.6.0"), &v("12.4")).status, Status::Ok);
        let c = torch_cuda(&v("2.6.0"), &v("13.2"));
        assert_eq!(c.status, Status::Fail);
        assert!(c.detail.contains("predates CUDA 13"));
        assert_eq!(torch_cuda(&v("2.6.0"), &v("12.8")).status, Status::Warn);
        assert_eq!(torch_cuda(&v("2.6.0"), &v("10.2")).status, Status::Fail);
        assert_eq!(torch_cuda(&v("2.15.0"), &v("13.2")).status, Status::Ok);
        assert_eq!(torch_cuda(&v("9.9.0"), &v("13.2")).status, Status::Warn);
    }

    #[test]
    fn a_cached_configuration_that_differs_is_named() {
        fn plan_env(arch: &str) -> Vec<(&str, &str)> {
            vec![
                ("TORCH_CUDA_ARCH_LIST", arch),
                ("USE_CUDNN", "0"),
                ("CUDAHOSTCXX", "/usr/bin/g++-11"),
            ]
        }
        let cache = "# This is the CMakeCache file.\n//comment\nTORCH_CUDA_ARCH_LIST:UNINITIALIZED=7.5;8.9\nUSE_CUDNN:BOOL=OFF\nCMAKE_CUDA_HOST_COMPILER:FILEPATH=/usr/bin/g++\n";
        let diffs = stale_configuration_of(cache, &plan_env("7.5;8.9;9.0"));
        assert_eq!(
            diffs,
            [
                "TORCH_CUDA_ARCH_LIST: 7.5;8.9 → 7.5;8.9;9.0",
                "CMAKE_CUDA_HOST_COMPILER: /usr/bin/g++ → /usr/bin/g++-11"
            ]
        );
        // OFF and 0 are the same switch value.
        let same = "TORCH_CUDA_ARCH_LIST:STRING=7.5\nUSE_CUDNN:BOOL=OFF\nCMAKE_CUDA_HOST_COMPILER:FILEPATH=/usr/bin/g++-11\n";
        assert!(stale_configuration_of(same, &plan_env("7.5")).is_empty());
    }

    #[test]
    fn disk_need_scales_with_the_trees_sources() {
        // torch 2.6.0 itself for 4 images: the README's 10 GiB plus 2 GiB an image.
        let torch = tree("2.6.0");
        assert!((super::super::plan::disk_need_gib(torch.sources, 4) - 18.0).abs() < 1e-9);
        let c = disk(&torch, Some(17.0), 4);
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(
            c.detail.contains("2215 C/C++ and 371 CUDA sources"),
            "{c:?}"
        );
        assert_eq!(disk(&torch, Some(19.0), 4).status, Status::Ok);
        // A tree a hundredth of torch's needs a hundredth of the space, not 18 GiB.
        let mut small = tree("2.6.0");
        small.sources = super::super::tree::SourceCount { cxx: 22, cuda: 4 };
        let need = super::super::plan::disk_need_gib(small.sources, 4);
        assert!(need > 0.1 && need < 0.3, "{need}");
        assert_eq!(disk(&small, Some(1.0), 4).status, Status::Ok);
        assert_eq!(disk(&small, Some(0.05), 4).status, Status::Fail);
    }
}
