//! One guarded compile, measured: it waits for room in the build's memory pool, runs with nvcc's
//! own phase timing where that costs the compiler cache nothing, and is watched for its peak
//! resident memory over its whole process tree; then its record is appended to the guard's log.

use crate::build_insight::compile_record;
use crate::build_insight::memory_gate::Gate;
use crate::build_insight::{compile_meter, nvcc_time, peaks};
use anyhow::Result;
use std::path::{Path, PathBuf};

/// Where nvcc's `--time` files go. Set only when the guard runs the toolkit's own nvcc: a
/// compiler cache counts a compile with `--time` as uncacheable (sccache 0.16 does, even when the
/// flag comes through `NVCC_APPEND_FLAGS`), and a build must not lose its cache hits to a report.
/// Unset, the compile went through a cache: what the guard's process tree holds is sccache's
/// client (the server runs a miss) or a hit, not the compile, so no peak is recorded or kept.
pub const TIME_DIR_VAR: &str = "ARCHSMITH_NVCC_TIME_DIR";
/// The peaks kept across builds ([`peaks::default_path`] unless set).
pub const PEAKS_VAR: &str = peaks::PATH_VAR;

/// How many archs nvcc compiles at once for this command line: its `--threads` (its own flags,
/// then `NVCC_APPEND_FLAGS`, which nvcc reads after them; 1 when unset), at most the plan's archs.
fn nvcc_threads(args: &[String], plan: &[String]) -> u32 {
    let env = std::env::var("NVCC_APPEND_FLAGS").unwrap_or_default();
    let words: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .chain(env.split_whitespace())
        .collect();
    let mut threads = 1;
    for (i, w) in words.iter().enumerate() {
        let value = match w.split_once('=') {
            Some(("--threads" | "-t", v)) => Some(v),
            None if *w == "--threads" || *w == "-t" => words.get(i + 1).copied(),
            _ => None,
        };
        if let Some(n) = value.and_then(|v| v.parse::<u32>().ok()) {
            threads = n;
        }
    }
    // nvcc runs one arch a thread (0: one per arch): never more at once than the plan's archs.
    let archs = plan.len().max(1) as u32;
    if threads == 0 {
        archs
    } else {
        threads.min(archs)
    }
}

/// What the compile reserves, and where the figure comes from.
fn reservation(kept: &peaks::Peaks, key: &str, threads: u32) -> (u64, &'static str) {
    let (per_thread, from) = compile_meter::first_estimate("nvcc");
    kept.reservation(key, (per_thread * u64::from(threads), from))
}

/// The most nvcc threads, up to `asked`, whose reservation fits the pool's `budget` (one at
/// least: a compile alone always runs): each thread compiles one arch at once, so memory grows
/// with them. Returns the threads, the compile's key and its reservation.
fn threads_that_fit(
    kept: &peaks::Peaks,
    asked: u32,
    plan: &[String],
    source_hash: Option<&str>,
    budget: Option<u64>,
) -> (u32, String, (u64, &'static str)) {
    let sized = |t: u32| {
        let mut sizing = plan.to_vec();
        sizing.push(format!("--threads={t}"));
        let key = source_hash.map_or(String::new(), |h| peaks::key("nvcc", h, &sizing));
        let r = reservation(kept, &key, t);
        (t, key, r)
    };
    let mut t = asked;
    loop {
        let candidate = sized(t);
        if t == 1 || budget.is_none_or(|b| candidate.2 .0 <= b) {
            return candidate;
        }
        t -= 1;
    }
}

/// Replaces nvcc's `--threads` in `args` and in `NVCC_APPEND_FLAGS` (nvcc reads it last) with
/// `threads`.
fn set_threads(cmd: &mut std::process::Command, args: &mut Vec<String>, threads: u32) {
    let mut out = Vec::with_capacity(args.len());
    let mut skip_next = false;
    for a in args.iter() {
        if skip_next {
            skip_next = false;
            continue;
        }
        match a.as_str() {
            "--threads" | "-t" => skip_next = true,
            _ if a.starts_with("--threads=") || a.starts_with("-t=") => {}
            _ => out.push(a.clone()),
        }
    }
    out.push(format!("--threads={threads}"));
    *args = out;
    if let Ok(env) = std::env::var("NVCC_APPEND_FLAGS") {
        let words: Vec<String> = env.split_whitespace().map(str::to_string).collect();
        let mut kept = Vec::new();
        let mut i = 0;
        while i < words.len() {
            match words[i].as_str() {
                "--threads" | "-t" => i += 2,
                w if w.starts_with("--threads=") || w.starts_with("-t=") => i += 1,
                _ => {
                    kept.push(words[i].clone());
                    i += 1;
                }
            }
        }
        cmd.env("NVCC_APPEND_FLAGS", kept.join(" "));
    }
}

/// Runs `cmd` with `args` for `sources` as described above; returns nvcc's exit status.
pub fn run(
    mut cmd: std::process::Command,
    mut args: Vec<String>,
    plan: &[String],
    sources: &[String],
    log: Option<&Path>,
) -> Result<i32> {
    let gate = Gate::from_env();
    let hash = sources
        .first()
        .and_then(|s| crate::stamp::hash_file(Path::new(s)).ok());
    let asked = nvcc_threads(&args, plan);
    // Read once: the reservation is looked up for each thread count tried.
    let kept = peaks::Peaks::load(&peaks::default_path_for_env());
    let (threads, key, (reserved_bytes, reserved_from)) = threads_that_fit(
        &kept,
        asked,
        plan,
        hash.as_deref(),
        gate.as_ref().map(|g| g.budget),
    );
    if threads < asked {
        set_threads(&mut cmd, &mut args, threads);
    }
    let name = sources
        .first()
        .map_or("?", |s| s.rsplit('/').next().unwrap_or(s));
    let time_file = std::env::var_os(TIME_DIR_VAR)
        .map(|d| PathBuf::from(d).join(format!("{}.csv", std::process::id())));
    if let Some(f) = &time_file {
        args.push(format!("--time={}", f.display()));
    }
    let ran = compile_meter::run_in_pool(cmd.args(&args), name, reserved_bytes)?;
    if let Some(log) = log {
        let phases = time_file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .map(|t| nvcc_time::parse(&t))
            .unwrap_or_default();
        let record = ran.record(
            "nvcc",
            sources.to_vec(),
            (reserved_bytes, reserved_from),
            key,
            time_file.is_some(),
            phases,
        );
        compile_record::append(log, &serde_json::to_string(&record)?)?;
    }
    if let Some(f) = &time_file {
        let _ = std::fs::remove_file(f);
    }
    Ok(ran.exit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_come_from_the_command_line_or_nvccs_own_variable() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let plan = s(&["-gencode=a", "-gencode=b", "-gencode=c"]);
        assert_eq!(nvcc_threads(&s(&["-c", "k.cu"]), &plan), 1);
        assert_eq!(nvcc_threads(&s(&["--threads", "2", "k.cu"]), &plan), 2);
        assert_eq!(nvcc_threads(&s(&["--threads=2"]), &plan), 2);
        // causal-conv1d passes --threads 4: three archs run three at most.
        assert_eq!(nvcc_threads(&s(&["--threads", "4"]), &plan), 3);
        assert_eq!(nvcc_threads(&s(&["-t", "0"]), &plan), 3);
    }

    #[test]
    fn threads_shrink_until_the_compile_fits_the_pool() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let plan = s(&["-gencode=a", "-gencode=b", "-gencode=c"]);
        let gib = 1u64 << 30;
        let none = peaks::Peaks::default();
        // A first build reserves 2.5 GiB a thread: 3 threads fit 8 GiB, 2 fit 6, 1 fits 2.6.
        assert_eq!(
            threads_that_fit(&none, 3, &plan, Some("h"), Some(8 * gib)).0,
            3
        );
        assert_eq!(
            threads_that_fit(&none, 3, &plan, Some("h"), Some(6 * gib)).0,
            2
        );
        assert_eq!(threads_that_fit(&none, 3, &plan, Some("h"), Some(gib)).0, 1);
        assert_eq!(threads_that_fit(&none, 3, &plan, None, None).0, 3);
        let mut cmd = std::process::Command::new("nvcc");
        let mut args = s(&["-c", "k.cu", "--threads", "4", "-O3"]);
        set_threads(&mut cmd, &mut args, 2);
        assert_eq!(args, s(&["-c", "k.cu", "-O3", "--threads=2"]));
    }
}
