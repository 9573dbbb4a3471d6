//! The one version type: PEP 440 versions (`2.15.0`, `2.6.0rc1`, `2.8.0.dev20250601+cu128`, `13.2`,
//! `595.45.04`), parsed by `pep440_rs`, the crate uv uses, for every release archsmith reads —
//! torch and its companions, CUDA, drivers, compilers.
//!
//! Ordering is PEP 440's (`13.2 == 13.2.0`, `12.10 > 12.9`, `2.6.0rc3 < 2.6.0`, dev releases before
//! pre-releases) with one exception: a `+local` label (`2.15.0+cu132`) is kept for display and
//! [`Version::local`] but ignored in comparisons, as torch's own version checks treat it. The
//! text as written is what is displayed, so driver versions keep their zeros (`595.45.04`).

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Debug, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Version {
    /// The PEP 440 version without its local label: what comparisons use.
    public: pep440_rs::Version,
    local: Option<String>,
    /// The text as written, without a leading `v`.
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not a version: expected a PEP 440 version such as 2.15.0, 13.2, 2.6.0rc1 or 2.8.0.dev20250601+cu128")]
pub struct VersionError {
    pub input: String,
}

impl Version {
    pub fn new<T: Copy + Into<u64>>(parts: &[T]) -> Version {
        let public = pep440_rs::Version::new(parts.iter().map(|&p| p.into()));
        Version {
            text: public.to_string(),
            public,
            local: None,
        }
    }

    /// A pre-release or development release (`2.6.0rc1`, `2.8.0.dev20250601`).
    pub fn is_prerelease(&self) -> bool {
        self.public.any_prerelease()
    }

    pub fn major(&self) -> u32 {
        self.part(0)
    }

    pub fn minor(&self) -> u32 {
        self.part(1)
    }

    fn part(&self, i: usize) -> u32 {
        let p = self.public.release().get(i).copied().unwrap_or(0);
        u32::try_from(p).unwrap_or(u32::MAX)
    }

    /// `major.minor`, the granularity at which CUDA and torch releases differ in what they accept.
    pub fn major_minor(&self) -> Version {
        Version::new(&[self.major(), self.minor()])
    }

    /// The `+local` label (`cu132` in `2.15.0+cu132`), which torch uses for its CUDA variant.
    pub fn local(&self) -> Option<&str> {
        self.local.as_deref()
    }

    /// The release numbers as written (`[13, 2]` for `13.2`, `[2, 6, 0]` for `2.6.0rc1`).
    pub fn parts(&self) -> &[u64] {
        self.public.release()
    }

    /// True when `self` starts with all of `prefix`'s components: `13.2.78` matches `13.2`.
    pub fn matches_prefix(&self, prefix: &Version) -> bool {
        prefix
            .parts()
            .iter()
            .enumerate()
            .all(|(i, p)| self.parts().get(i).copied().unwrap_or(0) == *p)
    }
}

impl From<&pep440_rs::Version> for Version {
    fn from(v: &pep440_rs::Version) -> Version {
        let text = v.to_string();
        Version {
            public: v.clone().without_local(),
            local: text.split_once('+').map(|(_, l)| l.to_string()),
            text,
        }
    }
}

impl FromStr for Version {
    type Err = VersionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || VersionError {
            input: s.to_string(),
        };
        let trimmed = s.trim();
        // `2.*` is a specifier's wildcard, never a release someone printed.
        if trimmed.is_empty() || trimmed.contains('*') {
            return Err(err());
        }
        let parsed: pep440_rs::Version = trimmed.parse().map_err(|_| err())?;
        let mut v = Version::from(&parsed);
        v.text = trimmed
            .strip_prefix(['v', 'V'])
            .unwrap_or(trimmed)
            .to_string();
        Ok(v)
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
        self.public.cmp(&other.public)
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
        for bad in ["", "2..1", "a.b", "2.15.0+", "1.2.3.4x", "2.*", "cu132"] {
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
        for bad in ["2.12.0x1", "2.12.0a1b", "2.12.0dev1x"] {
            assert!(bad.parse::<Version>().is_err(), "{bad}");
        }
        // PEP 440's normal forms: what pip and uv read these as.
        assert_eq!(v("2.12.0dev1"), v("2.12.0.dev1"));
        assert_eq!(v("2.12.0.a1"), v("2.12.0a1"));
        assert_eq!(v("v2.6.0").to_string(), "2.6.0");
    }

    #[test]
    fn nightlies_and_post_releases() {
        let n = v("2.8.0.dev20250601+cu128");
        assert!(n < v("2.8.0a0") && n > v("2.7.1"));
        assert_eq!(n.local(), Some("cu128"));
        assert_eq!(n.parts(), &[2, 8, 0]);
        assert!(v("2.6.0.post1") > v("2.6.0"));
        // What verify pins hands over: pep440_rs's own version of the pin.
        let pinned: pep440_rs::Version = "2.8.0.dev20250601+cu128".parse().unwrap();
        assert_eq!(pinned.to_string(), "2.8.0.dev20250601+cu128");
        let from: Version = (&pinned).into();
        assert_eq!(from, n);
        assert_eq!(from.local(), Some("cu128"));
    }

    #[test]
    fn prefix_matching() {
        assert!(v("13.2.78").matches_prefix(&v("13.2")));
        assert!(!v("13.20.1").matches_prefix(&v("13.2")));
    }
}
