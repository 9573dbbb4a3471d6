//! One line per compile, appended by the compile wrapper (the arch guard) as each compile ends:
//! what it compiled, when it ran, how long it waited for memory, its measured peak resident
//! memory and, for nvcc, its phases per arch. Every report of a build is made from these lines.

use super::nvcc_time::Phase;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A compile, as measured by the process that ran it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompileRecord {
    /// `nvcc` (the C++ compiler's records say `c++`).
    pub tool: String,
    /// The sources the command compiled, as it named them.
    pub sources: Vec<String>,
    /// Unix time in ms when it started (after any wait for memory) and when it ended.
    pub start_ms: u64,
    pub end_ms: u64,
    /// How long it waited for memory before starting.
    #[serde(default)]
    pub waited_ms: u64,
    /// The peak resident memory of the compile: the highest sampled sum over its process tree
    /// (nvcc runs cicc and ptxas of several archs at once with `--threads`), and never less than
    /// its largest single process (the kernel's `ru_maxrss`, exact); 0 where a compiler cache ran
    /// it (a hit, or a miss sccache's server compiled: not in the measured tree).
    pub peak_rss_bytes: u64,
    /// What the memory gate reserved for it, and where that figure came from.
    #[serde(default)]
    pub reserved_bytes: u64,
    #[serde(default)]
    pub reserved_from: String,
    /// The key its peak is kept under for later builds ([`super::peaks`]).
    #[serde(default)]
    pub key: String,
    pub exit: i32,
    /// nvcc's own phases (`--time`), when they were timed.
    #[serde(default)]
    pub phases: Vec<Phase>,
}

impl CompileRecord {
    pub fn seconds(&self) -> f64 {
        self.end_ms.saturating_sub(self.start_ms) as f64 / 1000.0
    }

    /// The first source's file name, for tables.
    pub fn file_name(&self) -> String {
        let s = self.sources.first().map(String::as_str).unwrap_or("?");
        Path::new(s)
            .file_name()
            .map_or(s.to_string(), |n| n.to_string_lossy().into_owned())
    }
}

/// Appends `record` as one line, in one `write` with `O_APPEND` so that parallel compiles never
/// interleave their lines.
pub fn append(path: &Path, line: &str) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    f.write_all(format!("{line}\n").as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// The compile records among the lines of `text` (other lines are skipped).
pub fn parse(text: &str) -> Vec<CompileRecord> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<CompileRecord>(l).ok())
        .collect()
}

/// Milliseconds since the Unix epoch now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `2026-11-28 09:14 UTC` of Unix seconds, for people reading a record.
pub fn utc_date(unix_s: u64) -> String {
    chrono::DateTime::from_timestamp(unix_s as i64, 0).map_or_else(
        || format!("{unix_s} s after 1970"),
        |t| t.format("%Y-%m-%d %H:%M UTC").to_string(),
    )
}

/// The resident memory of `pid` and all its descendants now, in bytes (`/proc/PID/statm` and
/// `/proc/PID/task/*/children`); 0 once it is gone.
pub fn tree_rss_bytes(pid: u32) -> u64 {
    let page = 4096u64;
    let mut total = 0u64;
    let mut stack = vec![pid];
    let mut seen = 0usize;
    while let Some(p) = stack.pop() {
        seen += 1;
        if seen > 10_000 {
            break;
        }
        if let Ok(statm) = std::fs::read_to_string(format!("/proc/{p}/statm")) {
            if let Some(rss) = statm
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
            {
                total += rss * page;
            }
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            if let Ok(children) = std::fs::read_to_string(t.path().join("children")) {
                stack.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_other_lines_are_skipped() {
        let r = CompileRecord {
            tool: "nvcc".into(),
            sources: vec!["/src/csrc/scale.cu".into()],
            start_ms: 1_000,
            end_ms: 3_500,
            waited_ms: 10,
            peak_rss_bytes: 1 << 30,
            reserved_bytes: 2 << 30,
            reserved_from: "per-kind estimate".into(),
            key: "k".into(),
            exit: 0,
            phases: vec![],
        };
        let text = format!(
            "{}\n{{\"removed\":[],\"added\":true,\"sources\":[\"a.cu\"]}}\nnot json\n",
            serde_json::to_string(&r).unwrap()
        );
        assert_eq!(parse(&text), std::slice::from_ref(&r));
        assert_eq!(r.seconds(), 2.5);
        assert_eq!(r.file_name(), "scale.cu");
    }

    #[test]
    fn a_process_tree_is_measured_and_a_gone_one_is_zero() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let mine = tree_rss_bytes(std::process::id());
        let its = tree_rss_bytes(child.id());
        assert!(its > 0 && mine > its, "{mine} {its}");
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(tree_rss_bytes(child.id()), 0);
    }
}
