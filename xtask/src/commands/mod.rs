//! One module per subcommand; `main.rs` only parses arguments and calls [`run`].

pub mod archs;
pub mod audit;
#[cfg(feature = "maintainer")]
pub mod bench;
pub mod build_ext;
pub mod build_torch;
pub mod codemod;
pub mod corpus;
pub mod doctor;
#[cfg(feature = "maintainer")]
pub mod kb;
pub mod kernels;
pub mod port_extension;
pub mod toolchain;
pub mod trace_build;
pub mod verify;

use crate::output::Exit;
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
    /// Download nothing: use the env given with --python, a toolkit under CUDA_HOME,
    /// /usr/local/cuda* or on PATH, cmake and ninja on PATH, and wheels from --find-links
    /// (also ARCHSMITH_OFFLINE=1; assumed when the package index cannot be reached).
    #[arg(long, global = true)]
    pub offline: bool,
    /// A directory of wheels to install from instead of PyPI (also ARCHSMITH_FIND_LINKS).
    #[arg(long, global = true, value_name = "DIR")]
    pub find_links: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
// Parsed once per process; boxing the big argument structs would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Plan an arch list: TORCH_CUDA_ARCH_LIST, nvcc flags, CMake archs, and runs-on verdicts per GPU.
    #[command(
        after_help = "Example:\n  archsmith archs --arch 7.5,8.9,9.0 --gpu L4 --gpu \"RTX 5090\""
    )]
    Archs(archs::ArchsArgs),
    /// Audits of a project's sources: `audit upgrade --from 2.3.1 --to 2.6.0 [PATH]`.
    Audit(audit::AuditArgs),
    /// Measured comparisons with the usual tools: `bench audit`, `bench build-ext`.
    #[cfg(feature = "maintainer")]
    Bench(bench::BenchArgs),
    /// Build a torch C++/CUDA extension for exactly the chosen archs, audit the wheel, import it.
    #[command(
        after_help = "Example:\n  archsmith build-ext ./my_ext --arch 7.5,8.9,9.0 --out dist"
    )]
    BuildExt(build_ext::BuildExtArgs),
    /// Build PyTorch from source for exactly the chosen archs: advise, plan, preflight, build, verify.
    #[command(
        after_help = "Example:\n  archsmith build-torch --torch 2.6.0 --arch 7.5,8.9,9.0 --gpu L4 --dry-run"
    )]
    BuildTorch(build_torch::BuildTorchArgs),
    /// Port legacy PyTorch C++/CUDA extension sources (AT_CHECK, THC, `.type()` dispatch, ...) to modern torch.
    #[command(after_help = "Example:\n  archsmith codemod csrc/ --dry-run")]
    Codemod(codemod::CodemodArgs),
    /// Re-run the regression corpus of real ports and builds; compare each outcome with the recorded one.
    #[command(after_help = "Example:\n  archsmith corpus adam-atan2 torchsort-0.1.10")]
    Corpus(corpus::CorpusArgs),
    /// Report this machine as a build host and runtime; with --gpu/--driver, which torch builds would run.
    #[command(after_help = "Example:\n  archsmith doctor --gpu \"RTX 5090\" --driver 570.86")]
    Doctor(doctor::DoctorArgs),
    /// Build archsmith's test kernels for an arch list, audit every binary, run them when there is a GPU.
    #[command(after_help = "Example:\n  archsmith kernels --arch 8.9,9.0")]
    Kernels(kernels::KernelsArgs),
    /// Port a legacy extension with a recipe (rules, patches), build it for the archs, verify it.
    #[command(after_help = "Example:\n  archsmith port-extension maskrcnn --arch 7.5,8.9,9.0")]
    PortExtension(port_extension::PortExtensionArgs),
    /// CUDA toolchains: install from PyPI (13.x) or find on the system, print env, list.
    Toolchain(toolchain::ToolchainArgs),
    /// Where a ninja build's time went (torch's, a running one): a Chrome trace, an HTML timeline,
    /// the slowest steps, the critical path and the idle job slots, from its .ninja_log.
    #[command(after_help = "Example:
  archsmith trace-build pytorch/build")]
    TraceBuild(trace_build::TraceBuildArgs),
    /// Check what was built and what is installed: `verify binary` (SASS/PTX in .so files and
    /// wheels), `verify env` (a Python env with torch), `verify pins` (a repository's requirements).
    Verify(verify::VerifyArgs),
    /// The compatibility knowledge base: `kb check` re-verifies it against NVIDIA's PyPI wheels.
    #[cfg(feature = "maintainer")]
    Kb(kb::KbArgs),
    /// `bench` and `kb` in a build without the maintainer's commands: says where they are.
    #[cfg(not(feature = "maintainer"))]
    #[command(hide = true, name = "bench", alias = "kb")]
    MaintainerOnly {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// The arch guard's nvcc (build_ext/arch_guard.rs): run by the wrapper a build's CUDA_HOME
    /// holds, never by hand.
    #[command(hide = true)]
    NvccGuard {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// The compile meter (build_insight/compile_meter.rs): the compiler launcher build-torch gives
    /// CMake, never run by hand.
    #[command(hide = true)]
    CompileMeter {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Print a shell completion script: `archsmith completions bash > /etc/bash_completion.d/archsmith`.
    #[command(after_help = "Example:\n  archsmith completions zsh")]
    Completions {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Runs a parsed command; `main` turns the [`Exit`] into the process status (errors exit 2).
pub fn run(cli: Cli) -> anyhow::Result<Exit> {
    set_network_mode(&cli)?;
    match cli.command {
        Command::Archs(args) => archs::run(&args),
        Command::Audit(args) => audit::run(args),
        #[cfg(feature = "maintainer")]
        Command::Bench(args) => bench::run(args),
        Command::BuildExt(args) => build_ext::run(args),
        Command::BuildTorch(args) => build_torch::run(args),
        Command::Codemod(args) => codemod::run(&args),
        Command::Corpus(args) => corpus::run(&args),
        Command::Doctor(args) => doctor::run(&args),
        Command::Kernels(args) => kernels::run(&args),
        Command::PortExtension(args) => port_extension::run(&args),
        Command::Toolchain(args) => toolchain::run(args),
        Command::TraceBuild(args) => trace_build::run(&args),
        Command::Verify(args) => verify::run(args),
        #[cfg(feature = "maintainer")]
        Command::Kb(args) => kb::run(&args),
        #[cfg(not(feature = "maintainer"))]
        Command::MaintainerOnly { .. } => anyhow::bail!(
            "`bench` and `kb check` are archsmith's maintainer commands, left out of this build: \
             run them in archsmith's checkout as `cargo xtask bench …` / `cargo xtask kb check`, \
             or build with `--features maintainer`"
        ),
        Command::NvccGuard { args } => crate::build_ext::arch_guard::run(&args).map(Exit::Program),
        Command::CompileMeter { args } => {
            crate::build_insight::compile_meter::run(&args).map(Exit::Program)
        }
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let name = crate::output::program().replace("cargo ", "cargo-");
            // Into memory first: clap_complete panics on a write error; a closed pipe ends quietly.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), name, &mut script);
            crate::out!("{}", String::from_utf8_lossy(&script));
            Ok(Exit::Success)
        }
    }
}

/// `--offline` and `--find-links` given to [`crate::offline`], which every child process's
/// environment carries (the archsmith processes a workflow starts: nvcc-guard, build hooks).
fn set_network_mode(cli: &Cli) -> anyhow::Result<()> {
    let find_links = match &cli.find_links {
        Some(dir) if !dir.is_dir() => anyhow::bail!(
            "--find-links {}: no such directory (give a directory of .whl files)",
            dir.display()
        ),
        Some(dir) => Some(dir.canonicalize()?),
        None => None,
    };
    crate::offline::configure(crate::offline::Flags {
        offline: cli.offline,
        find_links,
    });
    Ok(())
}

#[cfg(test)]
mod tests;
