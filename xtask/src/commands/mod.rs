//! One module per subcommand; `main.rs` only parses arguments and calls [`run`].

pub mod archs;
pub mod doctor;
pub mod kernels;
pub mod toolchain;
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
    /// Plan an arch list: TORCH_CUDA_ARCH_LIST, nvcc flags, CMake archs, and runs-on verdicts per GPU.
    Archs(archs::ArchsArgs),
    /// Report this machine as a build host and runtime; with --gpu/--driver, which torch builds would run.
    Doctor(doctor::DoctorArgs),
    /// Build archsmith's test kernels for an arch list, audit every binary, run them when there is a GPU.
    Kernels(kernels::KernelsArgs),
    /// CUDA toolchains: install from PyPI (13.x) or find on the system, print env, list.
    Toolchain(toolchain::ToolchainArgs),
    /// Check what was built: `verify binary` audits the SASS/PTX that .so files and wheels carry.
    Verify(verify::VerifyArgs),
}

/// Runs a parsed command; the returned code is the process exit status. Errors exit with 2.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Archs(args) => archs::run(&args),
        Command::Doctor(args) => doctor::run(&args),
        Command::Kernels(args) => kernels::run(&args),
        Command::Toolchain(args) => toolchain::run(args),
        Command::Verify(args) => verify::run(args),
    }
}
