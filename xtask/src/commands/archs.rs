//! `cargo xtask archs`: plan an arch list — what to export, which nvcc flags torch will pass, what
//! CMake wants, and whether named GPUs will run the result.

use crate::arch::compat::{runs_on, PtxJit, Verdict};
use crate::arch::spec::{consumer_reports, ConsumerReport, Plan, PlanContext};
use crate::arch::Cc;
use crate::kb::{kb, KnowledgeBase};
use crate::output::{emit, Table};
use crate::version::Version;
use anyhow::{bail, Result};
use serde::Serialize;

#[derive(Debug, clap::Args)]
pub struct ArchsArgs {
    /// Archs to build: `7.5,8.9,9.0+PTX`, `8.0;8.6`, `Hopper`, `9.0a`, `sm_120` …
    #[arg(long = "arch", value_name = "SPEC")]
    pub arch: String,
    /// torch release whose rules apply (default: the newest known).
    #[arg(long, value_name = "VER")]
    pub torch: Option<Version>,
    /// CUDA release whose nvcc will compile (default: the newest known).
    #[arg(long, value_name = "VER")]
    pub cuda: Option<Version>,
    /// A GPU to check the plan against (name such as "RTX 5090", "H100", or a compute capability).
    #[arg(long = "gpu", value_name = "NAME")]
    pub gpus: Vec<String>,
    /// The NVIDIA driver that would run the code (decides whether PTX can be JIT-compiled).
    #[arg(long, value_name = "VER")]
    pub driver: Option<Version>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct ReleaseChoice {
    pub version: String,
    /// True when the user gave no version and the newest known release was assumed.
    pub assumed: bool,
}

#[derive(Debug, Serialize)]
pub struct GpuVerdict {
    pub name: String,
    pub cc: Cc,
    pub runs: bool,
    pub via: Option<String>,
    pub reason: String,
}

#[derive(Debug, Serialize)]
pub struct ArchsReport {
    pub input: String,
    pub torch: ReleaseChoice,
    pub cuda: ReleaseChoice,
    pub torch_cuda_arch_list: String,
    pub gencode: Vec<String>,
    pub sass: Vec<String>,
    pub ptx: Vec<String>,
    pub cmake_cuda_architectures: String,
    pub notes: Vec<String>,
    pub consumers: Vec<ConsumerReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<GpuVerdict>>,
}

pub fn run(args: &ArchsArgs) -> Result<i32> {
    let kb = kb();
    let report = plan_report(kb, args)?;
    emit(args.json, &report, render)?;
    Ok(0)
}

pub fn plan_report(kb: &KnowledgeBase, args: &ArchsArgs) -> Result<ArchsReport> {
    let ctx = PlanContext::new(kb, args.torch.clone(), args.cuda.clone());
    let plan = match Plan::parse(kb, &ctx, &args.arch) {
        Ok(p) => p,
        Err(e) => bail!("invalid --arch `{}`:\n{e}", args.arch),
    };
    let mut notes = Vec::new();
    if ctx.torch_assumed || ctx.cuda_assumed {
        notes.push(format!(
            "no {} given: planned for the newest known {}; pass them to plan for your versions",
            match (ctx.torch_assumed, ctx.cuda_assumed) {
                (true, true) => "--torch/--cuda",
                (true, false) => "--torch",
                _ => "--cuda",
            },
            match (ctx.torch_assumed, ctx.cuda_assumed) {
                (true, true) => format!("torch {} and CUDA {}", ctx.torch, ctx.cuda),
                (true, false) => format!("torch {}", ctx.torch),
                _ => format!("CUDA {}", ctx.cuda),
            }
        ));
    }
    notes.extend(plan.notes.iter().cloned());
    if plan.has_family_targets() {
        notes.push("`f` targets: torch's cpp_extension rejects them in TORCH_CUDA_ARCH_LIST; pass them as -gencode in extra_compile_args['nvcc'] (which disables torch's own arch flags) or build through CMake".into());
    }
    let gpus = if args.gpus.is_empty() {
        None
    } else {
        Some(gpu_verdicts(
            kb,
            &ctx,
            &plan,
            &args.gpus,
            args.driver.as_ref(),
        )?)
    };
    Ok(ArchsReport {
        input: args.arch.clone(),
        torch: ReleaseChoice {
            version: ctx.torch.to_string(),
            assumed: ctx.torch_assumed,
        },
        cuda: ReleaseChoice {
            version: ctx.cuda.to_string(),
            assumed: ctx.cuda_assumed,
        },
        torch_cuda_arch_list: plan.torch_cuda_arch_list(),
        gencode: plan.gencode(),
        sass: plan.sass().iter().map(|a| a.sm()).collect(),
        ptx: plan.ptx().iter().map(|a| a.compute()).collect(),
        cmake_cuda_architectures: plan.cmake_cuda_architectures(),
        consumers: consumer_reports(kb, &ctx, &args.arch, &plan),
        notes,
        gpus,
    })
}

/// Resolves a `--gpu` argument: a known GPU name, or a compute capability such as `8.9`.
pub fn resolve_gpu(kb: &KnowledgeBase, query: &str) -> Result<(String, Cc)> {
    if let Ok(cc) = query.parse::<Cc>() {
        return Ok((format!("CC {cc}"), cc));
    }
    match kb.gpu(query) {
        Some(g) => Ok((g.name.clone(), g.cc.parse()?)),
        None => {
            let q = crate::kb::normalize_gpu_name(query);
            let mut close: Vec<&str> = kb
                .gpus
                .iter()
                .filter(|g| {
                    let n = crate::kb::normalize_gpu_name(&g.name);
                    !q.is_empty() && (n.contains(&q) || q.contains(&n))
                })
                .map(|g| g.name.as_str())
                .collect();
            close.truncate(6);
            let hint = if close.is_empty() {
                String::new()
            } else {
                format!(" Did you mean: {}?", close.join(", "))
            };
            bail!("unknown GPU `{query}`.{hint} Give a name from `cargo xtask archs --help`'s knowledge base (e.g. \"RTX 4090\", \"H100\", \"Jetson Orin\") or its compute capability, e.g. --gpu 8.9")
        }
    }
}

pub fn gpu_verdicts(
    kb: &KnowledgeBase,
    ctx: &PlanContext,
    plan: &Plan,
    queries: &[String],
    driver: Option<&Version>,
) -> Result<Vec<GpuVerdict>> {
    let jit = PtxJit {
        driver: driver.cloned(),
        ptx_min_driver: kb
            .cuda_row(&ctx.cuda)
            .and_then(|r| r.min_driver_linux.clone()),
        ptx_cuda: Some(ctx.cuda.clone()),
    };
    let images = plan.images();
    queries
        .iter()
        .map(|q| {
            let (name, cc) = resolve_gpu(kb, q)?;
            let Verdict {
                runs,
                via,
                mut reason,
            } = runs_on(&images, cc, &jit);
            if !runs {
                if let Some(limit) = cuda_limit(kb, &ctx.cuda, cc) {
                    reason = format!("{reason}. But {limit}");
                }
            }
            Ok(GpuVerdict {
                name,
                cc,
                runs,
                via: via.map(|i| i.name()),
                reason,
            })
        })
        .collect()
}

/// When the chosen CUDA cannot compile for `cc` at all, the usual fix ("add cc") is impossible;
/// says which CUDA releases can.
fn cuda_limit(kb: &KnowledgeBase, cuda: &Version, cc: Cc) -> Option<String> {
    let arch = crate::arch::Arch::plain(cc.major, cc.minor);
    if kb.cuda_supports(cuda, arch) {
        return None;
    }
    Some(match kb.target(arch) {
        Some(row) => match &row.last_cuda {
            Some(last) if *last < *cuda => format!(
                "CUDA {cuda} cannot compile for CC {cc} (nvcc supports {} from CUDA {} through {last}): build with CUDA {last} or older",
                arch.sm(),
                row.first_cuda
            ),
            _ => format!(
                "CUDA {cuda} cannot compile for CC {cc} (nvcc supports {} from CUDA {}): use CUDA {} or newer",
                arch.sm(),
                row.first_cuda,
                row.first_cuda
            ),
        },
        None => format!("no CUDA release compiles for CC {cc}"),
    })
}

pub fn render(r: &ArchsReport) -> String {
    let mut out = String::new();
    let assumed = |c: &ReleaseChoice| if c.assumed { " (newest known)" } else { "" };
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
