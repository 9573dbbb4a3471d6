//! `cargo xtask toolchain install|env|list`: CUDA toolchains from PyPI (13.x) or the system (11.x/12.x).

use crate::output::{documents, print_json, Exit};
use crate::paths::toolchains_dir;
use crate::toolchain::{self, discover, nvidia_wheels, Source};
use crate::version::Version;
use anyhow::Result;
use clap::{Args, Subcommand};
use std::time::Instant;

#[derive(Debug, Args)]
pub struct ToolchainArgs {
    #[command(subcommand)]
    pub command: ToolchainCommand,
}

#[derive(Debug, Subcommand)]
pub enum ToolchainCommand {
    /// Install (or reuse) the CUDA toolchain for a release: 13.x from NVIDIA's PyPI wheels, 12.4 and 11.8 from Debian's archive (no root), others from the system.
    #[command(after_help = "Example:\n  archsmith toolchain install --cuda 13.2")]
    Install(CudaArgs),
    /// Put the toolchain in the environment (CUDA_HOME, CUDA_PATH, PATH, LD_LIBRARY_PATH), installing first if needed:
    /// sourceable shell exports, or appended to $GITHUB_ENV/$GITHUB_PATH for the next steps of a GitHub Actions job.
    #[command(after_help = "Example:\n  archsmith toolchain env --cuda 13.2 --format github")]
    Env(EnvArgs),
    /// List archsmith's toolchains and any system CUDA found.
    #[command(after_help = "Example:\n  archsmith toolchain list")]
    List {
        #[command(flatten)]
        output: crate::output::JsonOutput,
    },
}

#[derive(Debug, Args)]
pub struct CudaArgs {
    /// CUDA release, e.g. 13.2 (any 13.x, from PyPI), 12.4 or 11.8 (from Debian's archive), or another with a system toolkit.
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::toolchain_cuda_release)]
    pub cuda: Version,
    /// With the CUDA libraries torch's own build links (cuBLAS, cuFFT, cuRAND, cuSPARSE, cuSOLVER,
    /// NVRTC, nvToolsExt): the toolkit `build-torch` uses; for 11.8/12.4 from Debian's archive a
    /// toolkit of its own (about 640 MB more to fetch).
    #[arg(long)]
    pub torch_build: bool,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

#[derive(Debug, Args)]
pub struct EnvArgs {
    /// CUDA release, e.g. 13.2 (any 13.x, from PyPI), 12.4 or 11.8 (from Debian's archive), or another with a system toolkit.
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::toolchain_cuda_release)]
    pub cuda: Version,
    /// `shell`: exports to eval; `github`: append to the files $GITHUB_ENV and $GITHUB_PATH name;
    /// `json` (as --json).
    #[arg(long, value_enum, default_value_t = EnvFormat::Shell, conflicts_with = "json")]
    pub format: EnvFormat,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EnvFormat {
    Shell,
    Github,
    Json,
}

pub fn run(args: ToolchainArgs) -> Result<Exit> {
    match args.command {
        ToolchainCommand::Install(a) => install(&a),
        ToolchainCommand::Env(a) => env(&a),
        ToolchainCommand::List { output } => list(output.json),
    }
}

fn install(args: &CudaArgs) -> Result<Exit> {
    let start = Instant::now();
    let tc = if args.torch_build {
        toolchain::ensure_for_torch_build(&args.cuda)?
    } else {
        toolchain::ensure(&args.cuda)?
    };
    let seconds = start.elapsed().as_secs_f64();
    let lock = match &tc.source {
        Source::Pypi { .. } => Some(nvidia_wheels::read_lock(tc.cuda_home())?),
        Source::System { .. } | Source::Debian { .. } => None,
    };
    let debian_lock = match &tc.source {
        Source::Debian { .. } => Some(toolchain::debian_packages::read_lock(tc.cuda_home())?),
        _ => None,
    };
    if args.output.json {
        let value = serde_json::json!({
            "toolchain": tc,
            "nvcc": tc.nvcc(),
            "cuobjdump": tc.cuobjdump().exists().then(|| tc.cuobjdump()),
            "lock": lock,
            "debian_lock": debian_lock,
            "seconds": seconds,
        });
        print_json(documents::TOOLCHAIN_INSTALL, &value)?;
    } else {
        crate::out!(
            "{}",
            toolchain::install_table(&tc, lock.as_ref(), seconds, &args.cuda)
        );
    }
    Ok(Exit::Success)
}

fn env(args: &EnvArgs) -> Result<Exit> {
    let format = if args.output.json {
        EnvFormat::Json
    } else {
        args.format
    };
    // Checked before installing: a job that runs this outside GitHub Actions learns it at once.
    let github_files = match format {
        EnvFormat::Github => Some(toolchain::GithubFiles::from_env()?),
        _ => None,
    };
    let tc = toolchain::ensure(&args.cuda)?;
    if let Some(files) = github_files {
        let lines = tc.github_env(std::env::var("LD_LIBRARY_PATH").ok().as_deref());
        files.append(&lines)?;
        crate::outln!(
            "CUDA {} for the next steps: {} appended to $GITHUB_ENV, {} to $GITHUB_PATH",
            tc.cuda,
            lines.names.join(" "),
            lines.path.trim_end()
        );
        return Ok(Exit::Success);
    }
    if format == EnvFormat::Json {
        let map: serde_json::Map<String, serde_json::Value> = tc
            .env_vars()
            .into_iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::String(v)))
            .collect();
        print_json(documents::TOOLCHAIN_ENV, &map)?;
    } else {
        crate::out!("{}", tc.shell_exports());
    }
    Ok(Exit::Success)
}

fn list(json: bool) -> Result<Exit> {
    let dir = toolchains_dir();
    let rows = discover()?;
    if json {
        print_json(
            documents::TOOLCHAIN_LIST,
            &serde_json::json!({ "toolchains": rows }),
        )?;
        return Ok(Exit::Success);
    }
    crate::out!("{}", toolchain::listing_table(&rows, &dir));
    Ok(Exit::Success)
}
