//! The CUDA arch types every layer shares: [`Arch`] (a compile target such as `9.0a`), [`Cc`] (a
//! device's compute capability) and [`Variant`]. They live below both the knowledge base, whose rows
//! name archs, and the arch model, which plans with the knowledge base, so neither imports the other
//! for its vocabulary.

use std::fmt;
use std::str::FromStr;

/// How specific a compiled image is (CUDA 12.0 added `a`, CUDA 12.9 added `f`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// `sm_90`: runs on the same major with an equal or higher minor; its PTX runs on anything newer.
    Plain,
    /// `sm_90a`: uses arch-specific features; runs on exactly this compute capability.
    ArchSpecific,
    /// `sm_100f`: uses family features; runs within the same major from this minor up.
    FamilySpecific,
}

impl Variant {
    pub fn suffix(self) -> &'static str {
        match self {
            Variant::Plain => "",
            Variant::ArchSpecific => "a",
            Variant::FamilySpecific => "f",
        }
    }
}

/// A compile target: compute capability plus variant, e.g. `9.0a` (= `sm_90a` / `compute_90a`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Arch {
    pub major: u8,
    pub minor: u8,
    pub variant: Variant,
}

/// A device's compute capability (what `torch.cuda.get_device_capability()` returns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cc {
    pub major: u8,
    pub minor: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchParseError {
    #[error("`{0}` is not a CUDA arch: expected MAJOR.MINOR with an optional `a` or `f` suffix, such as 8.6, 9.0a or 10.0f")]
    NotAnArch(String),
    #[error("`{0}` is not an sm_/compute_ name: expected e.g. sm_90, sm_90a, compute_120f")]
    NotATargetName(String),
    #[error("`{0}` is not a compute capability: a device's CC is MAJOR.MINOR, such as 8.6 or 12.0 (or its sm_ name, sm_120); the `a` and `f` suffixes name code built for devices, not a device")]
    NotACc(String),
}

impl Arch {
    pub const fn new(major: u8, minor: u8, variant: Variant) -> Arch {
        Arch {
            major,
            minor,
            variant,
        }
    }

    pub const fn plain(major: u8, minor: u8) -> Arch {
        Arch::new(major, minor, Variant::Plain)
    }

    pub fn cc(self) -> Cc {
        Cc {
            major: self.major,
            minor: self.minor,
        }
    }

    /// `90a` for 9.0a: the number nvcc and CMake use.
    pub fn number(self) -> String {
        format!("{}{}{}", self.major, self.minor, self.variant.suffix())
    }

    /// `sm_90a`: the SASS (cubin) target name.
    pub fn sm(self) -> String {
        format!("sm_{}", self.number())
    }

    /// `compute_90a`: the virtual (PTX) target name.
    pub fn compute(self) -> String {
        format!("compute_{}", self.number())
    }

    /// Parses nvcc's names: `sm_90a`, `compute_100f`, `lto_90` are all accepted; the prefix is dropped.
    /// The number is split as torch and CMake do: the last digit is the minor (`120` → 12.0).
    pub fn from_target_name(name: &str) -> Result<Arch, ArchParseError> {
        let err = || ArchParseError::NotATargetName(name.to_string());
        let rest = ["sm_", "compute_", "lto_"]
            .iter()
            .find_map(|p| name.strip_prefix(p))
            .ok_or_else(err)?;
        let (digits, variant) = split_variant(rest);
        if digits.len() < 2 || digits.len() > 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err());
        }
        let n: u16 = digits.parse().map_err(|_| err())?;
        let major = u8::try_from(n / 10).map_err(|_| err())?;
        Ok(Arch::new(major, (n % 10) as u8, variant))
    }
}

fn split_variant(s: &str) -> (&str, Variant) {
    if let Some(d) = s.strip_suffix('a') {
        (d, Variant::ArchSpecific)
    } else if let Some(d) = s.strip_suffix('f') {
        (d, Variant::FamilySpecific)
    } else {
        (s, Variant::Plain)
    }
}

/// Parses `X.Y`, `X.Ya`, `X.Yf` exactly as torch's regex does: one digit of minor, nothing else.
impl FromStr for Arch {
    type Err = ArchParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ArchParseError::NotAnArch(s.to_string());
        let (major, rest) = s.split_once('.').ok_or_else(err)?;
        let (minor, variant) = split_variant(rest);
        if major.is_empty() || major.len() > 2 || !major.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err());
        }
        if minor.len() != 1 || !minor.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err());
        }
        let major: u8 = major.parse().map_err(|_| err())?;
        let minor: u8 = minor.parse().map_err(|_| err())?;
        Ok(Arch::new(major, minor, variant))
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}{}", self.major, self.minor, self.variant.suffix())
    }
}

impl serde::Serialize for Arch {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A device's compute capability: `12.0`, or its SASS name `sm_120` (what nvidia-smi's users
/// and cuobjdump's print). Arch-specific and family suffixes name code, not devices.
impl FromStr for Cc {
    type Err = ArchParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let arch = if s.starts_with("sm_") {
            Arch::from_target_name(s)
        } else {
            s.parse::<Arch>()
        };
        match arch {
            Ok(a) if a.variant == Variant::Plain => Ok(a.cc()),
            _ => Err(ArchParseError::NotACc(s.to_string())),
        }
    }
}

impl fmt::Display for Cc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl serde::Serialize for Cc {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_names_targets() {
        let a: Arch = "9.0a".parse().unwrap();
        assert_eq!(
            (a.sm(), a.compute(), a.to_string()),
            ("sm_90a".into(), "compute_90a".into(), "9.0a".into())
        );
        let f: Arch = "12.0f".parse().unwrap();
        assert_eq!(f.sm(), "sm_120f");
        assert_eq!(Arch::from_target_name("sm_120f").unwrap(), f);
        assert_eq!(
            Arch::from_target_name("compute_75").unwrap(),
            Arch::plain(7, 5)
        );
        assert_eq!(
            Arch::from_target_name("sm_100").unwrap(),
            Arch::plain(10, 0)
        );
    }

    #[test]
    fn rejects_what_torch_rejects() {
        for bad in [
            "8", "8.", ".6", "8.60", "8.6b", "sm_86", "8,6", "-8.6", "8.6aa", "100.0", "８.６",
        ] {
            assert!(bad.parse::<Arch>().is_err(), "{bad}");
        }
        for bad in ["sm_", "sm_9", "sm_9x", "gfx90a", "sm_99999"] {
            assert!(Arch::from_target_name(bad).is_err(), "{bad}");
        }
    }
}
