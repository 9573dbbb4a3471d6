//! Running the plan: the front end's command under the plan's environment, with ninja's `[N/M]`
//! as progress, the whole output in a log on disk, the first real error on failure, the build
//! directory reconfigured when its configuration differs (else resumed: ninja rebuilds only what
//! changed), compiler-cache statistics and the slowest steps at the end.

use super::plan::BuildPlan;
use super::{Prepared, Request};
use crate::build_insight::build_summary::Summary;
use crate::build_insight::build_trace::BuildTrace;
use crate::build_insight::compile_record;
use crate::build_insight::peaks::{self, Peaks};
use crate::build_insight::written::Written;
use crate::build_output::log::{
    first_cmake_error, first_compiler_error, first_front_end_error, last_python_error,
};
use crate::build_output::progress::Progress;
use crate::compiler_cache::CompilerCache;
use crate::process::Cmd;
use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub struct Driven {
    /// The wheel in the plan's private wheel directory (None after `--stop-after configure`).
    pub wheel: Option<PathBuf>,
    pub log: PathBuf,
    pub ninja_log: Option<PathBuf>,
    pub seconds: f64,
    pub cache_stats: Option<String>,
    /// With `--dist`: compiles per build server.
    pub distributed: Option<crate::compiler_cache::dist::DistStats>,
    pub slowest: Vec<(String, f64)>,
    /// The build's trace and timeline, from its `.ninja_log`.
    pub insight: Option<Written>,
}

/// The build failed: where, and the log with everything.
#[derive(Debug, thiserror::Error, serde::Serialize)]
#[error("the torch build failed ({exit}){first}\nfull log: {}{}", log.display(), timeline.as_ref().map_or(String::new(), |t| format!("\ntimeline: {}", t.display())))]
pub struct BuildFailed {
    pub exit: String,
    pub first: String,
    pub log: PathBuf,
    /// The timeline of what ran before it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<PathBuf>,
}

/// The command with the plan's environment.
pub fn command(plan: &BuildPlan, words: &[String], dir: &Path) -> Cmd {
    let mut path: Vec<PathBuf> = plan.path_first.clone();
    if let Some(p) = std::env::var_os("PATH") {
        path.extend(std::env::split_paths(&p));
    }
    let mut cmd = Cmd::new(&words[0]).args(&words[1..]).dir(dir);
    if let Ok(joined) = std::env::join_paths(path) {
        cmd = cmd.env("PATH", joined);
    }
    for v in &plan.env {
        cmd = cmd.env(&v.name, &v.value);
    }
    cmd
}

/// Runs the build. `Ok(Err(_))`: it ran and failed, with its first error and the log.
pub fn drive(
    p: &Prepared,
    plan: &BuildPlan,
    req: &Request,
    out: &Path,
) -> Result<Result<Driven, BuildFailed>> {
    let started = Instant::now();
    let _lock = lock_build_dir(p, plan)?;
    prepare_build_dir(p, plan)?;
    meter_ready(plan)?;
    let log_path = out.join("build-torch.log");
    let cache = req
        .cache_kind()
        .map(|kind| CompilerCache::launcher_only(kind, req.dist.as_ref()))
        .transpose()?;
    let status = run_logged(p, plan, req, &log_path)?;
    let (cache_stats, distributed) = match cache.as_ref().and_then(|c| c.stats_with_dist().ok()) {
        Some((lines, dist)) => (Some(lines), dist),
        None => (None, None),
    };
    let ninja_log = Some(plan.build_dir.join(".ninja_log")).filter(|p| p.is_file());
    let insight = ninja_log
        .as_deref()
        .and_then(|l| trace_of(plan, l, None, out));
    if status != Some(0) {
        let mut failed = failure(status, log_path);
        failed.timeline = insight.map(|i| i.timeline);
        return Ok(Err(failed));
    }
    let slowest = ninja_log
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .map(|t| slowest_steps(&t, 10))
        .unwrap_or_default();
    let wheel = if req.stop_after_configure {
        None
    } else {
        Some(built_wheel(plan, &log_path)?)
    };
    Ok(Ok(Driven {
        wheel,
        log: log_path,
        ninja_log,
        seconds: started.elapsed().as_secs_f64(),
        cache_stats,
        distributed,
        slowest,
        insight,
    }))
}

/// `OUT/build-torch.trace.json` and `.timeline.html` from the build's `.ninja_log` and the compile
/// meter's records (whose peaks are kept for the next build's pool): the whole build over all its
/// runs, or with `run_began_ms` only the steps of the run that began then (a slice's own; by time,
/// as ninja may have recompacted its log at the run's start). A report, so one that cannot be
/// written is said and the build goes on.
fn trace_of(
    plan: &BuildPlan,
    ninja_log: &Path,
    run_began_ms: Option<u64>,
    out: &Path,
) -> Option<Written> {
    let text = std::fs::read_to_string(ninja_log).ok()?;
    let mut compiles = std::fs::read_to_string(super::plan::compile_log(&plan.build_dir))
        .map(|t| compile_record::parse(&t))
        .unwrap_or_default();
    if let Some(began) = run_began_ms {
        compiles.retain(|c| c.start_ms >= began);
    }
    let written = Peaks::remember(&peaks::default_path_for_env(), &compiles).and_then(|_| {
        let mut trace = BuildTrace::new("archsmith build-torch", Vec::new(), &compiles, &[text]);
        if let Some(began) = run_began_ms {
            trace.jobs.retain(|j| j.span.end_ms >= began);
        }
        let summary = Summary::of(&trace, &Default::default(), 0);
        crate::build_insight::written::write(&out.join("build-torch"), &trace, summary)
    });
    match written {
        Ok(w) => Some(w),
        Err(e) => {
            crate::errln!("warning: the build's trace was not written: {e:#}");
            None
        }
    }
}

/// The compile meter CMake's launchers name (written anew each run: it names this executable).
/// Its log keeps every run's records (the next plan sizes its jobs by them); returns when this
/// run began, which tells a slice's own records and steps apart.
fn meter_ready(plan: &BuildPlan) -> Result<u64> {
    let exe = std::env::current_exe().context("finding archsmith's own executable")?;
    crate::compiler_cache::write_wrapper(
        &super::plan::meter_launcher(&plan.build_dir),
        "written by archsmith build-torch: the compile meter CMake runs as each compiler's launcher",
        &[exe.display().to_string(), "compile-meter".to_string()],
    )?;
    Ok(compile_record::now_ms())
}

/// The build directory, made, and held: one build at a time in a tree (a second run waits
/// instead of corrupting the first).
fn lock_build_dir(p: &Prepared, plan: &BuildPlan) -> Result<crate::cache::Lock> {
    std::fs::create_dir_all(&plan.build_dir)
        .with_context(|| format!("creating {}", plan.build_dir.display()))?;
    crate::cache::lock(&plan.build_dir.join(".archsmith-build.lock"), &mut || {
        crate::errln!(
            "archsmith: another build-torch is building {}; waiting",
            p.tree.root.display()
        )
    })
}

/// A build directory whose configuration differs is reconfigured (its CMake cache removed,
/// objects kept); the plan's private wheel directory starts empty.
fn prepare_build_dir(p: &Prepared, plan: &BuildPlan) -> Result<()> {
    if !p.reconfigure.is_empty() {
        for stale in ["CMakeCache.txt", "CMakeFiles"] {
            crate::cache::remove_path(&plan.build_dir.join(stale))?;
        }
        crate::errln!(
            "archsmith: reconfiguring {} ({})",
            plan.build_dir.display(),
            p.reconfigure.join("; ")
        );
    } else if let Some(built) = steps_built(&plan.build_dir) {
        // An interrupted build (Ctrl-C, a killed job) with the same plan: ninja runs the rest.
        crate::errln!(
            "archsmith: resuming in {}: {built} step(s) built by an earlier run are kept; ninja runs only the rest",
            plan.build_dir.display()
        );
    }
    let _ = std::fs::remove_dir_all(&plan.wheel_dir);
    std::fs::create_dir_all(&plan.wheel_dir)?;
    Ok(())
}

/// The steps an earlier run's `.ninja_log` records whose outputs still exist: what a resumed
/// build keeps. A step is one command (the log's hash column): ninja logs a line per output, and
/// torch's code generation writes thousands of headers in one step. None without a log or with
/// nothing built.
pub fn steps_built(build_dir: &Path) -> Option<usize> {
    let text = std::fs::read_to_string(build_dir.join(".ninja_log")).ok()?;
    let steps: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split('\t');
            let output = f.nth(3)?;
            let hash = f.next()?;
            build_dir.join(output).exists().then_some(hash)
        })
        .collect();
    (!steps.is_empty()).then_some(steps.len())
}

/// The front end's command under the plan, its output streamed to the log (which starts with the
/// plan as a script) and to the progress display; its exit status.
fn run_logged(
    p: &Prepared,
    plan: &BuildPlan,
    req: &Request,
    log_path: &Path,
) -> Result<Option<i32>> {
    let mut log = open_log(p, plan, req, log_path)?;
    let words = if req.stop_after_configure {
        &plan.configure_command
    } else {
        &plan.wheel_command
    };
    run_streamed(plan, req, words, &p.tree.root, &mut log, log_path, true)
}

/// The log, created with the plan as a script at its top.
fn open_log(
    p: &Prepared,
    plan: &BuildPlan,
    req: &Request,
    log_path: &Path,
) -> Result<std::fs::File> {
    let mut log = std::fs::File::create(log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    writeln!(
        log,
        "{}",
        plan.shell_script(&p.tree.root, req.stop_after_configure)
    )?;
    Ok(log)
}

/// `words` under the plan in `dir`, each line to `log` and the progress display. `whole_build`:
/// the ETA weighs what `build.ninja` has left; a slice's ninja runs only its targets' steps, so
/// its ETA is their mean time (weighing the whole build's steps said `~162:17 left` two steps
/// before a 20-step slice ended).
fn run_streamed(
    plan: &BuildPlan,
    req: &Request,
    words: &[String],
    dir: &Path,
    log: &mut std::fs::File,
    log_path: &Path,
    whole_build: bool,
) -> Result<Option<i32>> {
    let cmd = command(plan, words, dir);
    crate::errln!("archsmith: {} (log: {})", cmd.display(), log_path.display());
    writeln!(log, "$ {}", cmd.display())?;
    let mut ui = Progress::labelled(req.progress, "torch");
    if whole_build {
        ui = ui.weighing_steps_of(&plan.build_dir);
    }
    // Ctrl-C ends the build's every process before archsmith goes, so that running the same
    // command again resumes on a quiet tree (see `settling_descendants`).
    let (status, interrupted) =
        crate::interrupts::settling_descendants(Duration::from_secs(30), || {
            cmd.stream_lines(|line| {
                let _ = writeln!(log, "{line}");
                ui.line(line);
            })
        });
    ui.finish();
    if let Some(sig) = interrupted {
        let _ = writeln!(
            log,
            "archsmith: interrupted; every process of the build has ended"
        );
        crate::interrupts::deliver(sig);
    }
    status
}

/// `--only`: configure where the build directory has no current configuration, then ninja
/// builds only those targets; each step's output is audited against the plan and the whole
/// build is estimated from the steps' times ([`super::slice`]). `Ok(Err(_))`: it ran and failed.
pub fn drive_slice(
    p: &Prepared,
    plan: &BuildPlan,
    req: &Request,
    out: &Path,
) -> Result<Result<super::slice::SliceReport, BuildFailed>> {
    use super::slice;
    let started = Instant::now();
    let _lock = lock_build_dir(p, plan)?;
    let run_began_ms = meter_ready(plan)?;
    let log_path = out.join("build-torch.log");
    let mut log = open_log(p, plan, req, &log_path)?;
    let build_ninja_path = plan.build_dir.join("build.ninja");
    if !build_ninja_path.is_file() || !p.reconfigure.is_empty() {
        prepare_build_dir(p, plan)?;
        let status = run_streamed(
            plan,
            req,
            &plan.configure_command,
            &p.tree.root,
            &mut log,
            &log_path,
            true,
        )?;
        if status != Some(0) {
            return Ok(Err(failure(status, log_path)));
        }
    } else if let Some(built) = steps_built(&plan.build_dir) {
        crate::errln!(
            "archsmith: {} is configured ({built} step(s) built by earlier runs are kept); ninja runs only what the targets still need",
            plan.build_dir.display()
        );
    }
    let build_ninja = std::fs::read_to_string(&build_ninja_path)
        .with_context(|| format!("reading {}", build_ninja_path.display()))?;
    let targets =
        slice::resolve_targets(&build_ninja, &p.tree.root, &plan.build_dir, &req.targets)?;
    let ninja_log_path = plan.build_dir.join(".ninja_log");
    let before = std::fs::metadata(&ninja_log_path).map_or(0, |m| m.len() as usize);
    let mut words = vec![
        "ninja".to_string(),
        "-C".into(),
        plan.build_dir.display().to_string(),
        "-j".into(),
        plan.jobs.jobs.to_string(),
    ];
    words.extend(targets.iter().cloned());
    let status = run_streamed(plan, req, &words, &p.tree.root, &mut log, &log_path, false)?;
    let insight = trace_of(plan, &ninja_log_path, Some(run_began_ms), out);
    if status != Some(0) {
        let mut failed = failure(status, log_path);
        failed.timeline = insight.map(|i| i.timeline);
        return Ok(Err(failed));
    }
    let ninja_log = std::fs::read_to_string(&ninja_log_path).unwrap_or_default();
    let ran = slice::steps_since(&ninja_log, before);
    let steps = slice::audit_steps(&plan.build_dir, &ran, &plan.sass, &plan.ptx);
    Ok(Ok(slice::SliceReport {
        ok: steps.iter().all(|s| s.ok),
        targets,
        steps,
        estimate: slice::Estimate::of(&build_ninja, &ninja_log, plan.jobs.jobs),
        seconds: started.elapsed().as_secs_f64(),
        log: log_path,
        insight,
    }))
}

/// The failure of a build that exited non-zero: the first compiler or CMake error, else the
/// front end's, else the last Python error, read from the log.
fn failure(status: Option<i32>, log_path: PathBuf) -> BuildFailed {
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let first = first_compiler_error(lines.iter().copied())
        .or_else(|| first_cmake_error(lines.iter().copied()))
        .map(|e| {
            let at = match (&e.file, e.line) {
                (Some(f), Some(l)) => format!("{f}:{l}: "),
                _ => String::new(),
            };
            format!("\nfirst error (log line {}): {at}{}", e.log_line, e.message)
        })
        .or_else(|| {
            crate::build_output::log::first_killed_compile(lines.iter().copied()).map(|k| {
                format!(
                    "\nfirst error (log line {}): {}",
                    k.log_line,
                    k.explain(&crate::host::memory().limit_sentence(), None)
                )
            })
        })
        .or_else(|| {
            first_front_end_error(lines.iter().copied()).map(|e| format!("\nfirst error: {e}"))
        })
        .or_else(|| last_python_error(lines.iter().copied()).map(|e| format!("\n{e}")))
        .unwrap_or_default();
    BuildFailed {
        exit: status.map_or("killed by a signal".into(), |c| format!("exit {c}")),
        first,
        log: log_path,
        timeline: None,
    }
}

/// The wheel a successful build left in the plan's wheel directory.
fn built_wheel(plan: &BuildPlan, log_path: &Path) -> Result<PathBuf> {
    let found = std::fs::read_dir(&plan.wheel_dir)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"));
    found.with_context(|| {
        format!(
            "the build succeeded but left no wheel in {} (log: {})",
            plan.wheel_dir.display(),
            log_path.display()
        )
    })
}

/// The `n` longest steps of a `.ninja_log` (v5/v6: start, end, mtime, output, command hash; ms),
/// longest first; a step rebuilt later counts once, with its last time. A step is one command (its
/// hash): ninja logs a line per output, so torch's code generation, one step writing thousands of
/// headers, is named by its first output and how many more it wrote.
pub fn slowest_steps(ninja_log: &str, n: usize) -> Vec<(String, f64)> {
    use std::collections::{HashMap, HashSet};
    let mut steps: HashMap<&str, (&str, f64, HashSet<&str>)> = HashMap::new();
    for line in ninja_log.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 4 {
            continue;
        }
        if let (Ok(s), Ok(e)) = (f[0].parse::<f64>(), f[1].parse::<f64>()) {
            let key = f.get(4).copied().unwrap_or(f[3]);
            let step = steps.entry(key).or_insert((f[3], 0.0, HashSet::new()));
            step.1 = (e - s).max(0.0) / 1000.0;
            step.2.insert(f[3]);
        }
    }
    let mut v: Vec<(String, f64)> = steps
        .into_values()
        .map(|(first, secs, outputs)| match outputs.len() {
            1 => (first.to_string(), secs),
            n => (format!("{first} (+{} outputs)", n - 1), secs),
        })
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(n);
    v
}

/// A Python to import the built wheel in, without a network or an installer: a venv of the build
/// Python whose site-packages holds the wheel's files and a `.pth` line naming the build Python's
/// own site-packages (so torch's dependencies, which the build already needed, are found).
pub fn verify_env(plan: &BuildPlan, wheel: &Path, out: &Path) -> Result<PathBuf> {
    use crate::python::probe::{probe, Depth};
    let dir = out.join(".build-torch-verify-env");
    crate::cache::remove_path(&dir)?;
    Cmd::new(&plan.python)
        .args(["-m", "venv", "--without-pip"])
        .arg(&dir)
        .read()?;
    let py = dir.join("bin/python");
    let site = probe(&py, Depth::Files)?.purelib;
    // Every site directory of the build Python, not only purelib: Debian's python3 keeps its
    // python3-* packages (typing_extensions, sympy, numpy) in /usr/lib/python3/dist-packages.
    let build = probe(&plan.python, Depth::Files)?;
    let mut dirs = vec![build.purelib.clone()];
    for d in build.site_packages {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    let lines: String = dirs.iter().map(|d| format!("{}\n", d.display())).collect();
    std::fs::write(site.join("archsmith-build-python.pth"), lines)?;
    crate::wheel::Wheel::open(wheel)?.extract_all(&site)?;
    Ok(py)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_built_counts_commands_not_outputs() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["gen/a.h", "gen/b.h", "x.o"] {
            let p = dir.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        // One code generation step with two outputs, one compile, one whose output is gone.
        let log = "# ninja log v6\n0\t900\t1\tgen/a.h\td7\n0\t900\t1\tgen/b.h\td7\n\
900\t1500\t2\tx.o\te1\n900\t1600\t3\tgone.o\tf2\n";
        std::fs::write(dir.path().join(".ninja_log"), log).unwrap();
        assert_eq!(steps_built(dir.path()), Some(2));
        std::fs::write(dir.path().join(".ninja_log"), "# ninja log v6\n").unwrap();
        assert_eq!(steps_built(dir.path()), None);
    }

    #[test]
    fn slowest_steps_from_a_ninja_log() {
        let log = "# ninja log v5\n0\t1500\t0\ta.o\tx\n10\t90010\t0\tflash.cu.o\ty\n5\t2505\t0\tb.o\tz\n3000\t3100\t0\ta.o\tx\n";
        assert_eq!(
            slowest_steps(log, 2),
            vec![("flash.cu.o".to_string(), 90.0), ("b.o".to_string(), 2.5)]
        );
        // Code generation: one step, many outputs, named once.
        let log = "# ninja log v6\n0\t9000\t1\tgen/A.h\th1\n0\t9000\t1\tgen/B.h\th1\n0\t9000\t1\tgen/C.h\th1\n0\t2000\t1\tx.o\th2\n";
        assert_eq!(
            slowest_steps(log, 3),
            vec![
                ("gen/A.h (+2 outputs)".to_string(), 9.0),
                ("x.o".to_string(), 2.0)
            ]
        );
    }
}
