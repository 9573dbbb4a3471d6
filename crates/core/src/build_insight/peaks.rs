//! Peaks kept across builds: each compile's measured peak resident memory and time, under a key
//! of its tool, its source's content and the flags that change its size (the archs, nvcc's
//! threads), in one file under archsmith's cache. The memory gate reserves a kept peak for the
//! same compile in a later build; a compile never seen reserves the per-kind estimate.

use super::compile_record::CompileRecord;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One nvcc job on torch headers, per nvcc thread, before anything was measured (1.5–3.5 GB
/// measured: docs/build-ext.md; the legacy demo's ROIAlign for three archs peaks at 3.5 GB).
pub const FIRST_NVCC_GIB_PER_THREAD: f64 = 2.5;
/// One C++ compile on torch headers before anything was measured (1.5 GB: the floor the jobs
/// models keep for C++ units; torch's own heaviest units, FlashAttention's CPU kernels, are
/// learned once measured).
pub const FIRST_CXX_GIB: f64 = 1.5;
/// What a compile reserves above its measured peak.
pub const HEADROOM: f64 = 1.15;
/// The variable that names another file for the peaks (tests, a CI cache).
pub const PATH_VAR: &str = "ARCHSMITH_COMPILE_PEAKS";
/// The most compiles the file keeps (the least recently measured go first).
const KEPT: usize = 20_000;

/// A compile's measured peak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    pub peak_rss_bytes: u64,
    pub seconds: f64,
    /// The source's file name, for people reading the file.
    pub file: String,
    /// Unix seconds of the measurement.
    pub measured_at: u64,
}

/// The kept peaks.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Peaks {
    pub compiles: BTreeMap<String, Kept>,
}

/// Where the peaks are kept.
pub fn default_path() -> PathBuf {
    crate::paths::cache_dir()
        .join("build-records")
        .join("compile-peaks.json")
}

/// Where the peaks are kept for this process: [`PATH_VAR`] when set, else [`default_path`].
pub fn default_path_for_env() -> PathBuf {
    std::env::var_os(PATH_VAR).map_or_else(default_path, PathBuf::from)
}

/// The key of a compile: its tool, its source's content hash and the flags that size it.
pub fn key(tool: &str, source_sha256: &str, sizing_flags: &[String]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(tool.as_bytes());
    h.update([0]);
    h.update(source_sha256.as_bytes());
    for f in sizing_flags {
        h.update([0]);
        h.update(f.as_bytes());
    }
    crate::stamp::hex(&h.finalize())[..32].to_string()
}

impl Peaks {
    /// The peaks kept in `path`; none when it is missing or unreadable (they are a hint).
    pub fn load(path: &Path) -> Peaks {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    pub fn get(&self, key: &str) -> Option<&Kept> {
        self.compiles.get(key)
    }

    /// What a compile under `key` reserves, and where the figure comes from: its kept peak with
    /// [`HEADROOM`], else `first` (the first-build estimate of its kind).
    pub fn reservation(&self, key: &str, first: (u64, &'static str)) -> (u64, &'static str) {
        match self.get(key) {
            Some(k) if !key.is_empty() => (
                (k.peak_rss_bytes as f64 * HEADROOM) as u64,
                "its peak in an earlier build",
            ),
            _ => first,
        }
    }

    /// Keeps the peaks of `records` (successful compiles with a key) in `path`, under its lock;
    /// returns how many were kept.
    pub fn remember(path: &Path, records: &[CompileRecord]) -> Result<usize> {
        let _lock = crate::cache::lock(&path.with_extension("lock"), &mut || {})?;
        let mut peaks = Peaks::load(path);
        let now = super::compile_record::now_ms() / 1000;
        let mut n = 0;
        for r in records.iter().filter(|r| r.exit == 0 && !r.key.is_empty()) {
            peaks.compiles.insert(
                r.key.clone(),
                Kept {
                    peak_rss_bytes: r.peak_rss_bytes,
                    seconds: r.seconds(),
                    file: r.file_name(),
                    measured_at: now,
                },
            );
            n += 1;
        }
        if peaks.compiles.len() > KEPT {
            let mut by_age: Vec<(u64, String)> = peaks
                .compiles
                .iter()
                .map(|(k, v)| (v.measured_at, k.clone()))
                .collect();
            by_age.sort();
            for (_, k) in by_age.iter().take(peaks.compiles.len() - KEPT) {
                peaks.compiles.remove(k);
            }
        }
        crate::cache::store(path, &serde_json::to_vec_pretty(&peaks)?)?;
        Ok(n)
    }
}

/// The GiB one job of `tool` (`c++`, `nvcc`) takes as `records` measured it: the largest peak
/// of its successful measured compiles with [`HEADROOM`], once at least `at_least` were measured
/// (None before: the first-build figure stands).
pub fn measured_gib_per_job(records: &[CompileRecord], tool: &str, at_least: usize) -> Option<f64> {
    let peaks: Vec<u64> = records
        .iter()
        .filter(|r| r.tool == tool && r.exit == 0 && r.peak_rss_bytes > 0)
        .map(|r| r.peak_rss_bytes)
        .collect();
    let largest = *peaks.iter().max()?;
    (peaks.len() >= at_least).then(|| largest as f64 * HEADROOM / (1u64 << 30) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_sized_by_the_largest_measured_peak_once_enough_were_measured() {
        let rec = |tool: &str, peak: u64, exit| CompileRecord {
            tool: tool.into(),
            sources: vec!["/t/a.cpp".into()],
            start_ms: 0,
            end_ms: 1,
            waited_ms: 0,
            peak_rss_bytes: peak,
            reserved_bytes: 0,
            reserved_from: String::new(),
            key: String::new(),
            exit,
            phases: vec![],
        };
        let g = 1u64 << 30;
        let records = [
            rec("c++", g, 0),
            rec("c++", g / 2, 0),
            rec("c++", 4 * g, 1),
            rec("c++", 0, 0),
            rec("nvcc", 3 * g, 0),
        ];
        // The failed compile and the unmeasured one (through a cache) do not count.
        let gib = measured_gib_per_job(&records, "c++", 2).unwrap();
        assert!((gib - HEADROOM).abs() < 1e-9, "{gib}");
        assert_eq!(measured_gib_per_job(&records, "c++", 3), None);
        assert_eq!(measured_gib_per_job(&records, "link", 1), None);
    }

    #[test]
    fn peaks_are_kept_by_key_and_a_failed_compile_is_not() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("peaks.json");
        assert!(Peaks::load(&path).compiles.is_empty());
        let k = key(
            "nvcc",
            "abc",
            &["-gencode=arch=compute_75,code=sm_75".into()],
        );
        assert_ne!(k, key("nvcc", "abc", &[]));
        let rec = |key: &str, exit, peak| CompileRecord {
            tool: "nvcc".into(),
            sources: vec!["/t/a.cu".into()],
            start_ms: 0,
            end_ms: 2000,
            waited_ms: 0,
            peak_rss_bytes: peak,
            reserved_bytes: 0,
            reserved_from: String::new(),
            key: key.into(),
            exit,
            phases: vec![],
        };
        let n = Peaks::remember(&path, &[rec(&k, 0, 7 << 20), rec("other", 1, 9 << 20)]).unwrap();
        assert_eq!(n, 1);
        let kept = Peaks::load(&path);
        assert_eq!(kept.get(&k).unwrap().peak_rss_bytes, 7 << 20);
        assert_eq!(kept.get(&k).unwrap().file, "a.cu");
        assert!(kept.get("other").is_none());
        std::fs::write(&path, "{garbled").unwrap();
        assert!(Peaks::load(&path).compiles.is_empty());
    }
}
