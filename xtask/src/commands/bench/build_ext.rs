//! `bench build-ext`: archsmith's clean build vs plain `pip wheel --no-build-isolation`, and the
//! no-op rebuild of each.

use crate::bench::build_ext_vs_pip::{self as bench, BenchRequest};
use crate::output::{documents, print_json, Exit};
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
        crate::out!("{}", r.table());
    }
    if reports.len() > 1 {
        crate::out!("{}", bench::packages_table(&reports));
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
