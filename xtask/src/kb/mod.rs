//! The compatibility knowledge base: every fact that changes with NVIDIA and PyTorch releases.
//!
//! The facts live in one data file, `xtask/data/knowledge-base.toml`, each row with its source. It
//! is compiled into the binary so archsmith answers offline; `cargo xtask kb check` re-verifies the
//! rows that can be checked against real NVIDIA wheels. Code asks questions through the methods here
//! and never carries its own copy of a version table.

use crate::cuda_arch::{Arch, Cc, Variant};
use crate::version::Version;
use serde::Deserialize;
use std::sync::OnceLock;

/// The `segment` values a GPU row may have.
pub const GPU_SEGMENTS: [&str; 4] = ["data-centre", "workstation", "consumer", "jetson"];

pub const KB_PATH: &str = "xtask/data/knowledge-base.toml";
const KB_TEXT: &str = include_str!("../../data/knowledge-base.toml");

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeBase {
    pub releases: Releases,
    #[serde(rename = "target")]
    pub targets: Vec<TargetRow>,
    #[serde(rename = "gpu")]
    pub gpus: Vec<GpuRow>,
    #[serde(rename = "cuda")]
    pub cuda: Vec<CudaRow>,
    #[serde(rename = "cuda_major")]
    pub cuda_majors: Vec<CudaMajorRow>,
    #[serde(rename = "torch")]
    pub torch: Vec<TorchRow>,
    #[serde(rename = "torch_arch_list")]
    pub torch_arch_lists: Vec<TorchArchListRow>,
    #[serde(rename = "torch_cmake_arch_list")]
    pub torch_cmake_arch_lists: Vec<TorchCmakeArchListRow>,
    #[serde(rename = "torch_variant")]
    pub torch_variants: Vec<TorchVariantRow>,
    #[serde(rename = "torch_switch")]
    pub torch_switches: Vec<TorchSwitchRow>,
    #[serde(rename = "torch_submodule")]
    pub torch_submodules: Vec<TorchSubmoduleRow>,
    #[serde(rename = "torch_env_pin", default)]
    pub torch_env_pins: Vec<TorchEnvPinRow>,
    #[serde(rename = "nvcc_option")]
    pub nvcc_options: Vec<NvccOptionRow>,
    #[serde(rename = "kernel_origin", default)]
    pub kernel_origins: Vec<KernelOriginRow>,
    #[serde(rename = "ambiguous_gpu_name", default)]
    pub ambiguous_gpu_names: Vec<AmbiguousGpuNameRow>,
    #[serde(rename = "cuda_system_package", default)]
    pub cuda_system_packages: Vec<CudaSystemPackageRow>,
    #[serde(rename = "gpu_chip", default)]
    pub gpu_chips: Vec<GpuChipRow>,
}

/// A GPU chip (`AD102`) and the compute capability of every product built on it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuChipRow {
    pub chip: String,
    pub cc: String,
    pub architecture: String,
    pub source: String,
}

/// A distribution's packaged CUDA toolkit.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaSystemPackageRow {
    pub distribution: String,
    pub package: String,
    pub cuda: Version,
    /// The command, with what it needs enabled.
    pub install: String,
    pub source: String,
}

impl KnowledgeBase {
    /// How to install a CUDA `major`.x toolkit from the distributions the knowledge base knows:
    /// `Debian 13 (trixie): apt-get install … (CUDA 12.4)`, one per package.
    pub fn cuda_packages_for(&self, major: u32) -> Vec<String> {
        self.cuda_system_packages
            .iter()
            .filter(|p| p.cuda.major() == major)
            .map(|p| format!("{}: {} (CUDA {})", p.distribution, p.install, p.cuda))
            .collect()
    }
}

/// A name people give to more than one GPU (`RTX 6000`: the Turing Quadro or the Ada card): a
/// lookup lists the candidates and asks, instead of picking one.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmbiguousGpuNameRow {
    pub name: String,
    /// `[[gpu]]` names.
    pub candidates: Vec<String>,
    pub source: String,
}

/// Where the kernels of a fatbin container come from, recognised by their names, and what fails
/// on a GPU for which those containers carry no image.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelOriginRow {
    /// `MAGMA`.
    pub name: String,
    /// Matched against the mangled kernel names of a container; one match claims the container.
    pub pattern: CmakeRegex,
    /// The operations that launch these kernels.
    pub operations: String,
    /// What a user can do meanwhile.
    pub workaround: String,
    pub source: String,
}

/// A library of an official wheel that carries an arch in only some of its containers, read
/// from the wheel with the binary reader.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PartialSassRow {
    /// `libtorch_cuda_linalg.so`.
    pub library: String,
    /// The SASS arch (`7.5`) present in only `with_image` of `containers` containers.
    pub arch: String,
    pub containers: usize,
    pub with_image: usize,
    /// The [`KernelOriginRow`] the other containers' kernels belong to, where recognised.
    pub origin: Option<String>,
}

/// A feature switch a from-source torch build sets explicitly, for a range of torch releases.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchSwitchRow {
    pub name: String,
    /// What build-torch sets unless the user overrides it.
    pub value: String,
    pub from: Version,
    pub to: Version,
    pub why: String,
    pub source: String,
    /// A GPU-only switch (`cmake_dependent_option(... "USE_CUDA" OFF)` or `"USE_CUDA OR
    /// USE_ROCM"`): a CPU-only build (`USE_CUDA=0`) leaves it out of the plan.
    #[serde(default)]
    pub cuda_only: bool,
}

/// A `third_party/` directory a torch configure needs while some switches are on.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchSubmoduleRow {
    pub path: String,
    /// Switches that must all be on for the directory to be needed (empty: always).
    pub needs: Vec<String>,
    /// The `USE_SYSTEM_*` switch that takes the library from the system instead.
    pub system: Option<String>,
    /// Whether `USE_SYSTEM_LIBS=1` turns this library to the system's (it sets only some).
    #[serde(default)]
    pub system_libs: bool,
    /// The Debian package that provides the library (a distribution build's alternative).
    pub debian: Option<String>,
    pub from: Version,
    pub to: Version,
    pub source: String,
}

/// A package an env of an older torch must hold below some release, because that torch was built
/// or written against the older one (torch 2.0's cpp_extension imports `pkg_resources`, which
/// setuptools 82 removed; torch before 2.3 was compiled against numpy 1.x's C API).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchEnvPinRow {
    /// A PEP 508 requirement, as pip takes it (`setuptools<82`).
    pub requirement: String,
    /// What in the torch wheel makes it so; `kb check --torch` reads it back from each wheel.
    pub evidence: PinEvidence,
    /// What a user sees without the pin.
    pub symptom: String,
    pub from: Version,
    pub to: Version,
    pub source: String,
}

/// The fact of a torch wheel a [`TorchEnvPinRow`] rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PinEvidence {
    /// `torch/utils/cpp_extension.py` imports `pkg_resources`.
    CppExtensionImportsPkgResources,
    /// `libtorch_python.so` imports numpy only as `numpy.core` (numpy 1.x's C API headers; numpy
    /// 2's also try `numpy._core`).
    NumpyOneCApi,
}

/// An nvcc option the torch build plan passes, from the first CUDA release that has it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvccOptionRow {
    /// The words added to `TORCH_NVCC_FLAGS`.
    pub flags: Vec<String>,
    /// The program whose `--help` lists [`Self::option`] (`nvcc`, `fatbinary`).
    pub tool: String,
    pub option: String,
    pub first_cuda: Version,
    pub why: String,
    pub source: String,
}

/// Whether `torch` (any precision) falls in the inclusive major.minor range `from..=to`.
pub fn torch_in_range(torch: &Version, from: &Version, to: &Version) -> bool {
    let mm = torch.major_minor();
    *from <= mm && mm <= *to
}

/// One official torch wheel variant (a `cuXYZ` build) for a range of torch releases.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchVariantRow {
    /// Inclusive major.minor range of torch releases.
    pub from: Version,
    pub to: Version,
    /// The CUDA release of the variant (`12.8` for cu128).
    pub cuda: Version,
    /// SASS archs the variant's kernels carry.
    pub sass: Vec<String>,
    /// PTX archs (often none in practice).
    #[serde(default)]
    pub ptx: Vec<String>,
    pub source: String,
}

impl TorchVariantRow {
    /// `cu128`.
    pub fn tag(&self) -> String {
        format!("cu{}{}", self.cuda.major(), self.cuda.minor())
    }

    /// The CUDA release of a variant tag: `cu121` → 12.1, `cu128` → 12.8 (the last digit is the
    /// minor); None for anything that is not one.
    pub fn cuda_of_tag(tag: &str) -> Option<Version> {
        let digits = tag.strip_prefix("cu")?;
        if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let (major, minor) = digits.split_at(digits.len() - 1);
        format!("{major}.{minor}").parse().ok()
    }

    pub fn covers(&self, torch: &Version) -> bool {
        let mm = torch.major_minor();
        self.from <= mm && mm <= self.to
    }
}

/// The newest releases archsmith knows; they apply when the user names none.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Releases {
    pub newest_torch: Version,
    pub newest_cuda: Version,
    /// Where each official variant's index lives, `{tag}` standing for `cu128`.
    pub torch_variant_index: String,
    pub source: String,
}

/// One nvcc compile target (`sm_XY`, `sm_XYa` or `sm_XYf`) and the CUDA releases whose nvcc accept it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetRow {
    /// `9.0a` form.
    pub arch: String,
    /// The architecture family name NVIDIA uses (`Hopper`).
    pub family: String,
    /// First CUDA release (major.minor) whose nvcc compiles this target.
    pub first_cuda: Version,
    /// Last CUDA release that compiles it; absent while current.
    pub last_cuda: Option<Version>,
    pub source: String,
}

/// One GPU model, its compute capability and the spellings users type.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuRow {
    pub name: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    /// The compute capability it reports with the newest CUDA.
    pub cc: String,
    /// Where older CUDA releases gave it another compute capability (Jetson Thor: sm_101 through
    /// CUDA 12.9, sm_110 from 13.0), oldest first.
    #[serde(default)]
    pub earlier_cc: Vec<EarlierCc>,
    /// Its own minimum driver where that is newer than its architecture's (a GPU launched on a later
    /// driver branch than the first of its CC); otherwise the floor comes from the CUDA release
    /// that first compiled for its CC ([`KnowledgeBase::gpu_driver_floor`]).
    pub min_driver: Option<Version>,
    /// `data-centre`, `workstation`, `consumer` or `jetson`.
    pub segment: String,
    pub source: String,
}

/// A compute capability a GPU reported up to a CUDA release.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EarlierCc {
    pub cc: String,
    /// The last CUDA release (major.minor) that gives the GPU this compute capability.
    pub through_cuda: Version,
    pub source: String,
}

impl GpuRow {
    /// The compute capability the GPU reports to software built with CUDA `cuda`.
    pub fn cc_with_cuda(&self, cuda: &Version) -> Result<Cc, crate::cuda_arch::ArchParseError> {
        let mm = cuda.major_minor();
        let earlier = self
            .earlier_cc
            .iter()
            .find(|e| mm <= e.through_cuda.major_minor());
        earlier.map_or(&self.cc, |e| &e.cc).parse()
    }
}

/// The oldest driver a GPU runs with, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DriverFloor {
    pub driver: Version,
    pub why: String,
}

/// One CUDA toolkit release (major.minor): its driver floor and host-compiler ceiling.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaRow {
    pub version: Version,
    /// Minimum Linux x86_64 driver of the GA release (the release notes' table).
    pub min_driver_linux: Option<Version>,
    /// Where the release notes name only a driver branch (`R615`), its number; no exact floor then.
    pub min_driver_branch: Option<u32>,
    pub driver_source: String,
    /// Newest GCC / Clang major that `crt/host_config.h` accepts without `-allow-unsupported-compiler`.
    pub max_gcc: Option<u32>,
    pub max_clang: Option<u32>,
    pub host_compiler_source: String,
    /// Patch releases that raised a limit (12.2.128 accepts clang 16, 12.2.91 does not), oldest first.
    #[serde(default, rename = "update")]
    pub updates: Vec<HostCompilerUpdate>,
}

/// A patch release of a CUDA minor whose `host_config.h` accepts newer host compilers than the GA.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCompilerUpdate {
    /// First patch release (`12.2.128`) with the new limits.
    pub from: Version,
    pub max_gcc: Option<u32>,
    pub max_clang: Option<u32>,
    pub source: String,
}

/// Newest GCC and Clang majors one exact CUDA release accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostCompilerLimits {
    pub max_gcc: Option<u32>,
    pub max_clang: Option<u32>,
}

impl CudaRow {
    /// The limits of this exact release: the GA values, raised by every update at or before it.
    /// A bare `12.2` means the GA release.
    pub fn host_compiler_limits(&self, release: &Version) -> HostCompilerLimits {
        let mut limits = HostCompilerLimits {
            max_gcc: self.max_gcc,
            max_clang: self.max_clang,
        };
        for u in self.updates.iter().filter(|u| u.from <= *release) {
            limits.max_gcc = u.max_gcc.or(limits.max_gcc);
            limits.max_clang = u.max_clang.or(limits.max_clang);
        }
        limits
    }
}

/// Per CUDA major: the minor-version compatibility floor (any driver at or above it runs the whole major).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaMajorRow {
    pub major: u32,
    pub minor_compat_min_driver: Version,
    pub source: String,
    /// NVIDIA's packaging of this major on PyPI: the wheel that carries its compiler.
    pub compiler_wheel: String,
    /// Which tool that wheel ships: `nvcc` (a whole toolkit can be assembled from PyPI) or only
    /// `ptxas` (CUDA 11/12: nvcc must come from a system toolkit).
    pub compiler_tool: CompilerTool,
    /// The wheel holding `crt/host_config.h` (the host-compiler ceilings).
    pub crt_wheel: String,
    /// Where inside those wheels the toolkit tree sits (`nvidia/cu13`).
    pub wheel_prefix: String,
    /// The first release whose `cuda-toolkit` meta-package has a `cuobjdump` extra.
    #[serde(default)]
    pub cuobjdump_from: Option<Version>,
    pub packaging_source: String,
}

/// The compiler a CUDA major's PyPI wheel ships.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CompilerTool {
    Nvcc,
    Ptxas,
}

impl CompilerTool {
    pub fn name(self) -> &'static str {
        match self {
            CompilerTool::Nvcc => "nvcc",
            CompilerTool::Ptxas => "ptxas",
        }
    }
}

/// One torch release as published on PyPI.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchRow {
    pub version: Version,
    /// torchvision releases built for it (their `Requires-Dist: torch==` pin or compatible range).
    pub torchvision: Vec<Version>,
    #[serde(default)]
    pub torchaudio: Vec<Version>,
    /// Lowest and highest CPython minor with a Linux x86_64 wheel (`3.11`, `3.15`).
    pub python_min: Version,
    pub python_max: Version,
    /// `-std=` that torch.utils.cpp_extension passes for extensions (`c++17`, `c++20`).
    pub cxx_std: String,
    /// `torch.version.cuda` of the default PyPI wheel; absent for CPU-only defaults.
    pub pypi_cuda: Option<Version>,
    /// CUDA variants published for this release (cuXYZ indexes), as CUDA versions.
    #[serde(default)]
    pub cuda_variants: Vec<Version>,
    /// SASS archs every kernel of the default PyPI wheel's libtorch_cuda.so carries.
    pub wheel_sass: Vec<String>,
    /// PTX archs found in that library (often none, whatever the build script asked for).
    #[serde(default)]
    pub wheel_ptx: Vec<String>,
    /// Extra per-kernel images beyond `wheel_sass` (`sm_90a` for a few kernels, …).
    #[serde(default)]
    pub wheel_extra_sass: Vec<String>,
    /// Minimum CUDA needed to build this torch from source.
    pub min_cuda_source_build: Option<Version>,
    /// Libraries of the default PyPI wheel that carry an arch of `wheel_sass` in only some
    /// containers: a GPU that runs through that arch runs this wheel only partly.
    #[serde(default)]
    pub partial_sass: Vec<PartialSassRow>,
    pub source: String,
}

/// What `torch.utils.cpp_extension._get_cuda_arch_flags` accepts, for a range of torch releases.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchArchListRow {
    /// Inclusive major.minor range of torch releases this row describes.
    pub from: Version,
    pub to: Version,
    /// `named_arches` in torch's order (substring replacement runs in this order).
    pub named: Vec<(String, String)>,
    /// `supported_arches`; each is also valid with `+PTX`.
    pub supported: Vec<String>,
    /// Whether the literal `native` means "detect visible GPUs" (2.9+).
    pub native_keyword: bool,
    pub source: String,
}

/// What torch's CMake `select_compute_arch.cmake` accepts, for a range of torch releases. The
/// three patterns are the file's own regular expressions (CMake's string escapes undone); they
/// differ between releases (one-digit majors only before 2.6, `a` from 2.5, `f` from 2.9), and
/// `kb check --torch` reads them back from each wheel.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchCmakeArchListRow {
    pub from: Version,
    pub to: Version,
    /// `if(arch_name MATCHES "…")`: what a numeric element must look like.
    pub number: CmakeRegex,
    /// `string(REGEX MATCHALL "…" cuda_arch_bin …)`: how SASS numbers are cut from the list.
    pub bin_matchall: CmakeRegex,
    /// The same for PTX numbers.
    pub ptx_matchall: CmakeRegex,
    pub named: Vec<CmakeNamedArch>,
    pub source: String,
}

impl TorchCmakeArchListRow {
    /// Whether `X.Yf` is a number this release's CMake accepts.
    pub fn accepts_family_specific(&self) -> bool {
        self.number.regex.is_match("10.0f")
    }
}

/// A CMake regular expression, kept as written and compiled once when the knowledge base loads.
/// The constructs torch uses (`^ $ [..] ( ) ? + \\. \\(`) mean the same in the `regex` crate.
#[derive(Debug, Clone)]
pub struct CmakeRegex {
    pub pattern: String,
    pub regex: regex::Regex,
}

impl PartialEq for CmakeRegex {
    fn eq(&self, other: &Self) -> bool {
        self.pattern == other.pattern
    }
}

impl std::str::FromStr for CmakeRegex {
    type Err = regex::Error;
    fn from_str(pattern: &str) -> Result<Self, Self::Err> {
        Ok(CmakeRegex {
            pattern: pattern.to_string(),
            regex: regex::Regex::new(pattern)?,
        })
    }
}

impl<'de> Deserialize<'de> for CmakeRegex {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pattern = String::deserialize(d)?;
        pattern.parse().map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CmakeNamedArch {
    pub name: String,
    /// SASS archs the name gives.
    pub bin: Vec<String>,
    /// PTX archs it adds, only when written with `+PTX`.
    pub ptx: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("{KB_PATH}: {0}")]
pub struct KbError(pub String);

/// The knowledge base compiled into this binary. Validated by the `kb_loads_and_is_consistent` test,
/// so a malformed data file fails `cargo test`, not a user's command.
pub fn kb() -> &'static KnowledgeBase {
    static KB: OnceLock<KnowledgeBase> = OnceLock::new();
    KB.get_or_init(|| match KnowledgeBase::parse(KB_TEXT) {
        Ok(kb) => kb,
        // The file is part of the binary and checked by tests; reaching this is a build defect.
        Err(e) => panic!("the embedded knowledge base is invalid: {e}"),
    })
}

impl KnowledgeBase {
    pub fn parse(text: &str) -> Result<KnowledgeBase, KbError> {
        let kb: KnowledgeBase = toml::from_str(text).map_err(|e| KbError(e.to_string()))?;
        kb.validate()?;
        Ok(kb)
    }

    fn validate(&self) -> Result<(), KbError> {
        let bad = |what: String| Err(KbError(what));
        let empty = |s: &str| s.trim().is_empty();
        let mut seen_targets = Vec::new();
        for t in &self.targets {
            let Ok(arch) = t.arch.parse::<Arch>() else {
                return bad(format!("target row `{}` is not an arch", t.arch));
            };
            if seen_targets.contains(&arch) {
                return bad(format!("target `{}` has two rows", t.arch));
            }
            seen_targets.push(arch);
            if empty(&t.source) || empty(&t.family) {
                return bad(format!(
                    "target row `{}` has no source or no family",
                    t.arch
                ));
            }
            if t.last_cuda
                .as_ref()
                .is_some_and(|last| *last < t.first_cuda)
            {
                return bad(format!(
                    "target `{}`: last_cuda is older than first_cuda",
                    t.arch
                ));
            }
        }
        for g in &self.gpus {
            if g.cc.parse::<Cc>().is_err() {
                return bad(format!("gpu `{}` has cc `{}`, expected X.Y", g.name, g.cc));
            }
            if empty(&g.source) {
                return bad(format!("gpu `{}` has no source", g.name));
            }
            if !GPU_SEGMENTS.contains(&g.segment.as_str()) {
                return bad(format!(
                    "gpu `{}` has segment `{}`, expected one of {GPU_SEGMENTS:?}",
                    g.name, g.segment
                ));
            }
            if let Some(n) = std::iter::once(&g.name)
                .chain(&g.aliases)
                .find(|n| normalize_gpu_name(n).is_empty())
            {
                return bad(format!(
                    "gpu `{}`: name `{n}` normalizes to nothing",
                    g.name
                ));
            }
        }
        for c in &self.cuda {
            if empty(&c.driver_source) || empty(&c.host_compiler_source) {
                return bad(format!("cuda {} has an empty source", c.version));
            }
            for u in &c.updates {
                if u.from.major_minor() != c.version.major_minor() || u.from.parts().len() < 3 {
                    return bad(format!(
                        "cuda {}: update `{}` is not a patch release of {}",
                        c.version, u.from, c.version
                    ));
                }
                if empty(&u.source) {
                    return bad(format!(
                        "cuda {}: update {} has no source",
                        c.version, u.from
                    ));
                }
            }
            if c.updates.windows(2).any(|w| w[0].from >= w[1].from) {
                return bad(format!(
                    "cuda {}: updates are not in release order",
                    c.version
                ));
            }
        }
        for c in &self.cuda_majors {
            if empty(&c.source) {
                return bad(format!("cuda_major {} has no source", c.major));
            }
        }
        for r in &self.torch_arch_lists {
            for s in &r.supported {
                if s.parse::<Arch>().is_err() {
                    return bad(format!(
                        "torch_arch_list {}–{}: `{s}` is not an arch",
                        r.from, r.to
                    ));
                }
            }
        }
        for r in &self.torch_switches {
            if empty(&r.source) || empty(&r.why) || r.from > r.to {
                return bad(format!(
                    "torch_switch {} has no source/why or an empty range",
                    r.name
                ));
            }
        }
        for r in &self.torch_submodules {
            if empty(&r.source) || r.from > r.to || !r.path.starts_with("third_party/") {
                return bad(format!(
                    "torch_submodule {}: no source, empty range or not under third_party/",
                    r.path
                ));
            }
            if let Some(n) = r
                .needs
                .iter()
                .find(|n| !self.torch_switches.iter().any(|s| s.name == **n))
            {
                return bad(format!(
                    "torch_submodule {} needs `{n}`, which no torch_switch row names",
                    r.path
                ));
            }
        }
        for r in &self.torch_env_pins {
            if empty(&r.source) || empty(&r.symptom) || r.from > r.to {
                return bad(format!(
                    "torch_env_pin {}: no source/symptom or an empty range",
                    r.requirement
                ));
            }
        }
        for r in &self.nvcc_options {
            if empty(&r.source) || r.flags.is_empty() {
                return bad(format!(
                    "nvcc_option {} has no source or no flags",
                    r.option
                ));
            }
        }
        for r in &self.torch {
            for s in r
                .wheel_sass
                .iter()
                .chain(&r.wheel_ptx)
                .chain(&r.wheel_extra_sass)
            {
                if s.parse::<Arch>().is_err() {
                    return bad(format!("torch {}: `{s}` is not an arch", r.version));
                }
            }
            if empty(&r.source) {
                return bad(format!("torch {} has no source", r.version));
            }
        }
        Ok(())
    }

    /// The switches a from-source build of `torch` sets, in knowledge-base order.
    pub fn torch_switches(&self, torch: &Version) -> Vec<&TorchSwitchRow> {
        self.torch_switches
            .iter()
            .filter(|r| torch_in_range(torch, &r.from, &r.to))
            .collect()
    }

    /// The `third_party/` directories a configure of `torch` may need.
    pub fn torch_submodules(&self, torch: &Version) -> Vec<&TorchSubmoduleRow> {
        self.torch_submodules
            .iter()
            .filter(|r| torch_in_range(torch, &r.from, &r.to))
            .collect()
    }

    /// The pins an env of `torch` needs beside it (`setuptools<82`, `numpy<2`).
    pub fn torch_env_pins(&self, torch: &Version) -> Vec<&TorchEnvPinRow> {
        self.torch_env_pins
            .iter()
            .filter(|r| torch_in_range(torch, &r.from, &r.to))
            .collect()
    }

    /// The nvcc options CUDA `cuda` has, for `TORCH_NVCC_FLAGS`.
    pub fn nvcc_options(&self, cuda: &Version) -> Vec<&NvccOptionRow> {
        self.nvcc_options
            .iter()
            .filter(|r| r.first_cuda.major_minor() <= cuda.major_minor())
            .collect()
    }

    /// The target row for `arch` (exact variant), if nvcc ever knew it.
    pub fn target(&self, arch: Arch) -> Option<&TargetRow> {
        self.targets
            .iter()
            .find(|t| t.arch.parse::<Arch>().ok() == Some(arch))
    }

    /// Whether the nvcc of CUDA `cuda` (any precision) compiles `arch`.
    pub fn cuda_supports(&self, cuda: &Version, arch: Arch) -> bool {
        let mm = cuda.major_minor();
        self.target(arch).is_some_and(|t| {
            t.first_cuda <= mm
                && t.last_cuda
                    .as_ref()
                    .is_none_or(|last| mm <= last.major_minor())
        })
    }

    /// Every target the nvcc of `cuda` compiles, in the table's order.
    pub fn cuda_targets(&self, cuda: &Version) -> Vec<Arch> {
        self.targets
            .iter()
            .filter_map(|t| t.arch.parse::<Arch>().ok())
            .filter(|a| self.cuda_supports(cuda, *a))
            .collect()
    }

    pub fn cuda_row(&self, cuda: &Version) -> Option<&CudaRow> {
        let mm = cuda.major_minor();
        self.cuda.iter().find(|c| c.version.major_minor() == mm)
    }

    /// The oldest driver that can JIT PTX written by CUDA `cuda`: its release row's floor, else
    /// (no driver row recorded for that release) the highest floor known for an older release of
    /// the same major, else the major's minor-compatibility floor. A lower bound in the last two
    /// cases: a driver below it certainly cannot load the PTX.
    /// The oldest driver that runs a build made with CUDA `cuda`, and what sets it: the major's
    /// minor-version-compatibility floor (11.x and newer), else the release's own minimum (10.x
    /// and older had no minor-version compatibility: 10.2 needs 440.33).
    pub fn driver_floor(&self, cuda: &Version) -> Option<(Version, String)> {
        if let Some(m) = self.cuda_major(cuda.major()) {
            return Some((
                m.minor_compat_min_driver.clone(),
                format!("the floor for CUDA {}.x", cuda.major()),
            ));
        }
        let own = self.cuda_row(cuda)?.min_driver_linux.clone()?;
        Some((own, format!("the minimum of CUDA {}", cuda.major_minor())))
    }

    pub fn ptx_min_driver(&self, cuda: &Version) -> Option<Version> {
        if let Some(d) = self.cuda_row(cuda).and_then(|r| r.min_driver_linux.clone()) {
            return Some(d);
        }
        let mm = cuda.major_minor();
        self.cuda
            .iter()
            .filter(|c| c.version.major() == cuda.major() && c.version.major_minor() <= mm)
            .filter_map(|c| c.min_driver_linux.clone())
            .max()
            .or_else(|| {
                self.cuda_major(cuda.major())
                    .map(|m| m.minor_compat_min_driver.clone())
            })
    }

    /// The first CUDA major whose PyPI wheels carry nvcc itself, so that a toolkit can be
    /// assembled from PyPI (13 today).
    pub fn first_pypi_nvcc_major(&self) -> Option<u32> {
        self.cuda_majors
            .iter()
            .filter(|m| m.compiler_tool == CompilerTool::Nvcc)
            .map(|m| m.major)
            .min()
    }

    pub fn cuda_major(&self, major: u32) -> Option<&CudaMajorRow> {
        self.cuda_majors.iter().find(|c| c.major == major)
    }

    pub fn torch_row(&self, torch: &Version) -> Option<&TorchRow> {
        // Exact release first, then the newest patch of the same major.minor.
        self.torch.iter().find(|t| t.version == *torch).or_else(|| {
            let mm = torch.major_minor();
            self.torch
                .iter()
                .filter(|t| t.version.major_minor() == mm)
                .max_by(|a, b| a.version.cmp(&b.version))
        })
    }

    pub fn torch_arch_list(&self, torch: &Version) -> Option<&TorchArchListRow> {
        let mm = torch.major_minor();
        self.torch_arch_lists
            .iter()
            .find(|r| r.from <= mm && mm <= r.to)
    }

    pub fn torch_cmake_arch_list(&self, torch: &Version) -> Option<&TorchCmakeArchListRow> {
        let mm = torch.major_minor();
        self.torch_cmake_arch_lists
            .iter()
            .find(|r| r.from <= mm && mm <= r.to)
    }

    /// Torch release ranges (`2.2–2.15`) whose cpp_extension accepts `arch`, for error messages.
    pub fn torch_ranges_accepting(&self, arch: Arch) -> Vec<(Version, Version)> {
        let text = arch.to_string();
        let mut out: Vec<(Version, Version)> = Vec::new();
        for r in &self.torch_arch_lists {
            if r.supported.contains(&text) {
                match out.last_mut() {
                    Some(last) if next_minor(&last.1) == r.from => last.1 = r.to.clone(),
                    _ => out.push((r.from.clone(), r.to.clone())),
                }
            }
        }
        out
    }

    /// Finds a GPU by the name a user types: case, spaces, dashes and the vendor words
    /// (`NVIDIA`, `GeForce`, `Tesla`, `Quadro`) do not matter.
    /// Resolves a `--gpu` argument: a known GPU name, or a compute capability such as `8.9`.
    pub fn resolve_gpu(&self, query: &str) -> anyhow::Result<(String, Cc)> {
        if let Ok(cc) = query.parse::<Cc>() {
            return Ok((format!("CC {cc}"), cc));
        }
        // Compared lightly (case, spaces, dashes, "NVIDIA"): "Quadro RTX 6000" names one GPU
        // even though the full normalization would strip "Quadro".
        let q = light_gpu_name(query);
        if let Some(a) = self
            .ambiguous_gpu_names
            .iter()
            .find(|a| !q.is_empty() && light_gpu_name(&a.name) == q)
        {
            let listed: Vec<String> = a
                .candidates
                .iter()
                .filter_map(|c| self.gpu(c))
                .map(|g| format!("\"{}\" (CC {})", g.name, g.cc))
                .collect();
            anyhow::bail!(
                "`{}` names more than one GPU: {}; give the full name, or the compute capability (--gpu 8.9)",
                crate::kb::user_input::echo(query),
                listed.join(", ")
            );
        }
        if let Some(g) = self.gpu(query) {
            return Ok((g.name.clone(), g.cc.parse()?));
        }
        // A product the rows do not name, found in this machine's PCI ID Repository by its chip.
        match pci_ids::by_name(self, pci_ids::system_devices(), query) {
            Some(found) => Ok(found),
            None => {
                let q = normalize_gpu_name(query);
                let mut close: Vec<&str> = self
                    .gpus
                    .iter()
                    .filter(|g| {
                        let n = normalize_gpu_name(&g.name);
                        !q.is_empty() && (n.contains(&q) || q.contains(&n))
                    })
                    .map(|g| g.name.as_str())
                    .collect();
                close.truncate(6);
                let hint = if close.is_empty() {
                    String::new()
                } else {
                    format!(" Did you mean: {}?", close.join(", "))
                };
                let query = crate::kb::user_input::echo(query);
                anyhow::bail!("unknown GPU `{query}`.{hint} Give one of the {} GPUs `archs --list-gpus` lists (e.g. \"RTX 4090\", \"H100\", \"Jetson Orin\") or its compute capability, e.g. --gpu 8.9", self.gpus.len())
            }
        }
    }

    /// The command that installs torch `torch` (and its torchvision) built with CUDA `variant`:
    /// plain PyPI where that is the release's default variant there, else the variant's index.
    pub fn install_command(&self, torch: &Version, variant: &TorchVariantRow) -> String {
        let row = self.torch_row(torch).filter(|r| r.version == *torch);
        let vision = row
            .and_then(|r| r.torchvision.iter().max())
            .map(|v| format!(" torchvision=={v}"))
            .unwrap_or_default();
        let on_pypi = row.is_some_and(|r| {
            r.pypi_cuda
                .as_ref()
                .is_some_and(|c| c.major_minor() == variant.cuda.major_minor())
        });
        let index = if on_pypi {
            String::new()
        } else {
            format!(
                " --index-url {}",
                self.releases
                    .torch_variant_index
                    .replace("{tag}", &variant.tag())
            )
        };
        format!("pip install torch=={torch}{vision}{index}")
    }

    /// The origin row whose pattern one of `kernels` (mangled names) matches.
    pub fn kernel_origin<'k>(
        &self,
        kernels: impl IntoIterator<Item = &'k str>,
    ) -> Option<&KernelOriginRow> {
        let kernels: Vec<&str> = kernels.into_iter().collect();
        self.kernel_origins
            .iter()
            .find(|o| kernels.iter().any(|k| o.pattern.regex.is_match(k)))
    }

    /// The oldest driver that runs anything on GPU `name` (CC `cc`): the GPU's own `min_driver`,
    /// else the driver of the first CUDA release whose nvcc compiled for its CC, since an older
    /// driver predates the architecture (an RTX 5090 needs the 570 branch whatever the wheel's
    /// CUDA). None where that release is older than the driver table.
    pub fn gpu_driver_floor(&self, name: &str, cc: Cc) -> Option<DriverFloor> {
        if let Some(d) = self.gpu(name).and_then(|g| g.min_driver.clone()) {
            return Some(DriverFloor {
                why: format!("the first driver for the {name}"),
                driver: d,
            });
        }
        let plain = Arch::plain(cc.major, cc.minor);
        let first = &self.target(plain)?.first_cuda;
        let driver = self.cuda_row(first)?.min_driver_linux.clone()?;
        Some(DriverFloor {
            driver,
            why: format!(
                "the driver of CUDA {first}, the first release for {} (CC {cc})",
                plain.sm()
            ),
        })
    }

    /// The compute capability GPU `name` (resolved as [`Self::resolve_gpu`], `cc` its answer)
    /// reports with CUDA `cuda`; `cc` itself for GPUs whose CC never changed.
    pub fn gpu_cc_with_cuda(&self, name: &str, cc: Cc, cuda: &Version) -> Cc {
        self.gpu(name)
            .filter(|g| !g.earlier_cc.is_empty())
            .and_then(|g| g.cc_with_cuda(cuda).ok())
            .unwrap_or(cc)
    }

    pub fn gpu(&self, query: &str) -> Option<&GpuRow> {
        let q = normalize_gpu_name(query);
        if q.is_empty() {
            return None;
        }
        self.gpus.iter().find(|g| {
            std::iter::once(&g.name)
                .chain(&g.aliases)
                .any(|n| normalize_gpu_name(n) == q)
        })
    }

    /// Arch family name for a compute capability (`Hopper` for 9.0).
    pub fn family(&self, cc: Cc) -> Option<&str> {
        self.target(Arch::new(cc.major, cc.minor, Variant::Plain))
            .map(|t| t.family.as_str())
    }
}

fn next_minor(v: &Version) -> Version {
    Version::new(&[v.major(), v.minor() + 1])
}

/// A GPU name with case, spaces, dashes and a leading "NVIDIA" dropped: `NVIDIA RTX-6000` →
/// `rtx6000`. Keeps the words [`normalize_gpu_name`] strips, for names that differ only by them.
pub fn light_gpu_name(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    let lower = lower.strip_prefix("nvidia").unwrap_or(&lower);
    lower
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-' && *c != '_')
        .collect()
}

/// `NVIDIA GeForce RTX-4090` → `rtx4090`. Public so tests and `doctor` agree on one spelling rule.
///
/// Lowercases and splits on whitespace, `-`, `_` and parentheses, then drops the words that never
/// tell two GPUs apart: vendor and product-line words (`NVIDIA`, `GeForce`, `Tesla`, `Quadro`, `GPU`,
/// `Laptop`, Jetson's `nvgpu`), memory sizes (`80GB`, `144G`) and form factors (`SXM4`, `PCIe`,
/// `HBM3e`), so `nvidia-smi`'s `NVIDIA A100-SXM4-80GB` and `NVIDIA H100 80GB HBM3` match `A100` and
/// `H100`. Words that do change the chip (`Ti`, `SUPER`, `Ada`, `NVL`, `Max-Q`) are kept.
pub fn normalize_gpu_name(name: &str) -> String {
    let lower = name.to_lowercase();
    lower
        .split(|c: char| c.is_whitespace() || matches!(c, '-' | '_' | '(' | ')'))
        .filter(|w| !w.is_empty() && !is_noise_word(w))
        .collect()
}

fn is_noise_word(w: &str) -> bool {
    if matches!(
        w,
        "nvidia" | "geforce" | "tesla" | "quadro" | "gpu" | "laptop" | "nvgpu" | "pcie" | "sxm"
    ) {
        return true;
    }
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    // Memory size: `80gb`, `144g`.
    if w.strip_suffix("gb")
        .or_else(|| w.strip_suffix('g'))
        .is_some_and(all_digits)
    {
        return true;
    }
    // Form factor with a generation: `sxm2`, `sxm5`.
    if w.strip_prefix("sxm").is_some_and(all_digits) {
        return true;
    }
    // Memory type: `hbm2`, `hbm2e`, `hbm3`, `hbm3e`.
    w.strip_prefix("hbm")
        .map(|r| r.strip_suffix('e').unwrap_or(r))
        .is_some_and(all_digits)
}

pub mod pci_ids;
#[cfg(test)]
mod tests;
pub mod user_input;
