//! The compatibility knowledge base: every fact that changes with NVIDIA and PyTorch releases.
//!
//! The facts live in one data file, `crates/model/data/knowledge-base.toml`, each row with its source. It
//! is compiled into the binary so archsmith answers offline; `cargo xtask kb check` re-verifies the
//! rows that can be checked against real NVIDIA wheels. Code asks questions through the methods here
//! and never carries its own copy of a version table.

//!
//! One module per subject, each with its rows, its queries (methods of [`KnowledgeBase`]) and its
//! checks: [`gpu_models`] (GPUs and chips), [`toolkits`] (CUDA releases and nvcc), [`drivers`],
//! [`torch_releases`] (torch releases and their pins), [`distributions`] (distributions'
//! packages). Every query goes through [`kb()`], the base compiled into this binary; a
//! `&KnowledgeBase` is passed only where a knowledge base is itself the subject (`kb check` reads
//! a planted copy back against the real artifacts).

use crate::version::Version;
use serde::Deserialize;
use std::sync::OnceLock;

pub mod aten_arguments;
pub mod distributions;
pub mod drivers;
pub mod gpu_models;
pub mod manylinux_policies;
pub mod pci_ids;
pub mod python_imports;
#[cfg(test)]
mod tests;
pub mod toolkits;
pub mod torch_releases;
pub mod user_input;

pub use distributions::*;
pub use drivers::*;
pub use gpu_models::*;
pub use toolkits::*;
pub use torch_releases::*;

pub const KB_PATH: &str = "crates/model/data/knowledge-base.toml";
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
    #[serde(rename = "python_import_name", default)]
    pub python_import_names: Vec<python_imports::PythonImportNameRow>,
    #[serde(rename = "aten_derived_argument", default)]
    pub aten_derived_arguments: Vec<aten_arguments::AtenDerivedArgumentRow>,
    #[serde(rename = "manylinux_policy", default)]
    pub manylinux_policies: Vec<manylinux_policies::ManylinuxPolicyRow>,
    #[serde(rename = "manylinux_symbol_versions", default)]
    pub manylinux_symbol_versions: Vec<manylinux_policies::ManylinuxSymbolVersionsRow>,
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
        toolkits::validate(self)?;
        gpu_models::validate(self)?;
        torch_releases::validate(self)
    }
}

/// A row the checks refuse, as the error that names it.
fn invalid<T>(what: String) -> Result<T, KbError> {
    Err(KbError(what))
}

/// A source, reason or name left empty.
fn blank(s: &str) -> bool {
    s.trim().is_empty()
}
