//! `verify binary`'s report: the audits of ELF files, directories and wheels (the one binary reader,
//! [`crate::binary`]) checked against an expected arch spec and GPUs, with its table, its JSON
//! (schema in docs/verify-binary.md) and its exit code.

use crate::arch::compat::{runs_on, PtxJit};
use crate::arch::spec::{Plan, PlanContext};
use crate::binary::expect::{check, Expectation, FileCheck};
use crate::binary::input::{audit_paths, FileAudit, Options, Outcome};
use crate::binary::{Compression, ElfAudit, ImageArch, Kind};
use crate::cuda_arch::Cc;
use crate::kb::kb;
use crate::output::Table;
use anyhow::{Context, Result};
use serde::ser::{SerializeMap, Serializer};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What `verify binary` is asked.
#[derive(Debug, Clone, Default)]
pub struct BinaryRequest {
    pub paths: Vec<PathBuf>,
    pub expect_arch: Option<ExpectedArch>,
    pub strict: bool,
    /// GPU names or compute capabilities, resolved through the knowledge base.
    pub gpus: Vec<String>,
    pub ccs: Vec<Cc>,
    pub extract: Option<PathBuf>,
    pub threads: usize,
}

/// Audits the request's paths and checks them: the files' audits, then the report over them.
/// Bad input (an unparsable spec, an unknown GPU) is an error; unreadable files are reported.
/// `unpacked`: wheels this command already unpacked (its load check's), read from there.
pub fn audit(
    req: &BinaryRequest,
    unpacked: Vec<(PathBuf, PathBuf)>,
) -> Result<(Vec<FileAudit>, Expectations)> {
    let expectation = req
        .expect_arch
        .as_ref()
        .map(parse_expectation)
        .transpose()?;
    let mut devices = Vec::new();
    for g in &req.gpus {
        devices.push(kb().resolve_gpu(g)?);
    }
    // A CC is checked as a GPU is: one no device has (`--cc 99.0`) is refused.
    for cc in &req.ccs {
        devices.push(kb().resolve_gpu(&cc.to_string())?);
    }
    let opts = Options {
        extract: req.extract.clone(),
        threads: req.threads,
        kernels_for: devices.iter().map(|(_, cc)| *cc).collect(),
        unpacked,
    };
    Ok((
        audit_paths(&req.paths, &opts),
        Expectations {
            expectation,
            devices,
            strict: req.strict,
        },
    ))
}

/// The checks a report applies: the parsed `--expect-arch`, the devices, `--strict`.
pub struct Expectations {
    pub expectation: Option<Expectation>,
    pub devices: Vec<(String, Cc)>,
    pub strict: bool,
}

/// `--expect-arch` uses the `archs --arch` grammar (names, `+PTX`, `sm_XY`…), parsed without the
/// torch/nvcc acceptance checks: a binary may legitimately carry archs a given torch would refuse.
fn parse_expectation(spec: &ExpectedArch) -> Result<Expectation> {
    let plan = expected_plan(spec.as_str())?;
    Ok(Expectation {
        sass: plan.sass(),
        ptx: plan.ptx(),
    })
}

/// An `--expect-arch` value: a spec whose plan is read where it is typed (no torch or nvcc
/// decides what a binary must carry), so a typo is a usage error (exit 2) before any file is
/// read or any release downloaded.
pub type ExpectedArch = crate::arch::spec::ArchSpec;

/// clap's value parser for `--expect-arch`.
pub fn expected_arch(spec: &str) -> Result<ExpectedArch, String> {
    let typed: ExpectedArch = spec.parse().map_err(|e| format!("{e}"))?;
    Plan::parse_unvalidated(&PlanContext::new(None, None), spec).map_err(|e| format!("{e:#}"))?;
    Ok(typed)
}

/// The plan of `spec`, with no torch or nvcc to narrow it.
pub fn expected_plan(spec: &str) -> Result<Plan> {
    Plan::parse_unvalidated(&PlanContext::new(None, None), spec).with_context(|| {
        format!(
            "invalid --expect-arch `{}`",
            crate::kb::user_input::echo(spec)
        )
    })
}

/// Everything computed for output: audits plus per-file checks and the exit code.
pub struct Report<'a> {
    files: &'a [FileAudit],
    checks: Vec<Option<FileCheck>>,
    /// Per file, one verdict per device (empty for files without device code).
    verdicts: Vec<Vec<DeviceVerdict>>,
    devices: Vec<(String, Cc)>,
    strict: bool,
    pub exit_code: i32,
}

/// Whether one file's kernels load on one device.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DeviceVerdict {
    pub device: String,
    pub cc: Cc,
    pub runs: bool,
    /// The image most containers would load.
    pub via: Option<String>,
    pub reason: String,
    /// Containers with loadable code, and how many of them have an image for this device.
    pub containers: usize,
    pub containers_running: usize,
    /// Where some containers run and others do not: what the others hold, by origin.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub at_risk: Vec<AtRisk>,
}

/// The kernels of a partly covered file that cannot launch on a device, grouped by where they
/// come from (a [`crate::kb::KernelOriginRow`], or `unrecognised`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct AtRisk {
    pub origin: String,
    pub containers: usize,
    pub kernels: usize,
    /// A few short kernel names, for the reader.
    pub examples: Vec<String>,
    pub operations: Option<String>,
    pub workaround: Option<String>,
}

/// Whether a set of files (a wheel, a torch install, a directory) runs on one device: every
/// container of every file (yes), some containers of some file while every file loads at least
/// partly (partly: the kernels of the others fail with "no kernel image"), or a file none of
/// whose containers load (no).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Coverage {
    Yes,
    Partly,
    No,
}

impl Coverage {
    pub fn of<'v>(verdicts: impl IntoIterator<Item = &'v DeviceVerdict>) -> Coverage {
        let mut out = Coverage::Yes;
        for v in verdicts {
            if v.containers_running == 0 {
                return Coverage::No;
            }
            if !v.runs {
                out = Coverage::Partly;
            }
        }
        out
    }
}

/// Groups the kernels of `containers` (those without an image) by origin.
fn at_risk(audit: &ElfAudit, containers: &[usize]) -> Vec<AtRisk> {
    let mut groups: BTreeMap<String, AtRisk> = BTreeMap::new();
    for c in containers {
        let Some(kernels) = audit.kernels.get(c) else {
            continue;
        };
        let origin = kb().kernel_origin(kernels.iter().map(String::as_str));
        let name = origin.map_or("unrecognised".to_string(), |o| o.name.clone());
        let group = groups.entry(name.clone()).or_insert_with(|| AtRisk {
            origin: name,
            containers: 0,
            kernels: 0,
            examples: Vec::new(),
            operations: origin.map(|o| o.operations.clone()),
            workaround: origin.map(|o| o.workaround.clone()),
        });
        group.containers += 1;
        group.kernels += kernels.len();
        if let Some(first) = kernels.first() {
            let short = crate::binary::kernel_names::short_name(first).to_string();
            if group.examples.len() < 4 && !group.examples.contains(&short) {
                group.examples.push(short);
            }
        }
    }
    groups.into_values().collect()
}

impl AtRisk {
    /// `MAGMA (32 containers, 1402 kernels, e.g. zlacpy_conj_kernel, …): OPERATIONS; WORKAROUND`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} ({} containers, {} kernels, e.g. {})",
            self.origin,
            self.containers,
            self.kernels,
            self.examples.join(", ")
        );
        if let Some(o) = &self.operations {
            s.push_str(&format!(": {o} fail with 'no kernel image'"));
        }
        if let Some(w) = &self.workaround {
            s.push_str(&format!("; {w}"));
        }
        s
    }
}

/// Applies the runs-on rules per container: a file runs only if every container (compilation
/// unit) has an image for the device, since a kernel in a container without one cannot launch.
///
/// A device older CUDA releases knew by another CC (Jetson Thor: sm_101 through CUDA 12.9,
/// sm_110 from 13.0; the knowledge base's `earlier_cc`) runs a binary that carries images for
/// either name, as the toolkit that built it named it: each is tried, the newest first.
pub fn file_verdict(audit: &ElfAudit, device: &str, cc: Cc) -> Option<DeviceVerdict> {
    let names = kb().gpu_ccs(device, cc);
    let newest = file_verdict_at(audit, device, cc)?;
    if newest.runs {
        return Some(newest);
    }
    for (earlier, through) in names.into_iter().skip(1) {
        if let Some(mut v) = file_verdict_at(audit, device, earlier).filter(|v| v.runs) {
            if let Some(t) = through {
                v.reason = format!(
                    "{} (CC {earlier}: the {device} as CUDA {t} and older name it, CC {cc} since)",
                    v.reason
                );
            }
            return Some(v);
        }
    }
    Some(newest)
}

fn file_verdict_at(audit: &ElfAudit, device: &str, cc: Cc) -> Option<DeviceVerdict> {
    let sec = audit.counted()?;
    let per = sec.container_images();
    if per.is_empty() {
        return None;
    }
    let jit = PtxJit::default();
    let verdicts: Vec<_> = per.values().map(|imgs| runs_on(imgs, cc, &jit)).collect();
    let without: Vec<usize> = per
        .keys()
        .zip(&verdicts)
        .filter(|(_, v)| !v.runs)
        .map(|(c, _)| *c)
        .collect();
    let running = verdicts.iter().filter(|v| v.runs).count();
    let mut via_counts: BTreeMap<String, usize> = BTreeMap::new();
    for v in verdicts.iter().filter_map(|v| v.via) {
        *via_counts.entry(v.name()).or_insert(0) += 1;
    }
    let via = via_counts
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(name, _)| name.clone());
    let n = verdicts.len();
    let reason = match verdicts.iter().find(|v| !v.runs) {
        None => verdicts
            .first()
            .map(|v| v.reason.clone())
            .unwrap_or_default(),
        Some(bad) if n == 1 => bad.reason.clone(),
        Some(bad) => format!(
            "{} of {n} containers have no image for CC {cc}: {}",
            n - running,
            bad.reason
        ),
    };
    Some(DeviceVerdict {
        device: device.to_string(),
        cc,
        runs: running == n,
        via,
        reason,
        containers: n,
        containers_running: running,
        at_risk: if running > 0 && running < n {
            at_risk(audit, &without)
        } else {
            Vec::new()
        },
    })
}

impl<'a> Report<'a> {
    pub fn new(
        files: &'a [FileAudit],
        expect: Option<&Expectation>,
        strict: bool,
        devices: &[(String, Cc)],
    ) -> Report<'a> {
        let verdicts: Vec<Vec<DeviceVerdict>> = files
            .iter()
            .map(|f| match &f.outcome {
                Outcome::Audited(a) => devices
                    .iter()
                    .filter_map(|(name, cc)| file_verdict(a, name, *cc))
                    .collect(),
                Outcome::Failed(_) => Vec::new(),
            })
            .collect();
        let failed_device = verdicts.iter().flatten().any(|v| !v.runs);
        let checks: Vec<Option<FileCheck>> = files
            .iter()
            .map(|f| match (&f.outcome, expect) {
                (Outcome::Audited(a), Some(e)) => Some(check(a, e)),
                _ => None,
            })
            .collect();
        let failed_read = files
            .iter()
            .any(|f| matches!(f.outcome, Outcome::Failed(_)));
        // Expecting archs of something that has no device code at all (an empty directory or
        // wheel, a CPU-only library) is a failure, not a vacuous pass.
        let no_device_code = expect.is_some()
            && !files
                .iter()
                .any(|f| matches!(&f.outcome, Outcome::Audited(a) if a.has_device_code()));
        let failed_check = failed_device
            || no_device_code
            || checks
                .iter()
                .flatten()
                .any(|c| c.missing_any() || (strict && c.extra_any()));
        let exit_code = if failed_read {
            2
        } else if failed_check {
            1
        } else {
            0
        };
        Report {
            files,
            checks,
            verdicts,
            devices: devices.to_vec(),
            strict,
            exit_code,
        }
    }

    /// The table people read: per file its images, then each file against `--expect-arch`, then
    /// per GPU whether it runs, then the counts and the exit status.
    pub fn table(&self, spec: Option<&str>) -> String {
        let mut out = self.files_table();
        if let Some(spec) = spec {
            out.push_str(&self.expectation_lines(spec));
        }
        for (name, cc) in &self.devices {
            out.push_str(&self.device_lines(name, *cc));
        }
        let errors = self
            .files
            .iter()
            .filter(|f| matches!(f.outcome, Outcome::Failed(_)))
            .count();
        let with_code = self
            .files
            .iter()
            .filter(|f| matches!(&f.outcome, Outcome::Audited(a) if a.has_device_code()))
            .count();
        out.push_str(&format!(
            "\n{} files: {} with device code, {} without, {} unreadable; exit {}\n",
            self.files.len(),
            with_code,
            self.files.len() - with_code - errors,
            errors,
            self.exit_code
        ));
        out
    }

    /// One row per file: SASS, PTX, compression, sections (an error in the last column, which is
    /// not padded, so a long message does not widen the table).
    fn files_table(&self) -> String {
        let mut table = Table::new(["FILE", "SASS", "PTX", "COMPRESSION", "SECTIONS"]);
        for f in self.files {
            let row = match &f.outcome {
                // In the last column, which is not padded, so a long message does not widen the table.
                Outcome::Failed(e) => [
                    display_path(&f.path),
                    "ERROR".into(),
                    String::new(),
                    String::new(),
                    e.to_string(),
                ],
                Outcome::Audited(a) if !a.has_device_code() => [
                    display_path(&f.path),
                    "no device code".into(),
                    String::new(),
                    String::new(),
                    String::new(),
                ],
                Outcome::Audited(a) => [
                    display_path(&f.path),
                    counts_text(&a.counts(Kind::Elf), Kind::Elf),
                    ptx_text(a),
                    compression_text(&a.compression()),
                    sections_text(a),
                ],
            };
            table.row(row);
        }
        table.render()
    }

    /// Each file with device code against the expected arch list.
    fn expectation_lines(&self, spec: &str) -> String {
        let mut out = String::new();
        out.push_str(&format!("\nexpected --expect-arch {spec}:\n"));
        let mut checked = 0;
        for (f, c) in self.files.iter().zip(&self.checks) {
            let (Some(c), Outcome::Audited(a)) = (c, &f.outcome) else {
                continue;
            };
            if !a.has_device_code() {
                continue;
            }
            checked += 1;
            let mut parts = Vec::new();
            for (label, m) in [
                ("missing SASS", &c.missing_sass),
                ("missing PTX", &c.missing_ptx),
            ] {
                if !m.is_empty() {
                    let items: Vec<String> = m
                        .iter()
                        .map(|m| {
                            if m.containers_with == 0 {
                                m.name.clone()
                            } else {
                                format!(
                                    "{} (present in only {} of {} containers)",
                                    m.name, m.containers_with, m.containers
                                )
                            }
                        })
                        .collect();
                    parts.push(format!("{label} {}", items.join(" ")));
                }
            }
            for (label, x) in [("extra SASS", &c.extra_sass), ("extra PTX", &c.extra_ptx)] {
                if !x.is_empty() {
                    let items: Vec<String> = x
                        .iter()
                        .map(|x| format!("{}×{}", x.name, x.count))
                        .collect();
                    parts.push(format!("{label} {}", items.join(" ")));
                }
            }
            let verdict = if c.missing_any() || (self.strict && c.extra_any()) {
                "FAIL"
            } else {
                "ok"
            };
            let detail = if parts.is_empty() {
                "as expected".to_string()
            } else {
                parts.join("; ")
            };
            out.push_str(&format!(
                "  {verdict:<4} {}: {detail}\n",
                display_path(&f.path)
            ));
        }
        if checked == 0 {
            out.push_str(
                "  no file with device code: nothing here carries the expected archs (a CPU-only build, or the wrong path?)\n",
            );
        }
        out
    }

    /// Whether the GPU `name` (at `cc`) runs these files, and why not per file.
    fn device_lines(&self, name: &str, cc: Cc) -> String {
        let mut out = String::new();
        let mine: Vec<(&FileAudit, &DeviceVerdict)> = self
            .files
            .iter()
            .zip(&self.verdicts)
            .filter_map(|(f, vs)| {
                vs.iter()
                    .find(|v| v.device == name && v.cc == cc)
                    .map(|v| (f, v))
            })
            .collect();
        let failing = mine.iter().filter(|(_, v)| !v.runs).count();
        let summary = if mine.is_empty() {
            "no file has device code".to_string()
        } else {
            match Coverage::of(mine.iter().map(|(_, v)| *v)) {
                Coverage::Yes => format!("yes, all {} files with device code", mine.len()),
                Coverage::Partly => format!(
                    "PARTLY, {failing} of {} files with device code carry it in only some containers: their other kernels cannot launch",
                    mine.len()
                ),
                Coverage::No => format!(
                    "NO, {failing} of {} files with device code cannot load",
                    mine.len()
                ),
            }
        };
        let label = if name.starts_with("CC ") {
            name.to_string()
        } else {
            format!("{name} (CC {cc})")
        };
        out.push_str(&format!("\nruns on {label}: {summary}\n"));
        for (f, v) in mine {
            let verdict = if v.runs {
                "ok"
            } else if v.containers_running > 0 {
                "PART"
            } else {
                "FAIL"
            };
            let via = v
                .via
                .as_deref()
                .map(|s| format!(" via {s}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {verdict:<4} {}{via}: {}\n",
                display_path(&f.path),
                v.reason
            ));
            for r in &v.at_risk {
                out.push_str(&format!("       at risk: {}\n", r.describe()));
            }
        }
        out
    }

    pub fn json(&self, spec: Option<&str>) -> serde_json::Value {
        let files: Vec<serde_json::Value> = self
            .files
            .iter()
            .zip(&self.checks)
            .zip(&self.verdicts)
            .map(|((f, c), vs)| match &f.outcome {
                Outcome::Failed(e) => serde_json::json!({
                    "path": f.path,
                    "status": "error",
                    "error": {"message": e.to_string(), "offset": e.offset()},
                }),
                Outcome::Audited(a) => {
                    let mut v = serde_json::json!({"path": f.path});
                    if let (Some(obj), serde_json::Value::Object(rest)) =
                        (v.as_object_mut(), audit_json(a))
                    {
                        obj.extend(rest);
                    }
                    if !self.devices.is_empty() {
                        v["runs_on"] = serde_json::to_value(vs).unwrap_or_default();
                    }
                    if let Some(c) = c {
                        v["expect"] = serde_json::to_value(c).unwrap_or_default();
                    }
                    v
                }
            })
            .collect();
        let devices: Vec<serde_json::Value> = self
            .devices
            .iter()
            .map(|(name, cc)| {
                let vs: Vec<&DeviceVerdict> = self
                    .verdicts
                    .iter()
                    .flatten()
                    .filter(|v| &v.device == name && v.cc == *cc)
                    .collect();
                serde_json::json!({
                    "device": name,
                    "cc": cc,
                    "runs": vs.iter().all(|v| v.runs),
                    "coverage": Coverage::of(vs.iter().copied()),
                    "files_with_device_code": vs.len(),
                    "files_failing": vs.iter().filter(|v| !v.runs).count(),
                })
            })
            .collect();
        serde_json::json!({
            "files": files,
            "expect_arch": spec,
            "devices": devices,
            "exit_code": self.exit_code,
        })
    }
}

/// Serializes per-arch counts as a JSON object in arch order (`sm_75` before `sm_100`).
struct ArchCounts<'a>(&'a BTreeMap<ImageArch, usize>, Kind);

impl serde::Serialize for ArchCounts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (a, n) in self.0 {
            m.serialize_entry(&a.name(self.1), n)?;
        }
        m.end()
    }
}

fn counts_json(m: &BTreeMap<ImageArch, usize>, kind: Kind) -> serde_json::Value {
    // Order survives because serde_json is built with `preserve_order`.
    serde_json::to_value(ArchCounts(m, kind)).unwrap_or_default()
}

fn audit_json(a: &ElfAudit) -> serde_json::Value {
    let sections: Vec<serde_json::Value> = a
        .sections
        .iter()
        .map(|s| {
            serde_json::json!({
                "name": s.name,
                "offset": s.offset,
                "size": s.size,
                "containers": s.containers,
                "counted": s.counted,
                "sass": counts_json(&s.counts(Kind::Elf), Kind::Elf),
                "ptx": counts_json(&s.counts(Kind::Ptx), Kind::Ptx),
                "ir": counts_json(&s.counts(Kind::Ir), Kind::Ir),
                "unknown_entries": s.images.iter().filter(|i| matches!(i.kind, Kind::Unknown(_))).count(),
                "concatenated_images": s.images.iter().filter(|i| i.concatenated).count(),
            })
        })
        .collect();
    let compression: BTreeMap<&str, usize> = a
        .compression()
        .into_iter()
        .map(|(c, n)| (c.name(), n))
        .collect();
    serde_json::json!({
        "status": if a.has_device_code() { "device_code" } else { "no_device_code" },
        "sass": counts_json(&a.counts(Kind::Elf), Kind::Elf),
        "ptx": counts_json(&a.counts(Kind::Ptx), Kind::Ptx),
        "ir": counts_json(&a.counts(Kind::Ir), Kind::Ir),
        "containers": a.counted().map_or(0, |s| s.containers),
        "compression": compression,
        "sections": sections,
    })
}

fn counts_text(m: &BTreeMap<ImageArch, usize>, kind: Kind) -> String {
    if m.is_empty() {
        return "-".into();
    }
    m.iter()
        .map(|(a, n)| format!("{}×{n}", a.name(kind)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// PTX counts, plus NVVM/LTO IR entries when there are any (linkable, not loadable).
fn ptx_text(a: &ElfAudit) -> String {
    let ptx = counts_text(&a.counts(Kind::Ptx), Kind::Ptx);
    let ir = a.counts(Kind::Ir);
    if ir.is_empty() {
        ptx
    } else {
        format!("{ptx} (IR {})", counts_text(&ir, Kind::Ir))
    }
}

fn compression_text(m: &BTreeMap<Compression, usize>) -> String {
    if m.is_empty() {
        return "-".into();
    }
    m.iter()
        .map(|(c, n)| format!("{}×{n}", c.name()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn sections_text(a: &ElfAudit) -> String {
    a.sections
        .iter()
        .map(|s| {
            format!(
                "{}{}({} containers)",
                s.name,
                if s.counted { "*" } else { "" },
                s.containers
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A path for the table: a wheel member (`/long/dir/torch-….whl!torch/lib/x.so`) is shown with the
/// wheel's file name only, so the table stays readable; `--json` keeps full paths.
fn display_path(path: &str) -> String {
    match path.split_once(".whl!") {
        Some((wheel, member)) => {
            let name = std::path::Path::new(wheel)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            format!("{name}.whl!{member}")
        }
        None => path.to_string(),
    }
}

/// Names each file that could not be read, on stderr (the report counts them).
pub fn print_read_errors(files: &[FileAudit]) {
    for f in files {
        if let crate::binary::Outcome::Failed(e) = &f.outcome {
            crate::errln!("error: {}: {e}", f.path);
        }
    }
}
