//! Manylinux policies (PEP 600) as auditwheel judges a wheel: which glibc, libstdc++ and libgcc
//! symbol versions, and which system libraries, each platform tag allows on x86_64.

use super::KnowledgeBase;
use serde::Deserialize;
use std::collections::BTreeMap;

/// One platform tag's policy.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManylinuxPolicyRow {
    /// `manylinux_2_28`.
    pub name: String,
    /// Legacy names of the same policy (`manylinux2014`).
    pub aliases: Vec<String>,
    /// auditwheel's priority: higher is more compatible.
    pub priority: u32,
    /// Per prefix (`GLIBC`), the newest version allowed; every version of the prefix's
    /// [`ManylinuxSymbolVersionsRow`] up to it is allowed.
    pub newest: BTreeMap<String, String>,
    /// Prefixes of which no version is allowed (`LIBATOMIC` before manylinux_2_24).
    pub none_of: Vec<String>,
    /// Allowed versions that are names, not numbers (`CXXABI_TM_1`).
    pub named: Vec<String>,
    /// The system libraries a wheel may need without carrying them.
    pub libraries: Vec<String>,
    pub source: String,
}

/// Every numbered version of one prefix that some policy allows.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManylinuxSymbolVersionsRow {
    pub prefix: String,
    pub versions: Vec<String>,
    pub source: String,
}

/// `2.3.4` as numbers; None for a name (`PRIVATE`, `TM_1`).
pub fn dotted(v: &str) -> Option<Vec<u32>> {
    v.split('.').map(|p| p.parse().ok()).collect()
}

impl ManylinuxPolicyRow {
    /// `manylinux_2_28_x86_64`.
    pub fn tag(&self) -> String {
        format!("{}_x86_64", self.name)
    }
}

impl KnowledgeBase {
    /// The policies, most compatible first.
    pub fn manylinux_policies(&self) -> Vec<&ManylinuxPolicyRow> {
        let mut rows: Vec<&ManylinuxPolicyRow> = self.manylinux_policies.iter().collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.priority));
        rows
    }

    /// Whether `policy` allows the symbol version `version` (`GLIBC_2.34`: prefix `GLIBC`, the
    /// part before the first `_`). A prefix the policy does not name at all is not its business,
    /// as for auditwheel.
    pub fn manylinux_allows(&self, policy: &ManylinuxPolicyRow, version: &str) -> bool {
        let (prefix, number) = version.split_once('_').unwrap_or((version, ""));
        if policy.none_of.iter().any(|p| p == prefix) {
            return false;
        }
        let Some(newest) = policy.newest.get(prefix) else {
            let named = policy
                .named
                .iter()
                .any(|n| n.starts_with(&format!("{prefix}_")));
            return !named || policy.named.iter().any(|n| n == version);
        };
        if policy.named.iter().any(|n| n == version) {
            return true;
        }
        let (Some(v), Some(max)) = (dotted(number), dotted(newest)) else {
            return false;
        };
        v <= max
            && self
                .manylinux_symbol_versions
                .iter()
                .find(|r| r.prefix == prefix)
                .is_some_and(|r| r.versions.iter().any(|k| k == number))
    }
}
