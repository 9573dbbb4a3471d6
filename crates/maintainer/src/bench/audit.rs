//! `bench audit`: archsmith auditing a whole wheel against the usual way (`unzip` of its shared
//! objects, then `cuobjdump --list-elf` on each), in one run, on the same page-cached wheel.

use crate::binary::input::{audit_paths, is_shared_object_name, Options, Outcome};
use crate::binary::Kind;
use crate::kb::kb;
use crate::process::{which, Cmd};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the audit benchmark compares.
#[derive(Debug, Clone, Default)]
pub struct AuditRequest {
    /// Default: the newest torch the knowledge base knows, from PyPI.
    pub wheel: Option<PathBuf>,
    /// Default: on PATH, else archsmith's toolchain for the newest CUDA the knowledge base knows.
    pub cuobjdump: Option<PathBuf>,
    pub runs: usize,
    pub threads: usize,
}

/// Both sides' medians, their ratio and what each counted.
#[derive(Debug, serde::Serialize)]
pub struct AuditReport {
    pub wheel: String,
    pub runs: usize,
    pub threads: usize,
    pub archsmith_s: f64,
    pub usual_s: f64,
    pub unzip_s: f64,
    pub cuobjdump_s: f64,
    pub ratio: f64,
    pub cubins_archsmith: usize,
    pub cubins_cuobjdump: usize,
}

/// The wheel of the newest torch the knowledge base knows (`[releases] newest_torch`).
fn torch_wheel() -> Result<PathBuf> {
    crate::downloads::download_wheel("torch", &kb().releases.newest_torch)
}

/// cuobjdump from PATH, else from archsmith's toolchain for the newest CUDA the knowledge base
/// knows (installed from PyPI if needed).
fn find_cuobjdump() -> Result<PathBuf> {
    if let Some(p) = which("cuobjdump") {
        return Ok(p);
    }
    let tc = crate::toolchain::ensure(&kb().releases.newest_cuda.major_minor())?;
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
    let _ = fs_err::remove_dir_all(scratch);
    fs_err::create_dir_all(scratch)?;
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
        for e in fs_err::read_dir(&d)?.filter_map(|e| e.ok()) {
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
    fs_err::remove_dir_all(scratch)?;
    Ok((unzip_time, list_time, cubins))
}

/// Audits the wheel both ways `runs` times on a warm page cache; an error when the two sides count
/// different cubins.
pub fn audit(args: &AuditRequest) -> Result<AuditReport> {
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
    fs_err::read(&wheel).with_context(|| format!("reading {}", wheel.display()))?;
    let opts = Options {
        extract: None,
        threads: args.threads,
        kernels_for: Vec::new(),
        unpacked: Vec::new(),
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
    if our_cubins != their_cubins {
        bail!("the two sides disagree: archsmith counted {our_cubins} cubins, cuobjdump listed {their_cubins}");
    }
    Ok(AuditReport {
        wheel: wheel.display().to_string(),
        runs,
        threads,
        archsmith_s: ours.as_secs_f64(),
        usual_s: usual.as_secs_f64(),
        unzip_s: median(unzips).as_secs_f64(),
        cuobjdump_s: median(lists).as_secs_f64(),
        ratio,
        cubins_archsmith: our_cubins,
        cubins_cuobjdump: their_cubins,
    })
}

impl AuditReport {
    /// The aligned table people read (`--json` prints the report itself).
    pub fn table(&self) -> String {
        let r = self;
        format!(
            "wheel: {}\narchsmith verify binary:        {:>7.2} s  ({} threads, median of {})\nunzip + cuobjdump --list-elf:   {:>7.2} s  (unzip {:.2} s + cuobjdump {:.2} s)\nratio: {:.1}x   cubins: archsmith {}, cuobjdump {}\n",
            r.wheel,
            r.archsmith_s,
            r.threads,
            r.runs,
            r.usual_s,
            r.unzip_s,
            r.cuobjdump_s,
            r.ratio,
            r.cubins_archsmith,
            r.cubins_cuobjdump
        )
    }
}
