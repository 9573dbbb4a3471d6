//! `bench build-ext`: archsmith's clean build against the plain front end with the same
//! `TORCH_CUDA_ARCH_LIST` and `MAX_JOBS` set by hand, and the no-op rebuild of each, in one run on
//! the same machine.
//!
//! The plain build gets exactly archsmith's environment (toolkit, `CPATH`, arch list, job count)
//! minus what archsmith decides on top of it (nvcc `--threads`), runs the same front end in a
//! fresh copy of the source, and its no-op rebuild is the same command again in that tree (its
//! `build/` dir kept, so ninja has nothing to compile). archsmith's clean build starts from an
//! empty output dir and includes the audit and the import; its no-op rebuild is the stamp check.
//!
//! On a shared machine other work shifts timings by more than the effect measured, so `rounds`
//! alternate the order (plain first in even rounds, archsmith first in odd ones: ABBA) and the
//! ratios use each side's fastest run, the one least disturbed; every sample is reported.

use super::progress::Mode;
use super::{build_command, front_end, plan, prepare, source, Request, SourceSpec};
use crate::version::Version;
use anyhow::{bail, Context, Result};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct BenchRequest {
    pub source: PathBuf,
    pub arch: String,
    pub torch: Option<Version>,
    pub jobs: Option<u32>,
    pub out: PathBuf,
    pub rounds: u32,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchReport {
    pub source: String,
    pub torch_cuda_arch_list: String,
    pub front_end: String,
    pub cores: u32,
    pub mem_available_gib: f64,
    pub max_jobs: u32,
    pub nvcc_threads: u32,
    /// Samples in run order, seconds.
    pub plain_clean_s: Vec<f64>,
    pub plain_noop_s: Vec<f64>,
    pub archsmith_clean_s: Vec<f64>,
    pub archsmith_noop_s: Vec<f64>,
    /// fastest plain clean / fastest archsmith clean.
    pub clean_speedup: f64,
    /// fastest plain no-op / slowest archsmith no-op.
    pub noop_speedup: f64,
    pub plain_log: PathBuf,
    /// 1-minute load average before each clean build, in run order (`plain`/`archsmith`, value):
    /// other work on the machine makes timings noisy.
    pub load_1min: Vec<(String, f64)>,
}

fn load_1min() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn timed_plain(cmd: &crate::process::Cmd, log: &Path) -> Result<f64> {
    let mut f = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    writeln!(f, "# {}", cmd.display())?;
    let t = Instant::now();
    let code = cmd.stream_lines(|l| {
        let _ = writeln!(f, "{l}");
    })?;
    let secs = t.elapsed().as_secs_f64();
    if code != Some(0) {
        bail!("the plain build failed ({code:?}); see {}", log.display());
    }
    Ok(secs)
}

fn min(v: &[f64]) -> f64 {
    v.iter().cloned().fold(f64::INFINITY, f64::min)
}

fn max(v: &[f64]) -> f64 {
    v.iter().cloned().fold(0.0, f64::max)
}

pub fn run(req: &BenchRequest) -> Result<BenchReport> {
    let p = prepare(None, req.torch.as_ref(), None, &req.arch)?;
    let builder = front_end(&p.env);
    let out = &req.out;
    let _ = fs::remove_dir_all(out);
    fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let out = out.canonicalize()?;
    let files = source::tree_files(&req.source)?;
    let (units, cu) = plan::count_sources(&files);
    let images = (p.plan.sass().len() + p.plan.ptx().len()) as u32;
    let cores = plan::cores();
    let mem = plan::mem_available_gib();
    let par = plan::parallelism(cores, mem, units, cu, images, req.jobs);
    let plain_par = plan::Parallelism {
        nvcc_threads: 1,
        ..par
    };
    let mut r = BenchReport {
        source: req.source.display().to_string(),
        torch_cuda_arch_list: p.plan.torch_cuda_arch_list(),
        front_end: builder.to_string(),
        cores,
        mem_available_gib: (mem * 10.0).round() / 10.0,
        max_jobs: par.jobs,
        nvcc_threads: par.nvcc_threads,
        plain_clean_s: vec![],
        plain_noop_s: vec![],
        archsmith_clean_s: vec![],
        archsmith_noop_s: vec![],
        clean_speedup: 0.0,
        noop_speedup: 0.0,
        plain_log: out.join("plain-clean-0.log"),
        load_1min: vec![],
    };
    eprintln!(
        "bench: {} rounds; TORCH_CUDA_ARCH_LIST={} MAX_JOBS={} for both, archsmith adds nvcc --threads={}",
        req.rounds.max(1),
        p.plan.torch_cuda_arch_list(),
        par.jobs,
        par.nvcc_threads
    );
    for round in 0..req.rounds.max(1) {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for archsmith in order {
            let load = load_1min();
            if archsmith {
                r.load_1min.push(("archsmith".into(), load));
                let req_a = Request {
                    source: SourceSpec::Dir(req.source.clone()),
                    arch: req.arch.clone(),
                    torch: req.torch.clone(),
                    cuda: None,
                    python: None,
                    out: out.join(format!("archsmith-{round}")),
                    cache: None,
                    jobs: req.jobs,
                    progress: Mode::Quiet,
                };
                let t = Instant::now();
                let first = super::run(&req_a)?;
                let clean = t.elapsed().as_secs_f64();
                if first.reused {
                    bail!("archsmith's clean build found a stamp in a fresh output dir");
                }
                let t = Instant::now();
                let second = super::run(&req_a)?;
                let noop = t.elapsed().as_secs_f64();
                if !second.reused {
                    bail!("archsmith's rebuild of an unchanged source was not a no-op");
                }
                eprintln!("bench: round {round}: archsmith clean {clean:.1} s, no-op {noop:.2} s (load {load:.1})");
                r.archsmith_clean_s.push(clean);
                r.archsmith_noop_s.push(noop);
            } else {
                r.load_1min.push(("plain".into(), load));
                let tree = out.join(format!("plain-src-{round}"));
                source::copy_tree(&req.source, &tree)?;
                let wheels = out.join(format!("plain-wheels-{round}"));
                fs::create_dir_all(&wheels)?;
                let cmd = build_command(
                    &p.env, &p.tc, &p.plan, &plain_par, builder, &tree, &wheels, None,
                );
                let clean = timed_plain(&cmd, &out.join(format!("plain-clean-{round}.log")))?;
                let noop = timed_plain(&cmd, &out.join(format!("plain-noop-{round}.log")))?;
                eprintln!("bench: round {round}: plain {builder} clean {clean:.1} s, no-op {noop:.2} s (load {load:.1})");
                r.plain_clean_s.push(clean);
                r.plain_noop_s.push(noop);
            }
        }
    }
    r.clean_speedup = min(&r.plain_clean_s) / min(&r.archsmith_clean_s);
    r.noop_speedup = min(&r.plain_noop_s) / max(&r.archsmith_noop_s);
    Ok(r)
}
