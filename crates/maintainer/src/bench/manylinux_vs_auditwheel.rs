//! `bench manylinux`: the platform tag archsmith gives a wheel ([`crate::binary::platform_tag`])
//! side by side with `auditwheel show --json` (auditwheel from PyPI, installed once under
//! archsmith's tools dir), on some wheels, in one run: the tag the symbol versions allow
//! (auditwheel's `sym_tag`), the libraries outside the policies' lists with torch's left to torch
//! (auditwheel's `external_libs` less those, which `auditwheel repair --exclude` leaves), and each
//! tool's time.

use crate::binary::platform_tag::{self, PlatformTag};
use crate::process::Cmd;
use anyhow::{Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The auditwheel whose policy file the knowledge base's `[[manylinux_policy]]` rows copy.
const AUDITWHEEL: &str = "auditwheel==6.8.2";

/// One wheel: both readings.
#[derive(Debug, Serialize)]
pub struct TagRow {
    pub wheel: String,
    pub archsmith: PlatformTag,
    /// auditwheel's `sym_tag`.
    pub auditwheel_symbol_tag: String,
    /// auditwheel's `external_libs` less torch's.
    pub auditwheel_external: Vec<String>,
    /// auditwheel's `overall_tag` (torch's libraries counted as external).
    pub auditwheel_overall: String,
    pub agree: bool,
}

#[derive(Debug, Serialize)]
pub struct ManylinuxReport {
    pub rows: Vec<TagRow>,
    pub agree: usize,
    pub archsmith_s: f64,
    pub auditwheel_s: f64,
}

pub fn run(wheels: &[PathBuf]) -> Result<ManylinuxReport> {
    let python = crate::python::host_python()?;
    let tools = auditwheel(&python)?;
    let started = Instant::now();
    let ours = wheels
        .iter()
        .map(|w| platform_tag::of_wheel(w))
        .collect::<Result<Vec<_>>>()?;
    let archsmith_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let theirs = wheels
        .iter()
        .map(|w| show(&python, &tools, w))
        .collect::<Result<Vec<_>>>()?;
    let auditwheel_s = started.elapsed().as_secs_f64();
    let rows: Vec<TagRow> = wheels
        .iter()
        .zip(ours)
        .zip(theirs)
        .map(|((w, archsmith), v)| {
            let text = |k: &str| v[k].as_str().unwrap_or("?").to_string();
            let mut external: Vec<String> = v["external_libs"]
                .as_object()
                .map(|m| {
                    m.keys()
                        .filter(|l| !platform_tag::is_torch_library_name(l))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            external.sort();
            let symbol_tag = text("sym_tag");
            TagRow {
                wheel: w
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                agree: archsmith.symbol_tag == symbol_tag && archsmith.external == external,
                archsmith,
                auditwheel_symbol_tag: symbol_tag,
                auditwheel_external: external,
                auditwheel_overall: text("overall_tag"),
            }
        })
        .collect();
    Ok(ManylinuxReport {
        agree: rows.iter().filter(|r| r.agree).count(),
        rows,
        archsmith_s,
        auditwheel_s,
    })
}

/// `auditwheel show --json WHEEL`.
fn show(python: &Path, tools: &Path, wheel: &Path) -> Result<serde_json::Value> {
    let json = Cmd::new(python)
        .args([
            "-c",
            "import sys; from auditwheel.main import main; sys.exit(main())",
        ])
        .args(["show", "--json"])
        .arg(wheel)
        .env("PYTHONPATH", tools)
        .read()
        .with_context(|| format!("auditwheel show {}", wheel.display()))?;
    serde_json::from_str(&json)
        .with_context(|| format!("auditwheel show {}: not JSON: {json}", wheel.display()))
}

/// auditwheel installed once (`--target`) under archsmith's tools dir.
fn auditwheel(python: &Path) -> Result<PathBuf> {
    let tools = crate::paths::cache_dir().join("tools");
    crate::cache::provision(
        &tools,
        "auditwheel",
        "auditwheel",
        &|dir| Ok(dir.join("auditwheel").is_dir().then(|| dir.to_path_buf())),
        &mut |staging, progress| {
            progress(&format!("installing {AUDITWHEEL} from PyPI"));
            crate::python::installer::Installer::detect()?.install_target(
                python,
                &[AUDITWHEEL.to_string()],
                staging,
                false,
            )
        },
        &mut |m| crate::errln!("archsmith: {m}"),
    )
}

impl ManylinuxReport {
    pub fn table(&self) -> String {
        let mut t = crate::output::Table::new([
            "wheel",
            "archsmith tag",
            "symbols: archsmith / auditwheel",
            "external (torch's left out)",
            "agree",
        ]);
        for r in &self.rows {
            t.row([
                r.wheel.clone(),
                r.archsmith.tag.clone(),
                format!("{} / {}", r.archsmith.symbol_tag, r.auditwheel_symbol_tag),
                format!("{:?} / {:?}", r.archsmith.external, r.auditwheel_external),
                if r.agree { "yes" } else { "NO" }.to_string(),
            ]);
        }
        format!(
            "{}{} of {} agree; archsmith {:.2} s, auditwheel show {:.2} s\n",
            t.render(),
            self.agree,
            self.rows.len(),
            self.archsmith_s,
            self.auditwheel_s
        )
    }
}
