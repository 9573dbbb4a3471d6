//! `verify env`: one Python environment checked the way teams check it by hand after an upgrade —
//! the versions they expect, torch ↔ torchvision ↔ torchaudio pairing from the knowledge base,
//! the CUDA variant, what torch's own libraries really carry (the binary reader, against
//! `--expect-arch`, with the same rules as build-torch's verify step: [`super::torch_wheel`]),
//! whether each `--gpu` runs it and through which image, cuDNN compile-time vs runtime, no conda
//! prefix leaking in, and with a GPU a small computation. Everything the environment says comes
//! from the one Python probe.

use super::checks::{all_ok, item, Item, Status};
use super::torch_wheel::{arch_flags_item, audit_libraries, conda_item, cuda_item, gpu_smoke_item};
use crate::arch::spec::Plan;
use crate::binary::expect::Expectation;
use crate::kb::kb;
use crate::python::probe::{probe_with, Ask, Depth, PythonInfo};
use crate::version::Version;
use anyhow::{bail, Result};
use serde::Serialize;
use std::path::PathBuf;

/// `NAME==VERSION` (or `>=`, `<=`, `>`, `<`, `!=`): what an installed distribution must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    pub name: String,
    pub op: &'static str,
    pub version: Version,
}

impl std::str::FromStr for Expect {
    type Err = String;
    fn from_str(s: &str) -> Result<Expect, String> {
        for op in ["==", ">=", "<=", "!=", ">", "<"] {
            if let Some((n, v)) = s.split_once(op) {
                let name = normalize(n.trim());
                if name.is_empty()
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
                {
                    return Err(format!(
                        "--expect {s}: `{}` is not a package name",
                        n.trim()
                    ));
                }
                let version = v.trim().parse().map_err(|e| format!("--expect {s}: {e}"))?;
                return Ok(Expect { name, op, version });
            }
        }
        Err(format!(
            "--expect {s}: expected NAME==VERSION, e.g. --expect torch==2.6.0"
        ))
    }
}

impl Expect {
    /// PEP 440's rule for `==` without a local label: `2.6.0` matches `2.6.0+cu124`; with one, the
    /// local label must match too.
    pub fn matches(&self, have: &Version) -> bool {
        let local_ok = self.version.local().is_none() || self.version.local() == have.local();
        match self.op {
            "==" => have == &self.version && local_ok,
            "!=" => !(have == &self.version && local_ok),
            ">=" => have >= &self.version,
            "<=" => have <= &self.version,
            ">" => have > &self.version,
            _ => have < &self.version,
        }
    }
}

/// PEP 503's normalized distribution name.
fn normalize(name: &str) -> String {
    name.to_ascii_lowercase().replace(['_', '.'], "-")
}

#[derive(Debug, Clone, Default)]
pub struct EnvRequest {
    pub python: Option<PathBuf>,
    pub expects: Vec<Expect>,
    pub expect_cuda: Option<Version>,
    pub expect_arch: Option<super::binary_check::ExpectedArch>,
    pub gpus: Vec<String>,
    pub no_conda: bool,
    pub gpu_smoke: bool,
    /// A torch range every compiled module that uses torch must load on (`--torch-range`).
    pub torch_range: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct EnvReport {
    pub python: PathBuf,
    pub python_version: String,
    pub torch: Option<String>,
    pub cuda: Option<String>,
    pub packages: std::collections::BTreeMap<String, String>,
    pub items: Vec<Item>,
    pub ok: bool,
}

impl EnvReport {
    pub fn table(&self) -> String {
        let head = format!(
            "{} (Python {}): torch {}, CUDA {}\n",
            self.python.display(),
            self.python_version,
            self.torch.as_deref().unwrap_or("not installed"),
            self.cuda.as_deref().unwrap_or("none")
        );
        head + &super::checks::table(&self.items)
    }
}

/// Runs every check the request asks for. Bad input (a Python that does not run, an unknown GPU,
/// an unparsable spec) is an error; everything about the environment is an item.
pub fn check_env(req: &EnvRequest) -> Result<EnvReport> {
    let python = match &req.python {
        Some(p) => p.clone(),
        None => crate::python::host_python()?,
    };
    let plan = req
        .expect_arch
        .as_deref()
        .map(super::binary_check::expected_plan)
        .transpose()?;
    let gpus = req
        .gpus
        .iter()
        .map(|g| kb().resolve_gpu(g))
        .collect::<Result<Vec<_>>>()?;
    let info = probe_with(
        &python,
        Depth::ImportTorch,
        &Ask {
            modules: &[],
            gpu_smoke: req.gpu_smoke,
            ..Ask::default()
        },
    )?;
    let mut items = vec![
        item("python", Status::Ok, format!("Python {}", info.python)),
        torch_item(&info, &python),
    ];
    let torch = info.torch.clone();
    for e in &req.expects {
        items.push(expectation_item(e, &info));
    }
    if req.expect_cuda.is_some() {
        items.push(cuda_item(&info, req.expect_cuda.as_ref(), "expected"));
    }
    if let Some(t) = &torch {
        items.extend(pairing_items(t, &info));
        items.extend(pin_items(t, &info, &python));
    }
    items.push(cudnn_item(&info));
    if info.imported {
        items.extend(super::load_check::env_items(&python, &info.purelib));
    }
    if let Some(spec) = &req.torch_range {
        items.push(super::load_check::release_range::env_item(
            spec,
            &info.purelib,
        ));
    }

    // What torch's own libraries carry: against --expect-arch, and for --gpu verdicts.
    let mut carried = None;
    if plan.is_some() || !gpus.is_empty() {
        carried = library_items(&info, plan.as_ref(), &gpus, &mut items);
    }
    if let Some(p) = &plan {
        if info.imported {
            items.push(arch_flags_item(&info, p));
        }
    }
    items.push(conda_check(&info, req.no_conda));
    if req.gpu_smoke {
        items.push(gpu_smoke_item(&info, carried.as_deref()));
    }
    let ok = all_ok(&items);
    Ok(EnvReport {
        python,
        python_version: info.python.to_string(),
        torch: torch.map(|t| t.to_string()),
        cuda: info.cuda.as_ref().map(|c| c.to_string()),
        packages: info.packages.clone(),
        items,
        ok,
    })
}

/// Conda's paths: a failure with `--no-conda`, else only said (skipped).
fn conda_check(info: &PythonInfo, no_conda: bool) -> Item {
    let conda = conda_item(info);
    if no_conda || conda.status == Status::Ok {
        return conda;
    }
    item(
        "no conda paths",
        Status::Skipped,
        format!("{} (--no-conda fails on this)", conda.detail),
    )
}

/// Whether torch is there and imports.
fn torch_item(info: &PythonInfo, python: &std::path::Path) -> Item {
    match (&info.torch, info.imported) {
        (None, _) => item(
            "torch",
            Status::Fail,
            info.error
                .clone()
                .unwrap_or_else(|| format!("no torch in {}", python.display())),
        ),
        (Some(t), false) => item(
            "torch",
            Status::Fail,
            format!(
                "torch {t} is installed but does not import: {}",
                info.error.clone().unwrap_or_default()
            ),
        ),
        (Some(t), true) => item("torch", Status::Ok, format!("torch {t} imports")),
    }
}

/// torch's own libraries audited: against the expected arch list (its items), and for each GPU
/// at the CC it reports to this torch's CUDA (Jetson Thor: 10.1 before 13.0). Returns the SASS
/// the main library carries, for the GPU smoke item.
fn library_items(
    info: &PythonInfo,
    plan: Option<&Plan>,
    gpus: &[(String, crate::cuda_arch::Cc)],
    items: &mut Vec<Item>,
) -> Option<String> {
    let lib_dir = info.torch_dir.as_ref().map(|d| d.join("lib"));
    let Some(dir) = lib_dir.as_ref().filter(|d| d.is_dir()) else {
        items.push(item(
            "torch libraries",
            Status::Fail,
            "torch's lib directory was not found",
        ));
        return None;
    };
    let expect = plan.map_or_else(Expectation::default, |p| Expectation {
        sass: p.sass(),
        ptx: p.ptx(),
    });
    let gpu_ccs: Vec<(String, crate::cuda_arch::Cc)> = gpus
        .iter()
        .map(|(name, newest)| {
            let cc = info
                .cuda
                .as_ref()
                .map_or(*newest, |cuda| kb().gpu_cc_with_cuda(name, *newest, cuda));
            (name.clone(), cc)
        })
        .collect();
    let ccs: Vec<crate::cuda_arch::Cc> = gpu_ccs.iter().map(|(_, cc)| *cc).collect();
    let libs = audit_libraries(std::slice::from_ref(dir), &expect, &ccs);
    if plan.is_some() {
        items.extend(libs.items.iter().cloned());
    }
    let carried = libs.primary_audit().map(|primary| {
        let sass: Vec<String> = primary
            .counts(crate::binary::Kind::Elf)
            .keys()
            .map(|a| a.to_string())
            .collect();
        sass.join(" ")
    });
    for (name, cc) in &gpu_ccs {
        items.push(gpu_item(name, *cc, &libs));
    }
    carried
}

/// The installed version of a distribution: torch's own answer for torch (it carries the
/// `+cuXYZ` label its metadata may not), the metadata for the rest.
fn installed(name: &str, info: &PythonInfo) -> Option<Version> {
    if name == "torch" {
        if let Some(t) = &info.torch {
            return Some(t.clone());
        }
    }
    info.packages
        .iter()
        .find(|(n, _)| normalize(n) == name)
        .and_then(|(_, v)| v.parse().ok())
}

fn expectation_item(e: &Expect, info: &PythonInfo) -> Item {
    let name = format!("{}{}{}", e.name, e.op, e.version);
    match installed(&e.name, info) {
        None => item(name, Status::Fail, format!("{} is not installed", e.name)),
        Some(have) if e.matches(&have) => item(name, Status::Ok, format!("{} {have}", e.name)),
        Some(have) => item(
            name,
            Status::Fail,
            format!("{} {have} is installed", e.name),
        ),
    }
}

/// torchvision and torchaudio built for this torch, from the knowledge base's torch rows.
fn pairing_items(torch: &Version, info: &PythonInfo) -> Vec<Item> {
    let Some(row) = kb().torch_row(torch) else {
        return vec![item(
            "pairing",
            Status::Skipped,
            format!("torch {torch} is not in the knowledge base"),
        )];
    };
    let mut out = Vec::new();
    for (dist, paired) in [
        ("torchvision", &row.torchvision),
        ("torchaudio", &row.torchaudio),
    ] {
        let name = format!("{dist} pairing");
        let Some(have) = installed(dist, info) else {
            out.push(item(
                name,
                Status::Skipped,
                format!("{dist} is not installed"),
            ));
            continue;
        };
        if paired.is_empty() {
            out.push(item(
                name,
                Status::Skipped,
                format!(
                    "the knowledge base records no {dist} for torch {}",
                    row.version
                ),
            ));
            continue;
        }
        let ok = paired.iter().any(|p| p.parts() == have.parts());
        let want: Vec<String> = paired.iter().map(|p| p.to_string()).collect();
        if ok {
            out.push(item(
                name,
                Status::Ok,
                format!(
                    "{dist} {have} is built for torch {}",
                    row.version.major_minor()
                ),
            ));
        } else {
            let theirs = kb()
                .torch
                .iter()
                .filter(|t| {
                    let list = if dist == "torchvision" {
                        &t.torchvision
                    } else {
                        &t.torchaudio
                    };
                    list.iter().any(|p| p.parts() == have.parts())
                })
                .map(|t| t.version.to_string())
                .collect::<Vec<_>>();
            out.push(item(
                name,
                Status::Fail,
                format!(
                    "{dist} {have} {}; torch {torch} pairs with {dist} {}",
                    if theirs.is_empty() {
                        "is not paired with any torch the knowledge base knows".to_string()
                    } else {
                        format!("is built for torch {}", theirs.join(", "))
                    },
                    want.join(" or ")
                ),
            ));
        }
    }
    out
}

/// The knowledge base's pins for an older torch (`setuptools<82`, `numpy<2`): one failing item
/// per pin the env breaks, with the install that meets it; nothing when all hold.
fn pin_items(torch: &Version, info: &PythonInfo, python: &std::path::Path) -> Vec<Item> {
    crate::python::torch_env::unmet_pins(torch, &info.packages)
        .into_iter()
        .map(|u| {
            item(
                format!("pin: {}", u.pin.requirement),
                Status::Fail,
                format!("{}. Run `{}`", u.message(torch), u.fix(python)),
            )
        })
        .collect()
}

/// cuDNN: the major torch was compiled against must be the one it loads.
fn cudnn_item(info: &PythonInfo) -> Item {
    let Some(c) = &info.cudnn else {
        return item(
            "cuDNN",
            Status::Skipped,
            "torch reports no cuDNN (a build without it, or torch did not import)",
        );
    };
    let compile_major = c
        .compile
        .as_deref()
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse::<i64>().ok());
    // cuDNN ≥ 9 reports major·10000 + minor·100 + patch; cuDNN 8 major·1000 + minor·100 + patch.
    let runtime_major = c
        .runtime
        .map(|r| if r >= 10000 { r / 10000 } else { r / 1000 });
    match (compile_major, runtime_major) {
        (Some(a), Some(b)) if a == b => item(
            "cuDNN",
            Status::Ok,
            format!(
                "compiled against {}, loads {}",
                c.compile.as_deref().unwrap_or("?"),
                c.runtime.unwrap_or_default()
            ),
        ),
        (Some(_), Some(_)) => item(
            "cuDNN",
            Status::Fail,
            format!(
                "compiled against {} but loads {}: another cuDNN comes first on the library path",
                c.compile.as_deref().unwrap_or("?"),
                c.runtime.unwrap_or_default()
            ),
        ),
        _ => item(
            "cuDNN",
            Status::Skipped,
            c.error
                .clone()
                .unwrap_or_else(|| "versions not reported".into()),
        ),
    }
}

/// Whether a GPU runs this torch, by [`super::binary_check::Coverage`] over its device libraries (the
/// verdict `verify binary` gives the same files): every container of every library (ok), some
/// containers of a library (fail: "partly", naming what cannot launch), or none of one (fail).
fn gpu_item(name: &str, cc: crate::cuda_arch::Cc, libs: &super::torch_wheel::LibraryAudit) -> Item {
    use super::binary_check::{file_verdict, Coverage};
    use crate::binary::input::Outcome;
    let label = format!("runs on {name} (CC {cc})");
    let mut verdicts = Vec::new();
    for a in &libs.audits {
        let Outcome::Audited(e) = &a.outcome else {
            continue;
        };
        if let Some(v) = file_verdict(e, name, cc) {
            verdicts.push((super::torch_wheel::short(&a.path), v));
        }
    }
    if verdicts.is_empty() {
        return item(
            label,
            Status::Fail,
            "no library with device code: a CPU-only torch",
        );
    }
    let primary = verdicts
        .iter()
        .find(|(file, _)| Some(file) == libs.primary.as_ref())
        .unwrap_or(&verdicts[0]);
    let via = primary.1.via.clone().unwrap_or_default();
    match Coverage::of(verdicts.iter().map(|(_, v)| v)) {
        Coverage::Yes => item(label, Status::Ok, format!("via {via}")),
        Coverage::Partly => {
            let parts: Vec<String> = verdicts
                .iter()
                .filter(|(_, v)| !v.runs)
                .map(|(file, v)| {
                    let risk: Vec<String> = v.at_risk.iter().map(|r| r.describe()).collect();
                    format!(
                        "{file} ({} of {} containers){}",
                        v.containers_running,
                        v.containers,
                        if risk.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", risk.join("; "))
                        }
                    )
                })
                .collect();
            item(
                label,
                Status::Fail,
                format!(
                    "partly: via {via}, but only partly: {} — their other kernels cannot launch there",
                    parts.join(", ")
                ),
            )
        }
        Coverage::No => {
            let bad = verdicts
                .iter()
                .find(|(_, v)| v.containers_running == 0)
                .unwrap_or(primary);
            item(label, Status::Fail, format!("{}: {}", bad.0, bad.1.reason))
        }
    }
}

/// `--expect` arguments parsed, for the CLI.
pub fn parse_expect(s: &str) -> Result<Expect, String> {
    s.parse()
}

/// Refuses a request that cannot be answered before probing anything.
pub fn validate(req: &EnvRequest) -> Result<()> {
    if let Some(p) = &req.python {
        if !p.exists() {
            bail!("--python {}: no such file", p.display());
        }
    }
    if let Some(spec) = &req.torch_range {
        super::load_check::release_exports::releases_in(spec)
            .map_err(|e| anyhow::anyhow!("--torch-range: {e:#}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_follow_pep_440_for_local_labels() {
        let e: Expect = "torch==2.6.0".parse().unwrap();
        assert!(e.matches(&"2.6.0+cu124".parse().unwrap()));
        assert!(!e.matches(&"2.6.1".parse().unwrap()));
        let e: Expect = "torch==2.6.0+cu124".parse().unwrap();
        assert!(!e.matches(&"2.6.0+cu118".parse().unwrap()));
        assert!(e.matches(&"2.6.0+cu124".parse().unwrap()));
        let e: Expect = "Torch_Vision>=0.21".parse().unwrap();
        assert_eq!(e.name, "torch-vision");
        assert!(e.matches(&"0.21.0".parse().unwrap()));
        assert!("torch"
            .parse::<Expect>()
            .unwrap_err()
            .contains("NAME==VERSION"));
        assert!("torch==x".parse::<Expect>().is_err());
    }
}
