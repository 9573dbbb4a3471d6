//! Binary compatibility: which compiled image a device loads, or why none does.
//!
//! NVIDIA's rules (Blackwell compatibility guide §1.2, CUDA C++ Programming Guide "Feature
//! Availability"; docs/research/arch.md §3), as one function used by `archs`, `verify binary`,
//! `kernels` and `doctor`:
//!
//! | image | runs on device CC D iff |
//! |---|---|
//! | SASS `sm_XY` | same major, D.minor ≥ Y |
//! | SASS `sm_XYa` | D == X.Y exactly |
//! | SASS `sm_XYf` | same major (family), D.minor ≥ Y |
//! | PTX `compute_XY` | D ≥ X.Y, JIT-compiled by a driver at least as new as the PTX's toolkit |
//! | PTX `compute_XYa` / `compute_XYf` | as the SASS of the same variant |
//!
//! The driver prefers SASS over PTX; among candidates archsmith reports the newest one.

use crate::arch::{Arch, Cc, Variant};
use crate::version::Version;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageKind {
    Sass,
    Ptx,
}

/// One device-code image a binary carries (or a build plans to carry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Image {
    pub arch: Arch,
    pub kind: ImageKind,
}

impl Image {
    pub fn sass(arch: Arch) -> Image {
        Image {
            arch,
            kind: ImageKind::Sass,
        }
    }

    pub fn ptx(arch: Arch) -> Image {
        Image {
            arch,
            kind: ImageKind::Ptx,
        }
    }

    /// `sm_90a` or `compute_90`.
    pub fn name(&self) -> String {
        match self.kind {
            ImageKind::Sass => self.arch.sm(),
            ImageKind::Ptx => self.arch.compute(),
        }
    }
}

impl serde::Serialize for Image {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.name())
    }
}

/// What is known about the driver that would JIT PTX: its version and the minimum driver of the CUDA
/// release that produced the PTX. Either may be unknown; then the PTX verdict says so.
#[derive(Clone, Debug, Default)]
pub struct PtxJit {
    pub driver: Option<Version>,
    /// Minimum Linux driver of the toolkit that wrote the PTX (from the knowledge base).
    pub ptx_min_driver: Option<Version>,
    /// That toolkit's release, for messages.
    pub ptx_cuda: Option<Version>,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    pub runs: bool,
    /// The image the driver would load.
    pub via: Option<Image>,
    pub reason: String,
}

/// Whether `image` can serve a device of capability `cc`, ignoring the driver.
pub fn image_matches(image: Image, cc: Cc) -> bool {
    let a = image.arch;
    match (image.kind, a.variant) {
        (_, Variant::ArchSpecific) => a.cc() == cc,
        (_, Variant::FamilySpecific) | (ImageKind::Sass, Variant::Plain) => {
            a.major == cc.major && a.minor <= cc.minor
        }
        (ImageKind::Ptx, Variant::Plain) => a.cc() <= cc,
    }
}

/// The verdict for one device given every image available.
pub fn runs_on(images: &[Image], cc: Cc, jit: &PtxJit) -> Verdict {
    let best = |kind: ImageKind| {
        images
            .iter()
            .copied()
            .filter(|i| i.kind == kind && image_matches(*i, cc))
            // Newest first; at equal CC the more specific code (a, then f) is the better fit.
            .max_by_key(|i| (i.arch.major, i.arch.minor, specificity(i.arch.variant)))
    };
    if let Some(img) = best(ImageKind::Sass) {
        let how = match img.arch.variant {
            Variant::ArchSpecific => format!(
                "{} is arch-specific and CC {cc} is exactly its target",
                img.name()
            ),
            Variant::FamilySpecific => format!(
                "{} is family-specific and CC {cc} is in family {}.x",
                img.name(),
                img.arch.major
            ),
            Variant::Plain if img.arch.cc() == cc => format!("{} is built for CC {cc}", img.name()),
            Variant::Plain => format!(
                "{} runs on the same major with a higher minor (CC {cc})",
                img.name()
            ),
        };
        return Verdict {
            runs: true,
            via: Some(img),
            reason: format!("SASS: {how}"),
        };
    }
    if let Some(img) = best(ImageKind::Ptx) {
        let jit_note = match (&jit.driver, &jit.ptx_min_driver) {
            (Some(d), Some(min)) if crate::kb::drivers::driver_below(d, min) => {
                let cuda = jit
                    .ptx_cuda
                    .as_ref()
                    .map(|c| format!("CUDA {c} "))
                    .unwrap_or_default();
                return Verdict {
                    runs: false,
                    via: None,
                    reason: format!(
                        "no SASS for CC {cc}; {} PTX would need JIT, but driver {d} is older than {min}, the minimum for {cuda}PTX (cudaErrorUnsupportedPtxVersion). Update the driver to ≥ {min}, or add {} to the arch list",
                        img.name(),
                        cc
                    ),
                };
            }
            (Some(d), Some(min)) => format!(" (driver {d} ≥ {min})"),
            _ => {
                " (if the driver is at least as new as the toolkit that wrote the PTX)".to_string()
            }
        };
        return Verdict {
            runs: true,
            via: Some(img),
            reason: format!("PTX JIT: no SASS for CC {cc}; the driver compiles {} at load time{jit_note}; first launch is slower", img.name()),
        };
    }
    Verdict {
        runs: false,
        via: None,
        reason: no_image_reason(images, cc),
    }
}

fn specificity(v: Variant) -> u8 {
    match v {
        Variant::Plain => 0,
        Variant::FamilySpecific => 1,
        Variant::ArchSpecific => 2,
    }
}

fn no_image_reason(images: &[Image], cc: Cc) -> String {
    if images.is_empty() {
        return format!("no device code at all, so nothing can run on CC {cc}");
    }
    let why: Vec<String> = images
        .iter()
        .map(|i| {
            let a = i.arch;
            match (i.kind, a.variant) {
                (_, Variant::ArchSpecific) => format!("{} runs only on CC {}", i.name(), a.cc()),
                (_, Variant::FamilySpecific) => format!(
                    "{} runs only on CC {}.{}–{}.9",
                    i.name(),
                    a.major,
                    a.minor,
                    a.major
                ),
                (ImageKind::Sass, Variant::Plain) => format!(
                    "{} runs only on CC {}.{}–{}.9",
                    i.name(),
                    a.major,
                    a.minor,
                    a.major
                ),
                (ImageKind::Ptx, Variant::Plain) => format!("{} needs CC ≥ {}", i.name(), a.cc()),
            }
        })
        .collect();
    format!(
        "no kernel image is available for execution on the device (CC {cc}): {}. Add {cc} to the arch list, or PTX for an arch ≤ {cc} (e.g. `X.Y+PTX`)",
        why.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imgs(sass: &[&str], ptx: &[&str]) -> Vec<Image> {
        sass.iter()
            .map(|s| Image::sass(s.parse().unwrap()))
            .chain(ptx.iter().map(|p| Image::ptx(p.parse().unwrap())))
            .collect()
    }

    fn cc(s: &str) -> Cc {
        s.parse().unwrap()
    }

    fn via(v: &Verdict) -> Option<String> {
        v.via.map(|i| i.name())
    }

    #[test]
    fn issue_examples() {
        let none = PtxJit::default();
        // --arch 8.6 --gpu L4 (8.9): runs via sm_86.
        let v = runs_on(&imgs(&["8.6"], &[]), cc("8.9"), &none);
        assert!(v.runs);
        assert_eq!(via(&v).as_deref(), Some("sm_86"));
        // --arch 9.0 --gpu "RTX 5090" (12.0): no image.
        let v = runs_on(&imgs(&["9.0"], &[]), cc("12.0"), &none);
        assert!(
            !v.runs && v.reason.contains("no kernel image is available"),
            "{}",
            v.reason
        );
        // --arch 9.0+PTX --gpu "RTX 5090": PTX JIT.
        let v = runs_on(&imgs(&["9.0"], &["9.0"]), cc("12.0"), &none);
        assert!(v.runs && v.reason.starts_with("PTX JIT"));
        assert_eq!(via(&v).as_deref(), Some("compute_90"));
        // --arch 9.0a: H100 yes, B200 no.
        assert!(runs_on(&imgs(&["9.0a"], &[]), cc("9.0"), &none).runs);
        assert!(!runs_on(&imgs(&["9.0a"], &[]), cc("10.0"), &none).runs);
    }

    #[test]
    fn rules_per_variant() {
        let none = PtxJit::default();
        // SASS does not cross majors, either way.
        assert!(!runs_on(&imgs(&["8.6"], &[]), cc("8.0"), &none).runs);
        assert!(!runs_on(&imgs(&["8.0"], &[]), cc("9.0"), &none).runs);
        // Family code: 10.0f on 10.3 yes, on 12.0 no; 10.3a not on 10.0.
        assert!(runs_on(&imgs(&["10.0f"], &[]), cc("10.3"), &none).runs);
        assert!(!runs_on(&imgs(&["10.0f"], &[]), cc("12.0"), &none).runs);
        assert!(!runs_on(&imgs(&["10.3a"], &[]), cc("10.0"), &none).runs);
        // Arch-specific PTX does not JIT forward.
        assert!(!runs_on(&imgs(&[], &["9.0a"]), cc("10.0"), &none).runs);
        // SASS preferred over PTX; newest SASS chosen; `a` preferred at equal CC.
        assert_eq!(
            via(&runs_on(&imgs(&["8.0", "8.6"], &["8.0"]), cc("8.9"), &none)).as_deref(),
            Some("sm_86")
        );
        assert_eq!(
            via(&runs_on(&imgs(&["9.0", "9.0a"], &[]), cc("9.0"), &none)).as_deref(),
            Some("sm_90a")
        );
        // No device code at all.
        assert!(runs_on(&[], cc("9.0"), &none)
            .reason
            .contains("no device code"));
    }

    #[test]
    fn ptx_needs_a_new_enough_driver() {
        let jit = PtxJit {
            driver: Some("570.26".parse().unwrap()),
            ptx_min_driver: Some("595.45.04".parse().unwrap()),
            ptx_cuda: Some("13.2".parse().unwrap()),
        };
        let v = runs_on(&imgs(&["9.0"], &["9.0"]), cc("12.0"), &jit);
        assert!(
            !v.runs && v.reason.contains("driver 570.26 is older than 595.45.04"),
            "{}",
            v.reason
        );
        // SASS does not care about the PTX driver floor.
        assert!(runs_on(&imgs(&["12.0"], &["9.0"]), cc("12.0"), &jit).runs);
        let newer = PtxJit {
            driver: Some("600.1".parse().unwrap()),
            ..jit
        };
        assert!(runs_on(&imgs(&["9.0"], &["9.0"]), cc("12.0"), &newer).runs);
    }
}
