//! `bench abi-checkers`: the range verdict side by side with torch-abi-audit and
//! kernel-abi-check ([`crate::bench::abi_checkers`]).

use crate::bench::abi_checkers::{run, AbiCheckersRequest};
use crate::output::{documents, emit, Exit};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct AbiCheckersArgs {
    /// An extension wheel whose shared objects are checked (repeatable).
    #[arg(long = "wheel", value_name = "WHEEL", required = true)]
    pub wheels: Vec<PathBuf>,
    /// The torch releases archsmith checks against (as `verify env --torch-range`).
    #[arg(
        long,
        value_name = "'torch>=A,<B'",
        default_value = "torch>=2.11,<2.16"
    )]
    pub torch_range: String,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

/// Exit 0: a comparison, not a gate (the disagreements are listed with their reasons).
pub fn abi_checkers(args: AbiCheckersArgs) -> Result<Exit> {
    let request = AbiCheckersRequest {
        wheels: args.wheels,
        range: args.torch_range,
    };
    let report = run(&request)?;
    emit(
        args.output.json,
        documents::BENCH_ABI_CHECKERS,
        &report,
        |r| r.table(),
    )?;
    Ok(Exit::Success)
}
