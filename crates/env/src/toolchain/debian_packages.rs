//! CUDA 11.x/12.x toolchains from Debian's archive, without root and without apt.
//!
//! NVIDIA ships nvcc on PyPI only from CUDA 13; Debian packages NVIDIA's own binaries for 11.8
//! (bookworm) and 12.4 (trixie) in non-free. The knowledge base's `[[cuda_system_package]]` row
//! names the suite and the closure an extension build needs; [`crate::downloads::debian_archive`]
//! reads the signed index and streams each package, and this module keeps only the files of
//! [`LAYOUT`], moved from Debian's places (nvcc and cicc under `/usr/lib/nvidia-cuda-toolkit`, the
//! headers in `/usr/include`, libraries in the multiarch directory) to a `CUDA_HOME` laid out as
//! NVIDIA's installer lays it out, with an `nvcc.profile` of its own:
//!
//! ```text
//! cuda-12.4/                          CUDA_HOME
//!   bin/        nvcc nvcc.profile ptxas fatbinary nvlink cudafe++ cuobjdump … crt/link.stub
//!   nvvm/       bin/cicc  libdevice/libdevice.10.bc
//!   include/    the runtime's and libraries' headers, CCCL (thrust, cub, libcu++)
//!   lib64/      libcudart.so -> .so.12, libcudart_static.a, libcudadevrt.a, stubs/libcuda.so
//!   archsmith-debian.lock.json        suite, signing key, each package's version, size, sha256
//! ```
//!
//! Building torch itself needs more than an extension does: its CMake links cuBLAS, cuFFT,
//! cuRAND, cuSPARSE, cuSOLVER, NVRTC and nvToolsExt (`cmake/public/cuda.cmake`), and c10_cuda
//! includes NVML's header (`libnvidia-ml-dev`). That closure
//! ([`Closure::TorchBuild`], the row's `torch_libraries`, some 640 MB more to fetch) is a
//! toolkit of its own, `cuda-X.Y-torch-build`, so an extension build never pays for it.
//!
//! Built in a staging directory under the toolchains lock, verified (nvcc reports the release; a
//! kernel compiles for sm_75, sm_89 and sm_90, links against the shared runtime, and the binary
//! reader finds exactly those images in it) and only then renamed into place.

use super::{nvcc_version, release_matches, Source, Toolchain};
use crate::cache::{provision, remove_path};
use crate::downloads::deb_file::{self, Expected, Extracted};
use crate::downloads::debian_archive::{self, Picked, Suite};
use crate::kb::{CudaSystemPackageRow, HostCompilerLimits};
use crate::process::Cmd;
use crate::version::Version;
use anyhow::{bail, Context, Result};
use fs_err as fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const LOCK_FILE: &str = "archsmith-debian.lock.json";
/// 2: the glibc 2.41 header fix ([`super::glibc_math`]) and the closure recorded.
const LOCK_SCHEMA: u32 = 2;

/// Where Debian's files go: a source ending in `/` maps its whole tree, one ending in `*` every
/// file whose name starts so (the rest of the name kept), any other exactly one file. `{triple}`
/// is the multiarch directory. This is Debian's packaging of NVIDIA's toolkit, the same in 11.8
/// and 12.4; a package that moves a file fails the install's checks of [`REQUIRED`].
pub const LAYOUT: &[(&str, &str)] = &[
    ("usr/lib/nvidia-cuda-toolkit/bin/nvcc", "bin/nvcc"),
    ("usr/lib/nvidia-cuda-toolkit/bin/cicc", "nvvm/bin/cicc"),
    ("usr/lib/nvidia-cuda-toolkit/bin/crt/", "bin/crt/"),
    ("usr/lib/nvidia-cuda-toolkit/libdevice/", "nvvm/libdevice/"),
    ("usr/bin/ptxas", "bin/ptxas"),
    ("usr/bin/fatbinary", "bin/fatbinary"),
    ("usr/bin/nvlink", "bin/nvlink"),
    ("usr/bin/cudafe++", "bin/cudafe++"),
    ("usr/bin/cuobjdump", "bin/cuobjdump"),
    ("usr/bin/nvdisasm", "bin/nvdisasm"),
    ("usr/bin/nvprune", "bin/nvprune"),
    ("usr/bin/bin2c", "bin/bin2c"),
    ("usr/bin/cu++filt", "bin/cu++filt"),
    ("usr/include/", "include/"),
    ("usr/lib/{triple}/libcudart.so*", "lib64/libcudart.so*"),
    (
        "usr/lib/{triple}/libcudart_static.a",
        "lib64/libcudart_static.a",
    ),
    ("usr/lib/{triple}/libcudadevrt.a", "lib64/libcudadevrt.a"),
    ("usr/lib/{triple}/libculibos.a", "lib64/libculibos.a"),
    (
        "usr/lib/{triple}/stubs/libcuda.so",
        "lib64/stubs/libcuda.so",
    ),
];

/// The libraries torch's own CMake links (`cmake/public/cuda.cmake`: `CUDA::cublas`,
/// `CUDA::cublasLt`, `CUDA::cufft`, `CUDA::curand`, `CUDA::cusparse`, `CUDA::cusolver`,
/// `CUDA::nvrtc`, `CUDA::nvToolsExt`, and cuSPARSE's nvJitLink), each with its development link:
/// mapped only for [`Closure::TorchBuild`], where their packages are in the closure (without
/// them, `nvidia-cuda-dev`'s `libcublas.so` would be a link to nothing).
pub const TORCH_LIBRARIES: &[&str] = &[
    "libcublas",
    "libcublasLt",
    "libcufft",
    "libcurand",
    "libcusparse",
    "libcusolver",
    "libnvrtc",
    "libnvrtc-builtins",
    "libnvJitLink",
    "libnvToolsExt",
];

/// Which of a row's closures a toolkit holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Closure {
    /// What an extension build needs (the row's `closure`).
    #[default]
    Extensions,
    /// That and the CUDA libraries torch's own build links (the row's `torch_libraries` too).
    TorchBuild,
}

impl Closure {
    /// The packages to install for `row`, the root first.
    pub fn packages(self, row: &CudaSystemPackageRow) -> Vec<String> {
        let mut v = row.closure.clone();
        if self == Closure::TorchBuild {
            v.extend(row.torch_libraries.iter().cloned());
        }
        v
    }

    /// Where Debian `path` goes under a `CUDA_HOME` for this closure.
    pub fn map(self, path: &str, triple: &str) -> Option<PathBuf> {
        map_path(path, triple).or_else(|| match self {
            Closure::Extensions => None,
            Closure::TorchBuild => map_library(path, triple),
        })
    }

    /// The files unpacking must have produced (a link must reach its file).
    fn required(self) -> Vec<String> {
        let mut v: Vec<String> = REQUIRED.iter().map(|s| s.to_string()).collect();
        if self == Closure::TorchBuild {
            v.extend(
                TORCH_LIBRARIES
                    .iter()
                    .filter(|l| **l != "libnvJitLink" && **l != "libnvrtc-builtins")
                    .map(|l| format!("lib64/{l}.so")),
            );
            // c10/cuda/driver_api.h includes it (libnvidia-ml-dev).
            v.push("include/nvml.h".into());
        }
        v
    }

    fn suffix(self) -> &'static str {
        match self {
            Closure::Extensions => "",
            Closure::TorchBuild => "-torch-build",
        }
    }
}

/// A [`TORCH_LIBRARIES`] file of Debian's multiarch directory, to `lib64/`.
fn map_library(path: &str, triple: &str) -> Option<PathBuf> {
    let name = path.strip_prefix(&format!("usr/lib/{triple}/"))?;
    TORCH_LIBRARIES
        .iter()
        .any(|l| {
            name.strip_prefix(l)
                .is_some_and(|rest| rest == ".so" || rest.starts_with(".so."))
        })
        .then(|| Path::new("lib64").join(name))
}

/// What an extension build needs, checked after unpacking.
pub const REQUIRED: &[&str] = &[
    "bin/nvcc",
    "bin/ptxas",
    "bin/fatbinary",
    "bin/nvlink",
    "bin/cudafe++",
    "bin/crt/link.stub",
    "nvvm/bin/cicc",
    "nvvm/libdevice/libdevice.10.bc",
    "include/cuda_runtime.h",
    "include/crt/host_config.h",
    "include/thrust/version.h",
    "include/cub/cub.cuh",
    "include/cuda/std/version",
    "lib64/libcudart.so",
    "lib64/libcudart_static.a",
];

/// Our `nvcc.profile`: NVIDIA's own, relative to the directory nvcc runs from (Debian's points
/// at `/etc/nvcc.profile` and `/usr/lib`, which this toolkit does not use). With a host compiler
/// of its own, its wrappers come first on the PATH nvcc runs its steps with (as Debian's
/// packaging does with `/usr/lib/nvidia-cuda-toolkit/bin/g++`), and nowhere else.
fn nvcc_profile(host_compiler: bool) -> String {
    let host = if host_compiler {
        format!("$(TOP)/{HOST_BIN}:")
    } else {
        String::new()
    };
    format!(
        "\
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH            += {host}$(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  \"-I$(TOP)/include\" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) \"-L$(TOP)/lib64/stubs\" \"-L$(TOP)/lib64\"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
"
    )
}

/// Where nvcc's own `gcc`/`g++` wrappers live, when the machine's compiler is too new for it.
pub const HOST_BIN: &str = "host-compiler/bin";
/// Where a host compiler from the archive is unpacked (its `usr/` tree, relocatable as gcc is).
const HOST_ROOT: &str = "host-compiler/root";

/// The SASS the verification builds and then finds in the binary.
pub const VERIFY_ARCHS: &[u32] = &[75, 89, 90];

/// Where Debian's `path` goes under a `CUDA_HOME`, by [`LAYOUT`].
pub fn map_path(path: &str, triple: &str) -> Option<PathBuf> {
    for (from, to) in LAYOUT {
        let from = from.replace("{triple}", triple);
        if let Some(dir) = from.strip_suffix('/') {
            if let Some(rest) = path.strip_prefix(&from) {
                return Some(Path::new(to).join(rest));
            }
            if path == dir {
                return Some(PathBuf::from(to.trim_end_matches('/')));
            }
        } else if let Some(stem) = from.strip_suffix('*') {
            if let Some(rest) = path.strip_prefix(stem) {
                return Some(PathBuf::from(format!("{}{rest}", to.trim_end_matches('*'))));
            }
        } else if path == from {
            return Some(PathBuf::from(to));
        }
    }
    None
}

/// One package as installed: the index's record, what pinned it, what was kept.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LockedPackage {
    #[serde(flatten)]
    pub package: debian_archive::Record,
    pub required_by: Option<String>,
    pub kept_files: usize,
    pub kept_bytes: u64,
}

/// What `archsmith-debian.lock.json` records.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LockFile {
    pub schema: u32,
    pub cuda: Version,
    pub distribution: String,
    pub suite: String,
    pub mirror: String,
    /// The signed index's `Date:`.
    pub release_date: String,
    /// The key gpgv found the index signed by.
    pub signed_by: String,
    pub packages: Vec<LockedPackage>,
    pub nvcc_release: Version,
    pub nvcc_version: Version,
    /// From this toolkit's own `crt/host_config.h`.
    pub max_gcc: Option<u32>,
    pub max_clang: Option<u32>,
    /// The compiler nvcc's `gcc`/`g++` run, when the machine's own is newer than the ceiling:
    /// `/usr/bin/g++-11`, or `Debian bookworm's g++-11 11.3.0-12`. None: the machine's `gcc`.
    pub host_compiler: Option<String>,
    /// `sm_75 sm_89 sm_90`: what the verification kernel held.
    pub verified_sass: Vec<String>,
    /// Which closure: an extension build's, or with the libraries torch's own build links.
    #[serde(default)]
    pub closure: Closure,
    /// Files archsmith changed after unpacking, and why.
    #[serde(default)]
    pub patched: Vec<String>,
    pub seconds: f64,
}

/// `toolchains_dir/cuda-X.Y` (`cuda-X.Y-torch-build`): where the Debian toolchain for `cuda`
/// (its major.minor) with `closure` lives.
pub fn home(toolchains_dir: &Path, cuda: &Version, closure: Closure) -> PathBuf {
    toolchains_dir.join(dir_name(cuda, closure))
}

fn dir_name(cuda: &Version, closure: Closure) -> String {
    format!("cuda-{}{}", cuda.major_minor(), closure.suffix())
}

/// Returns the toolchain at [`home`], installing it from `row` first when it is absent or
/// incomplete.
pub fn ensure(
    toolchains_dir: &Path,
    cuda: &Version,
    row: &CudaSystemPackageRow,
    closure: Closure,
    progress: &mut dyn FnMut(&str),
) -> Result<Toolchain> {
    let with = match closure {
        Closure::Extensions => "",
        Closure::TorchBuild => " with the libraries torch's build links",
    };
    provision(
        toolchains_dir,
        &dir_name(cuda, closure),
        &format!(
            "CUDA {} from Debian {}{with}",
            cuda.major_minor(),
            row.suite.as_deref().unwrap_or("?")
        ),
        &load,
        &mut |staging, progress| build(staging, cuda, row, closure, progress),
        progress,
    )
}

/// The toolchain at `home` when it is a complete Debian install; `None` otherwise (no program run).
pub fn load(home: &Path) -> Result<Option<Toolchain>> {
    let Some(lock) = super::complete_lock::<LockFile>(home, LOCK_FILE) else {
        return Ok(None);
    };
    if lock.schema != LOCK_SCHEMA {
        return Ok(None);
    }
    Ok(Some(Toolchain {
        cuda: lock.nvcc_release,
        nvcc_version: lock.nvcc_version,
        cuda_home: home.to_owned(),
        source: Source::Debian {
            lock: home.join(LOCK_FILE),
            suite: lock.suite,
        },
    }))
}

/// `toolchain install`'s lines for a Debian toolkit: where from, the ceiling, each package.
pub fn lock_table(lock: &LockFile) -> String {
    let mut out = format!(
        "  from {} ({}), index of {} signed by {}\n  host compiler up to gcc {} / clang {} (its crt/host_config.h); verified: {}\n",
        lock.distribution,
        lock.mirror,
        lock.release_date,
        lock.signed_by,
        lock.max_gcc.map_or("?".into(), |v| v.to_string()),
        lock.max_clang.map_or("?".into(), |v| v.to_string()),
        lock.verified_sass.join(" ")
    );
    for p in &lock.patched {
        out.push_str(&format!("  patched: {p}\n"));
    }
    if let Some(host) = &lock.host_compiler {
        out.push_str(&format!(
            "  nvcc's host compiler: {host} (this machine's g++ is newer than the ceiling)\n"
        ));
    }
    let mut t = crate::output::Table::new(["  PACKAGE", "VERSION", "SIZE", "KEPT", "PINNED BY"]);
    for p in &lock.packages {
        t.row([
            format!("  {}", p.package.name),
            p.package.version.clone(),
            format!("{:.1} MB", p.package.size as f64 / 1e6),
            format!(
                "{} files, {:.1} MB",
                p.kept_files,
                p.kept_bytes as f64 / 1e6
            ),
            p.required_by.clone().unwrap_or_else(|| "(root)".into()),
        ]);
    }
    out.push_str(&t.render());
    out
}

/// Reads a Debian toolchain's lock file.
pub fn read_lock(home: &Path) -> Result<LockFile> {
    let path = home.join(LOCK_FILE);
    let text = fs::read_to_string(&path)?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn build(
    staging: &Path,
    cuda: &Version,
    row: &CudaSystemPackageRow,
    closure: Closure,
    progress: &mut dyn FnMut(&str),
) -> Result<()> {
    let start = Instant::now();
    let suite_name = row.suite.as_deref().context("the row names no suite")?;
    if closure == Closure::TorchBuild && row.torch_libraries.is_empty() {
        bail!("the knowledge base's CUDA {cuda} row from Debian {suite_name} names no torch_libraries: torch's own build cannot be served from it");
    }
    let suite = Suite::new(suite_name)?;
    let index = suite.index(&row.components, progress)?;
    let names = closure.packages(row);
    let picked = debian_archive::resolve(&index.records, &names)
        .with_context(|| format!("picking CUDA {cuda}'s packages from Debian {suite_name}"))?;
    fs::create_dir_all(staging)?;
    let triple = debian_archive::debian_arch()?.1;
    let packages = unpack_all(
        &suite,
        &picked,
        &|p| closure.map(p, triple),
        staging,
        progress,
    )?;
    let nvcc = staging.join("bin").join("nvcc");
    let found = check_unpacked(staging, cuda, row, closure)?;
    let patched: Vec<String> = super::glibc_math::apply(staging)?.into_iter().collect();
    let header = fs::read_to_string(staging.join("include/crt/host_config.h"))?;
    let limits = crate::kb::parse_host_config(&header).context("reading crt/host_config.h")?;
    let (host_compiler, host_packages) =
        host_compiler(staging, &suite, &index.records, row, &limits, progress)?;
    fs::write(
        staging.join("bin").join("nvcc.profile"),
        nvcc_profile(host_compiler.is_some()),
    )?;
    progress(&format!(
        "verifying nvcc {}: a kernel for sm_75, sm_89 and sm_90, compiled, linked and read back",
        found.full
    ));
    let work = staging.join(".archsmith-work");
    let verified_sass = verify_build(&nvcc, &work, &limits)?;
    remove_path(&work)?;
    let mut packages = packages;
    packages.extend(host_packages);
    let lock = LockFile {
        schema: LOCK_SCHEMA,
        cuda: cuda.major_minor(),
        distribution: row.distribution.clone(),
        suite: suite_name.to_string(),
        mirror: suite.mirror.clone(),
        release_date: index.release.date.clone(),
        signed_by: index.fingerprint.clone(),
        packages,
        nvcc_release: found.release,
        nvcc_version: found.full,
        max_gcc: limits.max_gcc,
        max_clang: limits.max_clang,
        host_compiler,
        verified_sass,
        closure,
        patched,
        seconds: start.elapsed().as_secs_f64(),
    };
    fs::write(
        staging.join(LOCK_FILE),
        serde_json::to_string_pretty(&lock)? + "\n",
    )?;
    progress(&format!(
        "CUDA {cuda} from Debian {suite_name} ready in {:.1}s",
        lock.seconds
    ));
    Ok(())
}

/// Every file of [`REQUIRED`] is there and nvcc reports `cuda`; what it reported.
fn check_unpacked(
    staging: &Path,
    cuda: &Version,
    row: &CudaSystemPackageRow,
    closure: Closure,
) -> Result<super::NvccVersion> {
    let suite_name = row.suite.as_deref().unwrap_or("?");
    // `exists` follows links: a development link whose library did not come is missing too.
    let missing: Vec<String> = closure
        .required()
        .into_iter()
        .filter(|f| !staging.join(f).exists())
        .collect();
    if !missing.is_empty() {
        bail!(
            "Debian {suite_name}'s packages ({}) did not provide {}: their layout changed, so update toolchain::debian_packages::LAYOUT",
            closure.packages(row).join(", "),
            missing.join(", ")
        );
    }
    let found = nvcc_version(&staging.join("bin").join("nvcc"))?;
    if !release_matches(&found, cuda) {
        bail!(
            "Debian {suite_name}'s {} has an nvcc reporting release {} (V{}), not CUDA {cuda}: the knowledge base's row is out of date",
            row.package,
            found.release,
            found.full
        );
    }
    Ok(found)
}

/// Streams every picked package into `staging`, keeping what [`LAYOUT`] maps.
fn unpack_all(
    suite: &Suite,
    picked: &[Picked],
    map: &deb_file::PathMap,
    staging: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<LockedPackage>> {
    let mut out = Vec::new();
    for p in picked {
        let r = &p.record;
        let what = format!("{} {}", r.name, r.version);
        progress(&format!(
            "streaming {what} ({:.1} MB) from {}",
            r.size as f64 / 1e6,
            suite.mirror
        ));
        let source = suite.open(&r.filename)?;
        let mut last = Instant::now();
        let mut report = |unpacked: u64| {
            if last.elapsed().as_secs() >= 10 {
                last = Instant::now();
                crate::errln!(
                    "archsmith:   {what}: {:.0} MB unpacked",
                    unpacked as f64 / 1e6
                );
            }
        };
        let expected = Expected {
            what: &what,
            size: r.size,
            sha256: &r.sha256,
        };
        let Extracted {
            kept_files,
            kept_bytes,
            ..
        } = deb_file::extract(source, &expected, map, staging, &mut report)?;
        out.push(LockedPackage {
            package: r.clone(),
            required_by: p.required_by.clone(),
            kept_files,
            kept_bytes,
        });
    }
    Ok(out)
}

/// nvcc's host compiler when the machine's `g++` is newer than `limits` accept: the newest
/// accepted `g++-N` on PATH, else the row's host compiler from the archive unpacked under
/// [`HOST_ROOT`]; either way reached through `gcc`/`g++` wrappers in [`HOST_BIN`], which only
/// nvcc's profile puts on a PATH. None when the machine's own compiler is accepted.
fn host_compiler(
    staging: &Path,
    suite: &Suite,
    records: &[debian_archive::Record],
    row: &CudaSystemPackageRow,
    limits: &HostCompilerLimits,
    progress: &mut dyn FnMut(&str),
) -> Result<(Option<String>, Vec<LockedPackage>)> {
    use crate::host::CompilerFamily;
    let Some(max) = limits.max_gcc else {
        return Ok((None, Vec::new()));
    };
    let gccs: Vec<crate::host::HostCompiler> = crate::host::cxx_compilers()
        .into_iter()
        .filter(|c| c.family == CompilerFamily::Gcc)
        .collect();
    let default = gccs.iter().find(|c| c.name == "g++");
    if default.is_none_or(|c| c.major().is_some_and(|m| m <= max)) {
        return Ok((None, Vec::new()));
    }
    let newer = default
        .and_then(|c| c.version.clone())
        .map_or("?".into(), |v| v.to_string());
    if let Some(older) = gccs
        .iter()
        .find(|c| c.major().is_some_and(|m| m <= max) && c.c_compiler().is_some())
    {
        progress(&format!(
            "this machine's g++ is {newer} and nvcc {} accepts gcc up to {max}: nvcc's host compiler is {}",
            row.cuda,
            older.path.display()
        ));
        write_host_wrappers(staging, &older.path.display().to_string(), None)?;
        return Ok((Some(older.path.display().to_string()), Vec::new()));
    }
    if row.host_compiler.is_empty() {
        bail!(
            "this machine's g++ is {newer} and CUDA {}'s nvcc accepts gcc up to {max} (its crt/host_config.h), and no g++-{max} or older is on PATH: install one (apt-get install g++-{max}) and run this again",
            row.cuda
        );
    }
    let suite_name = &suite.name;
    let picked = debian_archive::resolve(records, &row.host_compiler)
        .with_context(|| format!("picking a host compiler from Debian {suite_name}"))?;
    let root = &picked[0].record;
    progress(&format!(
        "this machine's g++ is {newer} and nvcc {} accepts gcc up to {max}: nvcc's host compiler will be Debian {suite_name}'s {} {}",
        row.cuda, root.name, root.version
    ));
    let map = |p: &str| -> Option<PathBuf> {
        (p.starts_with("usr/") && !p.starts_with("usr/share/"))
            .then(|| Path::new(HOST_ROOT).join(p))
    };
    let packages = unpack_all(suite, &picked, &map, staging, progress)?;
    let triple = debian_archive::debian_arch()?.1;
    write_host_wrappers(
        staging,
        &format!("$root/usr/bin/{}", root.name),
        Some(&format!("$root/usr/lib/{triple}")),
    )?;
    Ok((
        Some(format!(
            "Debian {suite_name}'s {} {}",
            root.name, root.version
        )),
        packages,
    ))
}

/// `gcc` and `g++` in [`HOST_BIN`], each running `compiler` (both are the C++ driver, as in
/// Debian's own wrappers: nvcc compiles its host code as C++). `$root` in `compiler` and
/// `libs` is [`HOST_ROOT`] found from the script's own place, so the toolkit can move.
fn write_host_wrappers(staging: &Path, compiler: &str, libs: Option<&str>) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let bin = staging.join(HOST_BIN);
    fs::create_dir_all(&bin)?;
    let libs = libs
        .map(|l| format!("LD_LIBRARY_PATH=\"{l}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}\"\nexport LD_LIBRARY_PATH\n"))
        .unwrap_or_default();
    let script = format!(
        "#!/bin/sh\n# archsmith: nvcc's host compiler (this toolkit's crt/host_config.h refuses the machine's g++).\nroot=\"$(cd \"$(dirname \"$0\")/../root\" 2>/dev/null && pwd)\"\n{libs}exec \"{compiler}\" \"$@\"\n"
    );
    for name in ["gcc", "g++"] {
        let path = bin.join(name);
        fs::write(&path, &script)?;
        fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// Compiles a kernel for [`VERIFY_ARCHS`], links it against the shared runtime, and reads the
/// binary back: exactly those SASS images, or the install is refused. A host compiler newer
/// than the toolkit's ceiling is named with the ceiling.
pub fn verify_build(
    nvcc: &Path,
    scratch: &Path,
    limits: &HostCompilerLimits,
) -> Result<Vec<String>> {
    fs::create_dir_all(scratch)?;
    let src = scratch.join("archsmith_probe.cu");
    fs::write(
        &src,
        "#include <cuda_runtime.h>\n#include <thrust/version.h>\n__global__ void archsmith_probe(float *x) { x[threadIdx.x] *= 2.0f; }\nint main() { return THRUST_VERSION > 0 ? 0 : 1; }\n",
    )?;
    let exe = scratch.join("archsmith_probe");
    let mut cmd = Cmd::new(nvcc)
        .arg(&src)
        .args(["-cudart", "shared", "-o"])
        .arg(&exe);
    for a in VERIFY_ARCHS {
        cmd = cmd.arg(format!("-gencode=arch=compute_{a},code=sm_{a}"));
    }
    cmd.dir(scratch).read().with_context(|| {
        format!(
            "this toolkit could not compile and link a kernel; its crt/host_config.h accepts gcc up to {} and clang up to {} (a newer host compiler needs NVCC_CCBIN=g++-N of an accepted one)",
            limits.max_gcc.map_or("?".into(), |v| v.to_string()),
            limits.max_clang.map_or("?".into(), |v| v.to_string())
        )
    })?;
    let bytes = fs::read(&exe)?;
    let audit = crate::binary::audit_elf(&bytes)
        .map_err(|e| anyhow::anyhow!("reading back {}: {e}", exe.display()))?;
    let found: Vec<String> = audit
        .counted()
        .map(|s| s.counts(crate::binary::fatbin::Kind::Elf))
        .unwrap_or_default()
        .keys()
        .map(|a| format!("sm_{a}"))
        .collect();
    let want: Vec<String> = VERIFY_ARCHS.iter().map(|a| format!("sm_{a}")).collect();
    if found != want {
        bail!(
            "the verification kernel holds SASS {} where {} was asked: this nvcc does not build what it is told",
            found.join(" "),
            want.join(" ")
        );
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debian_paths_map_to_a_cuda_home() {
        let m = |p| map_path(p, "x86_64-linux-gnu").map(|p| p.display().to_string());
        assert_eq!(
            m("usr/lib/nvidia-cuda-toolkit/bin/nvcc").as_deref(),
            Some("bin/nvcc")
        );
        assert_eq!(m("usr/lib/nvidia-cuda-toolkit/bin/nvcc.profile"), None);
        assert_eq!(m("usr/bin/nvcc"), None, "Debian's wrapper script");
        assert_eq!(
            m("usr/lib/nvidia-cuda-toolkit/bin/cicc").as_deref(),
            Some("nvvm/bin/cicc")
        );
        assert_eq!(
            m("usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc").as_deref(),
            Some("nvvm/libdevice/libdevice.10.bc")
        );
        assert_eq!(
            m("usr/include/crt/host_config.h").as_deref(),
            Some("include/crt/host_config.h")
        );
        assert_eq!(
            m("usr/lib/x86_64-linux-gnu/libcudart.so.12.4.127").as_deref(),
            Some("lib64/libcudart.so.12.4.127")
        );
        assert_eq!(m("usr/lib/x86_64-linux-gnu/libcublasLt_static.a"), None);
        assert_eq!(
            m("usr/lib/x86_64-linux-gnu/stubs/libcuda.so").as_deref(),
            Some("lib64/stubs/libcuda.so")
        );
        assert_eq!(m("usr/lib/aarch64-linux-gnu/libcudart.so.12"), None);
        assert_eq!(m("usr/share/doc/nvidia-cuda-dev/copyright"), None);
    }

    #[test]
    fn every_required_file_has_a_source_in_the_layout() {
        for f in REQUIRED {
            assert!(
                LAYOUT.iter().any(|(_, to)| {
                    let to = to.trim_end_matches('*');
                    f.starts_with(to) || *f == to.trim_end_matches('/')
                }) || f.ends_with("libcudart.so"),
                "{f}"
            );
        }
    }

    #[test]
    fn incomplete_directories_are_not_toolchains() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("cuda-12.4");
        fs::create_dir_all(home.join("bin")).unwrap();
        assert!(load(&home).unwrap().is_none(), "no stamp");
        fs::write(home.join(crate::cache::COMPLETE_STAMP), "x").unwrap();
        assert!(load(&home).unwrap().is_none(), "stamp but no lock file");
        fs::write(home.join(LOCK_FILE), "{}").unwrap();
        assert!(load(&home).unwrap().is_none(), "unreadable lock file");
    }
}
