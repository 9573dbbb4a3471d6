//! One module per subcommand; `main.rs` only parses arguments and calls [`run`].

pub mod archs;

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
    /// Plan an arch list: TORCH_CUDA_ARCH_LIST, nvcc flags, CMake archs, and runs-on verdicts per GPU.
    Archs(archs::ArchsArgs),
}

/// Runs a parsed command; the returned code is the process exit status. Errors exit with 2.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Archs(args) => archs::run(&args),
    }
}
