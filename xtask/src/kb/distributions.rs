//! Distributions' packages: the CUDA toolkits Linux distributions package, and how to install them.

use super::KnowledgeBase;
use crate::version::Version;
use serde::Deserialize;

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
