//! `bench abi-checkers`: the range verdict (`verify binary --target`) side by side with the two
//! stable-ABI checkers a user would otherwise run, `torch-abi-audit` and `kernel-abi-check` (both
//! from PyPI, installed once under archsmith's tools dir), on every shared object of some wheels,
//! in one run: each tool's verdict, where they disagree (with the real exports that decide it:
//! the symbols the release lacks), and each tool's time.
//!
//! torch-abi-audit classifies a file's undefined symbols by name (the `aoti_torch_*`/`torch_*`
//! shims it knows, the C++ namespaces it treats as unstable) and states the CPython limited-API
//! compliance of an `abi3` file; kernel-abi-check's Python API states only the CPython side
//! (`check_python_abi`). Neither resolves a symbol against a torch release: archsmith reads each
//! release's real exports.

use super::load_check_vs_python::{module_name, module_sets};
use crate::process::Cmd;
use crate::verify::load_check::limited_api::claims_abi3;
use crate::verify::load_check::release_range::{FileFit, RangeReport};
use anyhow::{anyhow, Context, Result};
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The checkers compared, as the issue that asked for the comparison names them.
const CHECKERS: [&str; 2] = ["torch-abi-audit==0.3.0", "kernel-abi-check==0.14.1"];
/// The oldest CPython an `abi3` file is checked against (torch's own `min_supported_cpython` is
/// 3.10; 3.9 is what the checkers default to and what a wheel tagged cp39-abi3 claims).
const ABI3_FLOOR: &str = "3.9";

#[derive(Debug, Clone, Default)]
pub struct AbiCheckersRequest {
    pub wheels: Vec<PathBuf>,
    /// `torch>=2.11,<2.16`: the releases archsmith checks against.
    pub range: String,
}

/// One shared object: the three verdicts.
#[derive(Debug, Serialize)]
pub struct CheckerRow {
    pub wheel: String,
    pub module: String,
    /// archsmith: `stable`, `tied` or `no-torch`; the releases it loads on.
    pub archsmith: String,
    pub loads_on: Vec<String>,
    /// The symbols the first release it does not load on lacks (the first five).
    pub missing: Vec<String>,
    /// torch-abi-audit: `stable`, `unstable` or `no-torch`, and its minimum torch.
    pub torch_abi_audit: String,
    pub torch_abi_audit_min: Option<String>,
    /// archsmith's CPython verdict for a file tagged `abi3`: the Python symbols outside the
    /// limited API its wheel tag's CPython declares ([`crate::verify::load_check::limited_api`]).
    pub abi3_archsmith: Option<usize>,
    /// torch-abi-audit's CPython verdict for a file tagged `abi3`: the symbols outside the
    /// limited API.
    pub abi3_torch_abi_audit: Option<usize>,
    /// kernel-abi-check's CPython verdict: the Python symbols outside the stable ABI of 3.9.
    pub abi3_kernel_abi_check: Option<usize>,
    /// archsmith and torch-abi-audit say the same of stable vs tied.
    pub agree: bool,
    /// Where archsmith's verdict says more than stable/tied: why a release of the range is
    /// refused (a symbol it lacks, the CUDA runtime its wheel does not bring).
    pub note: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct AbiCheckersReport {
    pub range: String,
    pub rows: Vec<CheckerRow>,
    pub agree: usize,
    pub archsmith_s: f64,
    pub torch_abi_audit_s: f64,
    pub kernel_abi_check_s: f64,
}

pub fn run(req: &AbiCheckersRequest) -> Result<AbiCheckersReport> {
    let python = crate::python::host_python()?;
    let tools = checkers(&python)?;
    let sets = module_sets(&python, &req.wheels)?;
    let files: Vec<PathBuf> = sets.iter().flat_map(|(_, _, f)| f.clone()).collect();
    // The exports lists first (read from PyPI where missing), so the timing is of the verdicts.
    RangeReport::check(&req.range, &files[..files.len().min(1)])?;
    let started = Instant::now();
    let range = RangeReport::check(&req.range, &files)?;
    let archsmith_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let audit = torch_abi_audit(&python, &tools, &files)?;
    let torch_abi_audit_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let kac = kernel_abi_check(&python, &tools, &files)?;
    let kernel_abi_check_s = started.elapsed().as_secs_f64();
    // The range report by path: it leaves out a file it cannot read, so positions may differ.
    let fits: HashMap<&str, &FileFit> = range.files.iter().map(|f| (f.path.as_str(), f)).collect();
    let mut rows = Vec::new();
    let mut k = 0;
    for (wheel, site, set) in &sets {
        for file in set {
            let shown = file.display().to_string();
            let fit = fits
                .get(shown.as_str())
                .ok_or_else(|| anyhow!("{shown}: not read by the range verdict"))?;
            rows.push(row(wheel, module_name(site, file), fit, &audit[k], kac[k]));
            k += 1;
        }
    }
    Ok(AbiCheckersReport {
        range: req.range.clone(),
        agree: rows.iter().filter(|r| r.agree).count(),
        rows,
        archsmith_s,
        torch_abi_audit_s,
        kernel_abi_check_s,
    })
}

/// One file's row: archsmith's verdict (and, where a release of the range refuses it, why),
/// torch-abi-audit's and kernel-abi-check's.
fn row(
    wheel: &Option<String>,
    module: String,
    fit: &FileFit,
    audit: &Audit,
    kernel_abi_check: usize,
) -> CheckerRow {
    let verdict = fit.torch.as_ref();
    let refused = verdict.and_then(|v| v.releases.iter().find(|r| !r.loads));
    let note = refused.map(|r| match (&r.cuda_mismatch, r.first_missing.first()) {
        (Some(cuda), _) => format!("not on {}: {cuda}", r.torch),
        (None, Some(symbol)) => format!(
            "not on {}: lacks {} symbol(s), first `{symbol}`",
            r.torch, r.missing
        ),
        (None, None) => format!("not on {}", r.torch),
    });
    use crate::verify::load_check::torch_abi::AbiKind;
    let kind = verdict.map(|v| v.tally.kind);
    let agree = match kind {
        Some(AbiKind::Stable) => audit.verdict == "stable",
        Some(AbiKind::Tied) => audit.verdict == "unstable",
        None => audit.verdict == "no-torch",
    };
    let archsmith = kind.map_or("no-torch", AbiKind::as_str).to_string();
    CheckerRow {
        wheel: wheel.clone().unwrap_or_default(),
        module,
        loads_on: verdict.map(|v| v.loads_on.clone()).unwrap_or_default(),
        missing: refused
            .map(|r| r.first_missing.iter().take(5).cloned().collect())
            .unwrap_or_default(),
        archsmith,
        torch_abi_audit: audit.verdict.clone(),
        torch_abi_audit_min: audit.min_torch.clone(),
        abi3_archsmith: fit.abi3.as_ref().map(|a| a.violations.len()),
        abi3_torch_abi_audit: audit.abi3,
        abi3_kernel_abi_check: claims_abi3(&fit.path).then_some(kernel_abi_check),
        agree,
        note,
    }
}

/// Both checkers installed once (`--target`) under archsmith's tools dir.
fn checkers(python: &Path) -> Result<PathBuf> {
    let tools = crate::paths::cache_dir().join("tools");
    let packages: Vec<String> = CHECKERS.iter().map(|s| s.to_string()).collect();
    crate::cache::provision(
        &tools,
        "abi-checkers",
        "torch-abi-audit and kernel-abi-check",
        &|dir| {
            Ok(dir
                .join("torch_abi_audit")
                .is_dir()
                .then(|| dir.to_path_buf()))
        },
        &mut |staging, progress| {
            progress(&format!("installing {} from PyPI", packages.join(" ")));
            crate::python::installer::Installer::detect()?
                .install_target(python, &packages, staging, false)
        },
        &mut |m| crate::errln!("archsmith: {m}"),
    )
}

/// torch-abi-audit's reading of one file.
struct Audit {
    verdict: String,
    min_torch: Option<String>,
    abi3: Option<usize>,
}

fn torch_abi_audit(python: &Path, tools: &Path, files: &[PathBuf]) -> Result<Vec<Audit>> {
    let mut out = Vec::new();
    for file in files {
        // Exit 0 or 1 (a policy it was not asked to gate): its JSON is the answer either way.
        let json = Cmd::new(python)
            .args([
                "-c",
                "import sys; from torch_abi_audit.cli import main; sys.exit(main())",
                "--json",
            ])
            .arg(file)
            .env("PYTHONPATH", tools)
            .output()
            .with_context(|| format!("torch-abi-audit {}", file.display()))?
            .stdout;
        let v: serde_json::Value = serde_json::from_str(&json)
            .with_context(|| format!("torch-abi-audit {}: not JSON: {json}", file.display()))?;
        // A Python module is an "extension"; a library without PyInit_ (loaded with
        // torch.ops.load_library) a "bundled lib".
        let ext = match &v["extensions"][0] {
            serde_json::Value::Null => &v["bundled_libs"][0],
            e => e,
        };
        let torch = &ext["torch"];
        let verdict = match (torch["uses_torch"].as_bool(), torch["stable"].as_bool()) {
            (Some(false), _) => "no-torch",
            (_, Some(true)) => "stable",
            (Some(true), _) => "unstable",
            _ => "error",
        };
        out.push(Audit {
            verdict: verdict.to_string(),
            min_torch: torch["min_torch_version"].as_str().map(str::to_string),
            // Tagged abi3: its violations (a tagged library with no C API at all has none; the
            // tool's `compliant` is false there, its report says "abi3-tagged-no-capi").
            abi3: ext["cpython"]["intent"]
                .as_bool()
                .filter(|i| *i)
                .and_then(|_| ext["cpython"]["violations"].as_array().map(Vec::len)),
        });
    }
    Ok(out)
}

/// kernel-abi-check's `check_python_abi(3.9)` on each file: the number of violations.
fn kernel_abi_check(python: &Path, tools: &Path, files: &[PathBuf]) -> Result<Vec<usize>> {
    let script = format!(
        "import sys, kernel_abi_check as k\nfor f in sys.argv[1:]:\n    print(len(k.ObjectFile(f).check_python_abi('{ABI3_FLOOR}')))\n"
    );
    let text = Cmd::new(python)
        .args(["-c", &script])
        .args(files)
        .env("PYTHONPATH", tools)
        .read()
        .context("kernel-abi-check")?;
    let counts: Vec<usize> = text
        .lines()
        .map(|l| {
            l.trim()
                .parse()
                .map_err(|_| anyhow!("kernel-abi-check printed {l:?}"))
        })
        .collect::<Result<_>>()?;
    if counts.len() != files.len() {
        return Err(anyhow!(
            "kernel-abi-check answered {} of {} files",
            counts.len(),
            files.len()
        ));
    }
    Ok(counts)
}

impl AbiCheckersReport {
    pub fn table(&self) -> String {
        let mut t = crate::output::Table::new([
            "MODULE",
            "ARCHSMITH",
            "LOADS ON",
            "TORCH-ABI-AUDIT",
            "ABI3 (ARCHSMITH / AUDIT / KERNEL-ABI-CHECK)",
            "AGREE",
        ]);
        for r in &self.rows {
            let abi3 = match (
                r.abi3_archsmith,
                r.abi3_torch_abi_audit,
                r.abi3_kernel_abi_check,
            ) {
                (None, None, None) => "-".to_string(),
                (m, a, k) => {
                    let say = |n: Option<usize>| match n {
                        None => "-".to_string(),
                        Some(0) => "ok".to_string(),
                        Some(n) => format!("{n} symbol(s)"),
                    };
                    format!("{} / {} / {}", say(m), say(a), say(k))
                }
            };
            let loads = match (r.loads_on.first(), r.loads_on.last()) {
                (Some(a), Some(b)) if a != b => format!("{a}–{b}"),
                (Some(a), _) => a.clone(),
                _ => "none".into(),
            };
            let audit = match &r.torch_abi_audit_min {
                Some(m) => format!("{} (>= {m})", r.torch_abi_audit),
                None => r.torch_abi_audit.clone(),
            };
            t.row([
                r.module.clone(),
                r.archsmith.clone(),
                loads,
                audit,
                abi3,
                if r.agree { "yes" } else { "NO" }.to_string(),
            ]);
        }
        let mut s = t.render();
        s.push_str(&format!(
            "\n{} of {} agree (stable vs tied) over {}; archsmith {:.2} s, torch-abi-audit {:.2} s, kernel-abi-check {:.2} s\n",
            self.agree,
            self.rows.len(),
            self.range,
            self.archsmith_s,
            self.torch_abi_audit_s,
            self.kernel_abi_check_s
        ));
        for r in self.rows.iter().filter(|r| r.note.is_some()) {
            s.push_str(&format!(
                "{} ({}): {} {}\n",
                r.module,
                r.wheel,
                r.archsmith,
                r.note.as_deref().unwrap_or_default()
            ));
        }
        for r in self.rows.iter().filter(|r| !r.agree) {
            s.push_str(&format!(
                "{}: archsmith {} (loads on {:?}; first release it does not load on lacks {:?}), torch-abi-audit {}\n",
                r.module, r.archsmith, r.loads_on, r.missing, r.torch_abi_audit
            ));
        }
        s
    }
}
