//! `cargo xtask kernels --arch SPEC [--cuda VER] [--json]`: build archsmith's test kernels for every
//! requested arch each supports, audit every binary against the plan, and run them when there is a
//! GPU ([`crate::kernels::run`]).

use crate::kernels::run::{run as run_kernels, KernelsReport};
use crate::output::{documents, emit, Exit, Table};
use crate::version::Version;
use anyhow::Result;

#[derive(Debug, clap::Args)]
pub struct KernelsArgs {
    /// Archs to build: `7.5,8.9,9.0+PTX`, `8.0;9.0a`, `Hopper` … (as `cargo xtask archs` reads them).
    #[arg(long = "arch", value_name = "SPEC")]
    pub arch: crate::arch::spec::ArchSpec,
    /// CUDA release to compile with (default: the newest toolchain archsmith has installed, else the newest
    /// CUDA the knowledge base knows, installed from PyPI).
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::cuda_release)]
    pub cuda: Option<Version>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

pub fn run(args: &KernelsArgs) -> Result<Exit> {
    let report = run_kernels(&args.arch, args.cuda.as_ref())?;
    emit(args.output.json, documents::KERNELS, &report, render)?;
    Ok(Exit::passed(report.ok))
}

fn render(r: &KernelsReport) -> String {
    let mut out = format!(
        "CUDA {} (nvcc {}) at {}\n{}; CMAKE_CUDA_ARCHITECTURES={}\nbuild: {}\n",
        r.cuda,
        r.nvcc_version,
        r.cuda_home.display(),
        r.cmake,
        r.cmake_cuda_architectures,
        r.build_dir.display()
    );
    match &r.gpu {
        Some(g) => out.push_str(&format!(
            "GPU: {} (compute capability {}, driver {})\n",
            g.name, g.cc, g.driver
        )),
        None => out.push_str(
            "GPU: none (nvidia-smi found no GPU): kernels are built and audited, not run\n",
        ),
    }
    out.push('\n');
    let mut t = Table::new([
        "KERNEL",
        "BUILT FOR",
        "IMAGES (read from the fatbin)",
        "AUDIT",
        "RUN",
    ]);
    for k in &r.kernels {
        t.row([
            k.name.clone(),
            if k.built_for.is_empty() {
                "-".into()
            } else {
                k.built_for.join(" ")
            },
            if k.found.is_empty() {
                "-".into()
            } else {
                k.found.join(" ")
            },
            k.audit.clone(),
            k.run.clone(),
        ]);
    }
    out.push_str(&t.render());
    // One line per kernel and reason: the archs that share it are listed together.
    let mut skips: Vec<(&str, Vec<String>, &str)> = Vec::new();
    for k in &r.kernels {
        for s in &k.skipped {
            match skips
                .iter_mut()
                .find(|(n, _, why)| *n == k.name && *why == s.reason)
            {
                Some((_, archs, _)) => archs.push(s.arch.to_string()),
                None => skips.push((&k.name, vec![s.arch.to_string()], &s.reason)),
            }
        }
    }
    if !skips.is_empty() {
        out.push_str("\nskipped:\n");
        let mut t = Table::headerless();
        for (name, archs, why) in skips {
            t.row([format!("  {name}"), archs.join(" "), why.to_string()]);
        }
        out.push_str(&t.render());
    }
    if let Some(d) = &r.no_image_demo {
        out.push_str(&format!(
            "\nno-image check (f32_elementwise built without an image for this GPU): {} — {}\n",
            if d.passed {
                "caught and explained"
            } else {
                "NOT caught as expected"
            },
            d.line
        ));
    }
    out.push_str(if r.ok {
        "\nall built kernels carry exactly the planned images\n"
    } else {
        "\nFAILED: see AUDIT/RUN above\n"
    });
    out
}
