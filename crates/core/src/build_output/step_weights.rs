//! What the steps of a ninja build weigh, for an ETA that knows a CUDA unit from a C++ one. The
//! mean time per step so far misleads on a torch build: its first hundreds of steps are C++ and
//! code generation, and most CUDA units (minutes each, per arch) come later, so the mean-based
//! estimate grew from ~86 minutes left at step 797 as the CUDA steps began. The plan here counts
//! the steps still to run by kind from `build.ninja` (the rule of each edge), weighs each kind by
//! what it took in an earlier run's `.ninja_log`, and turns the weight done so far into an ETA.

use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    Cuda,
    Cxx,
    Link,
    Other,
}

/// Relative weights for a kind no earlier run measured: a CUDA unit compiles once per arch with
/// device code (the brief's 20–30 s per arch for a `.cu` with torch headers against ~10 s for a
/// C++ unit with them), a link of a large library is a few C++ units, a custom command is small.
const PRIOR: [f64; 4] = [4.0, 1.0, 2.0, 0.2];

impl StepKind {
    /// Every kind, in [`StepKind::index`] order.
    pub const ALL: [StepKind; 4] = [
        StepKind::Cuda,
        StepKind::Cxx,
        StepKind::Link,
        StepKind::Other,
    ];

    /// `CUDA`, `C++`, `link`, `other`.
    pub fn name(self) -> &'static str {
        match self {
            StepKind::Cuda => "CUDA",
            StepKind::Cxx => "C++",
            StepKind::Link => "link",
            StepKind::Other => "other",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// The kind of an output (`…/kernel.cu.o`, `…/Foo.cpp.o`, `lib/libtorch_cuda.so`).
    pub fn of_output(out: &str) -> StepKind {
        if out.ends_with(".cu.o") {
            StepKind::Cuda
        } else if [".cpp.o", ".cc.o", ".cxx.o", ".c.o"]
            .iter()
            .any(|s| out.ends_with(s))
        {
            StepKind::Cxx
        } else if out.ends_with(".so") || out.ends_with(".a") || out.contains(".so.") {
            StepKind::Link
        } else {
            StepKind::Other
        }
    }

    /// The kind of a step from its ninja line: CMake's description (`Building CUDA object …`),
    /// or, where the build runs ninja with `-v` as torch's setup.py does, the command's `-o`
    /// output (`… -c a.cu -o a.cu.o`, `… -o lib/libc10.so`).
    pub fn of_line(line: &str) -> StepKind {
        if line.contains("Building CUDA object") {
            StepKind::Cuda
        } else if line.contains("Building CXX object") || line.contains("Building C object") {
            StepKind::Cxx
        } else if line.contains("Linking ") {
            StepKind::Link
        } else {
            let mut words = line.split_whitespace().skip_while(|w| *w != "-o");
            words.nth(1).map_or(StepKind::Other, StepKind::of_output)
        }
    }

    /// The kind of a `build.ninja` rule (`CUDA_COMPILER__torch_cuda_Release`).
    fn of_rule(rule: &str) -> Option<StepKind> {
        if rule == "phony" {
            None
        } else if rule.starts_with("CUDA_COMPILER") {
            Some(StepKind::Cuda)
        } else if rule.starts_with("CXX_COMPILER") || rule.starts_with("C_COMPILER") {
            Some(StepKind::Cxx)
        } else if rule.contains("LINKER") {
            Some(StepKind::Link)
        } else {
            Some(StepKind::Other)
        }
    }
}

/// The steps still to run, by kind, and the weight of one step of each kind.
#[derive(Debug, Clone, PartialEq)]
pub struct StepPlan {
    pub count: [usize; 4],
    pub weight: [f64; 4],
    /// Kinds whose weight an earlier run measured (seconds); the others are scaled priors.
    pub measured: [bool; 4],
}

/// One `build` line of a `build.ninja`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge<'a> {
    /// The outputs as written (`$`-escapes kept), explicit then implicit.
    pub outputs: &'a str,
    pub rule: &'a str,
    /// The explicit inputs, up to `|` or `||` (`$ ` keeps a space in a path).
    pub inputs: Vec<&'a str>,
}

impl Edge<'_> {
    /// The first output as a path (`$ `, `$:`, `$$` undone): the name `.ninja_log` records the
    /// step by, and how a command line names it to ninja.
    pub fn first_output(&self) -> String {
        unescape(split_unescaped(self.outputs).next().unwrap_or_default())
    }

    /// The step's kind; None for a phony edge (no command).
    pub fn kind(&self) -> Option<StepKind> {
        StepKind::of_rule(self.rule)
    }
}

/// `build.ninja`'s edges: the outputs are the part before the first `:` that `$` does not
/// escape, the rule the first word after it, the explicit inputs the words after the rule.
pub fn edges(build_ninja: &str) -> impl Iterator<Item = Edge<'_>> {
    build_ninja.lines().filter_map(|l| {
        let rest = l.strip_prefix("build ")?;
        let bytes = rest.as_bytes();
        let colon =
            (0..bytes.len()).find(|&i| bytes[i] == b':' && (i == 0 || bytes[i - 1] != b'$'))?;
        let after = &rest[colon + 1..];
        let mut words = split_unescaped(after);
        let rule = words.next()?;
        let inputs = words.take_while(|w| *w != "|" && *w != "||").collect();
        Some(Edge {
            outputs: &rest[..colon],
            rule,
            inputs,
        })
    })
}

/// A `build.ninja` path as the file system spells it.
pub fn unescape(path: &str) -> String {
    path.replace("$ ", " ")
        .replace("$:", ":")
        .replace("$$", "$")
}

/// Words split at spaces that `$` does not escape.
fn split_unescaped(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            if bytes[i] == b'$' {
                i += 2;
                continue;
            }
            if bytes[i] == b' ' {
                let word = &text[start..i];
                i += 1;
                start = i;
                if !word.is_empty() {
                    return Some(word);
                }
                continue;
            }
            i += 1;
        }
        if start < bytes.len() {
            let word = &text[start..];
            start = bytes.len();
            return Some(word);
        }
        None
    })
}

/// One line of a `.ninja_log` (v5–v7: start and end in ms since that ninja run began, the
/// output's mtime, the output, the command's hash).
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedStep<'a> {
    pub start_ms: u64,
    pub end_ms: u64,
    /// The output's mtime as ninja recorded it (v6 and later: nanoseconds since the epoch).
    pub mtime: u64,
    pub output: &'a str,
    /// The command's hash: the outputs of one command share it.
    pub hash: &'a str,
}

/// The steps of a `.ninja_log`, in the order logged.
pub fn entries(ninja_log: &str) -> impl Iterator<Item = LoggedStep<'_>> {
    ninja_log
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.splitn(4, '\t');
            let start_ms: u64 = f.next()?.parse().ok()?;
            let end_ms: u64 = f.next()?.parse().ok()?;
            let mtime = f.next()?.parse().ok()?;
            // The hash is the last field; an output's name may hold a tab of its own.
            let rest = f.next()?;
            let (output, hash) = rest.rsplit_once('\t').unwrap_or((rest, ""));
            // A step that ends before it starts is no step (a hand-edited or torn line).
            if end_ms < start_ms {
                return None;
            }
            Some(LoggedStep {
                start_ms,
                end_ms,
                mtime,
                output,
                hash,
            })
        })
}

/// Outputs and durations (seconds) of a `.ninja_log`; a step logged twice counts with its last
/// time.
pub fn logged(ninja_log: &str) -> std::collections::HashMap<&str, f64> {
    entries(ninja_log)
        .map(|e| {
            (
                e.output,
                e.end_ms.saturating_sub(e.start_ms) as f64 / 1000.0,
            )
        })
        .collect()
}

impl StepPlan {
    /// The plan of a build directory: its `build.ninja` less what `ninja_log` (read before this
    /// run) records as built and still on disk, weighed by that log. None without `build.ninja`.
    pub fn read(build_dir: &Path, ninja_log: Option<&str>) -> Option<StepPlan> {
        let build_ninja = std::fs::read_to_string(build_dir.join("build.ninja")).ok()?;
        Some(StepPlan::new(
            &build_ninja,
            ninja_log.unwrap_or(""),
            |out| build_dir.join(out).exists(),
        ))
    }

    pub fn new(build_ninja: &str, ninja_log: &str, exists: impl Fn(&str) -> bool) -> StepPlan {
        let log = logged(ninja_log);
        let mut count = [0usize; 4];
        for edge in edges(build_ninja) {
            let Some(kind) = edge.kind() else {
                continue;
            };
            let first = edge.first_output();
            if log.contains_key(first.as_str()) && exists(&first) {
                continue;
            }
            count[kind.index()] += 1;
        }
        // Measured means per kind, then the priors scaled to the measured ones.
        let mut sum = [0.0f64; 4];
        let mut n = [0usize; 4];
        for (out, secs) in &log {
            let k = StepKind::of_output(out).index();
            sum[k] += secs;
            n[k] += 1;
        }
        let measured: [bool; 4] = std::array::from_fn(|k| n[k] > 0 && sum[k] > 0.0);
        // Seconds per prior unit: from the C++ units when measured, else from any measured kind.
        let unit = (0..4)
            .filter(|&k| measured[k])
            .map(|k| (k != StepKind::Cxx.index(), sum[k] / n[k] as f64 / PRIOR[k]))
            .min_by(|a, b| a.0.cmp(&b.0))
            .map_or(1.0, |(_, u)| u);
        let weight = std::array::from_fn(|k| {
            if measured[k] {
                sum[k] / n[k] as f64
            } else {
                PRIOR[k] * unit
            }
        });
        StepPlan {
            count,
            weight,
            measured,
        }
    }

    /// Seconds left after `done` steps of each kind finished `elapsed` seconds into this run: the
    /// weight left at the build's pace (which folds in the parallel jobs). None until a step with
    /// weight is done.
    pub fn eta(&self, done: &[usize; 4], elapsed: f64, pace: &mut Pace) -> Option<f64> {
        let total: f64 = (0..4).map(|k| self.count[k] as f64 * self.weight[k]).sum();
        let finished: f64 = (0..4).map(|k| done[k] as f64 * self.weight[k]).sum();
        let secs_per_weight = pace.record(elapsed, finished)?;
        Some(secs_per_weight * (total - finished).max(0.0))
    }
}

/// How far back the pace looks, and the least span it trusts.
const PACE_WINDOW_S: f64 = 600.0;
const PACE_MIN_SPAN_S: f64 = 60.0;

/// The build's pace, in seconds per unit of weight, from the steps finished in the last ten
/// minutes rather than since the start: a build stopped for a while (Ctrl-Z, a suspended
/// machine, SIGSTOP while something else had the cores) would otherwise count the stop as work
/// and overstate what is left for as long as it runs — the real torch tree's build, stopped for
/// 44 minutes, said `~695:36 left` at step 81 of 936 on resuming. Across a stop the pace from
/// before it holds until a minute of steps after it is measured.
#[derive(Debug, Default)]
pub struct Pace {
    /// (seconds into the run, weight finished then), the last [`PACE_WINDOW_S`] of them.
    samples: std::collections::VecDeque<(f64, f64)>,
    last: Option<f64>,
}

impl Pace {
    /// Records `finished` weight done `t` seconds into the run; the seconds per unit of weight:
    /// over the window once it spans a minute with progress in it, else the last such value,
    /// else the whole run so far.
    pub fn record(&mut self, t: f64, finished: f64) -> Option<f64> {
        self.samples.push_back((t, finished));
        while self
            .samples
            .front()
            .is_some_and(|&(t0, _)| t - t0 > PACE_WINDOW_S)
        {
            self.samples.pop_front();
        }
        if let Some(&(t0, w0)) = self.samples.front() {
            if t - t0 >= PACE_MIN_SPAN_S && finished > w0 {
                self.last = Some((t - t0) / (finished - w0));
            }
        }
        self.last.or_else(|| (finished > 0.0).then(|| t / finished))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUILD_NINJA: &str = "rule CUDA_COMPILER__torch_cuda_Release\n  command = nvcc\n\
build caffe2/CMakeFiles/torch_cuda.dir/aten/a.cu.o: CUDA_COMPILER__torch_cuda_Release /src/aten/a.cu || cmake_object_order_depends\n\
build caffe2/CMakeFiles/torch_cuda.dir/aten/b.cu.o: CUDA_COMPILER__torch_cuda_Release /src/aten/b.cu\n\
build caffe2/CMakeFiles/torch_cpu.dir/x.cpp.o: CXX_COMPILER__torch_cpu_Release /src/x.cpp\n\
build caffe2/CMakeFiles/torch_cpu.dir/y.cpp.o: CXX_COMPILER__torch_cpu_Release /src/y$:z.cpp\n\
build lib/libtorch_cuda.so: CUDA_SHARED_LIBRARY_LINKER__torch_cuda_Release caffe2/a.cu.o\n\
build all: phony lib/libtorch_cuda.so\n";

    #[test]
    fn counts_by_rule_and_weighs_by_an_earlier_log() {
        // An earlier run built x.cpp.o (20 s) and a.cu.o (100 s), both still on disk.
        let log = "# ninja log v5\n0\t20000\t0\tcaffe2/CMakeFiles/torch_cpu.dir/x.cpp.o\th\n\
0\t100000\t0\tcaffe2/CMakeFiles/torch_cuda.dir/aten/a.cu.o\th\n";
        let p = StepPlan::new(BUILD_NINJA, log, |_| true);
        assert_eq!(p.count, [1, 1, 1, 0], "b.cu, y.cpp and the link are left");
        assert_eq!(p.weight[0], 100.0);
        assert_eq!(p.weight[1], 20.0);
        // The link was not measured: the prior, scaled to the measured C++ unit.
        assert_eq!(p.weight[2], 40.0);
        // y.cpp done in 10 s: 20 of 160 weight-seconds, so 140 left at that pace.
        assert_eq!(p.eta(&[0, 1, 0, 0], 10.0, &mut Pace::default()), Some(70.0));
        // A mean per step would say 10 s per step × 2 left = 20 s.
    }

    #[test]
    fn without_a_log_the_priors_rank_cuda_above_cxx() {
        let p = StepPlan::new(BUILD_NINJA, "", |_| false);
        assert_eq!(p.count, [2, 2, 1, 0]);
        assert!(p.weight[0] > p.weight[1]);
        assert_eq!(p.eta(&[0, 0, 0, 0], 5.0, &mut Pace::default()), None);
        assert_eq!(
            StepKind::of_line("[3/9] Building CUDA object caffe2/a.cu.o"),
            StepKind::Cuda
        );
        assert_eq!(
            StepKind::of_line("[9/9] Linking CXX shared library lib/libc10.so"),
            StepKind::Link
        );
        // Verbose ninja (torch's setup.py passes -v): the command's output says the kind.
        assert_eq!(
            StepKind::of_line("[1/1375] /usr/bin/g++ -DX -O3 -MD -MT c10/CMakeFiles/c10.dir/core/A.cpp.o -MF c10/CMakeFiles/c10.dir/core/A.cpp.o.d -o c10/CMakeFiles/c10.dir/core/A.cpp.o -c /src/c10/core/A.cpp"),
            StepKind::Cxx
        );
        assert_eq!(
            StepKind::of_line("[7/9] /usr/local/cuda/bin/nvcc -x cu -c /src/a.cu -o caffe2/CMakeFiles/torch_cuda.dir/a.cu.o"),
            StepKind::Cuda
        );
        assert_eq!(
            StepKind::of_line(
                "[8/9] : && /usr/bin/g++ -fPIC -shared -o lib/libc10.so c10/a.cpp.o && :"
            ),
            StepKind::Link
        );
        assert_eq!(
            StepKind::of_line(
                "[1/4] cd /src && /usr/bin/python3 -m torchgen.gen --install_dir /src/build"
            ),
            StepKind::Other
        );
    }

    /// A stop of 40 minutes in the middle: the estimate goes on at the pace from before it, then
    /// at the pace after it, never at one that counts the stop as work.
    #[test]
    fn a_stopped_build_is_estimated_at_its_pace_not_its_stop() {
        let mut pace = Pace::default();
        // One unit of weight every 10 s for 15 minutes: 10 s per unit.
        for i in 1..=90 {
            assert_eq!(pace.record(i as f64 * 10.0, i as f64), Some(10.0));
        }
        // Stopped for 40 minutes; the first step after it.
        let resumed = 900.0 + 2400.0;
        assert_eq!(pace.record(resumed + 10.0, 91.0), Some(10.0));
        // Since the start it would be 3310 s / 91 units: 36 s per unit.
        // After it, twice as fast: once a minute of it is seen, that is the pace.
        let mut last = None;
        for i in 1..=12 {
            last = pace.record(resumed + 10.0 + i as f64 * 5.0, 91.0 + i as f64);
        }
        assert_eq!(last, Some(5.0));
        // Before any window: the run so far.
        assert_eq!(Pace::default().record(30.0, 3.0), Some(10.0));
        assert_eq!(Pace::default().record(30.0, 0.0), None);
    }
}
