//! Each arch's cost kept from a source's builds, so that planning a list for the same source
//! (`archs --src`) can say what each arch cost there before anything is compiled: one file per
//! source content under archsmith's build records, with the newest build of each arch list. A
//! plan is read against the build that measured most of its archs; a source whose files changed
//! since is still answered by the builds of a source of the same name, and says so.

use super::build_summary::{dotted, percent, ArchCost};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The most arch lists kept per source (the least recent go first).
const KEPT_PER_SOURCE: usize = 16;

/// One build's arch costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchCostRecord {
    /// The source as build-ext names it (`causal_conv1d-1.5.2`, a directory's name).
    pub label: String,
    pub source_sha256: String,
    /// Unix seconds of the build.
    pub built_at: u64,
    pub torch: String,
    pub nvcc: String,
    pub torch_cuda_arch_list: String,
    /// Device-phase seconds over every arch (0 where nvcc's phases were not timed: a compiler
    /// cache ran the compiles).
    pub device_seconds: f64,
    pub costs: Vec<ArchCost>,
}

/// The builds of one source content.
#[derive(Debug, Default, Serialize, Deserialize)]
struct SourceBuilds {
    builds: Vec<ArchCostRecord>,
}

/// Where the records are kept: `ARCHSMITH_HOME`'s build records.
pub fn records_dir() -> PathBuf {
    crate::paths::cache_dir()
        .join("build-records")
        .join("arch-costs")
}

fn file_of(dir: &Path, source_sha256: &str) -> PathBuf {
    let short: String = source_sha256.chars().take(16).collect();
    dir.join(format!("{short}.json"))
}

fn read(path: &Path) -> SourceBuilds {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Keeps `rec` as its source's newest build of its arch list. A build with no device times (a
/// compiler cache ran it) does not replace one that has them: its bytes alone would hide what
/// the archs cost.
pub fn remember(dir: &Path, rec: &ArchCostRecord) -> Result<bool> {
    if rec.costs.is_empty() {
        return Ok(false);
    }
    std::fs::create_dir_all(dir)?;
    let _lock = crate::cache::lock(&dir.join(".lock"), &mut || {})?;
    let path = file_of(dir, &rec.source_sha256);
    let mut kept = read(&path);
    kept.builds.retain(|b| b.source_sha256 == rec.source_sha256);
    let same_list = |b: &ArchCostRecord| b.torch_cuda_arch_list == rec.torch_cuda_arch_list;
    if rec.device_seconds <= 0.0
        && kept
            .builds
            .iter()
            .any(|b| same_list(b) && b.device_seconds > 0.0)
    {
        return Ok(false);
    }
    kept.builds.retain(|b| !same_list(b));
    kept.builds.push(rec.clone());
    kept.builds.sort_by_key(|b| std::cmp::Reverse(b.built_at));
    kept.builds.truncate(KEPT_PER_SOURCE);
    crate::cache::store(&path, &serde_json::to_vec_pretty(&kept)?)?;
    Ok(true)
}

/// The build that measured most of `planned` (`75`, `90a`), the newest of those, of the source
/// with this content; else of a source named `label` (`same_source` false).
pub fn recall(
    dir: &Path,
    label: &str,
    source_sha256: &str,
    planned: &[String],
) -> Option<(ArchCostRecord, bool)> {
    let best = |builds: Vec<ArchCostRecord>| {
        builds.into_iter().max_by_key(|b| {
            let covered = planned
                .iter()
                .filter(|p| b.costs.iter().any(|c| &c.arch == *p))
                .count();
            (covered, b.device_seconds > 0.0, b.built_at)
        })
    };
    let own: Vec<ArchCostRecord> = read(&file_of(dir, source_sha256))
        .builds
        .into_iter()
        .filter(|b| b.source_sha256 == source_sha256)
        .collect();
    if let Some(b) = best(own) {
        return Some((b, true));
    }
    let named: Vec<ArchCostRecord> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .flat_map(|e| read(&e.path()).builds)
        .filter(|b| b.label == label)
        .collect();
    best(named).map(|b| (b, false))
}

/// A planned arch beside what it cost in the last build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchAgainstLast {
    /// `7.5`, `9.0a`.
    pub arch: String,
    pub planned: bool,
    /// What it cost in the last build; none where that build did not have it.
    pub last_build: Option<ArchCost>,
}

/// What a source's last build says of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastBuild {
    pub label: String,
    /// The source's files are the ones that build compiled.
    pub same_source: bool,
    pub built_at: u64,
    pub torch: String,
    pub nvcc: String,
    pub torch_cuda_arch_list: String,
    pub device_seconds: f64,
    pub archs: Vec<ArchAgainstLast>,
    /// Device seconds of the last build's archs this plan keeps (what is known of its cost).
    pub planned_known_seconds: f64,
}

impl LastBuild {
    /// `record` against a plan of `planned` archs in the cost's spelling (`75`, `90a`: an
    /// `sm_`/`compute_` image's number).
    pub fn new(record: ArchCostRecord, same_source: bool, planned: &[String]) -> LastBuild {
        let mut archs: Vec<ArchAgainstLast> = planned
            .iter()
            .map(|a| ArchAgainstLast {
                arch: dotted(a),
                planned: true,
                last_build: record.costs.iter().find(|c| &c.arch == a).cloned(),
            })
            .collect();
        for c in record.costs.iter().filter(|c| !planned.contains(&c.arch)) {
            archs.push(ArchAgainstLast {
                arch: dotted(&c.arch),
                planned: false,
                last_build: Some(c.clone()),
            });
        }
        let planned_known_seconds = archs
            .iter()
            .filter(|a| a.planned)
            .filter_map(|a| a.last_build.as_ref())
            .map(|c| c.device_seconds)
            .sum::<f64>()
            + 0.0;
        LastBuild {
            label: record.label,
            same_source,
            built_at: record.built_at,
            torch: record.torch,
            nvcc: record.nvcc,
            torch_cuda_arch_list: record.torch_cuda_arch_list,
            device_seconds: record.device_seconds,
            archs,
            planned_known_seconds,
        }
    }

    /// The lines people read under the plan.
    pub fn lines(&self) -> Vec<String> {
        let which = if self.same_source {
            "measured in a build of this source"
        } else {
            "measured in a build of a source with this name (its files differ now)"
        };
        let mut out = vec![format!(
            "{which}: {} for {} with torch {}, nvcc {}, {}",
            self.label,
            self.torch_cuda_arch_list,
            self.torch,
            self.nvcc,
            crate::build_insight::compile_record::utc_date(self.built_at)
        )];
        if self.device_seconds <= 0.0 {
            out.push("its device-compile time was not measured (a compiler cache ran its compiles): image bytes only".into());
        }
        for a in &self.archs {
            let what = match (&a.last_build, a.planned) {
                (None, _) => "planned; not in that build, so not measured".to_string(),
                (Some(c), planned) => format!(
                    "{} {:.1} s of device compile ({}), {} KiB of images ({} of the shared objects)",
                    if planned { "kept:" } else { "dropped: saves" },
                    c.device_seconds,
                    percent(c.device_share),
                    c.wheel_bytes / 1024,
                    percent(c.wheel_share)
                ),
            };
            out.push(format!("  {:<6} {what}", a.arch));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(arch: &str, s: f64, share: f64) -> ArchCost {
        ArchCost {
            arch: arch.into(),
            device_seconds: s,
            device_share: share,
            wheel_bytes: 2048,
            wheel_share: share,
        }
    }

    fn record(sha: &str, at: u64, device: f64) -> ArchCostRecord {
        ArchCostRecord {
            label: "pkg-1.0".into(),
            source_sha256: sha.into(),
            built_at: at,
            torch: "2.6.0+cu124".into(),
            nvcc: "12.4.131".into(),
            torch_cuda_arch_list: "7.5;8.9;9.0".into(),
            device_seconds: device,
            costs: vec![
                cost("75", device * 0.25, 0.25),
                cost("89", device * 0.35, 0.35),
                cost("90", device * 0.4, 0.4),
            ],
        }
    }

    fn plan(archs: &[&str]) -> Vec<String> {
        archs.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn the_same_source_is_recalled_else_the_newest_of_its_name() {
        let d = tempfile::tempdir().unwrap();
        let p = plan(&["75", "89"]);
        assert!(recall(d.path(), "pkg-1.0", "aaaa", &p).is_none());
        assert!(remember(d.path(), &record("aaaa", 10, 100.0)).unwrap());
        assert!(remember(d.path(), &record("bbbb", 20, 50.0)).unwrap());
        let (r, same) = recall(d.path(), "pkg-1.0", "aaaa", &p).unwrap();
        assert!(same);
        assert_eq!(r.device_seconds, 100.0);
        let (r, same) = recall(d.path(), "pkg-1.0", "cccc", &p).unwrap();
        assert!(!same, "another content of the same name");
        assert_eq!(r.source_sha256, "bbbb", "the newest build of that name");
        assert!(recall(d.path(), "other-2.0", "cccc", &p).is_none());
    }

    #[test]
    fn the_build_that_measured_most_of_the_plan_answers() {
        let d = tempfile::tempdir().unwrap();
        remember(d.path(), &record("aaaa", 10, 100.0)).unwrap();
        // A later build of 7.5 alone is kept beside the three-arch one, not over it.
        let mut one = record("aaaa", 20, 30.0);
        one.torch_cuda_arch_list = "7.5".into();
        one.costs.truncate(1);
        remember(d.path(), &one).unwrap();
        let of = |p: &[&str]| {
            recall(d.path(), "pkg-1.0", "aaaa", &plan(p))
                .unwrap()
                .0
                .torch_cuda_arch_list
        };
        assert_eq!(of(&["89", "90"]), "7.5;8.9;9.0");
        assert_eq!(of(&["75"]), "7.5", "both measured 7.5: the newest");
        // The same list built again replaces its record.
        remember(d.path(), &record("aaaa", 30, 90.0)).unwrap();
        let (r, _) = recall(d.path(), "pkg-1.0", "aaaa", &plan(&["89"])).unwrap();
        assert_eq!((r.built_at, r.device_seconds), (30, 90.0));
    }

    #[test]
    fn a_build_without_device_times_does_not_hide_one_with_them() {
        let d = tempfile::tempdir().unwrap();
        remember(d.path(), &record("aaaa", 10, 100.0)).unwrap();
        assert!(!remember(d.path(), &record("aaaa", 20, 0.0)).unwrap());
        let (r, _) = recall(d.path(), "pkg-1.0", "aaaa", &plan(&["75"])).unwrap();
        assert_eq!(r.device_seconds, 100.0);
        // A record without costs is never kept.
        let mut empty = record("dddd", 30, 1.0);
        empty.costs.clear();
        assert!(!remember(d.path(), &empty).unwrap());
    }

    #[test]
    fn a_plan_is_read_against_the_last_build() {
        let last = LastBuild::new(
            record("aaaa", 10, 100.0),
            true,
            &["89".into(), "90".into(), "120".into()],
        );
        let by = |a: &str| last.archs.iter().find(|x| x.arch == a).unwrap();
        assert!(by("8.9").planned && by("8.9").last_build.is_some());
        assert!(by("12.0").planned && by("12.0").last_build.is_none());
        assert!(!by("7.5").planned, "built last time, not planned now");
        assert!((last.planned_known_seconds - 75.0).abs() < 1e-9);
        let text = last.lines().join("\n");
        assert!(
            text.contains("7.5    dropped: saves 25.0 s of device compile (25%)"),
            "{text}"
        );
        assert!(text.contains("12.0   planned; not in that build"), "{text}");
    }
}
