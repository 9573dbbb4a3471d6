//! `bench manylinux`: archsmith's platform tag side by side with `auditwheel show`
//! ([`crate::bench::manylinux_vs_auditwheel`]).

use crate::bench::manylinux_vs_auditwheel::run;
use crate::output::{documents, emit, Exit};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ManylinuxArgs {
    /// A wheel to tag (repeatable).
    #[arg(long = "wheel", value_name = "WHEEL", required = true)]
    pub wheels: Vec<PathBuf>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

/// Exit 0: a comparison, not a gate (each disagreement is a row).
pub fn manylinux(args: ManylinuxArgs) -> Result<Exit> {
    let report = run(&args.wheels)?;
    emit(args.output.json, documents::BENCH_MANYLINUX, &report, |r| {
        r.table()
    })?;
    Ok(Exit::Success)
}
