//! `bench build-ext`: archsmith's clean build against the plain front end a user would run, `pip
//! wheel --no-build-isolation --no-deps` with the same `TORCH_CUDA_ARCH_LIST` and `MAX_JOBS` set by
//! hand, and the no-op rebuild of each, in one run on the same machine.
//!
//! Two plain builds, since "`MAX_JOBS` set by hand" has two honest readings: the same value
//! archsmith chose (so the ratio shows only what archsmith adds beyond its variables: nvcc
//! threads, the front end, the overlapped import check), and one job per core, the value the
//! usual advice gives. When the two coincide only one is run.
//!
//! The plain builds get exactly archsmith's environment (toolkit, `CPATH`, arch list) and run pip
//! in a twin of archsmith's env (the same packages plus pip: archsmith's envs are made by uv and
//! have none), each in a fresh copy of the source; their no-op rebuild is the same command again in
//! that tree (its `build/` kept, so ninja has nothing to compile). archsmith's clean build starts
//! from an empty output dir and includes the audit and the import; its no-op rebuild is the stamp
//! check.
//!
//! On a shared machine other work shifts timings by more than the effects measured, so `rounds`
//! alternate the order (forward in even rounds, reversed in odd ones) and the ratios use each
//! build's fastest run, the one least disturbed; every sample is reported.

use super::{cpu_s, load_1min, max, min};
use crate::build_ext::{
    command::{build_command, Setup},
    jobs, prepare, probe_env, source, EnvInfo, Prepared, Request, SourceSpec,
};
use crate::build_output::progress::Mode;
use crate::output::Table;
use crate::paths;
use crate::version::Version;
use anyhow::{bail, Context, Result};
use fs_err as fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct BenchRequest {
    pub source: PathBuf,
    pub arch: crate::arch::spec::ArchSpec,
    pub torch: Option<Version>,
    pub jobs: Option<u32>,
    pub out: PathBuf,
    pub rounds: u32,
    /// MAX_JOBS of the plain builds; empty: archsmith's value and one per core.
    pub plain_jobs: Vec<u32>,
    /// Both builds meant to compile no GPU code (build-ext's `--cpu-only`).
    pub cpu_only: bool,
}

/// What a build's wheel carries, by the plan: whether every planned image is in every container
/// of every file with device code, and the SASS per file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WheelAudit {
    pub ok: bool,
    /// `file: sm_75 sm_89 sm_90`, one per file with device code.
    pub files: Vec<String>,
    pub problems: Vec<String>,
}

impl WheelAudit {
    pub fn of(wheel: &Path, plan: &crate::arch::spec::Plan, cpu_only: bool) -> WheelAudit {
        let a = match cpu_only {
            true => crate::build_ext::check::audit_cpu_only(wheel, plan, Vec::new()),
            false => crate::build_ext::check::audit_wheel(wheel, plan, true, Vec::new()),
        };
        WheelAudit {
            ok: a.ok,
            files: a
                .files
                .iter()
                .map(|f| format!("{}: {}", f.path, f.sass.join(" ")))
                .collect(),
            problems: a.problems,
        }
    }
}

/// One plain build setup and its samples.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlainBuild {
    /// e.g. `pip wheel, MAX_JOBS=3 (archsmith's)`.
    pub label: String,
    pub front_end: String,
    pub max_jobs: u32,
    /// Samples in run order, seconds.
    pub clean_s: Vec<f64>,
    /// CPU seconds (user + system, every process of the build) of each clean build.
    pub clean_cpu_s: Vec<f64>,
    pub noop_s: Vec<f64>,
    /// fastest clean / fastest archsmith clean.
    pub clean_speedup: f64,
    /// fastest no-op / slowest archsmith no-op.
    pub noop_speedup: f64,
    pub log: PathBuf,
    /// The last clean build's wheel against the plan.
    pub audit: Option<WheelAudit>,
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
    /// Extensions archsmith built at once (1 for a one-extension package).
    pub extensions_at_once: u32,
    pub plain: Vec<PlainBuild>,
    /// archsmith's last clean wheel against the plan.
    pub archsmith_audit: Option<WheelAudit>,
    /// Samples in run order, seconds.
    pub archsmith_clean_s: Vec<f64>,
    /// CPU seconds (user + system, every process of the build) of each clean build: against the
    /// plain side's, what building things side by side costs in work, not only in time.
    pub archsmith_clean_cpu_s: Vec<f64>,
    pub archsmith_noop_s: Vec<f64>,
    /// 1-minute load average before each clean build, in run order (build, value): other work on
    /// the machine makes timings noisy.
    pub load_1min: Vec<(String, f64)>,
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

/// A twin of `env` with pip: the same packages (`uv pip freeze`) in a uv venv seeded with pip,
/// under `cache_dir()/bench/`, made once per package set (under a file lock). `env` itself when
/// it already has pip.
pub fn pip_env(env: &EnvInfo) -> Result<EnvInfo> {
    if env.has_pip {
        return Ok(env.clone());
    }
    let uv = crate::python::installer::uv_binary()
        .context("the plain build needs pip: an env with pip, or uv to make one")?;
    let uv_cmd = || crate::python::installer::uv_cmd(&uv);
    let freeze = uv_cmd()
        .args(["pip", "freeze", "--python"])
        .arg(&env.python)
        .read()?;
    let key = crate::stamp::hex(&<sha2::Sha256 as sha2::Digest>::digest(freeze.as_bytes()));
    let root = paths::cache_dir()
        .join("bench")
        .join(format!("pip-env-{}", &key[..16]));
    let python = root.join("bin").join("python");
    crate::cache::provision_in_place(
        &root,
        "the benchmark's pip twin env",
        &|dir| Ok(dir.join("bin").join("python").exists().then_some(())),
        &mut |dir, progress| {
            let reqs = dir.join("requirements.txt");
            fs::write(&reqs, &freeze).with_context(|| format!("writing {}", reqs.display()))?;
            progress(&format!(
                "making {} (the env's packages plus pip)",
                dir.display()
            ));
            // `--seed` puts pip in the venv, which is the point of the twin.
            uv_cmd()
                .args(["venv", "--quiet", "--allow-existing", "--seed", "--python"])
                .arg(&env.python)
                .arg(dir)
                .run_inherit()?;
            uv_cmd()
                .args(["pip", "install", "--quiet", "--python"])
                .arg(dir.join("bin").join("python"))
                .arg("-r")
                .arg(&reqs)
                .run_inherit()
        },
        &mut |msg| crate::errln!("bench: {msg}"),
    )?;
    let twin = probe_env(&python)?;
    if !twin.has_pip || twin.torch != env.torch {
        bail!(
            "{} should have pip and torch {}, has pip: {}, torch {}",
            root.display(),
            env.torch,
            twin.has_pip,
            twin.torch
        );
    }
    Ok(twin)
}

/// One run of the benchmark: each side built clean and rebuilt unchanged, `rounds` times in
/// alternating order, both wheels audited against the plan; ratios of the best times.
pub fn run(req: &BenchRequest) -> Result<BenchReport> {
    let target = crate::python::TargetEnv {
        torch: req.torch.clone(),
        ..Default::default()
    };
    let p = prepare(&target, &req.arch, None)?;
    let out = &req.out;
    let _ = fs::remove_dir_all(out);
    fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let out = out.canonicalize()?;
    let files = source::tree_files(&req.source)?;
    let (units, cu) = jobs::count_sources(&files);
    let images = (p.plan.sass().len() + p.plan.ptx().len()) as u32;
    let cores = crate::host::cores();
    let mem = crate::host::mem_available_gib();
    let par = jobs::parallelism(cores, mem, units, cu, images, req.jobs);
    let plain_env = pip_env(&p.env)?;
    let mut plain = plain_builds(req, par.jobs, cores, &out);
    let mut r = BenchReport {
        source: req.source.display().to_string(),
        torch_cuda_arch_list: p.plan.torch_cuda_arch_list(),
        front_end: crate::build_ext::front_end(&p.env)?.to_string(),
        cores,
        mem_available_gib: (mem * 10.0).round() / 10.0,
        max_jobs: par.jobs,
        nvcc_threads: par.nvcc_threads,
        extensions_at_once: 1,
        plain: vec![],
        archsmith_audit: None,
        archsmith_clean_s: vec![],
        archsmith_clean_cpu_s: vec![],
        archsmith_noop_s: vec![],
        load_1min: vec![],
    };
    crate::errln!(
        "bench: {} rounds; TORCH_CUDA_ARCH_LIST={}; archsmith: MAX_JOBS={} nvcc --threads={}; plain: {}",
        req.rounds.max(1),
        p.plan.torch_cuda_arch_list(),
        par.jobs,
        par.nvcc_threads,
        plain.iter().map(|b| b.label.as_str()).collect::<Vec<_>>().join("; ")
    );
    let side = Sides {
        req,
        p: &p,
        plain_env: &plain_env,
        out: &out,
    };
    // Build order: archsmith is `None`, plain build i is `Some(i)`.
    let forward: Vec<Option<usize>> = (0..plain.len()).map(Some).chain([None]).collect();
    for round in 0..req.rounds.max(1) {
        let mut order = forward.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for who in order {
            let load = load_1min();
            match who {
                None => archsmith_round(&side, round, load, &mut r)?,
                Some(i) => plain_round(&side, round, load, i, &mut plain[i], &mut r)?,
            }
        }
    }
    for b in &mut plain {
        b.clean_speedup = min(&b.clean_s) / min(&r.archsmith_clean_s);
        b.noop_speedup = min(&b.noop_s) / max(&r.archsmith_noop_s);
    }
    r.plain = plain;
    Ok(r)
}

/// The plain builds to compare with: `pip wheel` with archsmith's `MAX_JOBS` and with one job per
/// core (when those differ), or `--plain-jobs`.
fn plain_builds(req: &BenchRequest, jobs: u32, cores: u32, out: &Path) -> Vec<PlainBuild> {
    let mut plain_jobs = vec![(jobs, "archsmith's")];
    if cores != jobs {
        plain_jobs.push((cores, "one per core"));
    }
    if !req.plain_jobs.is_empty() {
        plain_jobs = req
            .plain_jobs
            .iter()
            .map(|j| (*j, "--plain-jobs"))
            .collect();
    }
    plain_jobs
        .iter()
        .enumerate()
        .map(|(i, (jobs, why))| PlainBuild {
            label: format!("pip wheel, MAX_JOBS={jobs} ({why})"),
            front_end: "pip wheel".into(),
            max_jobs: *jobs,
            clean_s: vec![],
            clean_cpu_s: vec![],
            noop_s: vec![],
            clean_speedup: 0.0,
            noop_speedup: 0.0,
            log: out.join(format!("plain{i}-clean-0.log")),
            audit: None,
        })
        .collect()
}

/// What both sides of a round build with.
struct Sides<'a> {
    req: &'a BenchRequest,
    p: &'a Prepared,
    /// A twin of the env with pip, for the plain builds.
    plain_env: &'a EnvInfo,
    out: &'a Path,
}

/// archsmith's side of one round: `build-ext` into a fresh output dir, then again (a no-op).
fn archsmith_round(side: &Sides, round: u32, load: f64, r: &mut BenchReport) -> Result<()> {
    let (req, p, out) = (side.req, side.p, side.out);
    r.load_1min.push(("archsmith".into(), load));
    let req_a = Request {
        source: SourceSpec::Dir(req.source.clone()),
        arch: req.arch.clone(),
        target: crate::python::TargetEnv {
            torch: req.torch.clone(),
            ..Default::default()
        },
        out: out.join(format!("archsmith-{round}")),
        cache: None,
        jobs: req.jobs,
        progress: Mode::Quiet,
        own_arch_flags: false,
        serial_extensions: false,
        skip_missing_submodules: false,
        stable_abi_target: None,
        pool: None,
        prepared: None,
        cpu_only: req.cpu_only,
        dist: None,
    };
    let (t, cpu) = (Instant::now(), cpu_s());
    let first = crate::build_ext::run(&req_a)??;
    let clean = t.elapsed().as_secs_f64();
    let clean_cpu = cpu_s() - cpu;
    r.extensions_at_once = first.record.extensions_at_once;
    r.archsmith_audit = Some(WheelAudit::of(&first.wheel, &p.plan, req.cpu_only));
    if first.reused {
        bail!("archsmith's clean build found a stamp in a fresh output dir");
    }
    let t = Instant::now();
    let second = crate::build_ext::run(&req_a)??;
    let noop = t.elapsed().as_secs_f64();
    if !second.reused {
        bail!("archsmith's rebuild of an unchanged source was not a no-op");
    }
    crate::errln!(
        "bench: round {round}: archsmith clean {clean:.1} s ({clean_cpu:.0} CPU-s), no-op {noop:.2} s (load {load:.1})"
    );
    r.archsmith_clean_s.push(clean);
    r.archsmith_clean_cpu_s.push(clean_cpu);
    r.archsmith_noop_s.push(noop);
    Ok(())
}

/// Plain build `i`'s side of one round: `pip wheel --no-build-isolation` with the plan's
/// `TORCH_CUDA_ARCH_LIST` and its `MAX_JOBS` in a fresh copy of the source, then again.
fn plain_round(
    side: &Sides,
    round: u32,
    load: f64,
    i: usize,
    b: &mut PlainBuild,
    r: &mut BenchReport,
) -> Result<()> {
    let (req, p, out) = (side.req, side.p, side.out);
    r.load_1min
        .push((format!("plain MAX_JOBS={}", b.max_jobs), load));
    let tree = out.join(format!("plain{i}-src-{round}"));
    source::copy_tree(&req.source, &tree)?;
    let wheels = out.join(format!("plain{i}-wheels-{round}"));
    fs::create_dir_all(&wheels)?;
    let plain_par = jobs::Parallelism {
        jobs: b.max_jobs,
        nvcc_threads: 1,
        extensions: 1,
        reason: "set by hand",
    };
    let setup = Setup {
        env: side.plain_env,
        tc: &p.tc,
        plan: &p.plan,
        par: &plain_par,
        builder: "pip wheel",
        cache: None,
        shared_sources: None,
        guard: None,
        cpu_only: req.cpu_only,
        stable_abi_target: None,
        ninja_dir: None,
        pool: None,
    };
    let cmd = build_command(&setup, &tree, &wheels);
    let cpu = cpu_s();
    let clean = timed_plain(&cmd, &out.join(format!("plain{i}-clean-{round}.log")))?;
    let clean_cpu = cpu_s() - cpu;
    let wheel = fs::read_dir(&wheels)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .with_context(|| format!("the plain build left no wheel in {}", wheels.display()))?;
    b.audit = Some(WheelAudit::of(&wheel, &p.plan, req.cpu_only));
    let noop = timed_plain(&cmd, &out.join(format!("plain{i}-noop-{round}.log")))?;
    crate::errln!(
        "bench: round {round}: {} clean {clean:.1} s ({clean_cpu:.0} CPU-s), no-op {noop:.2} s (load {load:.1})",
        b.label
    );
    b.clean_s.push(clean);
    b.clean_cpu_s.push(clean_cpu);
    b.noop_s.push(noop);
    Ok(())
}

impl BenchReport {
    /// One package's table, audits and conditions.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let r = self;
        let mut out = String::new();
        let secs = |v: &[f64], digits: usize| {
            v.iter()
                .map(|x| format!("{x:.digits$}"))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let mut t = Table::new([
            "build",
            "clean (s, per round)",
            "CPU-s",
            "no-op (s, per round)",
            "clean ratio",
            "no-op ratio",
        ]);
        for b in &r.plain {
            t.row([
                format!("plain {}", b.label),
                secs(&b.clean_s, 1),
                secs(&b.clean_cpu_s, 0),
                secs(&b.noop_s, 2),
                format!("{:.2}x", b.clean_speedup),
                format!("{:.0}x", b.noop_speedup),
            ]);
        }
        t.row([
            format!(
                "archsmith build-ext ({}, MAX_JOBS={}, nvcc --threads={})",
                r.front_end, r.max_jobs, r.nvcc_threads
            ),
            secs(&r.archsmith_clean_s, 1),
            secs(&r.archsmith_clean_cpu_s, 0),
            secs(&r.archsmith_noop_s, 2),
            "1.00x".to_string(),
            "1x".to_string(),
        ]);
        out.push_str(&t.render());
        let mut audit_line = |who: &str, a: &Option<WheelAudit>| {
            if let Some(a) = a {
                let _ = writeln!(
                    out,
                    "{who} wheel: {} {}",
                    if a.ok { "ok" } else { "NOT AS PLANNED" },
                    a.files.join("; ")
                );
            }
        };
        for b in &r.plain {
            audit_line(&format!("plain {}", b.label), &b.audit);
        }
        audit_line("archsmith", &r.archsmith_audit);
        if r.extensions_at_once > 1 {
            let _ = writeln!(
                out,
                "archsmith built {} extensions at once",
                r.extensions_at_once
            );
        }
        let _ = writeln!(
            out,
            "{} for {}; {} cores, {:.1} GiB available; ratio = plain / archsmith: fastest clean of each, fastest plain no-op over the slowest archsmith one",
            r.source, r.torch_cuda_arch_list, r.cores, r.mem_available_gib
        );
        let loads: Vec<String> = r
            .load_1min
            .iter()
            .map(|(who, l)| format!("{who} {l:.1}"))
            .collect();
        let _ = writeln!(
            out,
            "1-minute load average before each clean build: {}",
            loads.join(", ")
        );
        out
    }
}

/// Several packages benchmarked in one run: each plain build against archsmith's, fastest clean
/// build of each.
pub fn packages_table(reports: &[BenchReport]) -> String {
    let mut t = Table::new(["package", "plain clean (s)", "archsmith clean (s)", "ratio"]);
    let fastest = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    for r in reports {
        for b in &r.plain {
            t.row([
                format!("{} ({})", r.source, b.label),
                format!("{:.1}", fastest(&b.clean_s)),
                format!("{:.1}", fastest(&r.archsmith_clean_s)),
                format!("{:.2}x", b.clean_speedup),
            ]);
        }
    }
    format!(
        "\neach package, plain / archsmith (fastest clean of each):\n{}",
        t.render()
    )
}
