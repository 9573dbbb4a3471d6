//! `bench build-ext`: archsmith's clean build against the plain front end with the same
//! `TORCH_CUDA_ARCH_LIST` and `MAX_JOBS` set by hand, and the no-op rebuild of each, in one run on
//! the same machine.
//!
//! The plain build gets exactly archsmith's environment (toolkit, `CPATH`, arch list, job count)
//! minus what archsmith decides on top of it (nvcc `--threads`), runs the same front end in a
//! fresh copy of the source, and its no-op rebuild is the same command again in that tree (its
//! `build/` dir kept, so ninja has nothing to compile). archsmith's clean build starts from an
//! empty output dir and includes the audit and the import; its no-op rebuild is the stamp check.

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
    pub plain_clean_s: f64,
    pub plain_noop_s: f64,
    pub archsmith_clean_s: f64,
    pub archsmith_noop_s: f64,
    /// plain clean / archsmith clean.
    pub clean_speedup: f64,
    /// plain no-op / archsmith no-op.
    pub noop_speedup: f64,
    pub plain_log: PathBuf,
    /// 1-minute load average at the start of each phase (plain clean, plain no-op, archsmith
    /// clean, archsmith no-op): other work on the machine makes timings noisy.
    pub load_1min: Vec<f64>,
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

    // Plain: a fresh copy, the front end with the arch list and MAX_JOBS set by hand.
    let tree = out.join("plain-src");
    source::copy_tree(&req.source, &tree)?;
    let wheels = out.join("plain-wheels");
    fs::create_dir_all(&wheels)?;
    let cmd = build_command(
        &p.env, &p.tc, &p.plan, &plain_par, builder, &tree, &wheels, None,
    );
    eprintln!(
        "bench: plain {builder}, TORCH_CUDA_ARCH_LIST={} MAX_JOBS={} (clean)…",
        p.plan.torch_cuda_arch_list(),
        par.jobs
    );
    let mut load = vec![load_1min()];
    let plain_log = out.join("plain-clean.log");
    let plain_clean = timed_plain(&cmd, &plain_log)?;
    eprintln!("bench: plain clean {plain_clean:.1} s; plain rebuild (no change)…");
    load.push(load_1min());
    let plain_noop = timed_plain(&cmd, &out.join("plain-noop.log"))?;
    eprintln!("bench: plain no-op {plain_noop:.1} s; archsmith clean…");

    let req_a = Request {
        source: SourceSpec::Dir(req.source.clone()),
        arch: req.arch.clone(),
        torch: req.torch.clone(),
        cuda: None,
        python: None,
        out: out.join("archsmith"),
        cache: None,
        jobs: req.jobs,
        progress: Mode::Quiet,
    };
    load.push(load_1min());
    let t = Instant::now();
    let first = super::run(&req_a)?;
    let archsmith_clean = t.elapsed().as_secs_f64();
    if first.reused {
        bail!("archsmith's clean build found a stamp in a fresh output dir");
    }
    eprintln!("bench: archsmith clean {archsmith_clean:.1} s; archsmith rebuild (no change)…");
    load.push(load_1min());
    let t = Instant::now();
    let second = super::run(&req_a)?;
    let archsmith_noop = t.elapsed().as_secs_f64();
    if !second.reused {
        bail!("archsmith's rebuild of an unchanged source was not a no-op");
    }
    Ok(BenchReport {
        source: req.source.display().to_string(),
        torch_cuda_arch_list: p.plan.torch_cuda_arch_list(),
        front_end: builder.to_string(),
        cores,
        mem_available_gib: (mem * 10.0).round() / 10.0,
        max_jobs: par.jobs,
        nvcc_threads: first.nvcc_threads,
        plain_clean_s: plain_clean,
        plain_noop_s: plain_noop,
        archsmith_clean_s: archsmith_clean,
        archsmith_noop_s: archsmith_noop,
        clean_speedup: plain_clean / archsmith_clean,
        noop_speedup: plain_noop / archsmith_noop,
        plain_log,
        load_1min: load,
    })
}
