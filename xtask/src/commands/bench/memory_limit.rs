//! `bench memory-limit`: archsmith's build vs plain `pip wheel` (MAX_JOBS = cores) under the same
//! memory cgroup limit ([`crate::bench::memory_limit`]).

use crate::bench::memory_limit::{run, MemoryLimitReport, MemoryLimitRequest};
use crate::output::{documents, emit, Exit};
use crate::version::Version;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct MemoryLimitArgs {
    /// The extension's source directory.
    #[arg(long, value_name = "DIR")]
    pub source: PathBuf,
    /// Archs archsmith builds for (the plain build keeps the package's own flags).
    #[arg(long, value_name = "SPEC", default_value = "7.5,8.9,9.0")]
    pub arch: crate::arch::spec::ArchSpec,
    /// The torch release of archsmith's env that both builds use (default: the newest known).
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::torch_release)]
    pub torch: Option<Version>,
    /// The memory limit of each build's cgroup, in GiB.
    #[arg(long, value_name = "GIB")]
    pub limit_gib: f64,
    /// Working dir for the builds and their logs (wiped first).
    #[arg(long, value_name = "DIR", default_value = "target/bench-memory-limit")]
    pub out: PathBuf,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

pub fn memory_limit(a: MemoryLimitArgs) -> Result<Exit> {
    anyhow::ensure!(
        a.limit_gib > 0.0 && a.limit_gib.is_finite(),
        "--limit-gib {}: give a size in GiB, e.g. 5",
        a.limit_gib
    );
    let report = run(&MemoryLimitRequest {
        source: a.source,
        arch: a.arch,
        torch: a.torch,
        limit_bytes: (a.limit_gib * (1u64 << 30) as f64) as u64,
        out: a.out,
    })?;
    emit(
        a.output.json,
        documents::BENCH_MEMORY_LIMIT,
        &report,
        MemoryLimitReport::table,
    )?;
    Ok(Exit::Success)
}
