//! What a trace says in a few lines: the slowest compiles, the critical path, the idle job slots,
//! the heaviest compile, and the cost of each arch — the device-compile seconds (nvcc's own
//! phases for that arch) and the wheel bytes (its SASS and PTX images) it adds.

use super::build_trace::BuildTrace;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One arch's share of a build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchCost {
    /// `75`, `90a`.
    pub arch: String,
    /// Seconds of its device phases (preprocessing, cicc, ptxas) over every compile.
    pub device_seconds: f64,
    /// Of all device-phase seconds.
    pub device_share: f64,
    /// Bytes of its images (`sm_XX` SASS and `compute_XX` PTX) in the wheel's shared objects.
    pub wheel_bytes: u64,
    /// Of the shared objects' bytes once installed (a wheel is a zip: what it saves compressed
    /// depends on how its images compress).
    pub wheel_share: f64,
}

/// The summary of one build.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub wall_seconds: f64,
    pub compiles: usize,
    /// The slowest jobs: file and seconds.
    pub slowest: Vec<(String, f64)>,
    /// The chain of steps and jobs, each starting as the one before it ended, that ends the build.
    pub critical_path: Vec<(String, f64)>,
    pub slots: usize,
    /// Slot-seconds between the first job's start and the last job's end with no job running.
    pub idle_slot_seconds: f64,
    /// Seconds compiles spent waiting for memory.
    pub waited_seconds: f64,
    /// The compile with the highest measured peak: file and bytes.
    pub heaviest: Option<(String, u64)>,
    /// nvcc's phases in all: per arch (device) and done once per compile (host side).
    pub device_seconds: f64,
    pub shared_seconds: f64,
    pub arch_costs: Vec<ArchCost>,
}

/// `90` of `sm_90`, `compute_90`, `sm_90a` → `90a`.
pub fn arch_of_image(name: &str) -> Option<&str> {
    name.strip_prefix("sm_")
        .or_else(|| name.strip_prefix("compute_"))
}

impl Summary {
    /// The summary of `trace`; `image_bytes` are the wheel's images by name (`sm_75`,
    /// `compute_90`), `so_bytes` its shared objects' installed size.
    pub fn of(trace: &BuildTrace, image_bytes: &BTreeMap<String, u64>, so_bytes: u64) -> Summary {
        let mut s = Summary {
            wall_seconds: trace.end_ms().saturating_sub(trace.origin_ms()) as f64 / 1000.0,
            compiles: trace.jobs.len(),
            slots: trace.slots(),
            ..Summary::default()
        };
        let mut by_time: Vec<(String, f64)> = trace
            .jobs
            .iter()
            .map(|j| (j.span.name.clone(), j.span.seconds()))
            .collect();
        by_time.sort_by(|a, b| b.1.total_cmp(&a.1));
        s.slowest = by_time.into_iter().take(5).collect();
        s.critical_path = critical_path(trace);
        s.waited_seconds = trace.jobs.iter().map(|j| j.waited_ms as f64 / 1000.0).sum();
        if let (Some(first), Some(last)) = (
            trace.jobs.iter().map(|j| j.span.start_ms).min(),
            trace.jobs.iter().map(|j| j.span.end_ms).max(),
        ) {
            let busy: f64 = trace.jobs.iter().map(|j| j.span.seconds()).sum();
            let capacity = s.slots as f64 * last.saturating_sub(first) as f64 / 1000.0;
            s.idle_slot_seconds = (capacity - busy).max(0.0);
        }
        s.heaviest = trace
            .jobs
            .iter()
            .filter_map(|j| Some((j.span.name.clone(), j.peak_rss_bytes?)))
            .max_by_key(|(_, b)| *b);
        let mut per_arch: BTreeMap<String, f64> = BTreeMap::new();
        for p in trace.jobs.iter().flat_map(|j| &j.phases) {
            match p.device_arch() {
                Some(a) => *per_arch.entry(a).or_default() += p.ms / 1000.0,
                None => s.shared_seconds += p.ms / 1000.0,
            }
        }
        // `+ 0.0`: an empty float sum is -0.0.
        s.device_seconds = per_arch.values().sum::<f64>() + 0.0;
        let mut bytes_per_arch: BTreeMap<String, u64> = BTreeMap::new();
        for (image, b) in image_bytes {
            if let Some(a) = arch_of_image(image) {
                *bytes_per_arch.entry(a.to_string()).or_default() += b;
            }
        }
        let archs: std::collections::BTreeSet<String> = per_arch
            .keys()
            .chain(bytes_per_arch.keys())
            .cloned()
            .collect();
        s.arch_costs = archs
            .into_iter()
            .map(|a| {
                let device = per_arch.get(&a).copied().unwrap_or(0.0);
                let bytes = bytes_per_arch.get(&a).copied().unwrap_or(0);
                ArchCost {
                    device_share: share(device, s.device_seconds),
                    wheel_share: share(bytes as f64, so_bytes as f64),
                    arch: a,
                    device_seconds: device,
                    wheel_bytes: bytes,
                }
            })
            .collect();
        s
    }

    /// "dropping 7.5 saves 31% of device-compile time and 28% of the wheel's shared objects", one
    /// per arch.
    pub fn arch_sentences(&self) -> Vec<String> {
        self.arch_costs
            .iter()
            .map(|c| {
                format!(
                    "dropping {} saves {} of device-compile time ({:.1} s) and {} of the shared objects ({} KiB)",
                    dotted(&c.arch),
                    percent(c.device_share),
                    c.device_seconds,
                    percent(c.wheel_share),
                    c.wheel_bytes / 1024
                )
            })
            .collect()
    }
}

/// `7.5` of `75`, `9.0a` of `90a`, `12.0` of `120`: TORCH_CUDA_ARCH_LIST's spelling.
pub fn dotted(arch: &str) -> String {
    let digits = arch.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    match digits.parse::<u32>() {
        Ok(n) => format!("{}.{}{}", n / 10, n % 10, &arch[digits.len()..]),
        Err(_) => arch.to_string(),
    }
}

/// `31%`, or `0.4%` below ten percent.
pub fn percent(share: f64) -> String {
    match share * 100.0 {
        p if p < 10.0 => format!("{p:.1}%"),
        p => format!("{p:.0}%"),
    }
}

fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole
    } else {
        0.0
    }
}

/// From the span that ends last, back through the span that ended latest before it began (the
/// one it waited for, as far as times tell: a build's dependencies are not in the trace).
fn critical_path(trace: &BuildTrace) -> Vec<(String, f64)> {
    let spans: Vec<(&str, u64, u64)> = trace
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.start_ms, s.end_ms))
        .chain(
            trace
                .jobs
                .iter()
                .map(|j| (j.span.name.as_str(), j.span.start_ms, j.span.end_ms)),
        )
        .collect();
    let mut path = Vec::new();
    let Some(mut cur) = spans.iter().max_by_key(|s| (s.2, s.2 - s.1)) else {
        return path;
    };
    loop {
        path.push((cur.0.to_string(), (cur.2 - cur.1) as f64 / 1000.0));
        // What ended before this one began (a step may begin in the same instant, ± 0.5 s).
        let Some(prev) = spans
            .iter()
            .filter(|s| s.2 <= cur.1 + 500 && s.1 < cur.1)
            .max_by_key(|s| (s.2, s.2 - s.1))
        else {
            break;
        };
        cur = prev;
        if path.len() > 64 {
            break;
        }
    }
    path.reverse();
    path
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build_insight::build_trace::{BuildTrace, Span};
    use crate::build_insight::compile_record::CompileRecord;
    use crate::build_insight::nvcc_time::Phase;

    fn phase(name: &str, arch: &str, ms: f64) -> Phase {
        Phase {
            name: name.into(),
            arch: (!arch.is_empty()).then(|| arch.into()),
            ms,
        }
    }

    fn compile(file: &str, start: u64, end: u64, waited: u64, phases: Vec<Phase>) -> CompileRecord {
        CompileRecord {
            tool: "nvcc".into(),
            sources: vec![format!("/t/csrc/{file}")],
            start_ms: start,
            end_ms: end,
            waited_ms: waited,
            peak_rss_bytes: 100 << 20,
            reserved_bytes: 200 << 20,
            reserved_from: String::new(),
            key: String::new(),
            exit: 0,
            phases,
        }
    }

    #[test]
    fn each_arch_costs_its_phases_and_they_add_up_to_the_device_time() {
        let a = compile(
            "a.cu",
            1_000,
            5_000,
            0,
            vec![
                phase("cudafe++", "compute_90", 400.0),
                phase("cicc", "compute_75", 1000.0),
                phase("ptxas", "sm_75", 200.0),
                phase("cicc", "compute_90", 1500.0),
                phase("ptxas", "sm_90", 300.0),
                phase("gcc (compiling)", "compute_90", 500.0),
            ],
        );
        let b = compile(
            "b.cu",
            5_200,
            7_000,
            4_200,
            vec![
                phase("cicc", "compute_75", 600.0),
                phase("cicc", "compute_90", 400.0),
            ],
        );
        let steps = vec![
            Span {
                name: "prepare".into(),
                kind: "step".into(),
                start_ms: 0,
                end_ms: 900,
            },
            Span {
                name: "audit and import".into(),
                kind: "step".into(),
                start_ms: 7_100,
                end_ms: 8_000,
            },
        ];
        let t = BuildTrace::new("t", steps, &[a, b], &[]);
        // b waited from 1.0 s, while a ran: it got a second slot.
        assert_eq!(t.slots(), 2);
        let images = BTreeMap::from([
            ("sm_75".to_string(), 3000u64),
            ("sm_90".to_string(), 4000),
            ("compute_90".to_string(), 1000),
        ]);
        let s = Summary::of(&t, &images, 16_000);
        let sum: f64 = s.arch_costs.iter().map(|c| c.device_seconds).sum();
        assert!((sum - s.device_seconds).abs() < 1e-9);
        assert!(
            (s.device_seconds + s.shared_seconds - 4.9).abs() < 1e-9,
            "{s:?}"
        );
        let c75 = &s.arch_costs[0];
        assert_eq!((c75.arch.as_str(), c75.wheel_bytes), ("75", 3000));
        assert!((c75.device_seconds - 1.8).abs() < 1e-9);
        assert!((c75.device_share - 1.8 / 4.0).abs() < 1e-9);
        assert!((s.arch_costs[1].wheel_share - 5000.0 / 16000.0).abs() < 1e-9);
        assert_eq!(
            s.arch_sentences()[0],
            "dropping 7.5 saves 45% of device-compile time (1.8 s) and 19% of the shared objects (2 KiB)"
        );
        assert_eq!(
            (dotted("90a"), dotted("120"), dotted("x")),
            ("9.0a".into(), "12.0".into(), "x".into())
        );
        assert_eq!(s.waited_seconds, 4.2);
        assert_eq!(s.slowest[0], ("a.cu".to_string(), 4.0));
        let path: Vec<&str> = s.critical_path.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(path, ["prepare", "a.cu", "b.cu", "audit and import"]);
        // 2 slots over 1.0–7.0 s, 5.8 s busy.
        assert!(
            (s.idle_slot_seconds - 6.2).abs() < 1e-9,
            "{}",
            s.idle_slot_seconds
        );
    }
}
