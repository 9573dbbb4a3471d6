//! One module per subcommand; `main.rs` only parses arguments and calls [`run`].

pub mod archs;
pub mod bench;
pub mod doctor;
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
    /// Measured comparisons: `bench audit` times `verify binary` against unzip + cuobjdump.
    Bench(bench::BenchArgs),
    /// Check what was built: `verify binary` audits the SASS/PTX that .so files and wheels carry.
    Verify(verify::VerifyArgs),
}

/// Runs a parsed command; the returned code is the process exit status. Errors exit with 2.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Archs(args) => archs::run(&args),
        Command::Doctor(args) => doctor::run(&args),
        Command::Verify(args) => verify::run(args),
        Command::Bench(args) => bench::run(args),
    }
}
