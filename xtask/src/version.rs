//! Dotted release numbers (`2.15.0`, `13.2`, `595.45.04`) as NVIDIA and PyTorch print them.
//!
//! Ordering is numeric per component with missing components as zero, so `13.2 == 13.2.0` and
//! `12.10 > 12.9`. A `+local` suffix (`2.15.0+cu132`) is kept for display but ignored in comparisons,
//! as torch's own version objects do. A PEP 440 pre-release or dev suffix (`2.12.0a0`,
//! `2.13.0.dev20260801`, `2.6.0rc3`) orders before its release, as PEP 440 says.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Debug, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Version {
    parts: Vec<u32>,
    /// A pre-release: (0 dev, 1 a, 2 b, 3 rc; its number). None for a release.
    pre: Option<(u8, u64)>,
    local: Option<String>,
    /// The text as written, for display: driver versions keep their zeros (`595.45.04`).
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not a version: expected numbers separated by dots, such as 2.15.0 or 13.2")]
pub struct VersionError {
    pub input: String,
}

impl Version {
    pub fn new(parts: &[u32]) -> Version {
        let text = parts
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(".");
        Version {
            parts: parts.to_vec(),
            pre: None,
            local: None,
            text,
        }
    }

    pub fn major(&self) -> u32 {
        self.parts.first().copied().unwrap_or(0)
    }

    pub fn minor(&self) -> u32 {
        self.parts.get(1).copied().unwrap_or(0)
    }

    /// `major.minor`, the granularity at which CUDA and torch releases differ in what they accept.
    pub fn major_minor(&self) -> Version {
        Version::new(&[self.major(), self.minor()])
    }

    /// The `+local` label (`cu132` in `2.15.0+cu132`), which torch uses for its CUDA variant.
    pub fn local(&self) -> Option<&str> {
        self.local.as_deref()
    }

    pub fn parts(&self) -> &[u32] {
        &self.parts
    }

    /// True when `self` starts with all of `prefix`'s components: `13.2.78` matches `13.2`.
    pub fn matches_prefix(&self, prefix: &Version) -> bool {
        prefix
            .parts
            .iter()
            .enumerate()
            .all(|(i, p)| self.parts.get(i).copied().unwrap_or(0) == *p)
    }
}

impl FromStr for Version {
    type Err = VersionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || VersionError {
            input: s.to_string(),
        };
        let trimmed = s.trim();
        let (release, local) = match trimmed.split_once('+') {
            Some((r, l)) if !l.is_empty() => (r, Some(l.to_string())),
            Some(_) => return Err(err()),
            None => (trimmed, None),
        };
        let release = release.strip_prefix('v').unwrap_or(release);
        if release.is_empty() {
            return Err(err());
        }
        let (release, pre) = match release.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
            None => (release, None),
            Some(at) => {
                let (nums, suffix) = release.split_at(at);
                let kind = [("dev", 0u8), ("rc", 3), ("a", 1), ("b", 2)]
                    .iter()
                    .find(|(k, _)| suffix.starts_with(k))
                    .ok_or_else(err)?;
                let n = &suffix[kind.0.len()..];
                if n.is_empty() || n.len() > 18 || !n.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err());
                }
                let nums = if kind.1 == 0 {
                    nums.strip_suffix('.').ok_or_else(err)?
                } else {
                    nums
                };
                (nums, Some((kind.1, n.parse::<u64>().map_err(|_| err())?)))
            }
        };
        let parts = release
            .split('.')
            .map(|p| {
                if p.is_empty() || p.len() > 9 || !p.bytes().all(|b| b.is_ascii_digit()) {
                    Err(err())
                } else {
                    p.parse::<u32>().map_err(|_| err())
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Version {
            parts,
            pre,
            local,
            text: trimmed.strip_prefix('v').unwrap_or(trimmed).to_string(),
        })
    }
}

impl TryFrom<String> for Version {
    type Error = VersionError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Version> for String {
    fn from(v: Version) -> String {
        v.to_string()
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        let n = self.parts.len().max(other.parts.len());
        for i in 0..n {
            let a = self.parts.get(i).copied().unwrap_or(0);
            let b = other.parts.get(i).copied().unwrap_or(0);
            match a.cmp(&b) {
                Ordering::Equal => continue,
                o => return o,
            }
        }
        // A release sorts after its pre-releases.
        match (self.pre, other.pre) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(a), Some(b)) => a.cmp(&b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    #[test]
    fn orders_numerically_with_missing_parts_as_zero() {
        assert!(v("12.10") > v("12.9"));
        assert_eq!(v("13.2"), v("13.2.0"));
        assert!(v("2.15.0+cu132") == v("2.15.0"));
        assert_eq!(v("2.15.0+cu132").to_string(), "2.15.0+cu132");
        assert!(v("595.45.04") > v("580.65.06"));
        assert_eq!(v("595.45.04").to_string(), "595.45.04");
    }

    #[test]
    fn rejects_garbage_with_a_message() {
        for bad in ["", "2..1", "a.b", "2.15.0+", "1.2.3.4x", "99999999999"] {
            let e = bad.parse::<Version>().unwrap_err();
            assert!(e.to_string().contains("is not a version"), "{bad}");
        }
    }

    #[test]
    fn pre_releases_order_before_their_release() {
        assert!(v("2.12.0a0") < v("2.12.0"));
        assert!(v("2.12.0a0") > v("2.11.9"));
        assert!(v("2.13.0.dev20260801") < v("2.13.0a0"));
        assert!(v("2.6.0rc3") > v("2.6.0b1"));
        assert_eq!(v("2.12.0a0+cu132").to_string(), "2.12.0a0+cu132");
        assert_eq!(v("2.12.0a0+cu132").local(), Some("cu132"));
        assert_eq!(v("2.12.0a0").major_minor(), v("2.12"));
        for bad in ["2.12.0x1", "2.12.0a", "2.12.0dev1", "2.12.0.a1"] {
            assert!(bad.parse::<Version>().is_err(), "{bad}");
        }
    }

    #[test]
    fn prefix_matching() {
        assert!(v("13.2.78").matches_prefix(&v("13.2")));
        assert!(!v("13.20.1").matches_prefix(&v("13.2")));
    }
}
