//! `cargo xtask doctor`: this machine as a build host and as a runtime, and — for a GPU or driver
//! you name — which torch releases and CUDA variants would run there.
//!
//! It only looks; it installs nothing. Everything it finds is compared with the knowledge base:
//! each nvcc's host-compiler ceiling, each driver's CUDA ceiling, each torch's built archs.

use crate::arch::compat::{runs_on, Image, PtxJit};
use crate::arch::{Arch, Cc};
use crate::commands::archs::resolve_gpu;
use crate::kb::{kb, KnowledgeBase};
use crate::output::{emit, Table};
use crate::paths;
use crate::process::{which, Cmd};
use crate::version::Version;
use anyhow::Result;
use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// A GPU to plan for (name or compute capability); answers which torch builds would run on it.
    #[arg(long = "gpu", value_name = "NAME")]
    pub gpus: Vec<String>,
    /// An NVIDIA driver version to plan for (e.g. 470.161.03), instead of or besides this machine's.
    #[arg(long, value_name = "VER")]
    pub driver: Option<Version>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct Driver {
    pub version: Version,
    pub source: String,
    /// Newest CUDA whose GA release this driver meets natively.
    pub cuda_native_max: Option<String>,
    /// CUDA majors this driver runs through minor-version compatibility (no PTX JIT of newer PTX).
    pub cuda_minor_compat_majors: Vec<u32>,
}

#[derive(Debug, Serialize)]
pub struct Device {
    pub name: String,
    pub cc: Option<Cc>,
}

#[derive(Debug, Serialize)]
pub struct Toolkit {
    pub nvcc: PathBuf,
    pub found_via: String,
    pub release: Option<Version>,
    pub max_gcc: Option<u32>,
    pub max_clang: Option<u32>,
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct HostCompiler {
    pub name: String,
    pub path: PathBuf,
    pub major: Option<u32>,
    pub version: String,
    /// Per toolkit release: whether its nvcc accepts this compiler without -allow-unsupported-compiler.
    pub accepted_by: Vec<(String, bool)>,
}

#[derive(Debug, Serialize)]
pub struct PythonRuntime {
    pub python: PathBuf,
    pub found_via: String,
    pub info: serde_json::Value,
}

#[derive(Debug, Serialize)]
pub struct TorchOption {
    pub torch: String,
    pub variant: String,
    pub runs: bool,
    pub reason: String,
}

#[derive(Debug, Serialize)]
pub struct DoctorReport {
    pub driver: Option<Driver>,
    pub devices: Vec<Device>,
    pub toolkits: Vec<Toolkit>,
    pub host_compilers: Vec<HostCompiler>,
    pub pythons: Vec<PythonRuntime>,
    pub plan_for: Option<PlanFor>,
    pub notes: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct PlanFor {
    pub gpus: Vec<(String, Cc)>,
    pub driver: Option<Version>,
    pub torch: Vec<TorchOption>,
}

pub fn run(args: &DoctorArgs) -> Result<i32> {
    let kb = kb();
    let report = diagnose(kb, args)?;
    emit(args.json, &report, render)?;
    Ok(0)
}

pub fn diagnose(kb: &KnowledgeBase, args: &DoctorArgs) -> Result<DoctorReport> {
    let mut notes = Vec::new();
    let (driver_version, driver_source, devices) = probe_driver();
    let driver = driver_version.map(|v| describe_driver(kb, v, driver_source));
    if driver.is_none() {
        notes.push("no NVIDIA driver found (no nvidia-smi, no /proc/driver/nvidia/version): this machine can build CUDA code but not run it".into());
    }
    let toolkits = find_toolkits(kb);
    if toolkits.is_empty() {
        notes.push("no CUDA toolkit found: `cargo xtask toolchain install --cuda 13.2` provisions one from PyPI".into());
    }
    let host_compilers = find_host_compilers(&toolkits);
    let pythons = find_pythons();
    let plan_for = if args.gpus.is_empty() && args.driver.is_none() {
        None
    } else {
        let gpus = args
            .gpus
            .iter()
            .map(|g| resolve_gpu(kb, g))
            .collect::<Result<Vec<_>>>()?;
        let driver = args
            .driver
            .clone()
            .or_else(|| driver.as_ref().map(|d| d.version.clone()));
        Some(PlanFor {
            torch: torch_options(kb, &gpus, driver.as_ref()),
            gpus,
            driver,
        })
    };
    Ok(DoctorReport {
        driver,
        devices,
        toolkits,
        host_compilers,
        pythons,
        plan_for,
        notes,
    })
}

fn probe_driver() -> (Option<Version>, String, Vec<Device>) {
    if let Some(smi) = which("nvidia-smi") {
        if let Ok(out) = Cmd::new(&smi)
            .args([
                "--query-gpu=name,compute_cap,driver_version",
                "--format=csv,noheader",
            ])
            .read()
        {
            let mut devices = Vec::new();
            let mut driver = None;
            for line in out.lines() {
                let cols: Vec<&str> = line.split(',').map(str::trim).collect();
                if let [name, cc, drv] = cols.as_slice() {
                    devices.push(Device {
                        name: name.to_string(),
                        cc: cc.parse().ok(),
                    });
                    driver = driver.or_else(|| drv.parse().ok());
                }
            }
            if driver.is_some() {
                return (driver, "nvidia-smi".into(), devices);
            }
        }
    }
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  ..."
    if let Ok(text) = std::fs::read_to_string("/proc/driver/nvidia/version") {
        let v = text.split_whitespace().find_map(|w| {
            w.parse::<Version>()
                .ok()
                .filter(|v| v.parts().len() >= 2 && v.major() >= 100)
        });
        if v.is_some() {
            return (v, "/proc/driver/nvidia/version".into(), Vec::new());
        }
    }
    (None, String::new(), Vec::new())
}

/// What a driver runs: the newest CUDA whose GA minimum it meets, and the majors it runs through
/// minor-version compatibility.
pub fn describe_driver(kb: &KnowledgeBase, version: Version, source: String) -> Driver {
    let native = kb
        .cuda
        .iter()
        .filter(|c| c.min_driver_linux.as_ref().is_some_and(|m| *m <= version))
        .max_by(|a, b| a.version.cmp(&b.version))
        .map(|c| c.version.to_string());
    let compat = kb
        .cuda_majors
        .iter()
        .filter(|m| m.minor_compat_min_driver <= version)
        .map(|m| m.major)
        .collect();
    Driver {
        version,
        source,
        cuda_native_max: native,
        cuda_minor_compat_majors: compat,
    }
}

/// Every toolkit `toolchain list` knows (archsmith's and the system's), with each release's
/// host-compiler ceiling from the knowledge base.
fn find_toolkits(kb: &KnowledgeBase) -> Vec<Toolkit> {
    let found = match crate::toolchain::discover() {
        Ok(f) => f,
        Err(e) => {
            return vec![Toolkit {
                nvcc: paths::toolchains_dir(),
                found_via: "archsmith toolchains".into(),
                release: None,
                max_gcc: None,
                max_clang: None,
                error: Some(format!("{e:#}")),
            }]
        }
    };
    found
        .into_iter()
        .filter(|t| t.usable || t.cuda_home.join("bin/nvcc").exists())
        .map(|t| {
            let row = t.cuda.as_ref().and_then(|r| kb.cuda_row(r));
            let limits = t
                .nvcc_version
                .as_ref()
                .zip(row)
                .map(|(v, r)| r.host_compiler_limits(v));
            Toolkit {
                nvcc: t.cuda_home.join("bin/nvcc"),
                found_via: if t.source == "archsmith" {
                    "archsmith toolchain".into()
                } else {
                    t.note.clone()
                },
                max_gcc: limits.as_ref().and_then(|l| l.max_gcc),
                max_clang: limits.as_ref().and_then(|l| l.max_clang),
                error: (!t.usable).then(|| t.note.clone()),
                release: t.cuda,
            }
        })
        .collect()
}

fn find_host_compilers(toolkits: &[Toolkit]) -> Vec<HostCompiler> {
    let mut out = Vec::new();
    for (name, is_gcc) in [("g++", true), ("gcc", true), ("clang++", false)] {
        let Some(path) = which(name) else { continue };
        let version = Cmd::new(&path)
            .arg("-dumpversion")
            .read()
            .unwrap_or_default();
        let major = version
            .split('.')
            .next()
            .and_then(|m| m.parse::<u32>().ok());
        let accepted_by = toolkits
            .iter()
            .filter_map(|t| {
                let limit = if is_gcc { t.max_gcc } else { t.max_clang }?;
                Some((
                    t.release.as_ref()?.to_string(),
                    major.is_some_and(|m| m <= limit),
                ))
            })
            .collect();
        out.push(HostCompiler {
            name: name.into(),
            path,
            major,
            version,
            accepted_by,
        });
    }
    out
}

fn find_pythons() -> Vec<PythonRuntime> {
    let mut candidates: Vec<(PathBuf, String)> = Vec::new();
    if let Some(p) = which("python3") {
        candidates.push((p, "PATH".into()));
    }
    let mut envs: Vec<PathBuf> = std::fs::read_dir(paths::envs_dir())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin/python"))
        .filter(|p| p.exists())
        .collect();
    envs.sort();
    candidates.extend(envs.into_iter().map(|p| (p, "archsmith env".to_string())));
    let probe = paths::repo_root().join("verify/probes/torch_info.py");
    candidates
        .into_iter()
        .map(|(python, via)| {
            let info = Cmd::new(&python)
                .arg(&probe)
                .read()
                .ok()
                .and_then(|s| serde_json::from_str(&s).ok())
                .unwrap_or_else(|| serde_json::json!({"error": "the probe did not run"}));
            PythonRuntime {
                python,
                found_via: via,
                info,
            }
        })
        .collect()
}

/// For each torch release line (major.minor) and official CUDA variant: would it run on these GPUs
/// with this driver?
pub fn torch_options(
    kb: &KnowledgeBase,
    gpus: &[(String, Cc)],
    driver: Option<&Version>,
) -> Vec<TorchOption> {
    let mut lines: Vec<Version> = kb.torch.iter().map(|t| t.version.major_minor()).collect();
    lines.dedup();
    let mut out = Vec::new();
    for line in lines {
        let patches: Vec<String> = kb
            .torch
            .iter()
            .filter(|t| t.version.major_minor() == line)
            .map(|t| t.version.to_string())
            .collect();
        let mut variants: Vec<_> = kb
            .torch_variants
            .iter()
            .filter(|v| v.covers(&line))
            .collect();
        variants.sort_by(|a, b| a.cuda.cmp(&b.cuda));
        for variant in variants {
            let mut problems = Vec::new();
            if let Some(d) = driver {
                let floor = kb
                    .cuda_major(variant.cuda.major())
                    .map(|m| &m.minor_compat_min_driver);
                if let Some(floor) = floor.filter(|f| d < *f) {
                    problems.push(format!(
                        "driver {d} < {floor}, the floor for CUDA {}.x",
                        variant.cuda.major()
                    ));
                }
            }
            let images: Vec<Image> = variant
                .sass
                .iter()
                .filter_map(|s| s.parse::<Arch>().ok().map(Image::sass))
                .chain(
                    variant
                        .ptx
                        .iter()
                        .filter_map(|s| s.parse::<Arch>().ok().map(Image::ptx)),
                )
                .collect();
            let jit = PtxJit {
                driver: driver.cloned(),
                ptx_min_driver: kb
                    .cuda_row(&variant.cuda)
                    .and_then(|r| r.min_driver_linux.clone()),
                ptx_cuda: Some(variant.cuda.clone()),
            };
            for (name, cc) in gpus {
                if !runs_on(&images, *cc, &jit).runs {
                    let ptx = if variant.ptx.is_empty() {
                        "no PTX".to_string()
                    } else {
                        format!("PTX {}", variant.ptx.join(" "))
                    };
                    problems.push(format!(
                        "{name}: no image for CC {cc} (built for {}; {ptx})",
                        variant.sass.join(" ")
                    ));
                }
            }
            out.push(TorchOption {
                torch: patches.join(", "),
                variant: variant.tag(),
                runs: problems.is_empty(),
                reason: if problems.is_empty() {
                    "ok".into()
                } else {
                    problems.join("; ")
                },
            });
        }
    }
    out
}

pub fn render(r: &DoctorReport) -> String {
    let mut s = String::new();
    s.push_str("runtime\n");
    match &r.driver {
        Some(d) => s.push_str(&format!(
            "  driver {} (from {}): CUDA ≤ {} natively; minor-version compatible with CUDA {}\n",
            d.version,
            d.source,
            d.cuda_native_max.as_deref().unwrap_or("?"),
            d.cuda_minor_compat_majors
                .iter()
                .map(|m| format!("{m}.x"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        None => s.push_str("  driver: none found\n"),
    }
    for d in &r.devices {
        s.push_str(&format!(
            "  GPU {} (CC {})\n",
            d.name,
            d.cc.map(|c| c.to_string()).unwrap_or_else(|| "?".into())
        ));
    }
    s.push_str("\nCUDA toolkits\n");
    let mut t = Table::new(["  release", "found via", "max gcc", "max clang", "nvcc"]);
    for k in &r.toolkits {
        t.row([
            format!(
                "  {}",
                k.release
                    .as_ref()
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "?".into())
            ),
            k.found_via.clone(),
            k.max_gcc
                .map(|v| v.to_string())
                .unwrap_or_else(|| "?".into()),
            k.max_clang
                .map(|v| v.to_string())
                .unwrap_or_else(|| "?".into()),
            k.nvcc.display().to_string(),
        ]);
    }
    if t.is_empty() {
        s.push_str("  none found\n");
    } else {
        s.push_str(&t.render());
    }
    s.push_str("\nhost compilers\n");
    for c in &r.host_compilers {
        let acc: Vec<String> = c
            .accepted_by
            .iter()
            .map(|(rel, ok)| format!("nvcc {rel}: {}", if *ok { "ok" } else { "TOO NEW" }))
            .collect();
        s.push_str(&format!(
            "  {} {} ({}){}\n",
            c.name,
            c.version,
            c.path.display(),
            if acc.is_empty() {
                String::new()
            } else {
                format!("  {}", acc.join(", "))
            }
        ));
    }
    s.push_str("\nPython / torch\n");
    for p in &r.pythons {
        let i = &p.info;
        let torch = i["torch"].as_str().map(|t| {
            format!(
                "torch {t}, CUDA {}, archs {}",
                i["cuda"].as_str().unwrap_or("none"),
                i["arch_list"]
                    .as_array()
                    .map(|a| a
                        .iter()
                        .filter_map(|x| x.as_str())
                        .collect::<Vec<_>>()
                        .join(" "))
                    .unwrap_or_default()
            )
        });
        s.push_str(&format!(
            "  {} ({}): Python {}; {}\n",
            p.python.display(),
            p.found_via,
            i["python"].as_str().unwrap_or("?"),
            torch.unwrap_or_else(|| "no torch".into())
        ));
    }
    if let Some(pf) = &r.plan_for {
        let who: Vec<String> = pf
            .gpus
            .iter()
            .map(|(n, c)| format!("{n} (CC {c})"))
            .collect();
        s.push_str(&format!(
            "\ntorch builds for {}{}\n",
            if who.is_empty() {
                "any GPU".to_string()
            } else {
                who.join(", ")
            },
            pf.driver
                .as_ref()
                .map(|d| format!(" with driver {d}"))
                .unwrap_or_default()
        ));
        let good: Vec<String> = pf
            .torch
            .iter()
            .filter(|o| o.runs)
            .map(|o| {
                format!(
                    "{} {}",
                    o.torch.split(", ").last().unwrap_or_default(),
                    o.variant
                )
            })
            .collect();
        s.push_str(&format!(
            "  runs with: {}\n",
            if good.is_empty() {
                "no official torch build".to_string()
            } else {
                good.join("; ")
            }
        ));
        let mut t = Table::new(["  torch", "variant", "runs", "why not"]);
        for o in &pf.torch {
            t.row([
                format!("  {}", o.torch),
                o.variant.clone(),
                if o.runs { "yes" } else { "no" }.into(),
                if o.runs {
                    String::new()
                } else {
                    o.reason.clone()
                },
            ]);
        }
        s.push_str(&t.render());
    }
    for n in &r.notes {
        s.push_str(&format!("\nnote: {n}"));
    }
    if !r.notes.is_empty() {
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_470_runs_cuda_11_4_natively_and_11_x_by_minor_compat() {
        let d = describe_driver(kb(), "470.161.03".parse().unwrap(), "test".into());
        assert_eq!(d.cuda_native_max.as_deref(), Some("11.4"));
        assert_eq!(d.cuda_minor_compat_majors, vec![11]);
    }

    #[test]
    fn rtx_5090_needs_torch_2_7_with_cu128_or_newer() {
        let gpus = vec![resolve_gpu(kb(), "RTX 5090").unwrap()];
        let opts = torch_options(kb(), &gpus, Some(&"595.71.05".parse().unwrap()));
        let running: Vec<&TorchOption> = opts.iter().filter(|o| o.runs).collect();
        assert!(!running.is_empty());
        for o in &running {
            let t: Version = o.torch.split(',').next().unwrap().parse().unwrap();
            assert!(t >= "2.7".parse().unwrap(), "{} {}", o.torch, o.variant);
            assert!(o.variant.as_str() >= "cu128", "{} {}", o.torch, o.variant);
        }
        assert!(opts
            .iter()
            .any(|o| o.torch.starts_with("2.7") && o.variant == "cu128" && o.runs));
        assert!(opts
            .iter()
            .any(|o| o.torch.starts_with("2.7") && o.variant == "cu126" && !o.runs));
    }

    #[test]
    fn old_driver_rules_out_cuda_12_and_13_builds() {
        let gpus = vec![resolve_gpu(kb(), "A100").unwrap()];
        let opts = torch_options(kb(), &gpus, Some(&"470.161.03".parse().unwrap()));
        assert!(opts
            .iter()
            .filter(|o| o.runs)
            .all(|o| o.variant.starts_with("cu11")));
        assert!(opts.iter().any(|o| o.runs));
    }
}
