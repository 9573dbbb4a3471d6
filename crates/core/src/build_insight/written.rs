//! A build's trace and timeline on disk, and the rows every command's table shows of them.

use super::build_summary::Summary;
use super::build_trace::BuildTrace;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where a build's trace and page were written, and what they say.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Written {
    /// Chrome's trace event JSON (Perfetto, chrome://tracing).
    pub trace: PathBuf,
    /// The self-contained HTML timeline.
    pub timeline: PathBuf,
    pub summary: Summary,
}

/// Writes `BASE.trace.json` and `BASE.timeline.html`, each whole or not at all.
pub fn write(base: &Path, trace: &BuildTrace, summary: Summary) -> Result<Written> {
    let with = |ext: &str| {
        let mut name = base.file_name().unwrap_or_default().to_os_string();
        name.push(ext);
        base.with_file_name(name)
    };
    let (trace_path, timeline_path) = (with(".trace.json"), with(".timeline.html"));
    crate::cache::store(&trace_path, &serde_json::to_vec(&trace.chrome_json())?)?;
    crate::cache::store(
        &timeline_path,
        super::timeline::html(trace, &summary).as_bytes(),
    )?;
    Ok(Written {
        trace: trace_path,
        timeline: timeline_path,
        summary,
    })
}

impl Written {
    /// The table `trace-build` prints.
    pub fn table(&self) -> String {
        let mut t = crate::output::Table::headerless();
        t.row([
            "build".to_string(),
            format!(
                "{:.0} s, {} steps on {} slots",
                self.summary.wall_seconds, self.summary.compiles, self.summary.slots
            ),
        ]);
        for (what, detail) in self.heaviest_row().into_iter().chain(self.rows()) {
            t.row([what.to_string(), detail]);
        }
        t.render()
    }

    /// The compile with the highest measured peak, for tables that show no other (build-ext's
    /// names its heaviest nvcc compile itself).
    pub fn heaviest_row(&self) -> Option<(&'static str, String)> {
        let (file, bytes) = self.summary.heaviest.as_ref()?;
        Some((
            "heaviest",
            format!(
                "{file} {:.2} GiB peak resident",
                *bytes as f64 / (1u64 << 30) as f64
            ),
        ))
    }

    /// The summary's rows for a command's table.
    pub fn rows(&self) -> Vec<(&'static str, String)> {
        let s = &self.summary;
        let timed = |v: &[(String, f64)], sep: &str| -> String {
            v.iter()
                .map(|(n, secs)| format!("{n} {secs:.0} s"))
                .collect::<Vec<_>>()
                .join(sep)
        };
        // A long build's path has hundreds of links: its first and last few.
        let path = match s.critical_path.len() {
            n if n > 8 => format!(
                "{} → … {} more … → {}",
                timed(&s.critical_path[..3], " → "),
                n - 6,
                timed(&s.critical_path[n - 3..], " → ")
            ),
            _ => timed(&s.critical_path, " → "),
        };
        let mut rows = vec![
            ("slowest", timed(&s.slowest[..s.slowest.len().min(3)], ", ")),
            ("critical path", path),
            (
                "job slots",
                format!(
                    "{} used, {:.0} slot-seconds idle, {:.0} s waiting for memory",
                    s.slots, s.idle_slot_seconds, s.waited_seconds
                ),
            ),
        ];
        rows.extend(s.arch_sentences().into_iter().map(|l| ("arch cost", l)));
        rows.push(("timeline", self.timeline.display().to_string()));
        rows.push(("trace", self.trace.display().to_string()));
        rows
    }
}

/// The trace and page of a ninja build (finished or still running: ninja appends a step as it
/// ends) from `path`, a build directory or its `.ninja_log`, written as
/// `OUT_DIR/ninja.trace.json` and `.timeline.html` (OUT_DIR: the log's directory by default).
pub fn of_ninja_build(path: &Path, out_dir: Option<&Path>) -> Result<Written> {
    use anyhow::Context;
    let log = if path.is_dir() {
        path.join(".ninja_log")
    } else {
        path.to_path_buf()
    };
    let text = crate::input_file::read_text(&log, "ninja log").with_context(|| {
        format!(
            "reading {}: give a ninja build directory (one with a .ninja_log) or the .ninja_log itself",
            log.display()
        )
    })?;
    let trace = BuildTrace::of_ninja_log(&format!("ninja build {}", log.display()), &text);
    anyhow::ensure!(
        !trace.jobs.is_empty(),
        "{} has no steps (lines `START\tEND\tMTIME\tOUTPUT\tHASH`, as ninja 1.10 or later writes in log v5, v6 and v7): nothing to draw",
        log.display()
    );
    let summary = Summary::of(&trace, &Default::default(), 0);
    let dir = out_dir.map_or_else(
        || log.parent().unwrap_or(Path::new(".")).to_path_buf(),
        Path::to_path_buf,
    );
    write(&dir.join("ninja"), &trace, summary)
}
