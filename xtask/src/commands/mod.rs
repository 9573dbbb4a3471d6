//! One module per subcommand; `main.rs` only parses arguments and calls [`run`].

pub mod verify;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    about = "archsmith: build, port and verify PyTorch and CUDA extensions for exactly the GPU archs you need"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check what was built: `verify binary` audits the SASS/PTX that .so files and wheels carry.
    Verify(verify::VerifyArgs),
}

/// Runs a parsed command; the returned code is the process exit status.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Verify(a) => verify::run(a),
    }
}
