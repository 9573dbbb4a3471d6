//! `cargo xtask doctor`: this machine as a build host and as a runtime, and — for a GPU or driver
//! you name — which torch releases and CUDA variants would run there ([`crate::doctor`]).

use crate::doctor::{diagnose, DoctorReport};
use crate::output::{documents, emit, Exit};
use crate::version::Version;
use anyhow::Result;

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// A GPU to plan for (name or compute capability); answers which torch builds would run on it.
    #[arg(long = "gpu", value_name = "NAME")]
    pub gpus: Vec<String>,
    /// An NVIDIA driver version to plan for (e.g. 470.161.03), instead of or besides this machine's.
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::driver_version)]
    pub driver: Option<Version>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

pub fn run(args: &DoctorArgs) -> Result<Exit> {
    let report = diagnose(&args.gpus, args.driver.as_ref())?;
    emit(
        args.output.json,
        documents::DOCTOR,
        &report,
        DoctorReport::table,
    )?;
    Ok(Exit::Success)
}
