//! `bench jit-prebuild`: a tree of JIT extensions prebuilt with its triggers in one pool of job
//! slots (build-ext's default) against one trigger at a time (`--serial-extensions`, how every
//! prebuild ran before issue 50), in one run on the same machine.
//!
//! Each build starts from an empty output dir (so nothing is reused) and is the whole prebuild:
//! the triggers, the audit, the manifest and the load with no compiler on PATH. Rounds alternate
//! the order (serial first in even rounds); the ratio uses each side's fastest run, the one least
//! disturbed by other work; every sample is reported. Both sides must build the same extensions
//! with the same device code, or the benchmark fails.

use super::{cpu_s, load_1min, min};
use crate::build_ext::{self, jit, Request, SourceSpec};
use crate::build_output::progress::Mode;
use crate::output::Table;
use crate::version::Version;
use anyhow::{bail, Result};
use fs_err as fs;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct JitPrebuildBenchRequest {
    /// A tree of JIT extensions (default: the `jit-ext` test fixture).
    pub source: PathBuf,
    pub arch: crate::arch::spec::ArchSpec,
    pub torch: Option<Version>,
    pub python: Option<PathBuf>,
    pub out: PathBuf,
    pub rounds: u32,
}

/// One way of running the prebuild and its samples.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    /// `pooled` or `serial`.
    pub label: String,
    pub triggers_at_once: u32,
    /// Wall seconds of each whole prebuild, in run order.
    pub seconds: Vec<f64>,
    /// CPU seconds (user + system, every process) of each.
    pub cpu_s: Vec<f64>,
    /// The last run's per-trigger times where they built at once.
    pub trigger_times: Vec<build_ext::ExtensionBuilt>,
    /// `name: sm_75 sm_89 …` of each extension the last run built.
    pub extensions: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct JitPrebuildReport {
    pub source: String,
    pub torch_cuda_arch_list: String,
    pub triggers: usize,
    pub cores: u32,
    pub mem_available_gib: f64,
    pub pooled: Side,
    pub serial: Side,
    /// Fastest serial / fastest pooled.
    pub speedup: f64,
    /// 1-minute load average before each build, in run order.
    pub load_1min: Vec<(String, f64)>,
}

pub fn jit_prebuild_pool(req: &JitPrebuildBenchRequest) -> Result<JitPrebuildReport> {
    let source = SourceSpec::Dir(req.source.clone());
    if !jit::applies(&source)? {
        bail!(
            "{}: not a tree of JIT extensions (torch load()/load_inline() calls and no compiled build script)",
            req.source.display()
        );
    }
    let side = |label: &str| Side {
        label: label.into(),
        triggers_at_once: 0,
        seconds: vec![],
        cpu_s: vec![],
        trigger_times: vec![],
        extensions: vec![],
    };
    let (mut pooled, mut serial) = (side("pooled"), side("serial"));
    let (mut arch_list, mut triggers, mut load) = (String::new(), 0, Vec::new());
    for round in 0..req.rounds.max(1) {
        let order = match round % 2 {
            0 => [true, false],
            _ => [false, true],
        };
        for is_serial in order {
            let s = if is_serial { &mut serial } else { &mut pooled };
            load.push((s.label.clone(), load_1min()));
            let out = req.out.join(format!("{}-{round}", s.label));
            let _ = fs::remove_dir_all(&out);
            let (cpu, t) = (cpu_s(), Instant::now());
            let o = match jit::run(&request(req, &source, out, is_serial))? {
                Ok(o) => o,
                Err(f) => bail!("the {} prebuild failed: {f}", s.label),
            };
            s.seconds.push(t.elapsed().as_secs_f64());
            s.cpu_s.push(cpu_s() - cpu);
            s.triggers_at_once = o.triggers_at_once;
            s.trigger_times = o.trigger_times;
            s.extensions = o
                .extensions
                .iter()
                .map(|e| {
                    format!(
                        "{}: {}",
                        e.name,
                        [&e.sass[..], &e.ptx[..]].concat().join(" ")
                    )
                })
                .collect();
            s.extensions.sort();
            arch_list = o.torch_cuda_arch_list;
            triggers = o.triggers.len();
        }
    }
    if pooled.extensions != serial.extensions {
        bail!(
            "the two prebuilds differ: pooled built {:?}, serial {:?}",
            pooled.extensions,
            serial.extensions
        );
    }
    Ok(JitPrebuildReport {
        source: req.source.display().to_string(),
        torch_cuda_arch_list: arch_list,
        triggers,
        cores: crate::host::cores(),
        mem_available_gib: crate::host::mem_available_gib(),
        speedup: min(&serial.seconds) / min(&pooled.seconds),
        pooled,
        serial,
        load_1min: load,
    })
}

fn request(
    req: &JitPrebuildBenchRequest,
    source: &SourceSpec,
    out: PathBuf,
    serial: bool,
) -> Request {
    Request {
        source: source.clone(),
        arch: req.arch.clone(),
        target: crate::python::TargetEnv {
            torch: req.torch.clone(),
            cuda: None,
            python: req.python.clone(),
        },
        out,
        cache: None,
        jobs: None,
        progress: Mode::Quiet,
        own_arch_flags: false,
        serial_extensions: serial,
        cpu_only: false,
        dist: None,
        skip_missing_submodules: false,
        stable_abi_target: None,
        pool: None,
        prepared: None,
    }
}

/// The default tree: the JIT test fixture (three triggers: a CUDA `load`, a `load_inline`, a C++
/// `load` through the package's own wrapper).
pub fn default_source() -> Result<PathBuf> {
    let dir = crate::paths::repo_root().join("xtask/tests/fixtures/jit-ext");
    if !dir.is_dir() {
        bail!(
            "{} is missing: pass a tree of JIT extensions",
            dir.display()
        );
    }
    Ok(dir)
}

impl JitPrebuildReport {
    /// The aligned table people read (`--json` prints the report itself).
    pub fn table(&self) -> String {
        let r = self;
        let mut t = Table::new(["prebuild", "at once", "runs (s)", "fastest", "CPU (s)"]);
        for s in [&r.serial, &r.pooled] {
            let runs: Vec<String> = s.seconds.iter().map(|x| format!("{x:.1}")).collect();
            let cpu: Vec<String> = s.cpu_s.iter().map(|x| format!("{x:.0}")).collect();
            t.row([
                s.label.clone(),
                s.triggers_at_once.to_string(),
                runs.join(" "),
                format!("{:.1} s", crate::bench::min(&s.seconds)),
                cpu.join(" "),
            ]);
        }
        format!(
            "{}{} trigger(s) of {} for {}, {} cores, {:.0} GiB available: pooled {:.2}x serial\n",
            t.render(),
            r.triggers,
            r.source,
            r.torch_cuda_arch_list,
            r.cores,
            r.mem_available_gib,
            r.speedup
        )
    }
}
