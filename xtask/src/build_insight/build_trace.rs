//! A build's timeline: the steps of the driver (prepare, the build command, the checks) and every
//! compile on the job slot it held, with its wait for memory, its peak and nvcc's phases; written
//! as Chrome's trace event JSON (Perfetto and chrome://tracing open it).
//!
//! Compiles come from the compile wrapper's records (measured) and from each ninja run's
//! `.ninja_log` (the C++ compiles and links that do not pass through it: times only). A compile
//! in both is kept once, measured.

use super::compile_record::CompileRecord;
use super::nvcc_time::Phase;
use crate::build_output::step_weights;
use serde_json::{json, Value};

/// One span of time on the timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub name: String,
    /// `step`, `nvcc`, `c++`, `link`…
    pub kind: String,
    pub start_ms: u64,
    pub end_ms: u64,
}

impl Span {
    pub fn seconds(&self) -> f64 {
        self.end_ms.saturating_sub(self.start_ms) as f64 / 1000.0
    }
}

/// One job of the build on its slot.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub span: Span,
    /// The path the compile named (its source, or ninja's output).
    pub path: String,
    pub slot: usize,
    pub waited_ms: u64,
    /// Measured by the compile wrapper; None for what only ninja logged.
    pub peak_rss_bytes: Option<u64>,
    pub reserved_bytes: Option<u64>,
    /// Where the reservation came from (a peak measured before, or the first-build estimate).
    pub reserved_from: Option<String>,
    pub phases: Vec<Phase>,
    pub exit: i32,
}

/// What a build did, in time.
#[derive(Debug, Clone, Default)]
pub struct BuildTrace {
    pub title: String,
    pub steps: Vec<Span>,
    pub jobs: Vec<Job>,
}

/// The steps of one `.ninja_log` as spans in Unix ms, each command once (a command with several
/// outputs is logged once per output). A log holds every ninja run of its build dir, one after
/// another, each timed from its own start (a run begins where the logged end times fall back).
/// Besides those times ninja logs one in ns per step: up to log v6 the output's mtime (written as
/// the step ends), from v7 the time the step started (ninja 1.12 records it so that an input
/// changed during the step is seen). So each run's start is the median of `mtime − end` (v5, v6)
/// or `mtime − start` (v7) over its steps (a median: an output restat left untouched keeps an
/// old mtime). Logs without such times give nothing (they cannot be placed).
pub fn ninja_spans(ninja_log: &str) -> Vec<(Span, String)> {
    let version: u32 = ninja_log
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("# ninja log v"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let steps: Vec<_> = step_weights::entries(ninja_log).collect();
    // Each step's guess of its run's start (None without a time in ns).
    let origin_of = |s: &step_weights::LoggedStep| {
        let at = if version >= 7 { s.start_ms } else { s.end_ms };
        (s.mtime > 1_000_000_000_000_000_000).then(|| (s.mtime / 1_000_000).saturating_sub(at))
    };
    let mut runs: Vec<&[step_weights::LoggedStep]> = Vec::new();
    let (mut begin, mut latest) = (0, None::<u64>);
    for i in 0..=steps.len() {
        // Within a run steps are logged as they end: an earlier end starts a new run, and so
        // does a start a minute past every start this run has implied (an output restat left
        // untouched implies an earlier one, never a later).
        let new_run = i == steps.len()
            || (i > begin
                && (steps[i].end_ms < steps[i - 1].end_ms
                    || origin_of(&steps[i])
                        .zip(latest)
                        .is_some_and(|(o, l)| o > l + 60_000)));
        if new_run {
            if i > begin {
                runs.push(&steps[begin..i]);
            }
            begin = i;
            latest = None;
        }
        if let Some(o) = steps.get(i).and_then(origin_of) {
            latest = Some(latest.map_or(o, |l| l.max(o)));
        }
    }
    let mut out = Vec::new();
    for run in runs {
        let mut origins: Vec<u64> = run.iter().filter_map(origin_of).collect();
        origins.sort_unstable();
        let Some(&origin) = origins.get(origins.len() / 2) else {
            continue;
        };
        let mut seen = std::collections::HashSet::new();
        for s in run {
            if !s.hash.is_empty() && !seen.insert((s.start_ms, s.end_ms, s.hash)) {
                continue;
            }
            let name = s.output.rsplit('/').next().unwrap_or(s.output).to_string();
            let kind = if name.ends_with(".cu.o") || name.ends_with(".cu.obj") {
                "nvcc"
            } else if name.ends_with(".o") || name.ends_with(".obj") {
                "c++"
            } else {
                "link"
            };
            let span = Span {
                name,
                kind: kind.into(),
                start_ms: origin + s.start_ms,
                end_ms: origin + s.end_ms,
            };
            out.push((span, s.output.to_string()));
        }
    }
    out
}

fn stem(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.split('.').next().unwrap_or(name)
}

impl BuildTrace {
    /// The trace of `steps`, the wrapper's `compiles` and the steps of the build's ninja logs.
    pub fn new(
        title: &str,
        steps: Vec<Span>,
        compiles: &[CompileRecord],
        ninja_logs: &[String],
    ) -> BuildTrace {
        let mut jobs: Vec<Job> = compiles
            .iter()
            .map(|c| Job {
                span: Span {
                    name: c.file_name(),
                    kind: c.tool.clone(),
                    start_ms: c.start_ms,
                    end_ms: c.end_ms,
                },
                path: c.sources.first().cloned().unwrap_or_default(),
                slot: 0,
                waited_ms: c.waited_ms,
                // 0: not measured (a compiler cache ran the compile).
                peak_rss_bytes: (c.peak_rss_bytes > 0).then_some(c.peak_rss_bytes),
                reserved_bytes: Some(c.reserved_bytes),
                reserved_from: Some(c.reserved_from.clone()),
                phases: c.phases.clone(),
                exit: c.exit,
            })
            .collect();
        for log in ninja_logs {
            for (span, output) in ninja_spans(log) {
                // The same compile measured by the wrapper: its output is named for its source
                // (`x.cu` → `x.o`, `x.cuda.o`) and they overlap in time.
                let measured = compiles.iter().any(|c| {
                    c.sources.iter().any(|s| stem(s) == stem(&output))
                        && c.start_ms < span.end_ms + 1000
                        && span.start_ms < c.end_ms + 1000
                });
                if !measured {
                    jobs.push(Job {
                        span,
                        path: output,
                        slot: 0,
                        waited_ms: 0,
                        peak_rss_bytes: None,
                        reserved_bytes: None,
                        reserved_from: None,
                        phases: Vec::new(),
                        exit: 0,
                    });
                }
            }
        }
        assign_slots(&mut jobs);
        BuildTrace {
            title: title.to_string(),
            steps,
            jobs,
        }
    }

    /// The trace of a build known only by its `.ninja_log` (a torch build, a running build).
    pub fn of_ninja_log(title: &str, ninja_log: &str) -> BuildTrace {
        BuildTrace::new(title, Vec::new(), &[], &[ninja_log.to_string()])
    }

    /// The earliest time on the timeline.
    pub fn origin_ms(&self) -> u64 {
        self.steps
            .iter()
            .map(|s| s.start_ms)
            .chain(
                self.jobs
                    .iter()
                    .map(|j| j.span.start_ms.saturating_sub(j.waited_ms)),
            )
            .min()
            .unwrap_or(0)
    }

    pub fn end_ms(&self) -> u64 {
        self.steps
            .iter()
            .map(|s| s.end_ms)
            .chain(self.jobs.iter().map(|j| j.span.end_ms))
            .max()
            .unwrap_or(0)
    }

    /// Job slots used (the most jobs at once, waits included).
    pub fn slots(&self) -> usize {
        self.jobs.iter().map(|j| j.slot + 1).max().unwrap_or(0)
    }

    /// Chrome's trace event format: one track for the driver's steps, one per job slot.
    pub fn chrome_json(&self) -> Value {
        let origin = self.origin_ms();
        let us = |ms: u64| (ms.saturating_sub(origin)) * 1000;
        let mut events = vec![
            json!({"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
                   "args": {"name": self.title}}),
            json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": 0,
                   "args": {"name": "archsmith"}}),
        ];
        for slot in 0..self.slots() {
            events.push(
                json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": slot + 1,
                               "args": {"name": format!("job slot {}", slot + 1)}}),
            );
        }
        for s in &self.steps {
            events.push(json!({"name": s.name, "cat": s.kind, "ph": "X", "pid": 1, "tid": 0,
                               "ts": us(s.start_ms), "dur": (s.end_ms.saturating_sub(s.start_ms)) * 1000}));
        }
        for j in &self.jobs {
            let tid = j.slot + 1;
            if j.waited_ms > 0 {
                events.push(
                    json!({"name": "waiting for memory", "cat": "wait", "ph": "X",
                    "pid": 1, "tid": tid, "ts": us(j.span.start_ms.saturating_sub(j.waited_ms)),
                    "dur": j.waited_ms * 1000, "args": {"file": j.path}}),
                );
            }
            let mut args = json!({"file": j.path, "tool": j.span.kind, "exit": j.exit});
            if let Some(p) = j.peak_rss_bytes {
                args["peak_rss_mib"] = json!(p / (1024 * 1024));
            }
            if let Some(r) = j.reserved_bytes {
                args["reserved_mib"] = json!(r / (1024 * 1024));
                args["reserved_from"] = json!(j.reserved_from);
            }
            let dur = j.span.end_ms.saturating_sub(j.span.start_ms) * 1000;
            events.push(
                json!({"name": j.span.name, "cat": j.span.kind, "ph": "X", "pid": 1,
                "tid": tid, "ts": us(j.span.start_ms), "dur": dur, "args": args}),
            );
            events.extend(phase_events(j, us(j.span.start_ms), dur, tid));
        }
        json!({"traceEvents": events, "displayTimeUnit": "ms",
               "otherData": {"origin_unix_ms": origin, "made_by": "archsmith"}})
    }
}

/// nvcc's phases of a job, nested in it. nvcc reports durations, not start times: they are laid
/// end to end in nvcc's order, shrunk to fit the compile where `--threads` ran several at once;
/// each keeps its measured ms in its args.
fn phase_events(j: &Job, start_us: u64, dur_us: u64, tid: usize) -> Vec<Value> {
    let total_us: f64 = j.phases.iter().map(|p| p.ms * 1000.0).sum();
    let scale = if total_us > dur_us as f64 && total_us > 0.0 {
        dur_us as f64 / total_us
    } else {
        1.0
    };
    let mut at = start_us as f64;
    j.phases
        .iter()
        .map(|p| {
            let d = p.ms * 1000.0 * scale;
            let name = match &p.arch {
                Some(a) => format!("{} {a}", p.name),
                None => p.name.clone(),
            };
            let e = json!({"name": name, "cat": "nvcc phase", "ph": "X", "pid": 1, "tid": tid,
                "ts": at as u64, "dur": d as u64,
                "args": {"ms": p.ms, "arch": p.device_arch()}});
            at += d;
            e
        })
        .collect()
}

/// Puts each job on the lowest slot free when it began to wait or run.
fn assign_slots(jobs: &mut [Job]) {
    jobs.sort_by_key(|j| (j.span.start_ms.saturating_sub(j.waited_ms), j.span.end_ms));
    let mut free_at: Vec<u64> = Vec::new();
    for j in jobs.iter_mut() {
        let begins = j.span.start_ms.saturating_sub(j.waited_ms);
        let slot = match free_at.iter().position(|&f| f <= begins) {
            Some(i) => i,
            None => {
                free_at.push(0);
                free_at.len() - 1
            }
        };
        free_at[slot] = j.span.end_ms;
        j.slot = slot;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ninja_logs_are_placed_by_their_own_clock() {
        // ninja 1.12 (log v7): the ns time is when the step started.
        let v7 = "# ninja log v7\n1\t5348\t1795830792611439851\tCMakeFiles/f.dir/f.cu.o\tab\n6641\t6868\t1795830799251440245\tf\tcd\n6641\t6868\t1795830799251440245\tf.lib\tcd\n";
        let spans = ninja_spans(v7);
        assert_eq!(spans.len(), 2);
        assert_eq!(spans[0].0.start_ms, 1795830792611);
        assert_eq!(spans[0].0.end_ms, 1795830792611 + 5347);
        assert_eq!(
            (spans[0].0.kind.as_str(), spans[1].0.kind.as_str()),
            ("nvcc", "link")
        );
        // v5: the output's mtime, as the step ended.
        let v5 = "# ninja log v5\n0\t1000\t1795830793610000000\ta.o\tab\n";
        assert_eq!(ninja_spans(v5)[0].0.start_ms, 1795830792610);
        assert!(ninja_spans("# ninja log v5\n0\t10\t7\ta.o\tab\n").is_empty());
    }

    #[test]
    fn a_compile_measured_and_logged_by_ninja_is_kept_once_and_slots_hold_waits() {
        let rec = |src: &str, start, end, waited| super::super::compile_record::CompileRecord {
            tool: "nvcc".into(),
            sources: vec![src.into()],
            start_ms: start,
            end_ms: end,
            waited_ms: waited,
            peak_rss_bytes: 1,
            reserved_bytes: 1,
            reserved_from: String::new(),
            key: String::new(),
            exit: 0,
            phases: vec![],
        };
        let origin = 1795830792611u64;
        let log = format!(
            "# ninja log v7\n0\t4000\t{}\tbuild/x/csrc/k.o\tab\n0\t2000\t{}\tbuild/x/csrc/b.o\tcd\n",
            origin * 1_000_000,
            origin * 1_000_000
        );
        let t = BuildTrace::new(
            "t",
            vec![],
            &[
                rec("/s/csrc/k.cu", origin + 50, origin + 3950, 0),
                rec("/s/csrc/m.cu", origin + 2500, origin + 5000, 2400),
            ],
            &[log],
        );
        let names: Vec<&str> = t.jobs.iter().map(|j| j.span.name.as_str()).collect();
        assert_eq!(names, ["b.o", "k.cu", "m.cu"]);
        // m.cu waited from 0.1 s: a third slot, as ninja had three jobs out.
        assert_eq!(t.slots(), 3);
        let json = t.chrome_json();
        let events = json["traceEvents"].as_array().unwrap();
        assert_eq!(
            events
                .iter()
                .filter(|e| e["name"] == "waiting for memory")
                .count(),
            1
        );
        assert_eq!(
            events
                .iter()
                .filter(|e| e["ph"] == "X" && e["cat"] != "wait")
                .count(),
            3
        );
    }
}
