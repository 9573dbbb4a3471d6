//! `bench codemod`: how `codemod --check` grows with a file's size ([`crate::bench::codemod_scaling`]).

use crate::bench::codemod_scaling::{codemod_scaling, CodemodScalingReport};
use crate::output::{documents, emit, Exit};
use anyhow::Result;
use clap::Args;

#[derive(Debug, Args)]
pub struct CodemodArgs {
    /// The sizes to time, in lines of one legacy check each (ascending).
    #[arg(long, value_delimiter = ',', default_value = "5000,10000,20000,40000")]
    pub lines: Vec<usize>,
    /// Timed runs of each size; the fastest is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Time the legacy and stable-ABI catalogues over one function definition a line.
    #[arg(long)]
    pub stable_abi: bool,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

pub fn codemod(args: CodemodArgs) -> Result<Exit> {
    let mut lines = args.lines.clone();
    lines.sort_unstable();
    lines.dedup();
    emit(
        args.output.json,
        documents::BENCH_CODEMOD,
        &codemod_scaling(&lines, args.runs, args.stable_abi)?,
        CodemodScalingReport::table,
    )?;
    Ok(Exit::Success)
}
