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
        render,
    )?;
    Ok(Exit::Success)
}

fn render(r: &AuditReport) -> String {
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
