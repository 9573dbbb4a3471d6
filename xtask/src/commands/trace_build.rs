//! `cargo xtask trace-build DIR`: the trace, timeline and summary of any ninja build — torch's,
//! a CMake project's, one still running — from its `.ninja_log`
//! ([`crate::build_insight::written::of_ninja_build`]). archsmith's own builds write theirs
//! beside their logs.

use crate::build_insight::written::{of_ninja_build, Written};
use crate::output::{documents, emit, Exit};
use anyhow::Result;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct TraceBuildArgs {
    /// A ninja build directory, or its `.ninja_log`.
    pub build: PathBuf,
    /// Where to write `ninja.trace.json` and `ninja.timeline.html` (default: beside the log).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

pub fn run(args: &TraceBuildArgs) -> Result<Exit> {
    let written = of_ninja_build(&args.build, args.out.as_deref())?;
    emit(
        args.output.json,
        documents::TRACE_BUILD,
        &written,
        Written::table,
    )?;
    Ok(Exit::Success)
}
