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
    /// The Debian suite archsmith installs the toolkit from without root (`trixie`); None when
    /// it only advises the install.
    #[serde(default)]
    pub suite: Option<String>,
    /// The archive components the closure is read from, in order.
    #[serde(default)]
    pub components: Vec<String>,
    /// The packages an extension build needs: the root first, each other pinned by its parent.
    #[serde(default)]
    pub closure: Vec<String>,
    /// A host compiler nvcc accepts, from the same suite, for a machine whose own is newer than
    /// the toolkit's ceiling and has no older one: the C++ driver first, the rest pinned by it.
    #[serde(default)]
    pub host_compiler: Vec<String>,
    /// The CUDA libraries torch's own build links (cuBLAS, cuFFT, …), each pinned by a package
    /// of `closure`: installed only for a torch build (`cuda-X.Y-torch-build`).
    #[serde(default)]
    pub torch_libraries: Vec<String>,
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

    /// The distribution toolkit archsmith installs from Debian's archive for CUDA `cuda` (its
    /// major.minor), if any.
    pub fn debian_archive_toolkit(&self, cuda: &Version) -> Option<&CudaSystemPackageRow> {
        self.debian_archive_toolkits()
            .find(|p| p.cuda.major_minor() == cuda.major_minor())
    }

    /// The CUDA releases of `major` archsmith installs from Debian's archive, oldest first.
    pub fn debian_archive_releases(&self, major: u32) -> Vec<Version> {
        let mut v: Vec<Version> = self
            .debian_archive_toolkits()
            .map(|p| p.cuda.clone())
            .filter(|c| c.major() == major)
            .collect();
        v.sort();
        v
    }

    /// Every toolkit archsmith installs from Debian's archive.
    pub fn debian_archive_toolkits(&self) -> impl Iterator<Item = &CudaSystemPackageRow> {
        self.cuda_system_packages
            .iter()
            .filter(|p| p.suite.is_some() && !p.closure.is_empty())
    }
}
