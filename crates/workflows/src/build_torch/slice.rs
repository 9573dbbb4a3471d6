//! `build-torch --only TARGET…`: a slice of the build instead of the wheel. On two cores the whole
//! CUDA build of torch takes most of a day; a slice (`c10_cuda`, a sample of `torch_cuda`'s
//! kernels) shows in minutes that the configuration compiles, that its objects carry exactly the
//! planned device code, and — from the time each step took and what `build.ninja` still holds —
//! what the whole build would take here, on a bigger host, and with a compile cluster.
//!
//! A target is what ninja knows (a CMake target such as `c10_cuda`, an output such as
//! `caffe2/CMakeFiles/torch_cuda.dir/__/aten/src/ATen/native/cuda/AbsKernel.cu.o`) or a source file
//! of the tree (`aten/src/ATen/native/cuda/AbsKernel.cu`), which names the step that compiles it.

use crate::binary::expect::{check, Expectation};
use crate::binary::input::{audit_paths, Options, Outcome};
use crate::binary::Kind;
use crate::build_output::step_weights::{edges, logged, unescape, StepKind};
use crate::cuda_arch::Arch;
use anyhow::{bail, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// A target that names nothing in `build.ninja` (exit 2: the input is wrong).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UnknownTarget(pub String);

/// The ninja targets `given` names in `build_ninja` (the tree at `root`, built in `build_dir`): an
/// output or phony target is itself; a source file becomes the outputs of the steps that compile
/// it — itself, and the copies torch compiles once per CPU capability
/// (`build/aten/src/ATen/native/cpu/X.cpp.AVX2.cpp`); anything else is refused.
pub fn resolve_targets(
    build_ninja: &str,
    root: &Path,
    build_dir: &Path,
    given: &[String],
) -> Result<Vec<String>> {
    let all: Vec<_> = edges(build_ninja).collect();
    let mut out = Vec::new();
    for t in given {
        // An output of build.ninja (a CMake target, an object) is built as named: never the
        // library a given object is linked into, which lists it among its inputs.
        let is_output = all
            .iter()
            .any(|e| e.first_output() == *t || e.outputs.split_whitespace().any(|o| o == t));
        if is_output {
            out.push(t.clone());
            continue;
        }
        let source = root.join(t);
        let source = source.to_string_lossy();
        let copies = format!("{}.", build_dir.join(t).to_string_lossy());
        let compiling: Vec<String> = all
            .iter()
            .filter(|e| matches!(e.kind(), Some(StepKind::Cuda | StepKind::Cxx)))
            .filter(|e| {
                e.inputs.iter().any(|i| {
                    let i = unescape(i);
                    i == source || i == *t || i.starts_with(&copies)
                })
            })
            .map(|e| e.first_output())
            .collect();
        if compiling.is_empty() {
            bail!(UnknownTarget(format!(
                "--only {t}: build.ninja has no such target and no step that compiles it; give a CMake target (c10_cuda, torch_cuda), an output (…/AbsKernel.cu.o) or a source file of the tree (aten/src/ATen/native/cuda/AbsKernel.cu) that this configuration builds"
            )));
        }
        out.extend(compiling);
    }
    out.dedup();
    Ok(out)
}

/// What `--only` built and found.
#[derive(Debug, Clone, Serialize)]
pub struct SliceReport {
    /// Every step's output carries what it should.
    pub ok: bool,
    /// The ninja targets the given ones named.
    pub targets: Vec<String>,
    /// This run's steps, in the order they finished.
    pub steps: Vec<SliceStep>,
    pub estimate: Estimate,
    pub seconds: f64,
    pub log: std::path::PathBuf,
    /// The slice's trace, timeline and summary (its own steps, measured compiles).
    pub insight: Option<crate::build_insight::written::Written>,
}

/// One step the slice ran: its output, kind, time, and what its binary carries.
#[derive(Debug, Clone, Serialize)]
pub struct SliceStep {
    pub output: String,
    pub kind: &'static str,
    pub seconds: f64,
    /// SASS and PTX in the output (objects and libraries; empty for other steps).
    pub images: Vec<String>,
    pub verdict: String,
    pub ok: bool,
}

/// The steps recorded in `.ninja_log` after byte `from` (this run's), one per command.
pub fn steps_since(ninja_log: &str, from: usize) -> Vec<(String, f64)> {
    let tail = ninja_log.get(from..).unwrap_or_default();
    let mut by_hash: BTreeMap<&str, (usize, &str, f64)> = BTreeMap::new();
    for (n, line) in tail.lines().enumerate() {
        let f: Vec<&str> = line.split('\t').collect();
        if line.starts_with('#') || f.len() < 4 {
            continue;
        }
        let (Ok(s), Ok(e)) = (f[0].parse::<f64>(), f[1].parse::<f64>()) else {
            continue;
        };
        let key = f.get(4).copied().unwrap_or(f[3]);
        by_hash
            .entry(key)
            .or_insert((n, f[3], (e - s).max(0.0) / 1000.0));
    }
    let mut v: Vec<(usize, String, f64)> = by_hash
        .into_values()
        .map(|(n, o, s)| (n, o.to_string(), s))
        .collect();
    v.sort_by_key(|x| x.0);
    v.into_iter().map(|(_, o, s)| (o, s)).collect()
}

/// Each step's output read by the binary reader against the plan: a CUDA object must carry every
/// planned image (beyond it is named: torch adds per-kernel archs to a few files itself), a C++
/// object none, a library with device code every planned image.
pub fn audit_steps(
    build_dir: &Path,
    steps: &[(String, f64)],
    sass: &[String],
    ptx: &[String],
) -> Vec<SliceStep> {
    let parse = |names: &[String]| -> Vec<Arch> {
        names
            .iter()
            .filter_map(|n| Arch::from_target_name(n).ok())
            .collect()
    };
    let expect = Expectation {
        sass: parse(sass),
        ptx: parse(ptx),
    };
    steps
        .iter()
        .map(|(output, seconds)| audit_step(build_dir, output, *seconds, &expect))
        .collect()
}

fn audit_step(build_dir: &Path, output: &str, seconds: f64, expect: &Expectation) -> SliceStep {
    let kind = StepKind::of_output(output);
    let mut step = SliceStep {
        output: output.to_string(),
        kind: kind.name(),
        seconds,
        images: Vec::new(),
        verdict: String::new(),
        ok: true,
    };
    let binary = output.ends_with(".o") || output.ends_with(".so") || output.contains(".so.");
    if !binary {
        step.verdict = "not a binary".into();
        return step;
    }
    let path = build_dir.join(output);
    let audit = audit_paths(std::slice::from_ref(&path), &Options::default());
    let a = match audit.first().map(|f| &f.outcome) {
        Some(Outcome::Audited(a)) => a,
        Some(Outcome::Failed(e)) => {
            step.ok = false;
            step.verdict = format!("unreadable: {e}");
            return step;
        }
        None => {
            step.ok = false;
            step.verdict = "missing".into();
            return step;
        }
    };
    let names = |k: Kind| -> Vec<String> { a.counts(k).keys().map(|x| x.name(k)).collect() };
    step.images = names(Kind::Elf)
        .into_iter()
        .chain(names(Kind::Ptx))
        .collect();
    (step.ok, step.verdict) = device_verdict(kind, a, expect);
    step
}

/// Whether a step's binary carries what its kind should, and the verdict in words.
fn device_verdict(
    kind: StepKind,
    a: &crate::binary::ElfAudit,
    expect: &Expectation,
) -> (bool, String) {
    match (kind, a.has_device_code()) {
        (StepKind::Cxx, true) => (false, "a C++ object with device code".into()),
        (StepKind::Cuda, false) => (false, "a CUDA object without device code".into()),
        (_, false) => (true, "no device code".into()),
        (_, true) => {
            let c = check(a, expect);
            let missing: Vec<&str> = c
                .missing_sass
                .iter()
                .chain(&c.missing_ptx)
                .map(|m| m.name.as_str())
                .collect();
            let extra: Vec<&str> = c
                .extra_sass
                .iter()
                .chain(&c.extra_ptx)
                .map(|m| m.name.as_str())
                .collect();
            match (missing.is_empty(), extra.is_empty()) {
                (true, true) => (true, "exactly the plan".into()),
                (true, false) => (true, format!("the plan, and {} beyond it", extra.join(" "))),
                (false, _) => (false, format!("missing {}", missing.join(" "))),
            }
        }
    }
}

/// The whole build, estimated from a slice: every step of `build.ninja` at the time this
/// directory's `.ninja_log` measured for it, or, for a step never run, the typical time of its
/// kind in its own CMake target when one of those was measured, else of its kind (the mean of
/// the measured CUDA, C++ and link steps; the median of the others, since one code generation
/// step takes minutes and most custom commands a moment).
#[derive(Debug, Clone, Serialize)]
pub struct Estimate {
    /// Steps of `build.ninja` by kind (CUDA, C++, link, other), and how many were measured.
    pub steps: [usize; 4],
    pub measured: [usize; 4],
    /// Seconds one step of each kind is taken to cost when not measured (None: no step measured).
    pub typical: [Option<f64>; 4],
    /// CPU-seconds by kind (one job each), the whole build.
    pub cpu_seconds: [f64; 4],
    /// How the steps of each target with a measured step were weighed.
    pub by_target: Vec<TargetCost>,
    /// Wall-clock hours with N job slots kept busy (N = this machine's jobs, 16, 64).
    pub hours_at: Vec<(u32, f64)>,
    /// With `--dist`: the hours of links and other steps that stay on this machine, at its jobs.
    pub local_hours_with_dist: f64,
}

impl Estimate {
    pub fn of(build_ninja: &str, ninja_log: &str, jobs_here: u32) -> Estimate {
        let timed = logged(ninja_log);
        let mut steps = [0usize; 4];
        let mut measured_times: [Vec<f64>; 4] = Default::default();
        // Per kind and CMake target: c10's C++ files take a second or two, torch_cpu's ATen
        // kernels close to a minute; a step is weighed by its own library's measured ones first.
        let mut groups: BTreeMap<(usize, String), (usize, Vec<f64>)> = BTreeMap::new();
        for e in edges(build_ninja) {
            let Some(kind) = e.kind() else { continue };
            let k = kind.index();
            steps[k] += 1;
            let out = e.first_output();
            let group = groups
                .entry((k, cmake_target(&out).unwrap_or_default().to_string()))
                .or_default();
            group.0 += 1;
            if let Some(t) = timed.get(out.as_str()) {
                measured_times[k].push(*t);
                group.1.push(*t);
            }
        }
        let typical: [Option<f64>; 4] =
            std::array::from_fn(|k| typical_of(&measured_times[k], k == StepKind::Other.index()));
        let mut cpu_seconds = [0.0f64; 4];
        let mut by_target = Vec::new();
        for ((k, target), (n, times)) in &groups {
            let own = typical_of(times, *k == StepKind::Other.index());
            let each = own.or(typical[*k]).unwrap_or(0.0);
            let secs = times.iter().sum::<f64>() + (n - times.len()) as f64 * each;
            cpu_seconds[*k] += secs;
            if !times.is_empty() {
                by_target.push(TargetCost {
                    kind: StepKind::ALL[*k].name(),
                    target: target.clone(),
                    steps: *n,
                    measured: times.len(),
                    typical: each,
                    cpu_seconds: secs,
                });
            }
        }
        let total: f64 = cpu_seconds.iter().sum();
        let local = cpu_seconds[StepKind::Link.index()] + cpu_seconds[StepKind::Other.index()];
        let jobs_here = jobs_here.max(1);
        Estimate {
            steps,
            measured: std::array::from_fn(|k| measured_times[k].len()),
            typical,
            cpu_seconds,
            by_target,
            hours_at: [jobs_here, 16, 64]
                .into_iter()
                .map(|n| (n, total / n as f64 / 3600.0))
                .collect(),
            local_hours_with_dist: local / jobs_here as f64 / 3600.0,
        }
    }

    /// Kinds with steps but no measured step: their time is not in the estimate.
    pub fn unmeasured_kinds(&self) -> Vec<&'static str> {
        StepKind::ALL
            .into_iter()
            .filter(|k| self.steps[k.index()] > 0 && self.typical[k.index()].is_none())
            .map(StepKind::name)
            .collect()
    }
}

/// One kind of step of one CMake target with a measured step: how its steps were weighed.
#[derive(Debug, Clone, Serialize)]
pub struct TargetCost {
    pub kind: &'static str,
    /// `torch_cuda` (from `…/CMakeFiles/torch_cuda.dir/…`); empty for steps of no target.
    pub target: String,
    pub steps: usize,
    pub measured: usize,
    /// Seconds each unmeasured step of it is taken to cost.
    pub typical: f64,
    pub cpu_seconds: f64,
}

/// The CMake target an output belongs to: `torch_cuda` of
/// `caffe2/CMakeFiles/torch_cuda.dir/__/aten/…/AbsKernel.cu.o`.
fn cmake_target(output: &str) -> Option<&str> {
    let rest = &output[output.find("CMakeFiles/")? + "CMakeFiles/".len()..];
    rest.split_once(".dir/").map(|(t, _)| t)
}

/// The mean of `times`, or for `median` steps (custom commands: one code generation step takes
/// minutes, most a moment) their median; None when nothing was measured.
fn typical_of(times: &[f64], median: bool) -> Option<f64> {
    if times.is_empty() {
        None
    } else if median {
        let mut s = times.to_vec();
        s.sort_by(f64::total_cmp);
        Some(s[s.len() / 2])
    } else {
        Some(times.iter().sum::<f64>() / times.len() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NINJA: &str = "\
rule CUDA_COMPILER__torch_cuda_Release
build caffe2/CMakeFiles/torch_cuda.dir/__/aten/src/ATen/native/cuda/AbsKernel.cu.o: CUDA_COMPILER__torch_cuda_Release /src/aten/src/ATen/native/cuda/AbsKernel.cu || cmake_object_order_depends_target_torch_cuda
build caffe2/CMakeFiles/torch_cuda.dir/__/aten/src/ATen/native/cuda/Fill$ Kernel.cu.o: CUDA_COMPILER__torch_cuda_Release /src/aten/src/ATen/native/cuda/Fill$ Kernel.cu
build c10/cuda/CMakeFiles/c10_cuda.dir/CUDAStream.cpp.o: CXX_COMPILER__c10_cuda_Release /src/c10/cuda/CUDAStream.cpp || cmake_object_order_depends_target_c10_cuda
build caffe2/CMakeFiles/torch_cpu.dir/__/aten/src/ATen/native/ReduceOps.cpp.o: CXX_COMPILER__torch_cpu_Release /src/aten/src/ATen/native/ReduceOps.cpp
build caffe2/CMakeFiles/torch_cpu.dir/__/aten/src/ATen/native/TensorShape.cpp.o: CXX_COMPILER__torch_cpu_Release /src/aten/src/ATen/native/TensorShape.cpp
build caffe2/CMakeFiles/torch_cpu.dir/__/aten/src/ATen/native/cpu/Bin.cpp.DEFAULT.cpp.o: CXX_COMPILER__torch_cpu_Release /src/build/aten/src/ATen/native/cpu/Bin.cpp.DEFAULT.cpp
build caffe2/CMakeFiles/torch_cpu.dir/__/aten/src/ATen/native/cpu/Bin.cpp.AVX2.cpp.o: CXX_COMPILER__torch_cpu_Release /src/build/aten/src/ATen/native/cpu/Bin.cpp.AVX2.cpp
build lib/libc10_cuda.so: CXX_SHARED_LIBRARY_LINKER__c10_cuda_Release c10/cuda/CMakeFiles/c10_cuda.dir/CUDAStream.cpp.o | lib/libc10.so
build c10_cuda: phony lib/libc10_cuda.so
build aten/src/ATen/core/TensorBody.h aten/src/ATen/Functions.h: CUSTOM_COMMAND /src/torchgen/gen.py
build version.py: CUSTOM_COMMAND /src/tools/v.py
build small: CUSTOM_COMMAND /src/tools/s.py
";

    #[test]
    fn sources_name_the_step_that_compiles_them_and_unknown_targets_are_refused() {
        let root = Path::new("/src");
        let build = Path::new("/src/build");
        let got = resolve_targets(
            NINJA,
            root,
            build,
            &[
                "aten/src/ATen/native/cuda/AbsKernel.cu".into(),
                "c10_cuda".into(),
                "aten/src/ATen/native/cuda/Fill Kernel.cu".into(),
                "aten/src/ATen/native/cpu/Bin.cpp".into(),
            ],
        )
        .unwrap();
        assert_eq!(
            got,
            [
                "caffe2/CMakeFiles/torch_cuda.dir/__/aten/src/ATen/native/cuda/AbsKernel.cu.o",
                "c10_cuda",
                "caffe2/CMakeFiles/torch_cuda.dir/__/aten/src/ATen/native/cuda/Fill Kernel.cu.o",
                "caffe2/CMakeFiles/torch_cpu.dir/__/aten/src/ATen/native/cpu/Bin.cpp.DEFAULT.cpp.o",
                "caffe2/CMakeFiles/torch_cpu.dir/__/aten/src/ATen/native/cpu/Bin.cpp.AVX2.cpp.o",
            ],
            "a path with a space is written with `$ ` in build.ninja"
        );
        // An object given as such is built alone, not the library it is linked into (whose
        // link step lists it as an input).
        let object = "c10/cuda/CMakeFiles/c10_cuda.dir/CUDAStream.cpp.o";
        assert_eq!(
            resolve_targets(NINJA, root, build, &[object.into()]).unwrap(),
            [object]
        );
        let e = resolve_targets(NINJA, root, build, &["torch_cudaa".into()]).unwrap_err();
        assert!(e.is::<UnknownTarget>(), "{e}");
        assert!(format!("{e}").contains("torch_cudaa"), "{e}");
    }

    #[test]
    fn this_runs_steps_are_read_from_where_the_log_stood() {
        let before = "# ninja log v6\n0\t100\t1\told.o\th0\n";
        let after = format!(
            "{before}0\t9000\t2\tgen/A.h\th1\n0\t9000\t2\tgen/B.h\th1\n9000\t40000\t3\tx.cu.o\th2\n"
        );
        assert_eq!(
            steps_since(&after, before.len()),
            [("gen/A.h".to_string(), 9.0), ("x.cu.o".to_string(), 31.0)]
        );
        assert!(steps_since(before, before.len()).is_empty());
        assert!(steps_since(before, 10_000).is_empty(), "a log that shrank");
    }

    #[test]
    fn the_estimate_adds_measured_steps_and_kind_typicals_for_the_rest() {
        // Measured: AbsKernel 60 s (CUDA), CUDAStream 10 s (C++ of c10_cuda), ReduceOps 50 s
        // (C++ of torch_cpu), codegen 300 s and version 1 s (other); not measured: Fill Kernel
        // (CUDA of torch_cuda → 60), TensorShape (torch_cpu's → 50, not the C++ mean of 30), the
        // link (none measured → 0, named), `small` (other → the median of [1, 300]: 300).
        let log = "# ninja log v6\n\
0\t60000\t1\tcaffe2/CMakeFiles/torch_cuda.dir/__/aten/src/ATen/native/cuda/AbsKernel.cu.o\ta\n\
0\t10000\t1\tc10/cuda/CMakeFiles/c10_cuda.dir/CUDAStream.cpp.o\tb\n\
0\t50000\t1\tcaffe2/CMakeFiles/torch_cpu.dir/__/aten/src/ATen/native/ReduceOps.cpp.o\te\n\
0\t300000\t1\taten/src/ATen/core/TensorBody.h\tc\n\
0\t1000\t1\tversion.py\td\n";
        let e = Estimate::of(NINJA, log, 2);
        assert_eq!(e.steps, [2, 5, 1, 3]);
        assert_eq!(e.measured, [1, 2, 0, 2]);
        assert_eq!(e.typical[1], Some(30.0));
        assert_eq!(e.cpu_seconds, [120.0, 210.0, 0.0, 601.0]);
        let cpu = e
            .by_target
            .iter()
            .find(|t| t.target == "torch_cpu")
            .unwrap();
        assert_eq!((cpu.steps, cpu.measured, cpu.typical), (4, 1, 50.0));
        assert_eq!(e.unmeasured_kinds(), ["link"]);
        assert_eq!(e.hours_at[0].0, 2);
        assert!((e.hours_at[0].1 - 931.0 / 2.0 / 3600.0).abs() < 1e-9);
        assert!((e.hours_at[2].1 - 931.0 / 64.0 / 3600.0).abs() < 1e-9);
        assert!((e.local_hours_with_dist - 601.0 / 2.0 / 3600.0).abs() < 1e-9);
    }
}
