//! `bench torch-range`: the range verdict vs importing each module in an env of every release
//! ([`crate::bench::torch_range_vs_imports`]).

use crate::bench::torch_range_vs_imports::{run, RangeBenchRequest};
use crate::output::{documents, emit, Exit};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct TorchRangeArgs {
    /// An env of one torch release (repeatable: the releases of the range).
    #[arg(long = "python", value_name = "PATH", required = true, value_parser = crate::python::interpreter_arg)]
    pub pythons: Vec<PathBuf>,
    /// An extension wheel whose shared objects are checked (repeatable).
    #[arg(long = "wheel", value_name = "WHEEL", required = true)]
    pub wheels: Vec<PathBuf>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

/// Exit 1 when a verdict disagrees with Python.
pub fn torch_range(args: TorchRangeArgs) -> Result<Exit> {
    let request = RangeBenchRequest {
        pythons: args.pythons,
        wheels: args.wheels,
    };
    let report = run(&request)?;
    emit(
        args.output.json,
        documents::BENCH_TORCH_RANGE,
        &report,
        |r| r.table(),
    )?;
    Ok(Exit::passed(report.agree == report.rows.len()))
}
