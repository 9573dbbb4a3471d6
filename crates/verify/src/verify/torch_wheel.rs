//! The check of a built (or downloaded) torch: what its device libraries really carry against the
//! planned arch list, and, in a Python where that torch is installed, `torch.version.cuda`,
//! `torch._C._cuda_getArchFlags()`, no conda paths in its build configuration, and with a GPU a
//! small CUDA computation. build-torch runs it on the wheel it produced; `verify env` runs the
//! same check on an installed torch.
//!
//! The libraries are held to the plan the way torch builds them: `libtorch_cuda.so` (the library
//! with the most kernel containers) is compiled entirely with `TORCH_CUDA_ARCH_LIST`, so every
//! planned arch must be in every container, and an arch in every container that was not planned
//! means another list was used. Images in only some containers are per-kernel extras torch adds on
//! its own (cmake/Codegen.cmake's `_BUILD_FOR_ADDITIONAL_ARCHS`: `sm_90a` for a few Hopper GEMMs)
//! and are reported, not failed. Other device libraries (`libtorch_cuda_linalg.so`,
//! `libtorch_nvshmem.so`) also link code built elsewhere with its own list (MAGMA), so there each
//! planned arch must be in at least one container; where it is in only some, the report says so.

use super::checks::{all_ok, item, table, Item, Status};
use crate::arch::spec::{Plan, PlanContext};
use crate::binary::expect::{check, Expectation};
use crate::binary::input::FileAudit;
use crate::binary::input::{audit_paths, Options, Outcome};
use crate::binary::ElfAudit;
use crate::python::probe::PythonInfo;
use crate::python::probe::{probe_with, Ask, Depth};
use crate::version::Version;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Request {
    pub wheel: PathBuf,
    /// The planned list (the `archs --arch` grammar); None for a CPU-only build (`USE_CUDA=0`),
    /// whose wheel must carry no device code.
    pub arch: Option<String>,
    /// The CUDA release the build used; `torch.version.cuda` must say the same.
    pub cuda: Option<Version>,
    /// A Python with this torch installed, for the checks only the live module can answer.
    pub python: Option<PathBuf>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    pub wheel: PathBuf,
    pub expected_sass: Vec<String>,
    pub expected_ptx: Vec<String>,
    pub items: Vec<Item>,
    pub ok: bool,
}

impl Report {
    pub fn table(&self) -> String {
        table(&self.items)
    }
}

/// What device libraries carry, against the plan: the items, and the audits with the primary
/// library (the one with the most kernel containers) for runs-on questions.
pub struct LibraryAudit {
    pub items: Vec<Item>,
    pub audits: Vec<FileAudit>,
    pub primary: Option<String>,
}

impl LibraryAudit {
    /// The primary library's audit.
    pub fn primary_audit(&self) -> Option<&ElfAudit> {
        let name = self.primary.as_deref()?;
        self.audits.iter().find_map(|a| match &a.outcome {
            Outcome::Audited(e) if short(&a.path) == name => Some(e),
            _ => None,
        })
    }
}

/// Audits the device libraries under `paths` (a wheel, a directory such as an installed
/// `torch/lib`, or files) against `expect`, with the rules in the module docs.
/// `kernels_for`: the CCs of GPUs a verdict will be given for, so a library that covers one only
/// partly can name the kernels at risk.
pub fn audit_libraries(
    paths: &[PathBuf],
    expect: &Expectation,
    kernels_for: &[crate::cuda_arch::Cc],
) -> LibraryAudit {
    let audits = audit_paths(
        paths,
        &Options {
            extract: None,
            threads: 0,
            kernels_for: kernels_for.to_vec(),
            unpacked: Vec::new(),
        },
    );
    let mut items = Vec::new();
    let mut device: Vec<(String, &crate::binary::ElfAudit)> = Vec::new();
    for a in &audits {
        match &a.outcome {
            Outcome::Audited(e) if e.has_device_code() => device.push((short(&a.path), e)),
            Outcome::Audited(_) => {}
            Outcome::Failed(err) => items.push(item(
                short(&a.path),
                Status::Fail,
                format!("unreadable: {err}"),
            )),
        }
    }
    let primary = device
        .iter()
        .max_by_key(|(_, e)| e.counted().map_or(0, |s| s.code_containers()))
        .map(|(n, _)| n.clone());
    match &primary {
        None => items.push(item(
            "device code",
            Status::Fail,
            "no library in the wheel carries device code: a CPU-only build (USE_CUDA=0, or CUDA not found at configure)",
        )),
        Some(p) => items.push(item("device code", Status::Ok, format!("{} device libraries; primary {p}", device.len()))),
    }
    for (name, audit) in &device {
        let is_primary = Some(name) == primary.as_ref();
        items.push(library_item(name, audit, expect, is_primary));
    }
    LibraryAudit {
        items,
        audits,
        primary,
    }
}

/// One device library against the plan. The primary library (the one with the most containers)
/// must carry every planned image in every container and nothing unplanned in all of them; the
/// others fail only on a planned image none of their containers carries (code linked in with its
/// own arch list, like MAGMA's, is reported, not failed).
fn library_item(
    name: &str,
    audit: &crate::binary::ElfAudit,
    expect: &Expectation,
    is_primary: bool,
) -> Item {
    let c = check(audit, expect);
    let n = audit.counted().map_or(0, |s| s.code_containers());
    let missing_all = || c.missing_sass.iter().chain(&c.missing_ptx);
    let extra_all = || c.extra_sass.iter().chain(&c.extra_ptx);
    let missing: Vec<String> = missing_all()
        .filter(|m| is_primary || m.containers_with == 0)
        .map(|m| format!("{} ({} of {n} containers)", m.name, m.containers_with))
        .collect();
    let partial: Vec<String> = missing_all()
        .filter(|m| !is_primary && m.containers_with > 0)
        .map(|m| format!("{} in {} of {n}", m.name, m.containers_with))
        .collect();
    let everywhere = |containers_with| is_primary && containers_with == n;
    let unplanned: Vec<String> = extra_all()
        .filter(|e| everywhere(e.containers_with))
        .map(|e| format!("{} (in every container)", e.name))
        .collect();
    let per_kernel: Vec<String> = extra_all()
        .filter(|e| !everywhere(e.containers_with))
        .map(|e| format!("{}×{}", e.name, e.count))
        .collect();
    let mut detail = Vec::new();
    if !missing.is_empty() {
        detail.push(format!("missing {}", missing.join(", ")));
    }
    if !unplanned.is_empty() {
        detail.push(format!("not planned {}", unplanned.join(", ")));
    }
    if detail.is_empty() {
        detail.push(format!(
            "{} planned image(s) in {n} containers",
            expect.sass.len() + expect.ptx.len()
        ));
    }
    if !partial.is_empty() {
        detail.push(format!(
            "linked-in code with its own list: {}",
            partial.join(", ")
        ));
    }
    if !per_kernel.is_empty() {
        detail.push(format!("per-kernel extras {}", per_kernel.join(" ")));
    }
    let status = if missing.is_empty() && unplanned.is_empty() {
        Status::Ok
    } else {
        Status::Fail
    };
    item(name.to_string(), status, detail.join("; "))
}

/// Runs the check. Bad input (an unparsable spec, an unreadable wheel) is an error.
pub fn check_wheel(req: &Request) -> Result<Report> {
    let plan = match &req.arch {
        Some(arch) => {
            let ctx = PlanContext::new(None, req.cuda.clone());
            Some(Plan::parse_unvalidated(&ctx, arch).with_context(|| {
                format!("invalid --arch `{}`", crate::kb::user_input::echo(arch))
            })?)
        }
        None => None,
    };
    if !req.wheel.is_file() {
        anyhow::bail!("{}: no such wheel", req.wheel.display());
    }
    let (mut items, audits, expected_sass, expected_ptx) = match &plan {
        Some(plan) => {
            let expect = Expectation {
                sass: plan.sass(),
                ptx: plan.ptx(),
            };
            let libs = audit_libraries(std::slice::from_ref(&req.wheel), &expect, &[]);
            (
                libs.items,
                libs.audits,
                expect.sass.iter().map(|a| a.sm()).collect(),
                expect.ptx.iter().map(|a| a.compute()).collect(),
            )
        }
        None => {
            let (items, audits) = no_device_code(&req.wheel);
            (items, audits, Vec::new(), Vec::new())
        }
    };
    // Before the import: when the libraries cannot find each other, this names why.
    items.push(super::library_paths::check(&audits));
    python_items(req, plan.as_ref(), &mut items)?;
    let ok = all_ok(&items);
    Ok(Report {
        wheel: req.wheel.clone(),
        expected_sass,
        expected_ptx,
        items,
        ok,
    })
}

/// A CPU-only wheel: no library in it may carry device code (one that does was built with CUDA
/// after all: CUDA found at configure despite the plan). The audits come back for the other
/// checks of the same files.
fn no_device_code(wheel: &Path) -> (Vec<Item>, Vec<FileAudit>) {
    let audits = audit_paths(
        &[wheel.to_path_buf()],
        &Options {
            extract: None,
            threads: 0,
            kernels_for: Vec::new(),
            unpacked: Vec::new(),
        },
    );
    let mut items = Vec::new();
    let mut device = Vec::new();
    for a in &audits {
        match &a.outcome {
            Outcome::Audited(e) if e.has_device_code() => device.push(short(&a.path)),
            Outcome::Audited(_) => {}
            Outcome::Failed(err) => items.push(item(
                short(&a.path),
                Status::Fail,
                format!("unreadable: {err}"),
            )),
        }
    }
    items.push(match device.is_empty() {
        true => item(
            "device code",
            Status::Ok,
            format!(
                "none in {} libraries: a CPU-only build, as planned",
                audits.len()
            ),
        ),
        false => item(
            "device code",
            Status::Fail,
            format!(
                "{} carry device code, but the plan was CPU-only (USE_CUDA=0)",
                device.join(", ")
            ),
        ),
    });
    (items, audits)
}

fn python_items(req: &Request, plan: Option<&Plan>, items: &mut Vec<Item>) -> Result<()> {
    let smoke = match plan {
        Some(_) => "gpu smoke",
        None => "cpu smoke",
    };
    let Some(python) = &req.python else {
        for n in ["torch.version.cuda", "arch flags", "no conda paths", smoke] {
            items.push(item(
                n,
                Status::Skipped,
                "no Python with this wheel installed (--python)",
            ));
        }
        return Ok(());
    };
    let info = probe_with(
        python,
        Depth::ImportTorch,
        &Ask {
            modules: &[],
            gpu_smoke: plan.is_some(),
            cpu_smoke: plan.is_none(),
            ..Ask::default()
        },
    )?;
    if !info.imported {
        items.push(item(
            "import torch",
            Status::Fail,
            format!(
                "{}: {}",
                python.display(),
                info.error
                    .clone()
                    .unwrap_or_else(|| "torch is not installed".into())
            ),
        ));
        return Ok(());
    }
    let torch = info
        .torch
        .clone()
        .map(|v| v.to_string())
        .unwrap_or_default();
    if let Some(wheel_version) = wheel_version(&req.wheel) {
        let public = torch.split('+').next().unwrap_or(&torch).to_string();
        if public != wheel_version.split('+').next().unwrap_or(&wheel_version) {
            items.push(item(
                "import torch",
                Status::Fail,
                format!(
                    "{} has torch {torch}, not this wheel's {wheel_version}",
                    python.display()
                ),
            ));
            return Ok(());
        }
    }
    items.push(item(
        "import torch",
        Status::Ok,
        format!("torch {torch} in {}", python.display()),
    ));
    match plan {
        Some(plan) => {
            items.push(cuda_item(&info, req.cuda.as_ref(), "the build used"));
            items.push(arch_flags_item(&info, plan));
            items.push(conda_item(&info));
            items.push(gpu_smoke_item(&info, None));
        }
        None => {
            items.extend(cpu_only_items(&info));
            items.push(conda_item(&info));
            items.push(cpu_smoke_item(&info));
        }
    }
    Ok(())
}

/// A CPU-only torch: `torch.version.cuda` is None and it names no arch.
fn cpu_only_items(info: &PythonInfo) -> [Item; 2] {
    let cuda = match &info.cuda {
        None => item(
            "torch.version.cuda",
            Status::Ok,
            "None: a CPU-only build, as planned",
        ),
        Some(v) => item(
            "torch.version.cuda",
            Status::Fail,
            format!("{v}, but the plan was CPU-only (USE_CUDA=0)"),
        ),
    };
    let archs = match info.arch_list.is_empty() {
        true => item("arch flags", Status::Ok, "none: a CPU-only build"),
        false => item(
            "arch flags",
            Status::Fail,
            format!(
                "{}, but the plan was CPU-only (USE_CUDA=0)",
                info.arch_list.join(" ")
            ),
        ),
    };
    [cuda, archs]
}

/// The small CPU computation against the same sums in plain Python.
pub fn cpu_smoke_item(info: &PythonInfo) -> Item {
    match info.cpu_smoke.as_deref() {
        Some("ok") => item(
            "cpu smoke",
            Status::Ok,
            "8×8 float64 matmul and 1000 sines equal plain Python's",
        ),
        Some(why) => item("cpu smoke", Status::Fail, why),
        None => item("cpu smoke", Status::Skipped, "not run"),
    }
}

/// `torch.version.cuda` against the CUDA the build (or the expectation) names.
pub fn cuda_item(info: &PythonInfo, want: Option<&Version>, whose: &str) -> Item {
    match (want, &info.cuda) {
        (Some(want), Some(have)) if have.major_minor() == want.major_minor() => {
            item("torch.version.cuda", Status::Ok, format!("{have}"))
        }
        (Some(want), have) => item(
            "torch.version.cuda",
            Status::Fail,
            format!(
                "{} but {whose} CUDA {want}",
                have.as_ref()
                    .map_or("None (a CPU build)".to_string(), |h| h.to_string())
            ),
        ),
        (None, have) => item(
            "torch.version.cuda",
            Status::Skipped,
            format!(
                "{} (no --cuda to compare with)",
                have.as_ref().map_or("None".into(), |h| h.to_string())
            ),
        ),
    }
}

/// `torch._C._cuda_getArchFlags()` against the plan, as sets.
pub fn arch_flags_item(info: &PythonInfo, plan: &Plan) -> Item {
    let mut want: Vec<String> = plan.sass().iter().map(|a| a.sm()).collect();
    want.extend(plan.ptx().iter().map(|a| a.compute()));
    let planned = want.join(" ");
    let mut have = info.arch_list.clone();
    want.sort();
    have.sort();
    if have == want {
        item(
            "arch flags",
            Status::Ok,
            format!("_cuda_getArchFlags() = {}", info.arch_list.join(" ")),
        )
    } else {
        item(
            "arch flags",
            Status::Fail,
            format!(
                "_cuda_getArchFlags() = {}; planned {planned}",
                info.arch_list.join(" ")
            ),
        )
    }
}

/// No conda prefix in torch's build configuration or on `sys.path`.
pub fn conda_item(info: &PythonInfo) -> Item {
    let mut found: Vec<String> = info
        .config
        .as_deref()
        .unwrap_or("")
        .lines()
        .filter(|l| l.contains("/conda") || l.contains("conda/") || l.contains("miniconda"))
        .map(|l| format!("torch.__config__.show(): {}", l.trim()))
        .collect();
    found.extend(info.conda_paths.iter().map(|p| format!("sys.path: {p}")));
    if found.is_empty() {
        item(
            "no conda paths",
            Status::Ok,
            "neither torch.__config__.show() nor sys.path names a conda prefix",
        )
    } else {
        item("no conda paths", Status::Fail, found.join(" | "))
    }
}

/// The probe's small CUDA computation; `no kernel image` explained with what torch carries.
pub fn gpu_smoke_item(info: &PythonInfo, carried: Option<&str>) -> Item {
    match &info.gpu_smoke {
        Some(s) if s == "ok" => item(
            "gpu smoke",
            Status::Ok,
            "8×8 matmul on the GPU equals the CPU's",
        ),
        Some(s) if s.contains("no kernel image") => {
            let devices: Vec<String> = info
                .devices
                .iter()
                .map(|d| format!("{} (CC {})", d.name, d.cc))
                .collect();
            item(
                "gpu smoke",
                Status::Fail,
                format!(
                    "{s}: this torch carries {} and none of it loads on {}",
                    carried
                        .map(str::to_string)
                        .unwrap_or_else(|| info.arch_list.join(" ")),
                    devices.join(", ")
                ),
            )
        }
        Some(s) => item("gpu smoke", Status::Fail, s.clone()),
        None => item("gpu smoke", Status::Skipped, "no GPU"),
    }
}

/// `torch-2.15.0-cp311-…whl` → `2.15.0`; `torch-2.6.0+cu118-…` → `2.6.0+cu118`.
fn wheel_version(wheel: &Path) -> Option<String> {
    let name = wheel.file_name()?.to_str()?;
    name.split('-').nth(1).map(str::to_string)
}

/// `torch-2.15.0-….whl!torch/lib/libtorch_cuda.so` → `libtorch_cuda.so`.
pub fn short(path: &str) -> String {
    path.rsplit(['/', '!']).next().unwrap_or(path).to_string()
}
