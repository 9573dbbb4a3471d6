//! CUDA toolkits and their nvcc: which targets each release compiles, the host compilers its
//! `host_config.h` accepts, how each major is packaged on PyPI, and the nvcc options torch's
//! build plan may pass.

use super::{blank, invalid, KbError, KnowledgeBase};
use crate::cuda_arch::Arch;
use crate::version::Version;
use serde::Deserialize;

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

impl KnowledgeBase {
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

    pub fn cuda_major(&self, major: u32) -> Option<&CudaMajorRow> {
        self.cuda_majors.iter().find(|c| c.major == major)
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

    /// The nvcc options CUDA `cuda` has, for `TORCH_NVCC_FLAGS`.
    pub fn nvcc_options(&self, cuda: &Version) -> Vec<&NvccOptionRow> {
        self.nvcc_options
            .iter()
            .filter(|r| r.first_cuda.major_minor() <= cuda.major_minor())
            .collect()
    }
}

/// Targets (each once, with a family and a range), toolkit rows, majors and nvcc options.
pub(super) fn validate(kb: &KnowledgeBase) -> Result<(), KbError> {
    let mut seen_targets = Vec::new();
    for t in &kb.targets {
        let Ok(arch) = t.arch.parse::<Arch>() else {
            return invalid(format!("target row `{}` is not an arch", t.arch));
        };
        if seen_targets.contains(&arch) {
            return invalid(format!("target `{}` has two rows", t.arch));
        }
        seen_targets.push(arch);
        if blank(&t.source) || blank(&t.family) {
            return invalid(format!(
                "target row `{}` has no source or no family",
                t.arch
            ));
        }
        if t.last_cuda
            .as_ref()
            .is_some_and(|last| *last < t.first_cuda)
        {
            return invalid(format!(
                "target `{}`: last_cuda is older than first_cuda",
                t.arch
            ));
        }
    }
    for c in &kb.cuda {
        if blank(&c.driver_source) || blank(&c.host_compiler_source) {
            return invalid(format!("cuda {} has an empty source", c.version));
        }
        for u in &c.updates {
            if u.from.major_minor() != c.version.major_minor() || u.from.parts().len() < 3 {
                return invalid(format!(
                    "cuda {}: update `{}` is not a patch release of {}",
                    c.version, u.from, c.version
                ));
            }
            if blank(&u.source) {
                return invalid(format!(
                    "cuda {}: update {} has no source",
                    c.version, u.from
                ));
            }
        }
        if c.updates.windows(2).any(|w| w[0].from >= w[1].from) {
            return invalid(format!(
                "cuda {}: updates are not in release order",
                c.version
            ));
        }
    }
    for c in &kb.cuda_majors {
        if blank(&c.source) {
            return invalid(format!("cuda_major {} has no source", c.major));
        }
    }
    for r in &kb.nvcc_options {
        if blank(&r.source) || r.flags.is_empty() {
            return invalid(format!(
                "nvcc_option {} has no source or no flags",
                r.option
            ));
        }
    }
    Ok(())
}
