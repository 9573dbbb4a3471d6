//! `cargo xtask kernels --arch SPEC [--cuda VER] [--json]`: build archsmith's test kernels for every
//! requested arch each supports, audit every binary against the plan, and run them when there is a
//! GPU ([`crate::kernels::run`]).

use crate::kernels::run::{run as run_kernels, KernelsReport};
use crate::output::{documents, emit, Exit};
use crate::version::Version;
use anyhow::Result;

#[derive(Debug, clap::Args)]
pub struct KernelsArgs {
    /// Archs to build: `7.5,8.9,9.0+PTX`, `8.0;9.0a`, `Hopper` … (as `cargo xtask archs` reads them).
    #[arg(long = "arch", value_name = "SPEC")]
    pub arch: crate::arch::spec::ArchSpec,
    /// CUDA release to compile with (default: the newest toolchain archsmith has installed, else the newest
    /// CUDA the knowledge base knows, installed from PyPI).
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::cuda_release)]
    pub cuda: Option<Version>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

pub fn run(args: &KernelsArgs) -> Result<Exit> {
    let report = run_kernels(&args.arch, args.cuda.as_ref())?;
    emit(
        args.output.json,
        documents::KERNELS,
        &report,
        KernelsReport::table,
    )?;
    Ok(Exit::passed(report.ok))
}
