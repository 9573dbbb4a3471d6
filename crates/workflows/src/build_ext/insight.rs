//! Where the build's time and memory went, beside its log: a Chrome trace
//! (`NAME-STAMP.trace.json`), a page (`NAME-STAMP.timeline.html`) and the summary the outcome
//! shows, made of the arch guard's measured compiles, the ninja logs of the source copy and the
//! build's own steps. The measured peaks are kept for the next build's memory pool, and each
//! arch's cost for `archs --src`.

use super::arch_guard::Guard;
use super::source::SourceSpec;
use crate::build_insight::arch_cost_records::{self, ArchCostRecord, LastBuild};
use crate::build_insight::build_summary::{arch_of_image, Summary};
use crate::build_insight::build_trace::{BuildTrace, Span};
use crate::build_insight::compile_record::now_ms;
use crate::build_insight::peaks::Peaks;
use crate::build_insight::written::Written;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What the outcome says of where the build's time and memory went.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Insight {
    #[serde(flatten)]
    pub written: Written,
    /// Measured peaks kept for the next build.
    pub peaks_kept: usize,
}

/// The build's steps in Unix ms: when it started, when the build command started and ended,
/// when the checks started and ended.
#[derive(Debug, Clone, Copy, Default)]
pub struct Times {
    pub started: u64,
    pub build: (u64, u64),
    pub checks: (u64, u64),
}

impl Times {
    /// Unix ms of an `Instant` in the past.
    pub fn unix_ms(at: std::time::Instant) -> u64 {
        now_ms().saturating_sub(at.elapsed().as_millis() as u64)
    }
}

/// The `.ninja_log` files of the build (torch's ninja builds one per extension's temp dir).
fn ninja_logs(tree: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![(tree.to_path_buf(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() && depth < 6 {
                dirs.push((e.path(), depth + 1));
            } else if t.is_file() && e.file_name() == ".ninja_log" {
                out.extend(std::fs::read_to_string(e.path()).ok());
            }
        }
    }
    out
}

/// What the report is made from.
pub struct Build<'a> {
    pub spec: &'a SourceSpec,
    /// `uv build`, `pip wheel`…
    pub builder: &'a str,
    /// The source copy the build ran in.
    pub tree: &'a Path,
    pub log_path: &'a Path,
    pub guard: Option<&'a Guard>,
    pub times: Times,
    /// What the arch costs are kept under for `archs --src`.
    pub source_sha256: &'a str,
    pub torch: &'a str,
    pub nvcc: &'a str,
    pub torch_cuda_arch_list: &'a str,
}

/// Writes the trace and the page beside the log and keeps the peaks; a report, so a failure to
/// write it is a warning, never a failed build.
pub fn write(b: &Build, wheel: &Path) -> Result<Insight> {
    let (times, tree) = (b.times, b.tree);
    let mut compiles = b.guard.map(|g| g.compiles()).unwrap_or_default();
    let peaks_kept = match b.guard {
        Some(g) => Peaks::remember(&g.peaks, &compiles)?,
        None => 0,
    };
    for c in &mut compiles {
        for s in &mut c.sources {
            super::source::user_path(s, tree, b.spec);
        }
    }
    let label = b.spec.label();
    let mut trace = BuildTrace::new(
        &format!("archsmith build-ext {label}"),
        Vec::new(),
        &compiles,
        &ninja_logs(tree),
    );
    let first = trace
        .jobs
        .iter()
        .map(|j| j.span.start_ms.saturating_sub(j.waited_ms))
        .min();
    let last = trace.jobs.iter().map(|j| j.span.end_ms).max();
    let step = |name: &str, start_ms: u64, end_ms: u64| Span {
        name: name.to_string(),
        kind: "step".into(),
        start_ms,
        end_ms: end_ms.max(start_ms),
    };
    trace.steps = vec![
        step(
            "prepare: env, toolkit, source copy",
            times.started,
            times.build.0,
        ),
        step(
            &format!("{}: until the first compile", b.builder),
            times.build.0,
            first.unwrap_or(times.build.1),
        ),
        step(
            "after the last compile: the wheel",
            last.unwrap_or(times.build.1),
            times.build.1,
        ),
        step("audit, load check, import", times.checks.0, times.checks.1),
    ];
    let so_bytes = super::check::shared_object_bytes(wheel);
    let summary = Summary::of(&trace, &super::check::image_bytes(wheel), so_bytes);
    let record = ArchCostRecord {
        label,
        source_sha256: b.source_sha256.to_string(),
        built_at: now_ms() / 1000,
        torch: b.torch.to_string(),
        nvcc: b.nvcc.to_string(),
        torch_cuda_arch_list: b.torch_cuda_arch_list.to_string(),
        device_seconds: summary.device_seconds,
        costs: summary.arch_costs.clone(),
    };
    arch_cost_records::remember(&arch_cost_records::records_dir(), &record)?;
    let written =
        crate::build_insight::written::write(&b.log_path.with_extension(""), &trace, summary)?;
    Ok(Insight {
        written,
        peaks_kept,
    })
}

/// What each of a plan's archs (`sm_75`, `compute_90`: the plan's images) cost in the build of
/// `spec` (the source's content, else its name) that measured most of them: none when no build of
/// it was recorded.
pub fn last_build(spec: &SourceSpec, images: &[String]) -> Result<Option<LastBuild>> {
    let resolved = super::source::resolve(spec)?;
    let mut planned: Vec<String> = Vec::new();
    for a in images.iter().filter_map(|i| arch_of_image(i)) {
        if !planned.iter().any(|p| p == a) {
            planned.push(a.to_string());
        }
    }
    Ok(arch_cost_records::recall(
        &arch_cost_records::records_dir(),
        &spec.label(),
        &resolved.hash,
        &planned,
    )
    .map(|(record, same)| LastBuild::new(record, same, &planned)))
}
