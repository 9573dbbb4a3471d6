//! `bench stable-port`: one stable-ABI build of a real extension against the ordinary build of
//! every torch variant the stable wheel covers — the matrix a kernel hub builds, one variant per
//! torch × CUDA — in one run, each from an empty output dir: wall time, CPU time (this process
//! and its children) and the bytes of the wheels to publish.
//!
//! Both sources are the recipe's ports (`port-extension NAME` and `--stable-abi`, ported in their
//! work trees without building); each variant's env is made before the timing starts. PyPI has
//! one CUDA variant per torch release (its default), so each release is one variant here; a hub
//! that also builds download.pytorch.org's other CUDA variants builds more.

use super::cpu_s;
use crate::build_ext::{Request, SourceSpec};
use crate::build_output::progress::Mode;
use crate::port_extension::{recipe::Recipe, RunMode};
use crate::version::Version;
use anyhow::{anyhow, Context, Result};
use fs_err as fs;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct StablePortRequest {
    pub recipe: Recipe,
    pub arch: crate::arch::spec::ArchSpec,
    /// The torch releases the ordinary builds target (the stable build uses the newest's headers).
    pub torch: Vec<Version>,
    pub out: PathBuf,
    /// Port and make every env, build nothing (a warm-up: the downloads are not timed anyway).
    pub prepare_only: bool,
}

/// One build.
#[derive(Debug, Serialize)]
pub struct VariantBuild {
    /// `stable (torch 2.15.0 headers)` or `torch 2.11.0`.
    pub label: String,
    pub torch: String,
    /// The CUDA the build compiled with.
    pub cuda: String,
    pub wall_s: f64,
    pub cpu_s: f64,
    pub wheel: Option<String>,
    pub wheel_bytes: u64,
    /// Why it did not build.
    pub failure: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct StablePortReport {
    pub recipe: String,
    pub torch_cuda_arch_list: String,
    pub stable: VariantBuild,
    pub ordinary: Vec<VariantBuild>,
    pub ordinary_wall_s: f64,
    pub ordinary_cpu_s: f64,
    pub ordinary_bytes: u64,
}

pub fn run(req: &StablePortRequest) -> Result<Option<StablePortReport>> {
    let newest = req
        .torch
        .iter()
        .max()
        .ok_or_else(|| anyhow!("--torch names no release"))?
        .clone();
    let ordinary_tree = port(req, None, &newest)?.work_tree;
    let namespace = crate::port_extension::stable_namespace(None, None, &req.recipe);
    let stable_port = port(req, Some(&namespace), &newest)?;
    let target = stable_port
        .stable_abi
        .map(|s| s.torch_target_macro)
        .ok_or_else(|| anyhow!("the stable port of {} states no target", req.recipe.name))?;
    let stable_tree = stable_port.work_tree;
    // Every env first, so that no timing includes a download.
    for v in &req.torch {
        crate::build_ext::prepare(&target_env(v), &req.arch, None)?;
    }
    let prepared = crate::build_ext::prepare(&target_env(&newest), &req.arch, Some(&target))?;
    if req.prepare_only {
        crate::errln!(
            "bench: ported, {} env(s) ready; --prepare-only builds nothing",
            req.torch.len()
        );
        return Ok(None);
    }
    let _ = fs::remove_dir_all(&req.out);
    fs::create_dir_all(&req.out)?;
    let stable = build(req, &stable_tree, &newest, Some(&target), "stable")?;
    let mut ordinary = Vec::new();
    for v in &req.torch {
        ordinary.push(build(req, &ordinary_tree, v, None, "ordinary")?);
    }
    Ok(Some(StablePortReport {
        recipe: req.recipe.name.clone(),
        torch_cuda_arch_list: prepared.plan.torch_cuda_arch_list(),
        ordinary_wall_s: ordinary.iter().map(|b| b.wall_s).sum(),
        ordinary_cpu_s: ordinary.iter().map(|b| b.cpu_s).sum(),
        ordinary_bytes: ordinary.iter().map(|b| b.wheel_bytes).sum(),
        stable,
        ordinary,
    }))
}

fn target_env(torch: &Version) -> crate::python::TargetEnv {
    crate::python::TargetEnv {
        torch: Some(torch.clone()),
        ..Default::default()
    }
}

/// The recipe ported in its work tree (no build): the outcome names the tree to build from and,
/// for a stable port, the `TORCH_TARGET_VERSION` its build gets.
fn port(
    req: &StablePortRequest,
    stable: Option<&str>,
    torch: &Version,
) -> Result<crate::port_extension::Outcome> {
    let r = crate::port_extension::Request {
        recipe: req.recipe.clone(),
        src: None,
        arch: None,
        target: target_env(torch),
        mode: RunMode::DryRun,
        progress: Mode::Quiet,
        with_deps: false,
        own_arch_flags: false,
        skip_missing_submodules: false,
        run_tests: false,
        stable_abi: stable.map(str::to_string),
        from_torch: None,
        jobs: None,
        pool: None,
    };
    crate::port_extension::run(&r)?.map_err(|f| {
        anyhow!(
            "porting {}: {}",
            req.recipe.name,
            f.message(&req.recipe.name)
        )
    })
}

/// One clean build from an empty output dir.
fn build(
    req: &StablePortRequest,
    tree: &Path,
    torch: &Version,
    stable_target: Option<&str>,
    kind: &str,
) -> Result<VariantBuild> {
    let label = match stable_target {
        Some(_) => format!("stable (torch {torch}'s headers)"),
        None => format!("torch {torch}"),
    };
    let request = Request {
        source: SourceSpec::Dir(tree.to_path_buf()),
        arch: req.arch.clone(),
        target: target_env(torch),
        out: req.out.join(format!("{kind}-{torch}")),
        cache: None,
        jobs: None,
        progress: Mode::Quiet,
        own_arch_flags: false,
        serial_extensions: false,
        skip_missing_submodules: false,
        stable_abi_target: stable_target.map(str::to_string),
        pool: None,
        prepared: None,
        cpu_only: false,
        dist: None,
    };
    crate::errln!("bench: building {label}");
    let (t, cpu) = (Instant::now(), cpu_s());
    let built = crate::build_ext::run(&request)?;
    let (wall_s, cpu_s) = (t.elapsed().as_secs_f64(), cpu_s() - cpu);
    let mut row = VariantBuild {
        label,
        torch: torch.to_string(),
        cuda: String::new(),
        wall_s,
        cpu_s,
        wheel: None,
        wheel_bytes: 0,
        failure: None,
    };
    match built {
        Ok(o) => {
            row.cuda = o.record.cuda.clone();
            row.wheel_bytes = fs::metadata(&o.wheel)
                .with_context(|| format!("{}", o.wheel.display()))?
                .len();
            row.wheel = o
                .wheel
                .file_name()
                .map(|n| n.to_string_lossy().into_owned());
        }
        Err(f) => row.failure = Some(f.message.lines().next().unwrap_or_default().to_string()),
    }
    crate::errln!(
        "bench: {} {:.1} s ({:.0} CPU-s)",
        row.label,
        row.wall_s,
        row.cpu_s
    );
    Ok(row)
}

impl StablePortReport {
    pub fn table(&self) -> String {
        let mut t = crate::output::Table::new(["build", "CUDA", "wall", "CPU", "wheel", "bytes"]);
        for b in std::iter::once(&self.stable).chain(&self.ordinary) {
            t.row([
                b.label.clone(),
                b.cuda.clone(),
                format!("{:.1} s", b.wall_s),
                format!("{:.0} s", b.cpu_s),
                b.wheel
                    .clone()
                    .or_else(|| b.failure.clone())
                    .unwrap_or_default(),
                b.wheel_bytes.to_string(),
            ]);
        }
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        format!(
            "{}{} ({}): {} ordinary builds {:.1} s wall, {:.0} CPU-s, {} bytes; one stable build {:.1} s, {:.0} CPU-s, {} bytes ({:.1}× wall, {:.1}× CPU, {:.1}× bytes)\n",
            t.render(),
            self.recipe,
            self.torch_cuda_arch_list,
            self.ordinary.len(),
            self.ordinary_wall_s,
            self.ordinary_cpu_s,
            self.ordinary_bytes,
            self.stable.wall_s,
            self.stable.cpu_s,
            self.stable.wheel_bytes,
            ratio(self.ordinary_wall_s, self.stable.wall_s),
            ratio(self.ordinary_cpu_s, self.stable.cpu_s),
            ratio(self.ordinary_bytes as f64, self.stable.wheel_bytes as f64),
        )
    }
}
