//! Checking what a file carries against what was asked for (`--expect-arch`).

use super::{ElfAudit, ImageArch, Kind};
use crate::cuda_arch::Arch;

/// The images a build plan asks for: SASS per arch, PTX per arch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expectation {
    pub sass: Vec<Arch>,
    pub ptx: Vec<Arch>,
}

/// An expected image a file lacks, in some or all of its containers.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Missing {
    #[serde(rename = "arch")]
    pub name: String,
    /// Containers (compilation units) that do hold it; a kernel in any other one cannot load.
    pub containers_with: usize,
    pub containers: usize,
}

/// Images a file carries beyond the plan.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Extra {
    #[serde(rename = "arch")]
    pub name: String,
    pub count: usize,
    pub containers_with: usize,
}

/// The verdict for one file with device code.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FileCheck {
    pub missing_sass: Vec<Missing>,
    pub missing_ptx: Vec<Missing>,
    pub extra_sass: Vec<Extra>,
    pub extra_ptx: Vec<Extra>,
}

impl FileCheck {
    pub fn missing_any(&self) -> bool {
        !self.missing_sass.is_empty() || !self.missing_ptx.is_empty()
    }

    pub fn extra_any(&self) -> bool {
        !self.extra_sass.is_empty() || !self.extra_ptx.is_empty()
    }
}

/// Compares the counted section of `audit` with `expect`. An expected image is missing when any
/// container with loadable code lacks it (per-container, not just the union: torch's kernels live
/// in hundreds of containers, and each must carry the arch). Files without device code pass.
pub fn check(audit: &ElfAudit, expect: &Expectation) -> FileCheck {
    let Some(sec) = audit.counted() else {
        return FileCheck::default();
    };
    let containers = sec.code_containers();
    if containers == 0 {
        return FileCheck::default();
    }
    let mut out = FileCheck::default();
    for (kind, wanted, missing, extra) in [
        (
            Kind::Elf,
            &expect.sass,
            &mut out.missing_sass,
            &mut out.extra_sass,
        ),
        (
            Kind::Ptx,
            &expect.ptx,
            &mut out.missing_ptx,
            &mut out.extra_ptx,
        ),
    ] {
        let wanted: Vec<ImageArch> = wanted.iter().map(|a| ImageArch::from_arch(*a)).collect();
        for w in &wanted {
            let with = sec.containers_with(kind, *w);
            if with < containers {
                missing.push(Missing {
                    name: w.name(kind),
                    containers_with: with,
                    containers,
                });
            }
        }
        for (arch, count) in sec.counts(kind) {
            if !wanted.contains(&arch) {
                extra.push(Extra {
                    name: arch.name(kind),
                    count,
                    containers_with: sec.containers_with(kind, arch),
                });
            }
        }
    }
    out
}
