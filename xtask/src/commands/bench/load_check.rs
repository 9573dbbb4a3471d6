//! `bench load-check`: the load check's verdicts vs importing each module in a fresh interpreter
//! ([`crate::bench::load_check_vs_python`]).

use crate::bench::load_check_vs_python::{run, LoadBenchRequest};
use crate::output::{documents, emit, Exit};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct LoadCheckArgs {
    /// A Python env with torch to load into (repeatable: every wheel is checked in each).
    #[arg(long = "python", value_name = "PATH", required = true)]
    pub pythons: Vec<PathBuf>,
    /// An extension wheel to check (repeatable); none: every compiled module of the env itself.
    #[arg(long = "wheel", value_name = "WHEEL")]
    pub wheels: Vec<PathBuf>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

/// Exit 1 when a verdict disagrees with Python.
pub fn load_check(args: LoadCheckArgs) -> Result<Exit> {
    let request = LoadBenchRequest {
        pythons: args.pythons,
        wheels: args.wheels,
    };
    let report = run(&request)?;
    emit(
        args.output.json,
        documents::BENCH_LOAD_CHECK,
        &report,
        |r| r.table(),
    )?;
    Ok(Exit::passed(report.modules_agree == report.modules))
}
