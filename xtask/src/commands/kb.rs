//! `cargo xtask kb check`: re-verify the knowledge base's nvcc facts against NVIDIA's real wheels
//! ([`crate::kb_check`]). Exit 0 all match, 1 a fact differs, 2 something could not be fetched or read.

use crate::kb::kb;
use crate::kb_check::{check_versions, releases_to_check};
use crate::output::{documents, print_json};
use crate::version::Version;
use anyhow::Result;

#[derive(Debug, clap::Args)]
pub struct KbArgs {
    #[command(subcommand)]
    pub command: KbCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum KbCommand {
    /// Check the nvcc target and host-compiler rows against NVIDIA's PyPI wheels (every CUDA 13.x
    /// release unless --cuda narrows or widens it).
    #[command(after_help = "Example:\n  archsmith kb check --cuda 13.2")]
    Check(CheckArgs),
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Only these releases, by prefix: `13.2` checks every 13.2.x on PyPI, `13.2.78` just that one,
    /// `12` every CUDA 12 wheel (ptxas only). Repeatable. Default: every 13.x.
    #[arg(long = "cuda", value_name = "VER")]
    pub cuda: Vec<Version>,
    /// Print one JSON document (every fact as the tool and the knowledge base have it) instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &KbArgs) -> Result<i32> {
    match &args.command {
        KbCommand::Check(a) => check(a),
    }
}

fn check(args: &CheckArgs) -> Result<i32> {
    let versions = releases_to_check(&args.cuda)?;
    let report = check_versions(kb(), &versions, !args.json);
    if args.json {
        print_json(documents::KB_CHECK, &report)?;
    } else {
        print!("{}", report.table());
    }
    Ok(report.exit_code())
}
