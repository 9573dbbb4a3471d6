//! `verify binary --target 'torch>=2.11,<2.16'`: which releases of a range each file loads on,
//! read against each release's real exports ([`super::release_exports`]) with no env of any of
//! them — the verdict an upgrade needs before it happens ([`super::torch_abi::over_releases`]).

use super::linker::Objects;
use super::release_exports::{releases_in, ReleaseExports};
use super::torch_abi::{over_releases, TorchRange};
use anyhow::Result;
use serde::Serialize;
use std::path::PathBuf;

/// One release checked.
#[derive(Debug, Clone, Serialize)]
pub struct Checked {
    pub torch: String,
    pub cuda: Option<String>,
    /// The PyPI wheel its exports were read from.
    pub wheel: String,
}

/// One file's fit over the range; `torch` is None for a file that needs nothing from torch.
#[derive(Debug, Clone, Serialize)]
pub struct FileFit {
    pub path: String,
    pub torch: Option<TorchRange>,
    /// A file tagged `abi3`: the Python symbols it needs outside CPython's limited API.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abi3: Option<super::limited_api::Abi3Check>,
    /// The driver its device code (and CUDA runtime) needs, read from the code's own record of
    /// the CUDA release that wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_code: Option<super::driver_need::DriverNeed>,
}

/// Files larger than this are not decompressed for [`FileFit::device_code`] (torch's own
/// libraries: hundreds of MB of cubins; an extension is a few).
const DEVICE_CODE_READ_MAX: u64 = 256 << 20;

/// [`FileFit::device_code`] of `path`; None where it has no device code that records its
/// release, or is too large to read whole, or cannot be read (the load check has read it).
fn device_code_of(
    path: &std::path::Path,
    runtime_major: Option<u32>,
) -> Option<super::driver_need::DriverNeed> {
    let size = std::fs::metadata(path).ok()?.len();
    let found = match size <= DEVICE_CODE_READ_MAX {
        true => crate::binary::device_toolkit::device_toolkits(&std::fs::read(path).ok()?).ok()?,
        false => Default::default(),
    };
    super::driver_need::driver_need(&found, runtime_major)
}

/// Every file's fit over the releases a range admits.
#[derive(Debug, Clone, Serialize)]
pub struct RangeReport {
    /// The range as given.
    pub range: String,
    pub releases: Vec<Checked>,
    pub files: Vec<FileFit>,
    /// Every file that needs torch loads on every release checked.
    pub loads_everywhere: bool,
}

/// `verify env --torch-range`: one item, whether every compiled module of `site` that uses
/// torch loads on each release of `spec`; failing, each module that does not, with its verdict.
pub fn env_item(spec: &str, site: &std::path::Path) -> crate::verify::checks::Item {
    use crate::verify::checks::{item, Status};
    let name = format!("loads on {spec}");
    let checked = super::compiled_modules(site, &mut Objects::default())
        .and_then(|modules| RangeReport::check(spec, &modules));
    let report = match checked {
        Ok(r) => r,
        Err(e) => return item(name, Status::Fail, format!("{e:#}")),
    };
    let fits: Vec<(&FileFit, &TorchRange)> = report
        .files
        .iter()
        .filter_map(|f| f.torch.as_ref().map(|t| (f, t)))
        .collect();
    let stable = fits
        .iter()
        .filter(|(_, t)| t.tally.kind == super::torch_abi::AbiKind::Stable)
        .count();
    let releases: Vec<&str> = report.releases.iter().map(|r| r.torch.as_str()).collect();
    let not: Vec<String> = fits
        .iter()
        .filter(|(_, t)| t.loads_on.len() < t.checked.len())
        .map(|(f, t)| format!("{}: {}", super::in_site(site, &f.path), t.verdict))
        .collect();
    if !not.is_empty() {
        return item(
            name,
            Status::Fail,
            format!(
                "{} of {} modules that use torch do not load on every release of {}: {}",
                not.len(),
                fits.len(),
                releases.join(", "),
                not.join(" | ")
            ),
        );
    }
    item(
        name,
        Status::Ok,
        format!(
            "all {} modules that use torch load on {} ({stable} on the stable ABI, {} tied but resolving)",
            fits.len(),
            releases.join(", "),
            fits.len() - stable
        ),
    )
}

/// A file tagged `abi3` checked against CPython's limited API (None for any other file, or,
/// with a warning, where this host's CPython headers are missing).
fn limited_api_of(
    shown: &str,
    object: &super::linker::Object,
) -> Option<super::limited_api::Abi3Check> {
    use super::limited_api::{check, claims_abi3, floor_of};
    if !claims_abi3(shown) {
        return None;
    }
    let undefined: Vec<&str> = object.undefined.iter().map(|n| &*n.name).collect();
    check(&undefined, floor_of(shown))
        .inspect_err(|e| {
            crate::errln!("warning: {shown}: CPython's limited API not checked: {e:#}")
        })
        .ok()
}

impl RangeReport {
    /// Reads each release's exports (kept after the first read) and checks `paths` over them.
    pub fn check(spec: &str, paths: &[PathBuf]) -> Result<RangeReport> {
        // The files first: a wrong path fails before any download.
        let inputs = super::Inputs::read(paths)?;
        RangeReport::of_inputs(spec, &inputs)
    }

    /// Checks files already read ([`super::Inputs::read`]) over the releases of `spec`.
    pub(super) fn of_inputs(spec: &str, inputs: &super::Inputs) -> Result<RangeReport> {
        let versions = releases_in(spec)?;
        let candidates = &inputs.candidates;
        let say = |line: &str| crate::errln!("{line}");
        let releases = versions
            .iter()
            .map(|v| ReleaseExports::of(v, &say))
            .collect::<Result<Vec<_>>>()?;
        let mut objects = Objects::default();
        let mut files = Vec::new();
        for c in candidates {
            let Ok(object) = objects.get(&c.file) else {
                continue;
            };
            let cuda = super::cuda_major(&object.needed);
            files.push(FileFit {
                path: c.shown.clone(),
                torch: over_releases(&object, &releases, cuda),
                abi3: limited_api_of(&c.shown, &object),
                device_code: device_code_of(&c.file, cuda),
            });
        }
        Ok(RangeReport {
            range: spec.to_string(),
            releases: releases
                .iter()
                .map(|r| Checked {
                    torch: r.torch.to_string(),
                    cuda: r.cuda.as_ref().map(ToString::to_string),
                    wheel: r.wheel.clone(),
                })
                .collect(),
            loads_everywhere: files
                .iter()
                .filter_map(|f| f.torch.as_ref())
                .all(|t| t.loads_on.len() == t.checked.len()),
            files,
        })
    }

    /// The verify-binary document with this report under `releases`.
    pub fn add_to(&self, doc: &mut serde_json::Value) -> Result<()> {
        if let Some(map) = doc.as_object_mut() {
            map.insert("torch_range".into(), serde_json::to_value(self)?);
        }
        Ok(())
    }

    /// One row per file and release (`loads` / `no`), then each file's sentence.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut out = format!(
            "torch releases {} ({}): each file against each release's exports\n",
            self.range,
            self.releases
                .iter()
                .map(|r| match &r.cuda {
                    Some(c) => format!("{} with CUDA {c}", r.torch),
                    None => format!("{} CPU-only", r.torch),
                })
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut head = vec!["file".to_string(), "ABI".to_string()];
        head.extend(self.releases.iter().map(|r| r.torch.clone()));
        let mut t = crate::output::Table::new(head);
        for f in &self.files {
            let mut row = vec![f.path.clone()];
            match &f.torch {
                None => {
                    row.push("-".into());
                    row.extend(self.releases.iter().map(|_| "needs no torch".to_string()));
                }
                Some(r) => {
                    row.push(r.tally.kind.to_string());
                    row.extend(r.releases.iter().map(|x| {
                        if x.loads {
                            "loads".to_string()
                        } else {
                            "NO".to_string()
                        }
                    }));
                }
            }
            t.row(row);
        }
        out.push_str(&t.render());
        for f in &self.files {
            if let Some(r) = &f.torch {
                let _ = writeln!(out, "\n{}: {}", f.path, r.verdict);
            }
            if let Some(d) = &f.device_code {
                let _ = writeln!(out, "{}: {}", f.path, d.said);
            }
            if let Some(a) = &f.abi3 {
                let said = match a.violations.len() {
                    0 => "every Python symbol it needs is in the limited API".to_string(),
                    n => format!(
                        "{n} Python symbol(s) outside the limited API: {}",
                        a.violations.join(", ")
                    ),
                };
                let _ = writeln!(
                    out,
                    "{}: abi3 from CPython {}: {said} ({}'s headers)",
                    f.path, a.floor, a.headers
                );
            }
        }
        out
    }
}
