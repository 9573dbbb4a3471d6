//! What a build made and proved, recorded beside its wheel under the stamp ([`crate::stamp`]):
//! all that a later run with the same stamp reports without building. What only one run did (its
//! log, its time, the compiler cache's counters, a `--torch-range` check) is the [`super::Outcome`]
//! around it, never recorded.
//!
//! A record counts only when it reads back as exactly what was written ([`crate::stamp::lookup`]),
//! so a field added here makes older records stale (the wheel is built again) rather than read
//! with a default.

use super::{arch_guard, check, compiling_cuda, insight};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub source: String,
    pub torch: String,
    pub cuda: String,
    pub nvcc: String,
    pub torch_cuda_arch_list: String,
    /// Asked archs that got no SASS, covered by the PTX of the compiling toolkit's newest arch
    /// (a stable build with an older toolkit than an asked arch needs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ptx_cover: Option<compiling_cuda::PtxCover>,
    pub jobs: u32,
    pub nvcc_threads: u32,
    pub builder: String,
    pub build_seconds: f64,
    pub audit: check::AuditSummary,
    pub imported: Vec<String>,
    /// Those of `imported` that are operator libraries (no `PyInit_`), loaded with
    /// `torch.ops.load_library` as their package loads them.
    pub operator_libraries: Vec<String>,
    /// The load check's verdict on the wheel's shared objects in the build env.
    pub load: Option<LoadSummary>,
    pub warnings: Vec<String>,
    /// What the arch guard saw: compiles, and the archs the extension asked for instead of the
    /// plan's. None with `--own-arch-flags`.
    pub arch_guard: Option<arch_guard::Report>,
    /// Extensions built at once (1: one after another), and each one's time where they ran
    /// concurrently (the build hooks' `archsmith-ext:` lines).
    pub extensions_at_once: u32,
    pub extensions: Vec<ExtensionBuilt>,
    /// The package switched ninja off and the hooks switched it back on.
    pub ninja_turned_on: bool,
    /// Where the build's time and memory went: its trace, timeline and summary.
    pub insight: Option<insight::Insight>,
}

/// The load check's verdict on a built wheel: whether every shared object loads after
/// `import torch` in the env it was built for, and each one that does not.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadSummary {
    pub loads: bool,
    pub files: usize,
    pub problems: Vec<String>,
    /// Per shared object that needs torch: `FILE: stable ABI: …` or `FILE: tied to torch …`.
    pub torch_abi: Vec<String>,
}

/// One extension of a package built concurrently with others.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExtensionBuilt {
    pub name: String,
    pub seconds: f64,
    pub ok: bool,
}
