//! Drivers: the oldest driver that runs a build of a CUDA release, JITs its PTX, or drives a GPU at
//! all. The floors are columns of the toolkit and GPU rows; the rules that combine them live here.

use super::KnowledgeBase;
use crate::cuda_arch::{Arch, Cc};
use crate::version::Version;

/// The oldest driver a GPU runs with, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DriverFloor {
    pub driver: Version,
    pub why: String,
}

impl KnowledgeBase {
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

    /// The oldest driver that can JIT PTX written by CUDA `cuda`: its release row's floor, else
    /// (no driver row recorded for that release) the highest floor known for an older release of
    /// the same major, else the major's minor-compatibility floor. A lower bound in the last two
    /// cases: a driver below it certainly cannot load the PTX.
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

    /// The oldest release whose nvcc writes PTX ISA `isa` or a newer one: a driver older than
    /// that release's cannot JIT such PTX. None where `isa` is newer than every release's, or
    /// no newer than the oldest recorded one's while older releases are unrecorded (the writer
    /// could be one of them).
    pub fn ptx_isa_release(&self, isa: &Version) -> Option<&Version> {
        let mut recorded: Vec<(&Version, &Version)> = self
            .cuda
            .iter()
            .filter_map(|c| Some((c.ptx_isa.as_ref()?, &c.version)))
            .collect();
        recorded.sort_by(|a, b| a.1.cmp(b.1));
        let at = recorded.iter().position(|(i, _)| *i >= isa)?;
        let unrecorded_before = self.cuda.iter().any(|c| c.version < *recorded[0].1);
        (at > 0 || !unrecorded_before).then_some(recorded[at].1)
    }

    /// The oldest driver that runs anything on GPU `name` (CC `cc`): the GPU's own `min_driver`,
    /// else the driver of the first CUDA release whose nvcc compiled for its CC, since an older
    /// driver predates the architecture (an RTX 5090 needs the 570 branch whatever the wheel's
    /// CUDA). None where that release is older than the driver table.
    ///
    /// A GPU that older CUDA releases knew by another CC (Jetson Thor: sm_101, then sm_110) is one
    /// device with one floor: the oldest of its names' (a CUDA 13 build of it still needs CUDA
    /// 13's own floor, [`KnowledgeBase::driver_floor`], and says so as such).
    pub fn gpu_driver_floor(&self, name: &str, cc: Cc) -> Option<DriverFloor> {
        if let Some(d) = self.gpu(name).and_then(|g| g.min_driver.clone()) {
            return Some(DriverFloor {
                why: format!("the first driver for the {name}"),
                driver: d,
            });
        }
        self.gpu_ccs(name, cc)
            .into_iter()
            .filter_map(|(cc, _)| {
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
            })
            .min_by(|a, b| a.driver.cmp(&b.driver))
    }
}

/// Whether driver `driver` is older than `floor`. A driver given with fewer parts than the floor
/// that agrees on those it has is that release (`--driver 580.65` for nvidia-smi's `580.65.06`):
/// not older.
pub fn driver_below(driver: &Version, floor: &Version) -> bool {
    driver < floor && !floor.parts().starts_with(driver.parts())
}
