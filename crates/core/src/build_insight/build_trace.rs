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
/// Besides those times ninja logs one in ns per step: the output's mtime as the step ended (up to
/// ninja 1.11), or the time the step started (ninja 1.12 records it so that an input changed
/// during the step is seen; measured here: Debian trixie's ninja 1.12.1 does so under a
/// `# ninja log v6` header, so the header does not say which). Each run's start is the median of
/// `mtime − start` or of `mtime − end` over its steps, whichever agrees across them (the other
/// spreads by the steps' durations); a median, as an output restat left untouched keeps an old
/// mtime. A log ninja has recompacted (it rewrites a long log, one line per output, in no order)
/// has no runs in order: its steps are grouped by the start they imply instead. Logs without
/// such times give nothing (they cannot be placed).
pub fn ninja_spans(ninja_log: &str) -> Vec<(Span, String)> {
    let version: u32 = ninja_log
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("# ninja log v"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let steps: Vec<_> = step_weights::entries(ninja_log).collect();
    let all: Vec<&step_weights::LoggedStep> = steps.iter().collect();
    let at_start = implied_at_start(&all).unwrap_or(version >= 7);
    let mut runs = runs_in_order(&steps, at_start);
    // In order, each run's steps imply one start (but for a few restat left untouched); a
    // recompacted log's "runs" mix several.
    if runs.iter().any(|r| mixed(r, at_start)) {
        runs = runs_by_origin(&steps, at_start);
    }
    let mut out: Vec<(Span, String)> = Vec::new();
    for run in &runs {
        let mut origins: Vec<u64> = run.iter().filter_map(|s| origin(s, at_start)).collect();
        origins.sort_unstable();
        // A run with no time in ns (a log whose outputs are gone, an old ninja's seconds) is
        // placed after the run before it: its steps keep their order and durations.
        let after_previous = || out.iter().map(|(s, _)| s.end_ms).max().unwrap_or(0);
        let origin = origins
            .get(origins.len() / 2)
            .copied()
            .unwrap_or_else(after_previous);
        let mut seen = std::collections::HashSet::new();
        for s in run.iter().copied() {
            if !s.hash.is_empty() && !seen.insert((s.start_ms, s.end_ms, s.hash)) {
                continue;
            }
            out.push(span_of(s, origin));
        }
    }
    out
}

/// A step's guess of its run's start: its ns time read as the step's start or as its end (None
/// without a time in ns).
fn origin(s: &step_weights::LoggedStep, at_start: bool) -> Option<u64> {
    let at = if at_start { s.start_ms } else { s.end_ms };
    (s.mtime > 1_000_000_000_000_000_000).then(|| (s.mtime / 1_000_000).saturating_sub(at))
}

/// Whether the ns times of `steps` are their starts: the reading under which more of them imply
/// the same run start as another step (within 50 ms: the steps of one run agree to a few ms, read
/// the other way they differ by their durations). None where both readings agree alike.
fn implied_at_start(steps: &[&step_weights::LoggedStep]) -> Option<bool> {
    let agreeing = |at_start: bool| {
        let mut o: Vec<u64> = steps.iter().filter_map(|s| origin(s, at_start)).collect();
        o.sort_unstable();
        o.windows(2).filter(|w| w[1] - w[0] <= 50).count()
    };
    let (starts, ends) = (agreeing(true), agreeing(false));
    (starts != ends).then_some(starts > ends)
}

/// The runs of a log written in order: steps are logged as they end, so an earlier end starts a
/// new run, and so does a start a minute past every start this run has implied (an output
/// restat left untouched implies an earlier one, never a later).
fn runs_in_order<'a, 'l>(
    steps: &'a [step_weights::LoggedStep<'l>],
    at_start: bool,
) -> Vec<Vec<&'a step_weights::LoggedStep<'l>>> {
    let mut runs = Vec::new();
    let (mut begin, mut latest) = (0, None::<u64>);
    for i in 0..=steps.len() {
        let new_run = i == steps.len()
            || (i > begin
                && (steps[i].end_ms < steps[i - 1].end_ms
                    || origin(&steps[i], at_start)
                        .zip(latest)
                        .is_some_and(|(o, l)| o > l + 60_000)));
        if new_run {
            if i > begin {
                runs.push(steps[begin..i].iter().collect());
            }
            begin = i;
            latest = None;
        }
        if let Some(o) = steps.get(i).and_then(|s| origin(s, at_start)) {
            latest = Some(latest.map_or(o, |l| l.max(o)));
        }
    }
    runs
}

/// The runs of a recompacted log: steps whose implied starts lie within a second of each other.
fn runs_by_origin<'a, 'l>(
    steps: &'a [step_weights::LoggedStep<'l>],
    at_start: bool,
) -> Vec<Vec<&'a step_weights::LoggedStep<'l>>> {
    let mut placed: Vec<(u64, &step_weights::LoggedStep)> = steps
        .iter()
        .filter_map(|s| Some((origin(s, at_start)?, s)))
        .collect();
    placed.sort_by_key(|(o, _)| *o);
    let mut runs: Vec<Vec<&'a step_weights::LoggedStep<'l>>> = Vec::new();
    let mut last = None::<u64>;
    for (o, s) in placed {
        match (last, runs.last_mut()) {
            (Some(l), Some(run)) if o <= l + 1000 => run.push(s),
            _ => runs.push(vec![s]),
        }
        last = Some(o);
    }
    runs
}

/// A logged step as a span of a run that started at `origin` (Unix ms).
fn span_of(s: &step_weights::LoggedStep, origin: u64) -> (Span, String) {
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
    (span, s.output.to_string())
}

/// Whether more than a tenth of `run`'s steps imply a start over a second from the median's:
/// steps of several runs (restat leaves a few outputs' old mtimes, never that many).
fn mixed(run: &[&step_weights::LoggedStep], at_start: bool) -> bool {
    let mut o: Vec<u64> = run.iter().filter_map(|s| origin(s, at_start)).collect();
    if o.len() < 2 {
        return false;
    }
    o.sort_unstable();
    let mid = o[o.len() / 2];
    o.iter().filter(|x| x.abs_diff(mid) > 1000).count() * 10 > o.len()
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
        // The wrapper's compiles by their sources' stems: a ninja step is looked up, not compared
        // with every compile (a torch build has thousands of each).
        let mut by_stem: std::collections::HashMap<&str, Vec<&CompileRecord>> =
            std::collections::HashMap::new();
        for c in compiles {
            for s in &c.sources {
                by_stem.entry(stem(s)).or_default().push(c);
            }
        }
        for log in ninja_logs {
            for (span, output) in ninja_spans(log) {
                // The same compile measured by the wrapper: its output is named for its source
                // (`x.cu` → `x.o`, `x.cuda.o`) and they overlap in time.
                let measured = by_stem.get(stem(&output)).is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.start_ms < span.end_ms + 1000 && span.start_ms < c.end_ms + 1000)
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
        // Without a time in ns the run is placed at 0, not dropped.
        let relative = ninja_spans("# ninja log v5\n0\t10\t7\ta.o\tab\n5\t20\t7\tb.o\tcd\n");
        let placed: Vec<(u64, u64)> = relative
            .iter()
            .map(|(s, _)| (s.start_ms, s.end_ms))
            .collect();
        assert_eq!(placed, [(0, 10), (5, 20)]);
        // A tab inside an output's name, and a step that ends before it starts.
        let odd = ninja_spans("# ninja log v5\n0\t1000\t1795830793610000000\ta\tb.o\tab\n9\t3\t1795830793610000000\tc.o\tcd\n");
        assert_eq!(odd.len(), 1);
        assert_eq!(odd[0].1, "a\tb.o");
        // Debian trixie's ninja 1.12.1 under a v6 header: the ns time is the step's start (two
        // steps started together, 127 and 126 ms in, and ended 16 s apart: their ns times are
        // 2 ms apart). Read as end times they would spread by their durations.
        let v6_starts = "# ninja log v6\n127\t80509\t1795857991971403874\tG.cpp.o\tab\n126\t96384\t1795857991969056661\tS.cpp.o\tcd\n96384\t171168\t1795858088225062383\tC.cpp.o\tef\n";
        let spans = ninja_spans(v6_starts);
        assert_eq!(spans.len(), 3);
        let run_start = 1795857991971 - 127;
        assert!(
            spans
                .iter()
                .all(|(s, _)| s.start_ms.abs_diff(run_start + (s.start_ms - run_start)) < 5),
            "{spans:?}"
        );
        assert!(
            spans[0].0.start_ms.abs_diff(run_start + 127) <= 3,
            "{spans:?}"
        );
        assert!(
            spans[2].0.start_ms.abs_diff(run_start + 96384) <= 3,
            "{spans:?}"
        );
    }

    #[test]
    fn a_recompacted_log_is_placed_by_the_start_each_step_implies() {
        // Two runs ten minutes apart, their lines interleaved as ninja's recompaction writes
        // them (no order); ns times are starts (ninja 1.12).
        let (a, b) = (1_795_857_000_000u64, 1_795_857_600_000u64);
        let mut log = String::from("# ninja log v6\n");
        for i in 0..8u64 {
            for (run, t0) in [("a", a), ("b", b)] {
                let (start, end) = (i * 1000, i * 1000 + 500 + i * 100);
                let ns = (t0 + start) * 1_000_000 + 7;
                log += &format!("{start}\t{end}\t{ns}\t{run}{i}.o\th{run}{i}\n");
            }
        }
        let spans = ninja_spans(&log);
        assert_eq!(spans.len(), 16);
        for (span, output) in &spans {
            let i: u64 = output[1..2].parse().unwrap();
            let t0 = if output.starts_with('a') { a } else { b };
            assert_eq!(span.start_ms, t0 + i * 1000, "{output}");
            assert_eq!(span.end_ms, t0 + i * 1000 + 500 + i * 100, "{output}");
        }
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
