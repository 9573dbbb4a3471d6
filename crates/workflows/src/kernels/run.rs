//! One `kernels` run: plan, build, audit every binary, run on the GPU when there is one, report.

use super::{
    arch_without_image_for, audit_images, build, compare_images, detect_gpu, kernels_dir,
    load_manifest, missing_per_container, run_binary, select, Build, Gpu, RunResult, Selection,
    Skip,
};
use crate::arch::compat::{self, Image};
use crate::arch::spec::{Plan, PlanContext};
use crate::cuda_arch::Arch;
use crate::kb::kb;
use crate::output::Table;
use crate::paths::{cache_dir, toolchains_dir};
use crate::toolchain::{self, buildtools, nvidia_wheels, Toolchain};
use crate::version::Version;
use anyhow::{bail, Result};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::PathBuf;

#[derive(Debug, Serialize)]
pub struct KernelReport {
    pub name: String,
    pub built_for: Vec<String>,
    pub skipped: Vec<Skip>,
    pub binary: Option<PathBuf>,
    pub expected: Vec<String>,
    pub found: Vec<String>,
    /// `ok`, `not built`, or what differs.
    pub audit: String,
    pub audit_ok: bool,
    /// `skipped: no GPU`, `not built`, or the binary's result line.
    pub run: String,
    pub run_result: Option<RunResult>,
}

#[derive(Debug, Serialize)]
pub struct KernelsReport {
    pub cuda: Version,
    pub nvcc_version: Version,
    pub cuda_home: PathBuf,
    pub cmake: String,
    pub cmake_cuda_architectures: String,
    pub build_dir: PathBuf,
    pub audited_with: &'static str,
    pub gpu: Option<Gpu>,
    pub kernels: Vec<KernelReport>,
    /// With a GPU: the binary built with no image for it, and how it failed.
    pub no_image_demo: Option<RunResult>,
    pub ok: bool,
}

/// Builds the test kernels for `spec` with CUDA `cuda` (default: the newest installed toolchain, else
/// the newest CUDA the knowledge base knows), audits every binary against the plan, and runs them
/// against their CPU references when there is a GPU. `report.ok` is the verdict.
pub fn run(spec: &str, cuda: Option<&Version>) -> Result<KernelsReport> {
    let cuda = match cuda {
        Some(c) => c.clone(),
        None => default_cuda()?,
    };
    let plan = plan_for(&cuda, spec)?;
    let tc = toolchain::ensure(&cuda)?;
    let tools = build_tools();
    let source_dir = kernels_dir();
    let selections = select(&load_manifest(&source_dir)?, &plan);
    let gpu = detect_gpu();
    let no_image_arch = gpu
        .as_ref()
        .and_then(|g| arch_without_image_for(g.cc, &kb().cuda_targets(&cuda)));

    let mut build_dir = build_dir_for(&source_dir, &cuda, &plan);
    if tools.is_none() {
        // Never mixed with a CMake tree of the same plan.
        build_dir.set_extension("nvcc");
    }
    // One build per tree at a time: CMake and ninja do not share a build directory.
    let _lock = crate::cache::lock(&build_dir.with_extension("lock"), &mut || {
        crate::errln!(
            "archsmith: waiting for another kernels build in {}",
            build_dir.display()
        )
    })?;

    crate::errln!(
        "archsmith: building {} kernels with nvcc {} for {} in {}",
        selections.iter().filter(|s| !s.targets.is_empty()).count(),
        tc.nvcc_version,
        plan.cmake_cuda_architectures(),
        build_dir.display()
    );
    build(
        &Build {
            source_dir: &source_dir,
            build_dir: &build_dir,
            toolchain: &tc,
            tools: tools.as_ref(),
            plan: &plan,
            no_image_arch,
        },
        &selections,
    )?;

    let mut reports = Vec::new();
    for s in &selections {
        reports.push(report_kernel(&tc, &build_dir, s, gpu.as_ref())?);
    }
    let no_image_demo = match (&gpu, no_image_arch) {
        (Some(g), Some(a)) => Some(no_image_demo(&tc, &build_dir, g, a)?),
        _ => None,
    };
    let ok = reports
        .iter()
        .all(|r| r.audit_ok && r.run_result.as_ref().is_none_or(|x| x.passed))
        && no_image_demo.as_ref().is_none_or(|r| r.passed);
    let report = KernelsReport {
        cuda: tc.cuda.clone(),
        nvcc_version: tc.nvcc_version.clone(),
        cuda_home: tc.cuda_home.clone(),
        cmake: match &tools {
            Some(t) => format!(
                "cmake {} + ninja {} ({})",
                t.cmake_version, t.ninja_version, t.source
            ),
            None => "none: nvcc alone (no cmake and ninja on this machine)".to_string(),
        },
        cmake_cuda_architectures: plan.cmake_cuda_architectures(),
        build_dir,
        audited_with: "archsmith::binary (fatbin headers)",
        gpu,
        kernels: reports,
        no_image_demo,
        ok,
    };
    Ok(report)
}

/// cmake and ninja, or `None`: an air-gapped GPU host may have no cmake, the kernels are single
/// files, and a missing build tool must not read as a failed GPU.
fn build_tools() -> Option<buildtools::BuildTools> {
    match buildtools::ensure(&cache_dir().join("tools"), &mut |m| {
        crate::errln!("archsmith: {m}")
    }) {
        Ok(t) => Some(t),
        Err(e) => {
            crate::errln!("archsmith: {e:#}\narchsmith: building the test kernels with nvcc alone (each is one .cu file)");
            None
        }
    }
}

/// The build tree of one checkout of kernels/, CUDA release and arch list. CMake ties a build tree
/// to one source tree, so each checkout gets its own (a second clone or worktree would otherwise
/// fail with "does not match the source … used to generate cache").
fn build_dir_for(source_dir: &std::path::Path, cuda: &Version, plan: &Plan) -> PathBuf {
    use sha2::{Digest, Sha256};
    let slug = plan.cmake_cuda_architectures().replace(';', "_");
    let canonical = source_dir
        .canonicalize()
        .unwrap_or_else(|_| source_dir.to_path_buf());
    let digest = Sha256::digest(canonical.to_string_lossy().as_bytes());
    let source_key: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    cache_dir()
        .join("builds")
        .join("kernels")
        .join(format!("src-{source_key}"))
        .join(format!("cuda-{cuda}"))
        .join(slug)
}

/// On a GPU: the binary built with no image for it, run; passing means it exited 3 after
/// catching and explaining cudaErrorNoKernelImageForDevice.
fn no_image_demo(
    tc: &Toolchain,
    build_dir: &std::path::Path,
    gpu: &Gpu,
    arch: Arch,
) -> Result<RunResult> {
    let bin = build_dir.join("f32_elementwise_noimage");
    let images: BTreeSet<Image> = [Image::sass(arch)].into();
    let mut r = run_binary(tc, &bin, &images, gpu)?;
    r.passed = r.line.starts_with("NO_IMAGE ");
    Ok(r)
}

/// The newest CUDA archsmith has installed, else the machine's own toolkit (CUDA_HOME,
/// /usr/local/cuda*, nvcc on PATH: what an air-gapped host has), else the newest the knowledge
/// base knows (installed from PyPI).
fn default_cuda() -> Result<Version> {
    let installed = std::fs::read_dir(toolchains_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| nvidia_wheels::load(&e.path()).ok().flatten())
        .map(|tc| tc.cuda)
        .max();
    let system = || {
        toolchain::system::Search::from_env()
            .probe(None)
            .iter()
            .find_map(|p| p.toolchain())
            .map(|tc| tc.cuda)
    };
    Ok(installed
        .or_else(system)
        .unwrap_or_else(|| kb().releases.newest_cuda.major_minor()))
}

/// Parses `spec` and checks every arch against what this CUDA's nvcc compiles (torch's own rules do not
/// apply to the test kernels).
fn plan_for(cuda: &Version, spec: &str) -> Result<Plan> {
    let ctx = PlanContext::new(None, Some(cuda.clone()));
    let plan = Plan::parse_unvalidated(&ctx, spec)?;
    let unsupported: Vec<Arch> = plan
        .sass()
        .into_iter()
        .filter(|a| !kb().cuda_supports(cuda, *a))
        .collect();
    if !unsupported.is_empty() {
        let names = unsupported
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        bail!(
            "CUDA {cuda}'s nvcc does not compile {names}; it compiles {}. Drop them, or choose another --cuda",
            kb().cuda_targets(cuda).iter().map(|a| a.to_string()).collect::<Vec<_>>().join(" ")
        );
    }
    Ok(plan)
}

fn report_kernel(
    tc: &toolchain::Toolchain,
    build_dir: &std::path::Path,
    s: &Selection,
    gpu: Option<&Gpu>,
) -> Result<KernelReport> {
    let name = s.kernel.name.clone();
    let built_for: Vec<String> = s.targets.iter().map(|t| t.to_string()).collect();
    let expected = s.expected_images();
    if s.targets.is_empty() {
        return Ok(KernelReport {
            name,
            built_for,
            skipped: s.skipped.clone(),
            binary: None,
            expected: Vec::new(),
            found: Vec::new(),
            audit: "not built".into(),
            audit_ok: true,
            run: "not built".into(),
            run_result: None,
        });
    }
    let binary = build_dir.join(&name);
    let (found, audit, audit_ok) = match audit(&binary, &expected) {
        Ok((found, Ok(()))) => (found, "ok".to_string(), true),
        Ok((found, Err(diff))) => (found, diff, false),
        Err(e) => (BTreeSet::new(), format!("{e:#}"), false),
    };
    let (run, run_result) = match gpu {
        None => ("skipped: no GPU".to_string(), None),
        Some(g) => {
            let images: Vec<Image> = found.iter().copied().collect();
            let verdict = compat::runs_on(&images, g.cc, &compat::PtxJit::default());
            if verdict.runs {
                let r = run_binary(tc, &binary, &found, g)?;
                (format!("{} ({})", r.line, r.served_by), Some(r))
            } else {
                // The plan has no image for this GPU: running would only show the error the
                // no-image check below demonstrates on purpose.
                (format!("skipped: {}", verdict.reason), None)
            }
        }
    };
    Ok(KernelReport {
        name,
        built_for,
        skipped: s.skipped.clone(),
        binary: Some(binary),
        expected: expected.iter().map(Image::name).collect(),
        found: found.iter().map(Image::name).collect(),
        audit,
        audit_ok,
        run,
        run_result,
    })
}

/// The binary's images, and whether they are exactly the planned ones in every container.
fn audit(
    binary: &std::path::Path,
    expected: &BTreeSet<Image>,
) -> Result<(BTreeSet<Image>, Result<(), String>)> {
    let found = audit_images(binary)?;
    if let Err(diff) = compare_images(expected, &found) {
        return Ok((found, Err(diff)));
    }
    let uneven = missing_per_container(binary, expected)?;
    if !uneven.is_empty() {
        return Ok((found, Err(format!("missing {}", uneven.join(", ")))));
    }
    Ok((found, Ok(())))
}

impl KernelsReport {
    /// The aligned table people read (`--json` prints the report itself).
    pub fn table(&self) -> String {
        let r = self;
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
        r.skipped_lines(&mut out);
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

    /// One line per kernel and reason a build skipped: the archs that share it together.
    fn skipped_lines(&self, out: &mut String) {
        let r = self;
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
    }
}
