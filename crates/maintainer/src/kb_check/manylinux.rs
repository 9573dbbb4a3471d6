//! `kb check --manylinux`: the `[[manylinux_policy]]` and `[[manylinux_symbol_versions]]` rows
//! read against the policy file of the auditwheel release their sources name
//! (`auditwheel/policy/manylinux-policy.json` in its wheel on PyPI, read by range and kept): each
//! x86_64 policy's aliases, priority, newest version per prefix, prefixes with none, named
//! versions and libraries, and that every policy's numbered versions are exactly the prefix's
//! versions up to its newest (what the rows' newest-version form assumes).

use crate::kb::manylinux_policies::dotted;
use crate::kb::KnowledgeBase;
use crate::output::{Exit, Table};
use crate::pypi::Pypi;
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

const POLICY_FILE: &str = "auditwheel/policy/manylinux-policy.json";

#[derive(Debug, Serialize)]
pub struct PolicyCheck {
    pub name: String,
    pub problems: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct ManylinuxReport {
    /// `auditwheel 6.8.2`: the release read.
    pub auditwheel: String,
    pub policies: Vec<PolicyCheck>,
    /// Problems of the symbol-version table, or of a policy only one side has.
    pub problems: Vec<String>,
}

impl ManylinuxReport {
    pub fn exit(&self) -> Exit {
        Exit::passed(
            self.problems.is_empty() && self.policies.iter().all(|p| p.problems.is_empty()),
        )
    }

    pub fn table(&self) -> String {
        let mut t = Table::new(["POLICY", "VERDICT"]);
        for p in &self.policies {
            let verdict = match p.problems.is_empty() {
                true => "ok".to_string(),
                false => format!("DIFFERS: {}", p.problems.join("; ")),
            };
            t.row([p.name.clone(), verdict]);
        }
        for p in &self.problems {
            t.row(["-".to_string(), format!("DIFFERS: {p}")]);
        }
        format!(
            "{}read against {}'s {POLICY_FILE}\n",
            t.render(),
            self.auditwheel
        )
    }
}

/// The auditwheel release the rows' sources name (they must name one).
fn release_named(kb: &KnowledgeBase) -> Result<String> {
    let re = regex::Regex::new(r"^auditwheel (\S+) ").expect("a valid pattern");
    let mut versions = BTreeSet::new();
    for source in kb
        .manylinux_policies
        .iter()
        .map(|r| &r.source)
        .chain(kb.manylinux_symbol_versions.iter().map(|r| &r.source))
    {
        let v = re.captures(source).ok_or_else(|| {
            anyhow!("a manylinux row's source does not start `auditwheel VERSION `: {source}")
        })?;
        versions.insert(v[1].to_string());
    }
    match versions.len() {
        1 => Ok(versions.into_iter().next().unwrap_or_default()),
        n => bail!(
            "the manylinux rows name {n} auditwheel releases ({versions:?}); they must copy one"
        ),
    }
}

/// Reads the policy file of the named release from PyPI (kept after the first read).
pub fn check_manylinux(kb: &KnowledgeBase, pypi: &Pypi) -> Result<ManylinuxReport> {
    let version = release_named(kb)?;
    let files = pypi.files("auditwheel")?;
    let wheel = files
        .iter()
        .find(|f| f.wheel_version() == Some(version.as_str()))
        .ok_or_else(|| anyhow!("PyPI has no wheel of auditwheel {version}"))?;
    let policy = pypi
        .members(wheel, &[POLICY_FILE])?
        .pop()
        .flatten()
        .ok_or_else(|| anyhow!("{} has no {POLICY_FILE}", wheel.filename))?;
    let json: serde_json::Value = serde_json::from_slice(&policy)
        .with_context(|| format!("{POLICY_FILE} of {}: not JSON", wheel.filename))?;
    compare(kb, &json, &format!("auditwheel {version}"))
}

/// The rows against a policy file's JSON.
pub fn compare(
    kb: &KnowledgeBase,
    json: &serde_json::Value,
    release: &str,
) -> Result<ManylinuxReport> {
    let entries = json
        .as_array()
        .ok_or_else(|| anyhow!("the policy file is not a list"))?;
    let mut report = ManylinuxReport {
        auditwheel: release.to_string(),
        policies: Vec::new(),
        problems: Vec::new(),
    };
    let mut union: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut lists = Vec::new();
    for e in entries {
        let name = e["name"].as_str().unwrap_or_default().to_string();
        let Some(versions) = e["symbol_versions"]["x86_64"].as_object() else {
            continue; // `linux`: no policy to keep
        };
        let mut numbered: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut named = Vec::new();
        for (prefix, list) in versions {
            let list = strings(list);
            let (num, names): (Vec<String>, Vec<String>) =
                list.into_iter().partition(|v| dotted(v).is_some());
            union
                .entry(prefix.clone())
                .or_default()
                .extend(num.iter().cloned());
            named.extend(names.into_iter().map(|n| format!("{prefix}_{n}")));
            numbered.insert(prefix.clone(), num);
        }
        lists.push((name.clone(), numbered.clone()));
        let Some(row) = kb.manylinux_policies.iter().find(|r| r.name == name) else {
            report.problems.push(format!(
                "{release} has {name}; the knowledge base has no row for it"
            ));
            continue;
        };
        let problems = policy_problems(e, row, &numbered, named);
        report.policies.push(PolicyCheck { name, problems });
    }
    for row in &kb.manylinux_policies {
        if !report.policies.iter().any(|p| p.name == row.name) {
            report.problems.push(format!(
                "the knowledge base has {}; {release} has no such x86_64 policy",
                row.name
            ));
        }
    }
    symbol_versions(kb, &union, &lists, release, &mut report.problems);
    Ok(report)
}

/// A JSON list of strings (anything else: empty).
fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// One policy of the file against its row.
fn policy_problems(
    e: &serde_json::Value,
    row: &crate::kb::manylinux_policies::ManylinuxPolicyRow,
    numbered: &BTreeMap<String, Vec<String>>,
    mut named: Vec<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let aliases = strings(&e["aliases"]);
    if aliases != row.aliases {
        problems.push(format!("aliases {aliases:?}, the row {:?}", row.aliases));
    }
    if e["priority"].as_u64() != Some(u64::from(row.priority)) {
        problems.push(format!(
            "priority {}, the row {}",
            e["priority"], row.priority
        ));
    }
    for (prefix, num) in numbered {
        let newest = num.iter().max_by_key(|v| dotted(v));
        match (newest, row.newest.get(prefix), row.none_of.contains(prefix)) {
            (None, _, true) => {}
            (None, _, false) => problems.push(format!("allows no {prefix} version; the row does")),
            (Some(n), Some(r), false) if n == r => {}
            (Some(n), r, _) => problems.push(format!("newest {prefix} {n}, the row {r:?}")),
        }
    }
    for prefix in row.newest.keys().chain(&row.none_of) {
        if !numbered.contains_key(prefix) {
            problems.push(format!("names no {prefix}; the row does"));
        }
    }
    named.sort();
    let mut row_named = row.named.clone();
    row_named.sort();
    if named != row_named {
        problems.push(format!("named versions {named:?}, the row {row_named:?}"));
    }
    let libs: BTreeSet<String> = strings(&e["lib_whitelist"]).into_iter().collect();
    let row_libs: BTreeSet<String> = row.libraries.iter().cloned().collect();
    if libs != row_libs {
        let more: Vec<_> = libs.difference(&row_libs).collect();
        let fewer: Vec<_> = row_libs.difference(&libs).collect();
        problems.push(format!(
            "libraries: the row lacks {more:?} and has {fewer:?} besides"
        ));
    }
    problems
}

/// Each prefix's row is the union of the policies' numbered versions, and every policy's list is
/// that union up to its newest.
fn symbol_versions(
    kb: &KnowledgeBase,
    union: &BTreeMap<String, BTreeSet<String>>,
    lists: &[(String, BTreeMap<String, Vec<String>>)],
    release: &str,
    problems: &mut Vec<String>,
) {
    for (prefix, all) in union.iter().filter(|(_, all)| !all.is_empty()) {
        let row: BTreeSet<String> = kb
            .manylinux_symbol_versions
            .iter()
            .find(|r| &r.prefix == prefix)
            .map(|r| r.versions.iter().cloned().collect())
            .unwrap_or_default();
        if &row != all {
            let more: Vec<_> = all.difference(&row).collect();
            problems.push(format!(
                "{prefix} versions: the row lacks {more:?} of {release}'s"
            ));
        }
        for (name, numbered) in lists {
            let list: BTreeSet<&String> = numbered
                .get(prefix)
                .map(|l| l.iter().collect())
                .unwrap_or_default();
            let Some(newest) = list.iter().filter_map(|v| dotted(v)).max() else {
                continue;
            };
            let expected: BTreeSet<&String> = all
                .iter()
                .filter(|v| dotted(v).is_some_and(|d| d <= newest))
                .collect();
            if list != expected {
                let skipped: Vec<_> = expected.difference(&list).collect();
                problems.push(format!("{name} skips {prefix} {skipped:?} below its newest: the rows' newest-version form cannot say that"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kb::kb;

    /// The rows' own policies written back as auditwheel's JSON agree; a changed priority, a
    /// library more, a newer GLIBC and a policy the rows lack are each named.
    #[test]
    fn rows_against_a_policy_file() {
        let kb = kb();
        let policy = |r: &crate::kb::manylinux_policies::ManylinuxPolicyRow| {
            let mut versions = serde_json::Map::new();
            for (prefix, newest) in &r.newest {
                let all = &kb
                    .manylinux_symbol_versions
                    .iter()
                    .find(|s| &s.prefix == prefix)
                    .unwrap()
                    .versions;
                let mut list: Vec<String> = all
                    .iter()
                    .filter(|v| dotted(v) <= dotted(newest))
                    .cloned()
                    .collect();
                list.extend(
                    r.named
                        .iter()
                        .filter_map(|n| n.strip_prefix(&format!("{prefix}_")).map(str::to_string)),
                );
                versions.insert(prefix.clone(), list.into());
            }
            for prefix in &r.none_of {
                versions.insert(prefix.clone(), serde_json::Value::Array(vec![]));
            }
            serde_json::json!({"name": r.name, "aliases": r.aliases, "priority": r.priority,
                "symbol_versions": {"x86_64": versions}, "lib_whitelist": r.libraries})
        };
        let linux = serde_json::json!({"name": "linux", "aliases": [], "priority": 0, "symbol_versions": {}, "lib_whitelist": []});
        let mut all: Vec<serde_json::Value> = vec![linux];
        all.extend(kb.manylinux_policies.iter().map(policy));
        let report = compare(kb, &serde_json::Value::Array(all.clone()), "auditwheel x").unwrap();
        assert_eq!(report.exit(), Exit::Success, "{}", report.table());
        assert_eq!(report.policies.len(), kb.manylinux_policies.len());

        let last = all.len() - 1;
        all[1]["priority"] = 99.into();
        all[2]["lib_whitelist"]
            .as_array_mut()
            .unwrap()
            .push("libfoo.so.1".into());
        all[3]["symbol_versions"]["x86_64"]["GLIBC"]
            .as_array_mut()
            .unwrap()
            .push("2.99".into());
        let mut extra = all[last].clone();
        extra["name"] = "manylinux_2_99".into();
        all.push(extra);
        let report = compare(kb, &serde_json::Value::Array(all), "auditwheel x").unwrap();
        let text = report.table();
        assert_eq!(report.exit(), Exit::Failed, "{text}");
        assert!(text.contains("priority 99, the row 100"), "{text}");
        assert!(text.contains("the row lacks [\"libfoo.so.1\"]"), "{text}");
        assert!(
            text.contains("newest GLIBC 2.99, the row Some(\"2.17\")"),
            "{text}"
        );
        assert!(
            text.contains("GLIBC versions: the row lacks [\"2.99\"]"),
            "{text}"
        );
        assert!(
            text.contains("auditwheel x has manylinux_2_99; the knowledge base has no row for it"),
            "{text}"
        );
    }
}
