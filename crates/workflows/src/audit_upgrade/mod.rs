//! `audit upgrade --from A --to B [PATH]`: what in a project's sources a torch upgrade breaks or
//! deprecates. Python sources are read as syntax trees and matched against the Python rule
//! catalogue (`crates/codemod/rules/torch-python.toml`, the rows the port rewrites with; a source and
//! real-wheel evidence per row, extendable with `--changes FILE`); C++/CUDA sources go through the
//! port's token rule catalogue (the codemod's, in dry-run). Files are walked with `ignore`
//! (git-ignored and hidden files skipped).

use crate::codemod;
pub use crate::codemod::python_source::{
    builtin_changes, parse_changes, row_for, Change, Evidence,
};
use crate::version::Version;
use anyhow::{bail, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

pub const CHANGES_PATH: &str = crate::codemod::python_source::BUILTIN_NAME;

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    pub api: String,
    /// The code as written (`amp.autocast`).
    pub code: String,
    /// `removed in 2.4`, `deprecated since 2.4`, …
    pub what: String,
    /// The change held already at `--from`.
    pub before_from: bool,
    pub reason: String,
    pub fix: String,
    pub source: String,
}

/// A file or directory the audit could not read: what it did not see.
#[derive(Debug, Clone, Serialize)]
pub struct Unreadable {
    pub path: PathBuf,
    pub error: String,
}

#[derive(Debug, Serialize)]
pub struct AuditReport {
    pub from: Version,
    pub to: Version,
    pub python_files: usize,
    /// What could not be read: the result says nothing of it, so it is never clean.
    pub unreadable: Vec<Unreadable>,
    pub findings: Vec<Finding>,
    /// C++/CUDA sources the port catalogue would rewrite or flags for review.
    pub native: Vec<codemod::FileReport>,
    /// With `--installed`: the compiled modules of that env that would not load after the
    /// upgrade (the load check against the target torch's env).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compiled: Option<CompiledCheck>,
    /// The rules the run applied, as code scanning describes them (`--format sarif`).
    #[serde(skip)]
    pub rule_docs: Vec<crate::lint::RuleDoc>,
    /// `native` as a linter's findings, worded from the port catalogue the run used.
    #[serde(skip)]
    native_diagnostics: Vec<crate::lint::Diagnostic>,
}

/// The installed compiled packages read against the torch they would run with after the upgrade.
#[derive(Debug, Serialize)]
pub struct CompiledCheck {
    pub installed: PathBuf,
    pub target: PathBuf,
    pub checked: usize,
    pub breaking: Vec<crate::verify::load_check::LoadVerdict>,
    /// The same modules over the target release by its real exports: which are on torch's stable
    /// ABI (they keep loading on later torches too) and which are tied to one torch's C++ ABI
    /// (None where the release's exports could not be read, offline with none kept).
    pub torch_range: Option<crate::verify::load_check::release_range::RangeReport>,
}

impl CompiledCheck {
    /// How many of the modules are on torch's stable ABI and how many tied to one torch.
    fn stable_or_tied(&self) -> String {
        let Some(r) = &self.torch_range else {
            return String::new();
        };
        use crate::verify::load_check::torch_abi::AbiKind;
        let kinds: Vec<AbiKind> = r
            .files
            .iter()
            .filter_map(|f| f.torch.as_ref())
            .map(|t| t.tally.kind)
            .collect();
        let stable = kinds.iter().filter(|k| **k == AbiKind::Stable).count();
        format!(
            "of them, {stable} on torch's stable ABI (they keep loading on later torches) and {} tied to one torch's C++ ABI (rebuilt at every upgrade); {} verify binary --target 'torch>=A,<B' says which releases each loads on\n",
            kinds.len() - stable,
            crate::output::program()
        )
    }
}

impl AuditReport {
    pub fn table(&self) -> String {
        let mut s = format!(
            "torch {} → {}: {} Python file(s), {} finding(s); {} C++/CUDA file(s) the port catalogue would change\n",
            self.from,
            self.to,
            self.python_files,
            self.findings.len(),
            self.native.iter().filter(|f| f.changed || !f.review.is_empty()).count()
        );
        let mut t = self.unreadable_rows(&mut s);
        for f in &self.findings {
            t.row([
                format!("{}:{}", f.file.display(), f.line),
                f.code.clone(),
                format!("{} {}", f.api, f.what),
                f.fix.clone(),
            ]);
        }
        for f in self
            .native
            .iter()
            .filter(|f| f.changed || !f.review.is_empty())
        {
            let rules: Vec<String> = f.rewrites.iter().map(|(r, n)| format!("{r}×{n}")).collect();
            if !rules.is_empty() {
                t.row([
                    f.path.display().to_string(),
                    String::new(),
                    format!("port rules: {}", rules.join(" ")),
                    format!(
                        "{} codemod PATH --dry-run shows the diff",
                        crate::output::program()
                    ),
                ]);
            }
            for r in &f.review {
                t.row([
                    format!("{}:{}", f.path.display(), r.line),
                    r.code.clone(),
                    format!("review: {}", r.message),
                    r.suggestion.clone(),
                ]);
            }
        }
        if let Some(c) = &self.compiled {
            for v in &c.breaking {
                t.row([
                    v.path.clone(),
                    String::new(),
                    format!("will not load: {}", v.reason.as_deref().unwrap_or("")),
                    v.fix.clone().unwrap_or_default(),
                ]);
            }
            s += &format!(
                "{} compiled module(s) of {} read against torch {} ({}): {} will not load\n",
                c.checked,
                c.installed.display(),
                self.to,
                c.target.display(),
                c.breaking.len()
            );
            s += &c.stable_or_tied();
        }
        if !t.is_empty() {
            s += &t.render();
        }
        s
    }

    /// The line that says what could not be read, and the table begun with a row for each.
    fn unreadable_rows(&self, s: &mut String) -> crate::output::Table {
        if !self.unreadable.is_empty() {
            *s += &format!(
                "{} path(s) could not be read, so nothing is said of them: make them readable and run again\n",
                self.unreadable.len()
            );
        }
        let mut t = crate::output::Table::new(["WHERE", "CODE", "WHAT", "FIX"]);
        for u in &self.unreadable {
            t.row([
                u.path.display().to_string(),
                String::new(),
                format!("not read: {}", u.error),
                "make it readable".to_string(),
            ]);
        }
        t
    }

    pub fn is_clean(&self) -> bool {
        self.unreadable.is_empty()
            && self.compiled.as_ref().is_none_or(|c| c.breaking.is_empty())
            && self.findings.is_empty()
            && self
                .native
                .iter()
                .all(|f| !f.changed && f.review.is_empty())
    }
}

#[derive(Debug, Clone)]
pub struct AuditRequest {
    pub from: Version,
    pub to: Version,
    /// Directories and files (pre-commit passes the staged files).
    pub paths: Vec<PathBuf>,
    /// Extra change tables (`--changes FILE`).
    pub changes: Vec<PathBuf>,
    /// `--select` / `--ignore`: rows by API, port rules by id.
    pub selection: crate::lint::Selection,
    /// The env whose compiled packages to check against the target torch (`--installed`).
    pub installed: Option<PathBuf>,
    /// An env with the target torch (`--to-python`); default: archsmith's torch `to` env.
    pub to_python: Option<PathBuf>,
}

/// Distributions the upgrade replaces along with torch: their modules are not checked.
const REPLACED_WITH_TORCH: &[&str] = &["torch", "functorch", "torchgen", "nvidia", "triton"];

/// Every compiled module of `installed` that belongs to another package, against `to`'s torch.
fn compiled_check(req: &AuditRequest) -> Result<Option<CompiledCheck>> {
    use crate::verify::load_check::release_range::RangeReport;
    use crate::verify::load_check::{check_paths, compiled_modules, linker::Objects, Target};
    let Some(installed) = &req.installed else {
        return Ok(None);
    };
    let target_python = match &req.to_python {
        Some(p) => p.clone(),
        None => crate::python::ensure_torch_env(&req.to)?.python,
    };
    let site = crate::python::probe(installed, crate::python::Depth::Files)?.purelib;
    let mut objects = Objects::default();
    let modules: Vec<PathBuf> = compiled_modules(&site, &mut objects)?
        .into_iter()
        .filter(|m| {
            let top = m
                .strip_prefix(&site)
                .ok()
                .and_then(|r| r.components().next());
            let top = top
                .map(|c| c.as_os_str().to_string_lossy().to_string())
                .unwrap_or_default();
            !REPLACED_WITH_TORCH.contains(&top.as_str())
        })
        .collect();
    let target = Target::from_python(&target_python, &mut objects)?;
    let verdicts = check_paths(&target, &mut objects, &modules)?;
    let range = format!("torch=={}", req.to);
    let torch_range = RangeReport::check(&range, &modules)
        .inspect_err(|e| crate::errln!("warning: no stable/tied verdict over {range}: {e:#}"))
        .ok();
    Ok(Some(CompiledCheck {
        installed: installed.clone(),
        target: target_python,
        checked: verdicts.len(),
        breaking: verdicts.into_iter().filter(|v| !v.loads).collect(),
        torch_range,
    }))
}

/// Python files under `root`, git-ignored and hidden ones skipped; what could not be listed goes
/// to `unreadable`.
fn python_files(root: &Path, unreadable: &mut Vec<Unreadable>) -> Vec<PathBuf> {
    if root.is_file() {
        return if root.extension().is_some_and(|x| x == "py") {
            vec![root.to_path_buf()]
        } else {
            Vec::new()
        };
    }
    let mut out = Vec::new();
    for entry in ignore::WalkBuilder::new(root).build() {
        match entry {
            Ok(e) if e.file_type().is_some_and(|t| t.is_file()) => {
                let p = e.into_path();
                if p.extension().is_some_and(|x| x == "py") {
                    out.push(p);
                }
            }
            Ok(_) => {}
            Err(e) => unreadable.push(Unreadable {
                path: codemod::walk_error_path(&e).unwrap_or_else(|| root.to_path_buf()),
                error: codemod::walk_error_reason(&e),
            }),
        }
    }
    out.sort();
    out
}

/// The change rows and port catalogue the request selects: built-in, `--changes`, `--select`.
fn rules(
    req: &AuditRequest,
) -> Result<(Vec<Change>, std::borrow::Cow<'static, codemod::Catalogue>)> {
    let mut changes = builtin_changes();
    for f in &req.changes {
        let text = crate::input_file::read_text(f, "change table")?;
        changes.extend(parse_changes(&f.display().to_string(), &text)?);
    }
    let port = codemod::catalogue::builtin();
    if req.selection.is_everything() {
        return Ok((changes, std::borrow::Cow::Borrowed(port)));
    }
    let mut known = port.rule_ids();
    known.extend(changes.iter().map(|c| c.api.clone()));
    req.selection.check_known(
        &known,
        "the rows of crates/codemod/rules/torch-python.toml and `codemod --list-rules`",
    )?;
    changes.retain(|c| req.selection.allows(&c.api));
    Ok((
        changes,
        std::borrow::Cow::Owned(port.selected(&req.selection)),
    ))
}

/// The uses of `changes`' APIs in one Python file, minus those a comment keeps off their line;
/// an error when the file cannot be read.
fn file_findings(
    req: &AuditRequest,
    changes: &[Change],
    f: &Path,
) -> std::result::Result<Vec<Finding>, Unreadable> {
    let src = crate::input_file::read_text(f, "Python source").map_err(|e| Unreadable {
        path: f.to_path_buf(),
        error: match e {
            crate::input_file::InputError::Io { source, .. } => source.to_string(),
            other => other.to_string(),
        },
    })?;
    let Some(uses) = codemod::python_source::reader::uses(&src) else {
        return Ok(Vec::new());
    };
    let kept_off = codemod::suppress::Suppressions::of(codemod::Lang::PythonModule, src.as_bytes());
    let mut findings = Vec::new();
    for u in uses {
        let Some(c) = row_for(changes, &u, &req.to) else {
            continue;
        };
        if kept_off.covers(u.line, &c.api) {
            continue;
        }
        findings.push(Finding {
            file: f.to_path_buf(),
            line: u.line,
            column: u.column,
            api: c.api.clone(),
            code: u.text.clone(),
            what: c.event(&req.to).unwrap_or_default(),
            before_from: c.before(&req.from),
            reason: c.reason.clone(),
            fix: c.fix.clone(),
            source: c.source.clone(),
        });
    }
    Ok(findings)
}

pub fn audit(req: &AuditRequest) -> Result<AuditReport> {
    if req.to <= req.from {
        bail!("--to {} is not newer than --from {}: give the release you upgrade from and the one you upgrade to", req.to, req.from);
    }
    for p in &req.paths {
        if !p.exists() {
            bail!("{}: no such file or directory", p.display());
        }
    }
    let (changes, port) = rules(req)?;
    let mut unreadable = Vec::new();
    let mut files: Vec<PathBuf> = req
        .paths
        .iter()
        .flat_map(|p| python_files(p, &mut unreadable))
        .collect();
    files.sort();
    files.dedup();
    let mut findings = Vec::new();
    let mut python_files = 0;
    for f in &files {
        match file_findings(req, &changes, f) {
            Ok(found) => {
                python_files += 1;
                findings.extend(found);
            }
            Err(u) => unreadable.push(u),
        }
    }
    // Files given one by one (a hook's staged files) may be of any kind: only C-family ones go
    // to the port catalogue.
    let native_roots: Vec<PathBuf> = req
        .paths
        .iter()
        .filter(|p| p.is_dir() || codemod::Lang::of_path(p).is_some())
        .cloned()
        .collect();
    let (native_files, native_unreadable) = codemod::discover_readable(&native_roots)?;
    // A directory unreadable to one walk is to the other: named once.
    for (path, error) in native_unreadable {
        if !unreadable.iter().any(|u| u.path == path) {
            unreadable.push(Unreadable { path, error });
        }
    }
    let native_files: Vec<PathBuf> = native_files
        .into_iter()
        .filter(|p| p.extension().is_none_or(|x| x != "py"))
        .collect();
    let native = if native_files.is_empty() {
        Vec::new()
    } else {
        codemod::run(&port, &native_files, codemod::Mode::Check)?.files
    };
    let mut rule_docs: Vec<crate::lint::RuleDoc> =
        changes.iter().map(|c| c.rule_doc(&req.to)).collect();
    rule_docs.extend(port.rule_docs());
    let native_diagnostics = codemod::diagnostics(&native, &port, true);
    Ok(AuditReport {
        from: req.from.clone(),
        to: req.to.clone(),
        python_files,
        unreadable,
        findings,
        native,
        compiled: compiled_check(req)?,
        rule_docs,
        native_diagnostics,
    })
}

impl AuditReport {
    /// The findings as a linter prints them, the rules they name, and the one-line summary.
    pub fn diagnostics(
        &self,
    ) -> (
        Vec<crate::lint::Diagnostic>,
        Vec<crate::lint::RuleDoc>,
        String,
    ) {
        use crate::lint::{Diagnostic, Position, RuleDoc};
        let mut docs = self.rule_docs.clone();
        let mut diags: Vec<Diagnostic> = self
            .findings
            .iter()
            .map(|f| Diagnostic {
                rule: f.api.clone(),
                file: f.file.clone(),
                start: Position {
                    line: f.line,
                    column: f.column,
                },
                end: None,
                message: format!("`{}`: {}: {}", f.code, f.what, f.reason),
                help: f.fix.clone(),
                replacement: None,
                related: Vec::new(),
            })
            .collect();
        diags.extend(self.native_diagnostics.iter().cloned());
        if let Some(c) = &self.compiled {
            docs.push(RuleDoc {
                id: WILL_NOT_LOAD.into(),
                summary: "An installed compiled module would not load with the target torch".into(),
                help: "Rebuild or upgrade its package for the target torch.".into(),
            });
            diags.extend(c.breaking.iter().map(|v| Diagnostic {
                rule: WILL_NOT_LOAD.into(),
                file: PathBuf::from(&v.path),
                start: Position::line(1),
                end: None,
                message: format!(
                    "will not load with torch {}: {}",
                    self.to,
                    v.reason.as_deref().unwrap_or("")
                ),
                help: v.fix.clone().unwrap_or_default(),
                replacement: None,
                related: Vec::new(),
            }));
        }
        let summary = self.table().lines().next().unwrap_or_default().to_string();
        (diags, docs, summary)
    }
}

/// The rule id of a compiled module that would not load after the upgrade (`--installed`).
pub const WILL_NOT_LOAD: &str = "will-not-load";

/// A member of torch `version`'s wheel, by name (None when the wheel has no such member): read
/// from PyPI by range in the tests, so no release has to be downloaded whole.
pub type MemberOf<'a> = dyn Fn(&Version, &str) -> Result<Option<Vec<u8>>> + 'a;

/// Holds each row's evidence to a real torch wheel, whose members `member_of` reads.
/// Returns one line per piece of evidence the wheel contradicts (empty: all hold).
pub fn check_evidence(changes: &[Change], member_of: &MemberOf<'_>) -> Result<Vec<String>> {
    let mut wrong = Vec::new();
    for c in changes {
        for e in &c.evidence {
            let member = member_of(&e.torch, &e.member)?;
            let present = member.is_some();
            let text = member
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let mut fail = |what: &str| {
                wrong.push(format!("{}: torch {} {}: {what}", c.api, e.torch, e.member))
            };
            if e.present && !present {
                fail("expected present, absent");
            }
            if e.absent && present {
                fail("expected absent, present");
            }
            if let Some(s) = &e.contains {
                if !text.contains(s.as_str()) {
                    fail(&format!("does not contain `{s}`"));
                }
            }
            if let Some(s) = &e.lacks {
                if text.contains(s.as_str()) {
                    fail(&format!("contains `{s}`"));
                }
            }
        }
    }
    Ok(wrong)
}
