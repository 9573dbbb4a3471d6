//! `cargo xtask archs`: plan an arch list — what to export, which nvcc flags torch will pass, what
//! CMake wants, and whether named GPUs will run the result ([`crate::arch::advice::plan_report`]).

use crate::arch::advice::{plan_report, ArchsReport, PlanRequest};
use crate::build_ext::SourceSpec;
use crate::kb::kb;
use crate::output::{documents, emit, Exit};
use crate::version::Version;
use anyhow::{Context, Result};

#[derive(Debug, clap::Args)]
pub struct ArchsArgs {
    /// Archs to build: `7.5,8.9,9.0+PTX`, `8.0;8.6`, `Hopper`, `9.0a`, `sm_120` …
    #[arg(long, value_name = "SPEC", required_unless_present = "list_gpus")]
    pub arch: Option<crate::arch::spec::ArchSpec>,
    /// List the GPUs the knowledge base knows (name, compute capability, segment, other names)
    /// instead of planning.
    #[arg(long, conflicts_with_all = ["arch", "print"])]
    pub list_gpus: bool,
    /// torch release whose rules apply (default: the newest known).
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::torch_release)]
    pub torch: Option<Version>,
    /// CUDA release whose nvcc will compile (default: the newest known).
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::cuda_release)]
    pub cuda: Option<Version>,
    /// A GPU to check the plan against (name such as "RTX 5090", "H100", or a compute capability).
    #[arg(long = "gpu", value_name = "NAME")]
    pub gpus: Vec<String>,
    /// The NVIDIA driver that would run the code (decides whether PTX can be JIT-compiled).
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::driver_version)]
    pub driver: Option<Version>,
    /// A source built before (build-ext's SOURCE: a directory, an sdist, pypi:NAME==VER): shows
    /// what each arch cost in its last build — device-compile seconds and image bytes.
    #[arg(
        long,
        value_name = "DIR|SDIST|pypi:NAME==VER",
        conflicts_with = "print"
    )]
    pub src: Option<String>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
    /// Print one value alone, for CI scripts: `torch-cuda-arch-list` (`7.5;8.9;9.0`), `nvcc-flags`…
    #[arg(long, value_enum, value_name = "VALUE", conflicts_with = "json")]
    pub print: Option<PlainValue>,
}

/// The values `--print` writes alone on a line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum PlainValue {
    TorchCudaArchList,
    CmakeCudaArchitectures,
    NvccFlags,
    Sass,
    Ptx,
}

impl PlainValue {
    fn of(self, r: &ArchsReport) -> String {
        match self {
            PlainValue::TorchCudaArchList => r.torch_cuda_arch_list.clone(),
            PlainValue::CmakeCudaArchitectures => r.cmake_cuda_architectures.clone(),
            PlainValue::NvccFlags => r.gencode.join(" "),
            PlainValue::Sass => r.sass.join(" "),
            PlainValue::Ptx => r.ptx.join(" "),
        }
    }
}

pub fn run(args: &ArchsArgs) -> Result<Exit> {
    if args.list_gpus {
        return list_gpus(args.output.json);
    }
    let arch = args
        .arch
        .clone()
        .context("--arch SPEC is required (or --list-gpus)")?;
    let request = PlanRequest {
        arch,
        torch: args.torch.clone(),
        cuda: args.cuda.clone(),
        gpus: args.gpus.clone(),
        driver: args.driver.clone(),
    };
    let mut report = plan_report(&request)?;
    if let Some(src) = &args.src {
        let images: Vec<String> = report.sass.iter().chain(&report.ptx).cloned().collect();
        report.last_build =
            crate::build_ext::insight::last_build(&SourceSpec::parse(src)?, &images)?;
        if report.last_build.is_none() {
            report.notes.push(format!(
                "no build of {src} is recorded: build it once (build-ext, port-extension) and archs shows what each arch cost"
            ));
        }
    }
    match args.print {
        Some(value) => crate::outln!("{}", value.of(&report)),
        None => emit(
            args.output.json,
            documents::ARCHS,
            &report,
            ArchsReport::table,
        )?,
    }
    Ok(Exit::Success)
}

/// `archs --list-gpus`: every GPU row, for "unknown GPU" answers and scripts.
fn list_gpus(json: bool) -> Result<Exit> {
    let gpus: Vec<serde_json::Value> = kb()
        .gpus
        .iter()
        .map(|g| {
            serde_json::json!({
                "name": g.name, "cc": g.cc, "segment": g.segment, "aliases": g.aliases,
            })
        })
        .collect();
    emit(
        json,
        documents::GPUS,
        &serde_json::json!({ "gpus": gpus }),
        |_| crate::kb::gpu_models::gpu_table(),
    )?;
    Ok(Exit::Success)
}
