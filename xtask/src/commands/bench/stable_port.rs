//! `bench stable-port`: one stable-ABI build vs the ordinary build of every torch variant it
//! covers ([`crate::bench::stable_port_matrix`]).

use crate::bench::stable_port_matrix::{run, StablePortRequest};
use crate::output::{documents, emit, Exit};
use crate::version::Version;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct StablePortArgs {
    /// The recipe to port and build (patches/NAME).
    #[arg(default_value = "legacy-demo")]
    pub recipe: String,
    /// The archs every build compiles for.
    #[arg(long, value_name = "SPEC", default_value = "9.0")]
    pub arch: crate::arch::spec::ArchSpec,
    /// The torch releases of the ordinary builds, one variant each (PyPI's CUDA for each).
    #[arg(
        long,
        value_name = "VER",
        value_delimiter = ',',
        default_value = "2.10.0,2.11.0,2.12.1,2.13.0,2.14.1,2.15.0"
    )]
    pub torch: Vec<Version>,
    /// Where the wheels go (emptied first).
    #[arg(long, value_name = "DIR", default_value = "target/bench-stable-port")]
    pub out: PathBuf,
    /// Port and make every env; build nothing.
    #[arg(long)]
    pub prepare_only: bool,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

/// Exit 0: a measurement; a variant that does not build is a row with its first error.
pub fn stable_port(args: StablePortArgs) -> Result<Exit> {
    let request = StablePortRequest {
        recipe: crate::port_extension::recipe::chosen(None, Some(&args.recipe), None, false)?,
        arch: args.arch,
        torch: args.torch,
        out: args.out,
        prepare_only: args.prepare_only,
    };
    let Some(report) = run(&request)? else {
        return Ok(Exit::Success);
    };
    emit(
        args.output.json,
        documents::BENCH_STABLE_PORT,
        &report,
        |r| r.table(),
    )?;
    Ok(Exit::Success)
}
