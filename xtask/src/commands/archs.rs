//! `cargo xtask archs`: plan an arch list — what to export, which nvcc flags torch will pass, what
//! CMake wants, and whether named GPUs will run the result ([`crate::arch::advice::plan_report`]).

use crate::arch::advice::{plan_report, ArchsReport, PlanRequest, ReleaseChoice};
use crate::kb::kb;
use crate::output::{documents, emit, Exit, Table};
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
    let report = plan_report(&request)?;
    match args.print {
        Some(value) => crate::outln!("{}", value.of(&report)),
        None => emit(args.output.json, documents::ARCHS, &report, render)?,
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
        |_| {
            let mut t = Table::new(["GPU", "CC", "SEGMENT", "ALSO"]);
            for g in &kb().gpus {
                t.row([
                    g.name.clone(),
                    g.cc.clone(),
                    g.segment.clone(),
                    g.aliases.join(", "),
                ]);
            }
            t.render()
        },
    )?;
    Ok(Exit::Success)
}

pub fn render(r: &ArchsReport) -> String {
    let mut out = String::new();
    let assumed = |c: &ReleaseChoice| match (c.assumed, c.from_torch) {
        (true, _) => " (newest known)",
        (_, true) => " (its PyPI default)",
        _ => "",
    };
    out.push_str(&format!(
        "archs {}  for torch {}{}, CUDA {}{}\n\n",
        r.input,
        r.torch.version,
        assumed(&r.torch),
        r.cuda.version,
        assumed(&r.cuda)
    ));
    let mut t = Table::headerless();
    t.row(["TORCH_CUDA_ARCH_LIST", r.torch_cuda_arch_list.as_str()]);
    t.row(["SASS".to_string(), r.sass.join(" ")]);
    t.row([
        "PTX".to_string(),
        if r.ptx.is_empty() {
            "none".to_string()
        } else {
            r.ptx.join(" ")
        },
    ]);
    t.row([
        "CMAKE_CUDA_ARCHITECTURES",
        r.cmake_cuda_architectures.as_str(),
    ]);
    for (i, g) in r.gencode.iter().enumerate() {
        t.row([if i == 0 { "nvcc flags" } else { "" }, g.as_str()]);
    }
    out.push_str(&t.render());
    out.push('\n');
    let mut c = Table::new(["consumer", "input as written", "exported list"]);
    for rep in &r.consumers {
        c.row([
            rep.consumer,
            if rep.accepts_input {
                "accepted"
            } else {
                "rejected"
            },
            if rep.accepts_exported {
                "accepted"
            } else {
                "rejected"
            },
        ]);
    }
    out.push_str(&c.render());
    for rep in r
        .consumers
        .iter()
        .filter(|c| !c.accepts_input || !c.accepts_exported)
    {
        let detail = if rep.accepts_input {
            &rep.exported_detail
        } else {
            &rep.input_detail
        };
        out.push_str(&format!("  {}: {}\n", rep.consumer, detail));
    }
    if let Some(gpus) = &r.gpus {
        out.push('\n');
        let mut g = Table::new(["GPU", "CC", "runs", "via", "why"]);
        for v in gpus {
            g.row([
                v.name.clone(),
                v.cc.to_string(),
                if v.runs { "yes" } else { "NO" }.to_string(),
                v.via.clone().unwrap_or_else(|| "-".into()),
                v.reason.clone(),
            ]);
        }
        out.push_str(&g.render());
    }
    if !r.notes.is_empty() {
        out.push('\n');
        for n in &r.notes {
            out.push_str(&format!("note: {n}\n"));
        }
    }
    out
}
