//! `bench audit`: archsmith auditing a whole wheel against the usual way (`unzip` of its shared
//! objects, then `cuobjdump --list-elf` on each), in one run, on the same page-cached wheel.

use crate::binary::input::{audit_paths, is_shared_object_name, Options, Outcome};
use crate::binary::Kind;
use crate::process::{which, Cmd};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// The wheel to audit (default: torch 2.15.0 from PyPI, cached in the downloads dir).
    #[arg(long)]
    pub wheel: Option<PathBuf>,
    /// cuobjdump to compare with (default: on PATH, else archsmith's CUDA 13.5 toolchain).
    #[arg(long)]
    pub cuobjdump: Option<PathBuf>,
    /// Timed runs of each side; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Threads for archsmith (default: all CPUs).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    #[arg(long)]
    pub json: bool,
}

fn torch_wheel() -> Result<PathBuf> {
    crate::downloads::download_wheel("torch", &crate::version::Version::new(&[2, 15, 0]))
}

/// cuobjdump from PATH, else from archsmith's CUDA 13.5 toolchain (installed from PyPI if needed).
fn find_cuobjdump() -> Result<PathBuf> {
    if let Some(p) = which("cuobjdump") {
        return Ok(p);
    }
    let tc = crate::toolchain::ensure(&crate::version::Version::new(&[13, 5]))?;
    Ok(tc.cuobjdump())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// One run of the usual way; returns (unzip time, cuobjdump time, cubins listed).
fn usual_way(
    wheel: &Path,
    cuobjdump: &Path,
    scratch: &Path,
) -> Result<(Duration, Duration, usize)> {
    let _ = std::fs::remove_dir_all(scratch);
    std::fs::create_dir_all(scratch)?;
    let t = Instant::now();
    let unzip = Cmd::new("unzip")
        .args(["-q", "-o"])
        .arg(wheel)
        .args(["*.so", "*.so.*", "-d"])
        .arg(scratch);
    let out = unzip.output()?;
    if !out.success() {
        bail!("{}", unzip.failure_message(&out));
    }
    let unzip_time = t.elapsed();
    let mut files = Vec::new();
    let mut stack = vec![scratch.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)?.filter_map(|e| e.ok()) {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if is_shared_object_name(&p.to_string_lossy()) {
                files.push(p);
            }
        }
    }
    let t = Instant::now();
    let mut cubins = 0;
    for f in &files {
        // Exit 255 means "does not contain device code": part of the usual way, not a failure.
        let out = Cmd::new(cuobjdump).arg("--list-elf").arg(f).output()?;
        cubins += out
            .stdout
            .lines()
            .filter(|l| l.starts_with("ELF file"))
            .count();
    }
    let list_time = t.elapsed();
    std::fs::remove_dir_all(scratch)?;
    Ok((unzip_time, list_time, cubins))
}

pub fn audit(args: AuditArgs) -> Result<i32> {
    let wheel = match &args.wheel {
        Some(w) => w.clone(),
        None => torch_wheel()?,
    };
    let cuobjdump = match &args.cuobjdump {
        Some(c) => c.clone(),
        None => find_cuobjdump()?,
    };
    let runs = args.runs.max(1);
    let scratch =
        std::env::temp_dir().join(format!("archsmith-bench-audit-{}", std::process::id()));
    // Warm the page cache so neither side pays for the first read from disk.
    std::fs::read(&wheel).with_context(|| format!("reading {}", wheel.display()))?;
    let opts = Options {
        extract: None,
        threads: args.threads,
    };
    let (mut ours, mut unzips, mut lists, mut totals) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut our_cubins, mut their_cubins) = (0, 0);
    for _ in 0..runs {
        let t = Instant::now();
        let files = audit_paths(std::slice::from_ref(&wheel), &opts);
        ours.push(t.elapsed());
        our_cubins = 0;
        for f in &files {
            match &f.outcome {
                Outcome::Audited(a) => our_cubins += a.counts(Kind::Elf).values().sum::<usize>(),
                Outcome::Failed(e) => bail!("{}: {e}", f.path),
            }
        }
        let (u, l, n) = usual_way(&wheel, &cuobjdump, &scratch)?;
        unzips.push(u);
        lists.push(l);
        totals.push(u + l);
        their_cubins = n;
    }
    let (ours, usual) = (median(ours), median(totals));
    let ratio = usual.as_secs_f64() / ours.as_secs_f64();
    let threads = if args.threads > 0 {
        args.threads
    } else {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    };
    let report = serde_json::json!({
        "wheel": wheel.display().to_string(),
        "runs": runs,
        "threads": threads,
        "archsmith_s": ours.as_secs_f64(),
        "usual_s": usual.as_secs_f64(),
        "unzip_s": median(unzips).as_secs_f64(),
        "cuobjdump_s": median(lists).as_secs_f64(),
        "ratio": ratio,
        "cubins_archsmith": our_cubins,
        "cubins_cuobjdump": their_cubins,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("wheel: {}", wheel.display());
        println!(
            "archsmith verify binary:        {:>7.2} s  ({threads} threads, median of {runs})",
            ours.as_secs_f64()
        );
        println!(
            "unzip + cuobjdump --list-elf:   {:>7.2} s  (unzip {:.2} s + cuobjdump {:.2} s)",
            usual.as_secs_f64(),
            report["unzip_s"].as_f64().unwrap_or_default(),
            report["cuobjdump_s"].as_f64().unwrap_or_default()
        );
        println!("ratio: {ratio:.1}x   cubins: archsmith {our_cubins}, cuobjdump {their_cubins}");
    }
    if our_cubins != their_cubins {
        bail!("the two sides disagree: archsmith counted {our_cubins} cubins, cuobjdump listed {their_cubins}");
    }
    Ok(0)
}
