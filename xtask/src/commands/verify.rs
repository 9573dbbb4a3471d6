//! `cargo xtask verify …`: checks of what was built. `verify binary` audits the SASS and PTX that
//! ELF files, directories and wheels really carry ([`crate::verify::binary`], docs/verify-binary.md).

use crate::binary::Outcome;
use crate::cuda_arch::Cc;
use crate::kb::kb;
use crate::verify::binary::{audit, BinaryRequest, Report};
use anyhow::Result;
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(subcommand)]
    pub what: VerifyCommand,
}

#[derive(Debug, Subcommand)]
pub enum VerifyCommand {
    /// Which SASS and PTX ELF files, directories or wheels really carry (read from the fatbin
    /// headers in pure Rust). Exit 0 ok, 1 an expectation failed, 2 unreadable or malformed input.
    Binary(BinaryArgs),
}

#[derive(Debug, Args)]
pub struct BinaryArgs {
    /// ELF files (.so, .o, executables), directories (walked) or wheels (.whl).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Arch spec the files must carry, e.g. `7.5,8.0,12.0+PTX`: missing SASS/PTX fail (exit 1).
    #[arg(long, value_name = "SPEC")]
    pub expect_arch: Option<String>,
    /// With --expect-arch: images beyond the spec fail too.
    #[arg(long, requires = "expect_arch")]
    pub strict: bool,
    /// A GPU to give a runs-on verdict for (name such as "H100", "RTX 5090"; repeatable).
    #[arg(long = "gpu", value_name = "NAME")]
    pub gpus: Vec<String>,
    /// A compute capability to give a runs-on verdict for, e.g. 8.9 (repeatable).
    #[arg(long = "cc", value_name = "X.Y")]
    pub ccs: Vec<Cc>,
    /// Print JSON (schema in docs/verify-binary.md) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Decompress and write every cubin/PTX under DIR (one folder per file).
    #[arg(long, value_name = "DIR")]
    pub extract: Option<PathBuf>,
    /// Threads for inflating wheel members (default: all CPUs).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
}

pub fn run(args: VerifyArgs) -> Result<i32> {
    match args.what {
        VerifyCommand::Binary(b) => binary(b),
    }
}

fn binary(args: BinaryArgs) -> Result<i32> {
    let request = BinaryRequest {
        paths: args.paths,
        expect_arch: args.expect_arch,
        strict: args.strict,
        gpus: args.gpus,
        ccs: args.ccs,
        extract: args.extract,
        threads: args.threads,
    };
    let (files, checks) = audit(kb(), &request)?;
    let report = Report::new(
        &files,
        checks.expectation.as_ref(),
        checks.strict,
        &checks.devices,
    );
    let spec = request.expect_arch.as_deref();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json(spec))?);
    } else {
        print!("{}", report.table(spec));
    }
    for f in &files {
        if let Outcome::Failed(e) = &f.outcome {
            eprintln!("error: {}: {e}", f.path);
        }
    }
    Ok(report.exit_code)
}
