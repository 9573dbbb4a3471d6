//! `bench audit`: archsmith auditing a whole wheel against `unzip` + `cuobjdump --list-elf`
//! ([`crate::bench::audit`]).

use crate::bench::audit::{audit as run_audit, AuditReport, AuditRequest};
use crate::output::{documents, emit, Exit};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// The wheel to audit (default: the newest torch the knowledge base knows, from PyPI).
    #[arg(long)]
    pub wheel: Option<PathBuf>,
    /// cuobjdump to compare with (default: on PATH, else archsmith's toolchain for the newest known CUDA).
    #[arg(long)]
    pub cuobjdump: Option<PathBuf>,
    /// Timed runs of each side; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Threads for archsmith (default: all CPUs).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

pub fn audit(args: AuditArgs) -> Result<Exit> {
    let request = AuditRequest {
        wheel: args.wheel,
        cuobjdump: args.cuobjdump,
        runs: args.runs,
        threads: args.threads,
    };
    emit(
        args.output.json,
        documents::BENCH_AUDIT,
        &run_audit(&request)?,
        AuditReport::table,
    )?;
    Ok(Exit::Success)
}
