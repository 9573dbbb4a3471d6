//! One module per subcommand; `main.rs` only parses arguments and calls [`run`].

pub mod toolchain;

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
    /// CUDA toolchains: install from PyPI (13.x) or find on the system, print env, list.
    Toolchain(toolchain::ToolchainArgs),
}

/// Runs a parsed command; the returned code is the process exit status.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Toolchain(args) => toolchain::run(args),
    }
}
