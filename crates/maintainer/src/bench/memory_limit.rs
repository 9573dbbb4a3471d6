//! `bench memory-limit`: a build under a real memory limit — archsmith's `build-ext` against the
//! plain `pip wheel --no-build-isolation` with `MAX_JOBS` = cores (the usual advice), each in a
//! memory cgroup of its own with the same limit, one after the other in one run: whether the
//! kernel killed a compile, the group's peak memory, the time, and whether a wheel with the
//! planned archs came out. The plain build gets archsmith's environment (toolkit, `CPATH`,
//! `TORCH_CUDA_ARCH_LIST`) and the package's own flags, as a user running pip would.

use super::build_ext_vs_pip::{pip_env, WheelAudit};
use crate::build_ext::command::{build_command, Setup};
use crate::build_ext::{jobs, prepare, source};
use crate::build_output::log::first_killed_compile;
use crate::host::LimitedGroup;
use crate::output::Table;
use crate::process::Cmd;
use crate::version::Version;
use anyhow::{Context, Result};
use fs_err as fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct MemoryLimitRequest {
    pub source: PathBuf,
    pub arch: crate::arch::spec::ArchSpec,
    pub torch: Option<Version>,
    pub limit_bytes: u64,
    pub out: PathBuf,
}

/// One build under the limit.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Side {
    pub label: String,
    /// The build exited 0 with a wheel.
    pub finished: bool,
    pub exit: Option<i32>,
    /// Processes the kernel's out-of-memory killer killed in the group.
    pub oom_kills: u64,
    /// The highest anonymous memory of the group's processes, sampled every 100 ms (what the
    /// compiles themselves held; the page cache is reclaimed at the limit, not killed for).
    pub peak_bytes: u64,
    /// The group's own high-water mark, page cache included (the limit, in a long build).
    pub peak_with_cache_bytes: u64,
    pub seconds: f64,
    /// The first compile the build's output says was killed.
    pub killed: Option<String>,
    pub audit: Option<WheelAudit>,
    pub log: PathBuf,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct MemoryLimitReport {
    pub source: String,
    pub torch_cuda_arch_list: String,
    pub limit_bytes: u64,
    pub cores: u32,
    pub plain: Side,
    pub archsmith: Side,
}

/// Both builds, plain first.
pub fn run(req: &MemoryLimitRequest) -> Result<MemoryLimitReport> {
    let target = crate::python::TargetEnv {
        torch: req.torch.clone(),
        ..Default::default()
    };
    let p = prepare(&target, &req.arch, None)?;
    let _ = fs::remove_dir_all(&req.out);
    fs::create_dir_all(&req.out)?;
    let out = req.out.canonicalize()?;
    let cores = crate::host::cores();
    let plain = plain_side(req, &p, cores, &out)?;
    let archsmith = archsmith_side(req, &p, &out)?;
    Ok(MemoryLimitReport {
        source: req.source.display().to_string(),
        torch_cuda_arch_list: p.plan.torch_cuda_arch_list(),
        limit_bytes: req.limit_bytes,
        cores,
        plain,
        archsmith,
    })
}

/// Runs `cmd` in a fresh group with the limit, its output in `log`: the side's measurements.
fn measured(label: String, cmd: Cmd, limit: u64, log: PathBuf) -> Result<(Side, Vec<String>)> {
    let group = LimitedGroup::create("archsmith-bench", limit)?;
    let cmd = cmd.in_cgroup(group.procs());
    let mut f = fs::File::create(&log)?;
    writeln!(f, "# {}", cmd.display())?;
    let mut lines = Vec::new();
    let started = Instant::now();
    crate::errln!(
        "bench: {label} under {:.1} GiB; log: {}",
        limit as f64 / (1u64 << 30) as f64,
        log.display()
    );
    let (exit, peak_bytes) = crate::process::with_peak(
        std::time::Duration::from_millis(100),
        || group.anon_bytes().unwrap_or(0),
        || {
            cmd.stream_lines(|l| {
                let _ = writeln!(f, "{l}");
                lines.push(l.to_string());
            })
        },
    );
    let exit = exit?;
    let side = Side {
        label,
        finished: exit == Some(0),
        exit,
        oom_kills: group.oom_kills().unwrap_or(0),
        peak_bytes,
        peak_with_cache_bytes: group.peak_bytes().unwrap_or(0),
        seconds: started.elapsed().as_secs_f64(),
        killed: first_killed_compile(lines.iter().map(String::as_str))
            .map(|k| format!("{} (log line {})", k.program, k.log_line + 1)),
        audit: None,
        log,
    };
    Ok((side, lines))
}

fn plain_side(
    req: &MemoryLimitRequest,
    p: &crate::build_ext::Prepared,
    cores: u32,
    out: &Path,
) -> Result<Side> {
    let plain_env = pip_env(&p.env)?;
    let tree = out.join("plain-src");
    source::copy_tree(&req.source, &tree)?;
    let wheels = out.join("plain-wheels");
    fs::create_dir_all(&wheels)?;
    let par = jobs::Parallelism {
        jobs: cores,
        nvcc_threads: 1,
        extensions: 1,
        reason: "one per core, set by hand",
    };
    let setup = Setup {
        env: &plain_env,
        tc: &p.tc,
        plan: &p.plan,
        par: &par,
        builder: "pip wheel",
        cache: None,
        shared_sources: None,
        guard: None,
        cpu_only: false,
        stable_abi_target: None,
        ninja_dir: None,
        pool: None,
    };
    let cmd = build_command(&setup, &tree, &wheels);
    let label = format!("pip wheel, MAX_JOBS={cores}");
    let (mut side, _) = measured(label, cmd, req.limit_bytes, out.join("plain.log"))?;
    let wheel = fs::read_dir(&wheels)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|w| w.extension().is_some_and(|x| x == "whl"));
    side.audit = wheel.map(|w| WheelAudit::of(&w, &p.plan, false));
    side.finished &= side.audit.is_some();
    Ok(side)
}

fn archsmith_side(
    req: &MemoryLimitRequest,
    p: &crate::build_ext::Prepared,
    out: &Path,
) -> Result<Side> {
    let exe = std::env::current_exe().context("finding archsmith's own executable")?;
    let mut cmd = Cmd::new(exe)
        .arg("build-ext")
        .arg(&req.source)
        .arg("--arch")
        .arg(req.arch.to_string())
        .arg("--out")
        .arg(out.join("archsmith"))
        .arg("--json");
    if let Some(t) = &req.torch {
        cmd = cmd.arg("--torch").arg(t.to_string());
    }
    let (mut side, lines) = measured(
        "archsmith build-ext".into(),
        cmd,
        req.limit_bytes,
        out.join("archsmith.log"),
    )?;
    // Its --json document is the last thing it printed.
    let doc = lines
        .iter()
        .position(|l| l == "{")
        .map(|i| lines[i..].join("\n"));
    let wheel = doc
        .and_then(|d| serde_json::from_str::<serde_json::Value>(&d).ok())
        .and_then(|v| v["result"]["wheel"].as_str().map(PathBuf::from));
    side.audit = wheel.map(|w| WheelAudit::of(&w, &p.plan, false));
    side.finished &= side.audit.as_ref().is_some_and(|a| a.ok);
    Ok(side)
}

impl MemoryLimitReport {
    pub fn table(&self) -> String {
        let gib = |b: u64| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64);
        let mut t = Table::new([
            "build",
            "result",
            "peak (anon)",
            "OOM kills",
            "time",
            "wheel",
        ]);
        for s in [&self.plain, &self.archsmith] {
            let result = match (s.finished, &s.killed) {
                (true, _) => "finished".to_string(),
                (false, Some(k)) => format!("killed: {k}"),
                (false, None) => format!("failed ({:?})", s.exit),
            };
            let wheel = s.audit.as_ref().map_or("none".to_string(), |a| match a.ok {
                true => format!("planned archs: {}", a.files.join("; ")),
                false => format!("not the plan: {}", a.files.join("; ")),
            });
            t.row([
                s.label.clone(),
                result,
                gib(s.peak_bytes),
                s.oom_kills.to_string(),
                format!("{:.0} s", s.seconds),
                wheel,
            ]);
        }
        format!(
            "{} under a {} memory cgroup, {} cores, TORCH_CUDA_ARCH_LIST={}\n{}",
            self.source,
            gib(self.limit_bytes),
            self.cores,
            self.torch_cuda_arch_list,
            t.render()
        )
    }
}
