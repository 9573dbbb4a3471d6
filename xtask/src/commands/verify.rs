//! `cargo xtask verify …`: checks of what was built. `verify binary` audits the SASS and PTX that
//! ELF files, directories and wheels really carry (see docs/verify-binary.md).

use crate::arch::Arch;
use crate::binary::expect::{check, Expectation, FileCheck};
use crate::binary::source::{audit_paths, FileAudit, Options, Outcome};
use crate::binary::{Compression, ElfAudit, ImageArch, Kind};
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use serde::ser::{SerializeMap, Serializer};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(subcommand)]
    pub what: VerifyCommand,
}

#[derive(Debug, Subcommand)]
pub enum VerifyCommand {
    /// Which SASS and PTX ELF files, directories or wheels really carry (read from the fatbin
    /// headers in pure Rust). Exit 0 ok, 1 an expectation failed, 2 unreadable or malformed input.
    Binary(BinaryArgs),
}

#[derive(Debug, Args)]
pub struct BinaryArgs {
    /// ELF files (.so, .o, executables), directories (walked) or wheels (.whl).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Arch spec the files must carry, e.g. `7.5,8.0,12.0+PTX`: missing SASS/PTX fail (exit 1).
    #[arg(long, value_name = "SPEC")]
    pub expect_arch: Option<String>,
    /// With --expect-arch: images beyond the spec fail too.
    #[arg(long, requires = "expect_arch")]
    pub strict: bool,
    /// Print JSON (schema in docs/verify-binary.md) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Decompress and write every cubin/PTX under DIR (one folder per file).
    #[arg(long, value_name = "DIR")]
    pub extract: Option<PathBuf>,
    /// Threads for inflating wheel members (default: all CPUs).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
}

pub fn run(args: VerifyArgs) -> Result<i32> {
    match args.what {
        VerifyCommand::Binary(b) => binary(b),
    }
}

/// Temporary `--expect-arch` grammar until `arch::spec` lands on main: comma/semicolon/space
/// separated `X.Y[a|f][+PTX]`; `+PTX` asks for PTX of that arch as well as its SASS.
fn parse_expectation(spec: &str) -> Result<Expectation> {
    let mut e = Expectation::default();
    for item in spec
        .split([',', ';', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let (arch, ptx) = match item
            .strip_suffix("+PTX")
            .or_else(|| item.strip_suffix("+ptx"))
        {
            Some(a) => (a, true),
            None => (item, false),
        };
        let a: Arch = arch.parse()?;
        if !e.sass.contains(&a) {
            e.sass.push(a);
        }
        if ptx && !e.ptx.contains(&a) {
            e.ptx.push(a);
        }
    }
    if e.sass.is_empty() {
        bail!("--expect-arch `{spec}` names no arch");
    }
    Ok(e)
}

fn binary(args: BinaryArgs) -> Result<i32> {
    let expectation = args
        .expect_arch
        .as_deref()
        .map(parse_expectation)
        .transpose()?;
    let opts = Options {
        extract: args.extract.clone(),
        threads: args.threads,
    };
    let files = audit_paths(&args.paths, &opts);
    let report = Report::new(&files, expectation.as_ref(), args.strict);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report.json(args.expect_arch.as_deref()))?
        );
    } else {
        print!("{}", report.table(args.expect_arch.as_deref()));
    }
    for f in &files {
        if let Outcome::Failed(e) = &f.outcome {
            eprintln!("error: {}: {e}", f.path);
        }
    }
    Ok(report.exit_code)
}

/// Everything computed for output: audits plus per-file checks and the exit code.
pub struct Report<'a> {
    files: &'a [FileAudit],
    checks: Vec<Option<FileCheck>>,
    strict: bool,
    pub exit_code: i32,
}

impl<'a> Report<'a> {
    pub fn new(files: &'a [FileAudit], expect: Option<&Expectation>, strict: bool) -> Report<'a> {
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
        let failed_check = checks
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
            strict,
            exit_code,
        }
    }

    pub fn table(&self, spec: Option<&str>) -> String {
        let mut rows: Vec<[String; 5]> =
            vec![["FILE", "SASS", "PTX", "COMPRESSION", "SECTIONS"].map(String::from)];
        for f in self.files {
            let row = match &f.outcome {
                Outcome::Failed(e) => [
                    f.path.clone(),
                    format!("ERROR {e}"),
                    String::new(),
                    String::new(),
                    String::new(),
                ],
                Outcome::Audited(a) if !a.has_device_code() => [
                    f.path.clone(),
                    "no device code".into(),
                    String::new(),
                    String::new(),
                    String::new(),
                ],
                Outcome::Audited(a) => [
                    f.path.clone(),
                    counts_text(&a.counts(Kind::Elf), Kind::Elf),
                    counts_text(&a.counts(Kind::Ptx), Kind::Ptx),
                    compression_text(&a.compression()),
                    sections_text(a),
                ],
            };
            rows.push(row);
        }
        let mut widths = [0usize; 5];
        for r in &rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in &rows {
            let mut line = String::new();
            for (i, (c, w)) in r.iter().zip(widths).enumerate() {
                if i + 1 == r.len() {
                    line.push_str(c);
                } else {
                    line.push_str(&format!("{c:<w$}  "));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        if let Some(spec) = spec {
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
                                        "{} (in {} of {} containers)",
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
                out.push_str(&format!("  {verdict:<4} {}: {detail}\n", f.path));
            }
            if checked == 0 {
                out.push_str("  (no file with device code)\n");
            }
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

    pub fn json(&self, spec: Option<&str>) -> serde_json::Value {
        let files: Vec<serde_json::Value> = self
            .files
            .iter()
            .zip(&self.checks)
            .map(|(f, c)| match &f.outcome {
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
                    if let Some(c) = c {
                        v["expect"] = serde_json::to_value(c).unwrap_or_default();
                    }
                    v
                }
            })
            .collect();
        serde_json::json!({
            "schema": 1,
            "files": files,
            "expect_arch": spec,
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
