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
    /// The PTX ISA its nvcc writes (`.version 8.4` for 12.4): its ptxas's "current version",
    /// read by `kb check` from the release's PyPI wheel; absent where PyPI has no wheel of it.
    #[serde(default)]
    pub ptx_isa: Option<Version>,
    #[serde(default)]
    pub ptx_isa_source: Option<String>,
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
        if c.ptx_isa.is_some() && c.ptx_isa_source.as_deref().is_none_or(blank) {
            return invalid(format!("cuda {}: ptx_isa has no ptx_isa_source", c.version));
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

/// The newest GCC and Clang majors `crt/host_config.h` accepts: the `#if` guarding
/// `#error -- unsupported GNU version!` (`__GNUC__ > N` → N) and the one guarding
/// `#error -- unsupported clang version!` (`__clang_major__ >= N` → N-1).
///
/// The conditions are read, not the messages: in CUDA 12.2 and 12.3 the message still says "clang
/// version must be less than 16" while the check is `__clang_major__ >= 17`, i.e. clang 16 is
/// accepted. Other compilers' checks (`HOS clang`, the GRCO clang) are ignored.
pub fn parse_host_config(header: &str) -> anyhow::Result<HostCompilerLimits> {
    let mut last_if = "";
    let (mut gcc, mut clang) = (None, None);
    for line in header.lines().map(str::trim) {
        if line.starts_with("#if") {
            last_if = line;
        } else if line.starts_with("#error") {
            let (slot, operator, offset, what) = if line.contains("unsupported GNU version!") {
                (&mut gcc, "__GNUC__ >", 0, "GNU")
            } else if line.contains("unsupported clang version!") {
                (&mut clang, "__clang_major__ >=", 1, "clang")
            } else {
                continue;
            };
            let n = number_after(last_if, operator).ok_or_else(|| {
                anyhow::anyhow!(
                    "the {what} version #error is not guarded by `#if … {operator} N`: {last_if}"
                )
            })?;
            let max = n
                .checked_sub(offset)
                .ok_or_else(|| anyhow::anyhow!("impossible {what} limit in: {last_if}"))?;
            if slot.is_some_and(|m| m != max) {
                anyhow::bail!("host_config.h has two different {what} version limits");
            }
            *slot = Some(max);
        }
    }
    if gcc.is_none() && clang.is_none() {
        anyhow::bail!("found neither the GNU nor the clang version check; the header's layout changed, so update parse_host_config");
    }
    Ok(HostCompilerLimits {
        max_gcc: gcc,
        max_clang: clang,
    })
}

/// `12` from `#if (__clang_major__ >= 12) || …` for operator `__clang_major__ >=`.
fn number_after(line: &str, operator: &str) -> Option<u32> {
    let rest = line.split_once(operator)?.1.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_config_limits_come_from_the_conditions() {
        let header = "\
#if __GNUC__ > 16
#error -- unsupported GNU version! gcc versions later than 16 are not supported! The nvcc flag ...
#endif
#if defined(__HORIZON__)
#if (__clang_major__ >= 22) || (__clang_major__ < 3)
#error -- unsupported HOS clang version! The version must be must be less than 22 and greater than 3.2 .
#endif
#endif
#if (__clang_major__ >= 23) || (__clang_major__ < 3)
#error -- unsupported clang version! clang version must be less than 23 and greater than 3.2 . The nvcc flag ...
#endif
";
        assert_eq!(
            parse_host_config(header).unwrap(),
            HostCompilerLimits {
                max_gcc: Some(16),
                max_clang: Some(22)
            }
        );
        // CUDA 12.2/12.3: the message lags the check; the check is what nvcc enforces.
        let stale = "\
#if __GNUC__ > 12
#error -- unsupported GNU version! gcc versions later than 12 are not supported!
#endif
#if (__clang_major__ >= 17) || (__clang_major__ < 3) || ((__clang_major__ == 3) &&  (__clang_minor__ < 3))
#error -- unsupported clang version! clang version must be less than 16 and greater than 3.2 .
#endif
";
        assert_eq!(
            parse_host_config(stale).unwrap(),
            HostCompilerLimits {
                max_gcc: Some(12),
                max_clang: Some(16)
            }
        );
        assert!(parse_host_config("#define NOTHING 1\n").is_err());
        let unguarded = "#if defined(__GNUC__)\n#error -- unsupported GNU version! gcc versions later than 9 are not supported!\n";
        assert!(parse_host_config(unguarded).is_err());
        let two = format!("{header}#if __GNUC__ > 15\n#error -- unsupported GNU version! gcc versions later than 15 are not supported!\n");
        assert!(parse_host_config(&two).is_err());
    }
}
