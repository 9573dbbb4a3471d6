//! `bench build-ext`: archsmith's clean build vs plain `pip wheel --no-build-isolation`, and the
//! no-op rebuild of each.

use crate::bench::build_ext_vs_pip::{self as bench, BenchRequest};
use crate::output::{documents, print_json, Exit, Table};
use crate::version::Version;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct BuildExtBench {
    /// Extension source directory (default: the multi-file fixture xtask/tests/fixtures/benchext);
    /// repeat it to run both sides on each package in turn and report each ratio.
    #[arg(long, value_name = "DIR")]
    pub source: Vec<PathBuf>,
    /// Archs both builds compile for (the `archs --arch` grammar).
    #[arg(long, value_name = "SPEC", default_value = "7.5,8.9,9.0")]
    pub arch: crate::arch::spec::ArchSpec,
    /// The torch release of archsmith's env that both builds use (default: the newest known).
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::torch_release)]
    pub torch: Option<Version>,
    /// MAX_JOBS for both builds (default: archsmith's model).
    #[arg(long, value_name = "N")]
    pub jobs: Option<u32>,
    /// Working dir for the builds and their logs (wiped first).
    #[arg(long, value_name = "DIR", default_value = "target/bench-build-ext")]
    pub out: PathBuf,
    /// Rounds, alternating which build goes first (ABBA); ratios use each side's fastest run.
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
    /// MAX_JOBS of the plain build (repeatable, one plain build each); default: archsmith's value
    /// and one per core.
    #[arg(long, value_name = "N")]
    pub plain_jobs: Vec<u32>,
    /// Both builds meant to compile no GPU code (build-ext's --cpu-only): a package's own CPU-only
    /// switch set in the environment, e.g. FORCE_ONLY_CPU=1.
    #[arg(long)]
    pub cpu_only: bool,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

pub fn build_ext(a: BuildExtBench) -> Result<Exit> {
    let sources = match a.source.is_empty() {
        true => vec![crate::paths::repo_root()
            .join("xtask")
            .join("tests")
            .join("fixtures")
            .join("benchext")],
        false => a.source.clone(),
    };
    let mut reports = Vec::new();
    for (i, source) in sources.iter().enumerate() {
        // Each package in a working dir of its own when there are several.
        let out = match sources.len() {
            1 => a.out.clone(),
            _ => a.out.join(format!("{i}-{}", dir_name(source))),
        };
        reports.push(bench::run(&BenchRequest {
            source: source.clone(),
            arch: a.arch.clone(),
            torch: a.torch.clone(),
            jobs: a.jobs,
            out,
            rounds: a.rounds,
            plain_jobs: a.plain_jobs.clone(),
            cpu_only: a.cpu_only,
        })?);
    }
    if a.output.json {
        match reports.as_slice() {
            [one] => print_json(documents::BENCH_BUILD_EXT, one)?,
            many => print_json(
                documents::BENCH_BUILD_EXT_PACKAGES,
                &serde_json::json!({ "packages": many }),
            )?,
        }
        return Ok(Exit::Success);
    }
    for r in &reports {
        print_report(r);
    }
    if reports.len() > 1 {
        crate::outln!("\neach package, plain / archsmith (fastest clean of each):");
        let mut t = Table::new(["package", "plain clean (s)", "archsmith clean (s)", "ratio"]);
        for r in &reports {
            let fastest = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
            for b in &r.plain {
                t.row([
                    format!("{} ({})", r.source, b.label),
                    format!("{:.1}", fastest(&b.clean_s)),
                    format!("{:.1}", fastest(&r.archsmith_clean_s)),
                    format!("{:.2}x", b.clean_speedup),
                ]);
            }
        }
        crate::out!("{}", t.render());
    }
    Ok(Exit::Success)
}

/// A source directory's last component, for its working dir.
fn dir_name(source: &std::path::Path) -> String {
    source
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "source".into())
}

/// One package's table, audits and conditions.
fn print_report(r: &bench::BenchReport) {
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
    crate::out!("{}", t.render());
    let audit_line = |who: &str, a: &Option<bench::WheelAudit>| {
        if let Some(a) = a {
            crate::outln!(
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
        crate::outln!(
            "archsmith built {} extensions at once",
            r.extensions_at_once
        );
    }
    crate::outln!(
        "{} for {}; {} cores, {:.1} GiB available; ratio = plain / archsmith: fastest clean of each, fastest plain no-op over the slowest archsmith one",
        r.source, r.torch_cuda_arch_list, r.cores, r.mem_available_gib
    );
    let loads: Vec<String> = r
        .load_1min
        .iter()
        .map(|(who, l)| format!("{who} {l:.1}"))
        .collect();
    crate::outln!(
        "1-minute load average before each clean build: {}",
        loads.join(", ")
    );
}
