//! One module per subcommand; `main.rs` only parses arguments and calls [`run`].

pub mod archs;
pub mod audit;
pub mod bench;
pub mod build_ext;
pub mod build_torch;
pub mod codemod;
pub mod doctor;
pub mod kb;
pub mod kernels;
pub mod port_extension;
pub mod toolchain;
pub mod verify;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    version,
    about = "archsmith: build, port and verify PyTorch and CUDA extensions for exactly the GPU archs you need"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
// Parsed once per process; boxing the big argument structs would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Plan an arch list: TORCH_CUDA_ARCH_LIST, nvcc flags, CMake archs, and runs-on verdicts per GPU.
    Archs(archs::ArchsArgs),
    /// Audits of a project's sources: `audit upgrade --from 2.3.1 --to 2.6.0 [PATH]`.
    Audit(audit::AuditArgs),
    /// Measured comparisons with the usual tools: `bench audit`, `bench build-ext`.
    Bench(bench::BenchArgs),
    /// Build a torch C++/CUDA extension for exactly the chosen archs, audit the wheel, import it.
    BuildExt(build_ext::BuildExtArgs),
    /// Build PyTorch from source for exactly the chosen archs: advise, plan, preflight, build, verify.
    BuildTorch(build_torch::BuildTorchArgs),
    /// Port legacy PyTorch C++/CUDA extension sources (AT_CHECK, THC, `.type()` dispatch, ...) to modern torch.
    Codemod(codemod::CodemodArgs),
    /// Report this machine as a build host and runtime; with --gpu/--driver, which torch builds would run.
    Doctor(doctor::DoctorArgs),
    /// Build archsmith's test kernels for an arch list, audit every binary, run them when there is a GPU.
    Kernels(kernels::KernelsArgs),
    /// Port a legacy extension with a recipe (rules, patches), build it for the archs, verify it.
    PortExtension(port_extension::PortExtensionArgs),
    /// CUDA toolchains: install from PyPI (13.x) or find on the system, print env, list.
    Toolchain(toolchain::ToolchainArgs),
    /// Check what was built: `verify binary` audits the SASS/PTX that .so files and wheels carry.
    Verify(verify::VerifyArgs),
    /// The compatibility knowledge base: `kb check` re-verifies it against NVIDIA's PyPI wheels.
    Kb(kb::KbArgs),
    /// Print a shell completion script: `archsmith completions bash > /etc/bash_completion.d/archsmith`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// The name the binary runs under: `archsmith` when installed as such, else `cargo xtask`.
pub fn bin_name() -> &'static str {
    let exe = std::env::args_os().next().unwrap_or_default();
    let stem = std::path::Path::new(&exe)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if stem == "archsmith" {
        "archsmith"
    } else {
        "cargo xtask"
    }
}

/// Runs a parsed command; the returned code is the process exit status. Errors exit with 2.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Archs(args) => archs::run(&args),
        Command::Audit(args) => audit::run(args),
        Command::Bench(args) => bench::run(args),
        Command::BuildExt(args) => build_ext::run(args),
        Command::BuildTorch(args) => build_torch::run(args),
        Command::Codemod(args) => codemod::run(&args),
        Command::Doctor(args) => doctor::run(&args),
        Command::Kernels(args) => kernels::run(&args),
        Command::PortExtension(args) => port_extension::run(&args),
        Command::Toolchain(args) => toolchain::run(args),
        Command::Verify(args) => verify::run(args),
        Command::Kb(args) => kb::run(&args),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let name = bin_name().replace("cargo ", "cargo-");
            clap_complete::generate(shell, &mut Cli::command(), name, &mut std::io::stdout());
            Ok(0)
        }
    }
}
