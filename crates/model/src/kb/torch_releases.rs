//! torch releases: what each publishes on PyPI (Pythons, CUDA variants, the archs its wheel
//! carries), what its extension and CMake arch parsers accept, what a from-source build of it sets
//! and needs, and the packages an env of it must pin.

use super::{blank, invalid, KbError, KnowledgeBase};
use crate::cuda_arch::Arch;
use crate::version::Version;
use serde::Deserialize;

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

/// Whether `torch` (any precision) falls in the inclusive major.minor range `from..=to`.
pub fn torch_in_range(torch: &Version, from: &Version, to: &Version) -> bool {
    let mm = torch.major_minor();
    *from <= mm && mm <= *to
}

impl KnowledgeBase {
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
}

fn next_minor(v: &Version) -> Version {
    Version::new(&[v.major(), v.minor() + 1])
}

/// torch rows (archs that parse, a source), arch lists, switches, submodules (each needing a switch that exists) and env pins.
pub(super) fn validate(kb: &KnowledgeBase) -> Result<(), KbError> {
    for r in &kb.torch_arch_lists {
        for s in &r.supported {
            if s.parse::<Arch>().is_err() {
                return invalid(format!(
                    "torch_arch_list {}–{}: `{s}` is not an arch",
                    r.from, r.to
                ));
            }
        }
    }
    for r in &kb.torch_switches {
        if blank(&r.source) || blank(&r.why) || r.from > r.to {
            return invalid(format!(
                "torch_switch {} has no source/why or an empty range",
                r.name
            ));
        }
    }
    for r in &kb.torch_submodules {
        if blank(&r.source) || r.from > r.to || !r.path.starts_with("third_party/") {
            return invalid(format!(
                "torch_submodule {}: no source, empty range or not under third_party/",
                r.path
            ));
        }
        if let Some(n) = r
            .needs
            .iter()
            .find(|n| !kb.torch_switches.iter().any(|s| s.name == **n))
        {
            return invalid(format!(
                "torch_submodule {} needs `{n}`, which no torch_switch row names",
                r.path
            ));
        }
    }
    for r in &kb.torch_env_pins {
        if blank(&r.source) || blank(&r.symptom) || r.from > r.to {
            return invalid(format!(
                "torch_env_pin {}: no source/symptom or an empty range",
                r.requirement
            ));
        }
    }
    for r in &kb.torch {
        for s in r
            .wheel_sass
            .iter()
            .chain(&r.wheel_ptx)
            .chain(&r.wheel_extra_sass)
        {
            if s.parse::<Arch>().is_err() {
                return invalid(format!("torch {}: `{s}` is not an arch", r.version));
            }
        }
        if blank(&r.source) {
            return invalid(format!("torch {} has no source", r.version));
        }
    }
    Ok(())
}
