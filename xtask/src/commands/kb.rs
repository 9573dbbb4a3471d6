//! `cargo xtask kb check`: re-verify the knowledge base's facts against the real artifacts
//! ([`crate::kb_check`]): nvcc's against NVIDIA's wheels, torch's against torch's wheels on PyPI.
//! Exit 0 all match, 1 a fact differs, 2 something could not be fetched or read.

use crate::kb::kb;
use crate::kb_check::torch::{check_torch, rows_to_check};
use crate::kb_check::{check_versions, gpus, releases_to_check};
use crate::output::{documents, print_json, Exit};
use crate::pypi::Pypi;
use crate::version::Version;
use anyhow::{bail, Result};

#[derive(Debug, clap::Args)]
pub struct KbArgs {
    #[command(subcommand)]
    pub command: KbCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum KbCommand {
    /// Check the nvcc target and host-compiler rows against NVIDIA's PyPI wheels (every CUDA 13.x
    /// release unless --cuda narrows or widens it), and with --torch every torch release row and
    /// both arch-list tables against torch's wheels on PyPI (read by range, not downloaded).
    #[command(after_help = "Example:\n  archsmith kb check --torch 2.6")]
    Check(CheckArgs),
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Only these releases, by prefix: `13.2` checks every 13.2.x on PyPI, `13.2.78` just that one,
    /// `12` every CUDA 12 wheel (ptxas only). Repeatable. Default: every 13.x.
    #[arg(long = "cuda", value_name = "VER")]
    pub cuda: Vec<Version>,
    /// Check the torch rows: every one, or those whose version starts with a given prefix
    /// (`--torch 2.6`). Repeatable. Without --nvcc or --cuda, only torch is checked.
    #[arg(long, value_name = "VER", num_args = 0..=1, default_missing_value = None)]
    pub torch: Option<Vec<Version>>,
    /// Check the nvcc rows too when --torch is given (they are checked by default otherwise).
    #[arg(long)]
    pub nvcc: bool,
    /// With --torch: also read each release line's small device libraries (libtorch_cuda_linalg.so,
    /// libtorch_nvshmem.so; 3–80 MB each, by range) for archs they carry in only some containers,
    /// and its libtorch_python.so for the numpy C API it was built against (the numpy<2 pin).
    #[arg(long, requires = "torch")]
    pub libraries: bool,
    /// Check the GPU rows and chips against the PCI ID Repository (Debian's pci.ids package) and
    /// report how many NVIDIA device IDs resolve; only that is checked.
    #[arg(long, conflicts_with_all = ["torch", "nvcc", "cuda"])]
    pub gpus: bool,
    /// Check the CUDA toolkits archsmith installs from Debian's archive (12.4 from trixie, 11.8
    /// from bookworm): each row's packages resolved against the suite's signed index as archsmith
    /// last read and verified it (today's with --live, or where none is kept yet).
    #[arg(long, conflicts_with_all = ["torch", "nvcc", "cuda", "gpus"])]
    pub debian: bool,
    /// Check the manylinux policies (the platform tags a stable-ABI wheel gets) against the
    /// policy file of the auditwheel release their sources name, read from its wheel on PyPI.
    #[arg(long, conflicts_with_all = ["torch", "nvcc", "cuda", "gpus", "debian"])]
    pub manylinux: bool,
    /// Read today's index pages instead of the recordings in xtask/data/pypi-recordings (the
    /// default: a verdict no upload to PyPI can turn), and say what moved since they were made:
    /// releases uploaded, files yanked or gone. With --debian: today's signed indexes.
    #[arg(long, conflicts_with_all = ["gpus"])]
    pub live: bool,
    /// Read today's index pages and write those that moved as the recordings (a diff to review),
    /// then check against them. Implies --live.
    #[arg(long, conflicts_with_all = ["gpus", "debian"])]
    pub record: bool,
    /// With --gpus: read this pci.ids instead of Debian's package.
    #[arg(long, value_name = "FILE", requires = "gpus")]
    pub pci_ids: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

/// Where the checks read the index pages: the recordings, or (`--live`, `--record`) today's
/// index, saying what moved since the recordings (and with `--record` replacing them).
fn index_pages(args: &CheckArgs) -> Result<Pypi> {
    let dir = crate::pypi::repository_recordings();
    if !(args.live || args.record) {
        return Ok(Pypi::recorded(dir));
    }
    let moved = crate::kb_check::live_against_recorded(&dir, args.record)?;
    for (project, since, changes) in &moved {
        let Some(since) = since.as_deref() else {
            let done = if args.record {
                "recorded now"
            } else {
                "run with --record to keep it"
            };
            crate::errln!("archsmith: {project}'s index page was not recorded before: {done}");
            continue;
        };
        let what = if changes.is_empty() {
            "nothing moved".to_string()
        } else {
            let shown: Vec<String> = changes
                .iter()
                .take(8)
                .map(|m| format!("{} {}", m.what, m.filename))
                .collect();
            format!(
                "{} moved: {}{}",
                changes.len(),
                shown.join(", "),
                if changes.len() > 8 { ", …" } else { "" }
            )
        };
        crate::errln!("archsmith: {project}'s index page since the recording of {since}: {what}");
    }
    if args.record {
        crate::errln!(
            "archsmith: recordings in {} (review them with `git diff`)",
            dir.display()
        );
    }
    Ok(Pypi::live())
}

pub fn run(args: &KbArgs) -> Result<Exit> {
    match &args.command {
        KbCommand::Check(a) => check(a),
    }
}

fn check(args: &CheckArgs) -> Result<Exit> {
    if args.debian {
        let report = crate::kb_check::debian::check_debian(kb(), args.live);
        match args.output.json {
            true => print_json(documents::KB_CHECK_DEBIAN, &report)?,
            false => crate::out!("{}", report.table()),
        }
        return Ok(report.exit());
    }
    if args.gpus {
        let file = gpus::pci_ids_file(args.pci_ids.as_deref())?;
        let report = gpus::check_gpus(kb(), &file)?;
        match args.output.json {
            true => print_json(documents::KB_CHECK_GPUS, &report)?,
            false => crate::out!("{}", report.table()),
        }
        return Ok(report.exit());
    }
    let nvcc = args.torch.is_none() || args.nvcc || !args.cuda.is_empty();
    let pypi = index_pages(args)?;
    if args.manylinux {
        let report = crate::kb_check::manylinux::check_manylinux(kb(), &pypi)?;
        match args.output.json {
            true => print_json(documents::KB_CHECK_MANYLINUX, &report)?,
            false => crate::out!("{}", report.table()),
        }
        return Ok(report.exit());
    }
    let mut exit = Exit::Success;
    if let Some(filters) = &args.torch {
        if nvcc && args.output.json {
            bail!("--json prints one document: check torch (--torch) and nvcc (--nvcc, --cuda) in two runs");
        }
        let rows = rows_to_check(kb(), filters)?;
        let report = check_torch(kb(), &pypi, &rows, args.libraries, !args.output.json)?;
        if args.output.json {
            print_json(documents::KB_CHECK_TORCH, &report)?;
        } else {
            crate::out!("{}", report.table());
        }
        exit = report.exit();
        if !nvcc {
            return Ok(exit);
        }
        crate::outln!();
    }
    let versions = releases_to_check(&args.cuda, &pypi)?;
    let report = check_versions(kb(), &versions, !args.output.json);
    if args.output.json {
        print_json(documents::KB_CHECK, &report)?;
    } else {
        crate::out!("{}", report.table());
    }
    Ok(exit.worst(report.exit()))
}
