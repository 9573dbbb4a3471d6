//! The codemod engine: brings legacy PyTorch C++/CUDA extension sources (torch 0.4–1.x era) to
//! modern torch, driven by a rule catalogue that is data (`crates/codemod/rules/torch-legacy.toml`).
//!
//! * [`lexer`] tokenizes C/C++/CUDA and Python on bytes, so rules never match inside comments or
//!   literals and non-UTF-8 files are handled, not refused.
//! * [`pattern`] matches token patterns with balanced-parenthesis holes.
//! * [`catalogue`] loads and validates the rules; [`engine`] applies them to one file.
//! * This module walks paths, computes diffs and writes files atomically, and renders its [`Report`]
//!   as a table; `commands::codemod` is
//!   the CLI over it, and `port-extension` calls [`run`] directly.

pub mod aten_schema;
pub mod catalogue;
pub mod engine;
pub mod lexer;
pub mod pattern;
pub mod printf;
pub mod python_source;
pub mod stable_bindings;
pub mod stable_dispatch;
pub mod suppress;
pub mod tensor_subscripts;
pub mod trace;

pub use catalogue::{builtin, Catalogue, Lang, Rule};
pub use engine::{Outcome, ReviewItem};

use crate::lint::{LineIndex, Position};
use crate::output::Table;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Compute changes and diffs; write nothing.
    DryRun,
    /// Compute changes; write nothing, no diffs (`--check`, the port's "anything left?").
    Check,
    /// Write the changed files.
    Apply,
}

#[derive(Debug, Serialize)]
pub struct FileReport {
    pub path: PathBuf,
    pub changed: bool,
    pub rewrites: BTreeMap<String, usize>,
    /// Where each rewrite is in the file as read (what a linter reports and SARIF's fix edits).
    pub sites: Vec<RewriteSite>,
    pub review: Vec<ReviewItem>,
    /// Unified diff of the change (dry-run only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<Diff>,
}

/// A unified diff as bytes: byte-exact where the file is not UTF-8, so `git apply` takes the
/// patch `--dry-run` prints. In JSON it is text, with such bytes shown as U+FFFD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff(pub Vec<u8>);

impl Serialize for Diff {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&String::from_utf8_lossy(&self.0))
    }
}

impl std::fmt::Display for Diff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

/// One rewrite in the file as read: its rule, the code it replaces and, when the rewrite is one
/// replacement of that code, the replacement.
#[derive(Debug, Clone, Serialize)]
pub struct RewriteSite {
    pub rule: String,
    pub start: Position,
    pub end: Position,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub catalogue: String,
    pub files_scanned: usize,
    pub files_changed: usize,
    /// Rewrites per rule over all files.
    pub rewrites: BTreeMap<String, usize>,
    pub review_items: usize,
    pub files: Vec<FileReport>,
    /// With `--stable-abi`: the lowest TORCH_TARGET_VERSION the rewritten code allows (the
    /// newest "minimum compatible version" among the stable forms it now uses).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torch_target_version: Option<String>,
}

impl Report {
    pub fn total_rewrites(&self) -> usize {
        self.rewrites.values().sum()
    }

    /// Each review item and (with `rewrites`) each rewrite as a linter's finding, in file order.
    pub fn diagnostics(&self, cat: &Catalogue, rewrites: bool) -> Vec<crate::lint::Diagnostic> {
        diagnostics(&self.files, cat, rewrites)
    }
}

/// The findings of `files` (see [`Report::diagnostics`]).
pub fn diagnostics(
    files: &[FileReport],
    cat: &Catalogue,
    rewrites: bool,
) -> Vec<crate::lint::Diagnostic> {
    use crate::lint::Diagnostic;
    let mut out = Vec::new();
    for f in files {
        for s in f.sites.iter().filter(|_| rewrites) {
            let why = cat.why(&s.rule).unwrap_or_default();
            let row = cat.python.iter().find(|c| c.api == s.rule);
            let help = match (&s.replacement, row) {
                (Some(r), _) if !r.is_empty() => format!("replace with `{}`", r.trim()),
                (Some(_), _) => "remove it".to_string(),
                (None, Some(row)) => row.fix.clone(),
                (None, None) => format!("`{} codemod` rewrites it", crate::output::program()),
            };
            out.push(Diagnostic {
                rule: s.rule.clone(),
                file: f.path.clone(),
                start: s.start,
                end: Some(s.end),
                message: why,
                help,
                replacement: s.replacement.clone(),
                related: Vec::new(),
            });
        }
        for r in &f.review {
            out.push(Diagnostic {
                rule: r.rule.clone(),
                file: f.path.clone(),
                start: Position {
                    line: r.line,
                    column: r.column.max(1),
                },
                end: None,
                message: format!("{} (`{}`)", r.message, r.code),
                help: r.suggestion.clone(),
                replacement: None,
                related: Vec::new(),
            });
        }
    }
    out.sort_by(|a, b| {
        (&a.file, a.start.line, a.start.column).cmp(&(&b.file, b.start.line, b.start.column))
    });
    out
}

/// The files under `paths` that the codemod handles (C-family sources and headers, `setup.py`),
/// sorted. Hidden directories, `build/` and symlinks are skipped; a path given explicitly that is
/// a symlink or not a handled file is an error.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let (files, unreadable) = discover_readable(paths)?;
    if let Some((path, why)) = unreadable.first() {
        bail!(
            "{}: cannot read ({why}){}; make it readable, or pass the directories that are",
            path.display(),
            match unreadable.len() {
                1 => String::new(),
                n => format!(", and {} more", n - 1),
            }
        );
    }
    Ok(files)
}

/// Entries a walk could not read, and why.
pub type Unread = Vec<(PathBuf, String)>;

/// [`discover`], with the entries below the paths that could not be read (a directory without
/// permission) listed apart instead of failing: for a report that must name what it did not see.
pub fn discover_readable(paths: &[PathBuf]) -> Result<(Vec<PathBuf>, Unread)> {
    let mut out = Vec::new();
    let mut unreadable = Vec::new();
    for p in paths {
        let meta =
            fs::symlink_metadata(p).with_context(|| format!("{}: cannot read", p.display()))?;
        if meta.file_type().is_symlink() {
            bail!(
                "{}: is a symlink; pass the file or directory it points to",
                p.display()
            );
        }
        if meta.is_dir() {
            walk(p, &mut out, &mut unreadable);
        } else if Lang::of_path(p).is_some() {
            out.push(p.clone());
        } else {
            bail!(
                "{}: not a file the codemod handles (expected .c .cc .cpp .cxx .h .hh .hpp .cu .cuh or .py)",
                p.display()
            );
        }
    }
    out.sort();
    out.dedup();
    Ok((out, unreadable))
}

/// The handled files under `dir`, walked with `ignore` (what ruff and ripgrep use): git-ignored
/// files (generated sources, vendored copies git has no copy of), hidden directories, `build/`,
/// `__pycache__` and symlinks are skipped.
fn walk(dir: &Path, out: &mut Vec<PathBuf>, unreadable: &mut Unread) {
    let walker = ignore::WalkBuilder::new(dir)
        .hidden(true)
        .git_ignore(true)
        .git_exclude(true)
        .follow_links(false)
        .filter_entry(|e| {
            let name = e.file_name().to_string_lossy();
            !(e.file_type().is_some_and(|t| t.is_dir())
                && (name == "build" || name == "__pycache__"))
        })
        .build();
    for entry in walker {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                unreadable.push((
                    walk_error_path(&e).unwrap_or_else(|| dir.to_path_buf()),
                    walk_error_reason(&e),
                ));
                continue;
            }
        };
        let path = entry.into_path();
        let is_file = fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file());
        if is_file && Lang::of_path(&path).is_some() {
            out.push(path);
        }
    }
}

/// The path an `ignore` walk error is about.
pub fn walk_error_path(e: &ignore::Error) -> Option<PathBuf> {
    match e {
        ignore::Error::WithPath { path, .. } => Some(path.clone()),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            walk_error_path(err)
        }
        _ => None,
    }
}

/// What went wrong, without the path [`walk_error_path`] gives.
pub fn walk_error_reason(e: &ignore::Error) -> String {
    match e {
        ignore::Error::WithPath { err, .. }
        | ignore::Error::WithDepth { err, .. }
        | ignore::Error::WithLineNumber { err, .. } => walk_error_reason(err),
        ignore::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    }
}

/// The rules of `cat` on one file's bytes, then (`--stable-abi`) the ATen calls no rule took
/// through the dispatcher and its bindings as operators. `modules`: how many of the files run
/// together define a Python module (`PYBIND11_MODULE`).
fn outcome(
    cat: &Catalogue,
    lang: Lang,
    path: &Path,
    src: &[u8],
    modules: usize,
) -> Result<engine::Outcome> {
    let mut out = engine::apply(cat, lang, src).with_context(|| format!("{}", path.display()))?;
    if let (Some(ns), Lang::Cpp) = (&cat.stable_namespace, lang) {
        if let Some(release) = &cat.stable_schemas {
            stable_dispatch::apply(&mut out, &release.schemas);
        }
        // Each module its own operator namespace where there are several (a package's CPU and
        // GPU modules both define `forward`; one namespace is registered once per process).
        let ns = match modules > 1 {
            true => stable_bindings::module_namespace(ns, path),
            false => ns.clone(),
        };
        stable_bindings::apply(&mut out, path, &ns);
    }
    Ok(out)
}

/// How many of `files` define a Python module with pybind11.
fn pybind_modules(files: &[PathBuf]) -> usize {
    (files.iter())
        .filter(|p| {
            fs::read(p).is_ok_and(|b| memchr::memmem::find(&b, b"PYBIND11_MODULE").is_some())
        })
        .count()
}

/// Runs `cat` over `files`: computes every outcome first, then (in [`Mode::Apply`]) writes the
/// changed files atomically.
pub fn run(cat: &Catalogue, files: &[PathBuf], mode: Mode) -> Result<Report> {
    let mut reports = Vec::new();
    let mut outputs = Vec::new();
    // What each file needs beside it: bundled headers, operators of the dispatcher header.
    let mut beside = Vec::new();
    let modules = match cat.stable_namespace {
        Some(_) => pybind_modules(files),
        None => 0,
    };
    for path in files {
        let lang = Lang::of_path(path)
            .with_context(|| format!("{}: not a C/C++/CUDA file or setup.py", path.display()))?;
        let src = crate::input_file::read_bytes(path, crate::input_file::TEXT_CAP, "source file")?;
        let out = outcome(cat, lang, path, &src, modules)?;
        let changed = out.output != src;
        let diff = (mode == Mode::DryRun && changed).then(|| unified_diff(path, &src, &out.output));
        let mut review = out.review.clone();
        if mode == Mode::Check {
            // Nothing is written: the places a person opens are those of the file as it is.
            let lines = LineIndex::new(&src);
            for r in &mut review {
                let at = lines.position(out.trace.origin(r.at.1, r.at.0));
                (r.line, r.column) = (at.line, at.column);
            }
        }
        reports.push(FileReport {
            path: path.clone(),
            changed,
            rewrites: out.counts.clone(),
            sites: rewrite_sites(&src, &out),
            review,
            diff,
        });
        if changed {
            outputs.push((path.clone(), out.output));
        }
        beside.push((path.clone(), out.bundles, out.aten_ops));
    }
    let files_scanned = reports.len();
    for (header, text) in headers_beside(cat, beside) {
        let old = fs::read(&header).ok();
        if old.as_deref() == Some(text.as_slice()) {
            continue;
        }
        let before = old.unwrap_or_default();
        reports.push(FileReport {
            path: header.clone(),
            changed: true,
            rewrites: BTreeMap::new(),
            sites: Vec::new(),
            review: Vec::new(),
            diff: (mode == Mode::DryRun).then(|| unified_diff(&header, &before, &text)),
        });
        outputs.push((header, text));
    }
    if mode == Mode::Apply {
        write_all_or_nothing(&outputs)?;
    }
    let mut rewrites = BTreeMap::new();
    for r in &reports {
        for (k, v) in &r.rewrites {
            *rewrites.entry(k.clone()).or_default() += v;
        }
    }
    let torch_target_version = cat
        .stable_namespace
        .as_ref()
        .and_then(|_| catalogue::stable_target(rewrites.keys().map(String::as_str)))
        .map(|v| v.to_string());
    Ok(Report {
        catalogue: cat.name.clone(),
        files_scanned,
        files_changed: outputs.len(),
        rewrites,
        review_items: reports.iter().map(|r| r.review.len()).sum(),
        files: reports,
        torch_target_version,
    })
}

/// Each bundled header a rewrite calls into, beside the file, once per directory; and each
/// directory's generated dispatcher header, with the operators its files call.
fn headers_beside(
    cat: &Catalogue,
    beside: Vec<(PathBuf, Vec<String>, std::collections::BTreeSet<String>)>,
) -> Vec<(PathBuf, Vec<u8>)> {
    let mut headers: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
    let mut aten_ops: BTreeMap<PathBuf, std::collections::BTreeSet<String>> = BTreeMap::new();
    for (path, bundles, ops) in beside {
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        for name in bundles {
            let text = catalogue::bundled(&name).unwrap_or_default().as_bytes();
            headers
                .entry(dir.join(&name))
                .or_insert_with(|| text.to_vec());
        }
        if !ops.is_empty() {
            aten_ops.entry(dir).or_default().extend(ops);
        }
    }
    if let Some(release) = &cat.stable_schemas {
        for (dir, names) in &aten_ops {
            let text = stable_dispatch::header(release, names);
            headers.insert(dir.join(stable_dispatch::HEADER), text.into_bytes());
        }
    }
    headers.into_iter().collect()
}

/// The rewrites of `out` in `src`'s coordinates. A change no rule names a place for (none is
/// known to exist) still gets one, at its first changed byte, so a changed file never passes a
/// linter's eye without a line.
fn rewrite_sites(src: &[u8], out: &Outcome) -> Vec<RewriteSite> {
    let lines = LineIndex::new(src);
    let mut sites: Vec<RewriteSite> = out
        .trace
        .sites(src)
        .into_iter()
        .map(|s| RewriteSite {
            rule: s.rule,
            start: lines.position(s.start),
            end: lines.position(s.end),
            replacement: s.replacement.and_then(|r| String::from_utf8(r).ok()),
        })
        .collect();
    if sites.is_empty() && out.output != src {
        let at = src
            .iter()
            .zip(&out.output)
            .take_while(|(a, b)| a == b)
            .count();
        sites.push(RewriteSite {
            rule: out
                .counts
                .keys()
                .next()
                .cloned()
                .unwrap_or_else(|| "codemod".into()),
            start: lines.position(at),
            end: lines.position(at),
            replacement: None,
        });
    }
    sites
}

/// A unified diff (`--- a/…`, `+++ b/…`, 3 lines of context) of the bytes as they are: a file
/// that is not UTF-8 gets a patch that applies to it.
pub fn unified_diff(path: &Path, old: &[u8], new: &[u8]) -> Diff {
    // `git apply` wants `a/dir/file`: relative to the current directory when the file is under it,
    // without `./` components, and never `a//abs`.
    let cwd = std::env::current_dir().unwrap_or_default();
    let rel = path.strip_prefix(&cwd).unwrap_or(path);
    let rel: PathBuf = rel
        .components()
        .filter(|c| {
            !matches!(
                c,
                std::path::Component::CurDir | std::path::Component::RootDir
            )
        })
        .collect();
    let name = rel.display().to_string();
    // Patience anchors on unique lines, so the cost follows the file's size, not size × changes
    // (Myers' O(N·D) grew with every rewrite: docs/hostile-input.md); past the deadline `similar`
    // returns a coarser diff, still one `git apply` takes.
    let diff = similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Patience)
        .deadline(std::time::Instant::now() + std::time::Duration::from_secs(2))
        .diff_lines(old, new);
    let mut unified = diff.unified_diff();
    unified.context_radius(3);
    // Hunk by hunk through `to_writer`: the whole diff's writer formats hunks as text (lossy).
    let mut bytes = format!("--- a/{name}\n+++ b/{name}\n").into_bytes();
    let mut any = false;
    for hunk in unified.iter_hunks() {
        any = true;
        hunk.to_writer(&mut bytes)
            .expect("writing to a Vec cannot fail");
    }
    if !any {
        bytes.clear();
    }
    Diff(bytes)
}

/// The temporary a write of `path` goes through: `.NAME.archsmith-PID.tmp` beside it.
fn temporary_for(path: &Path, pid: u32) -> Result<PathBuf> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .with_context(|| format!("{}: not a file path", path.display()))?;
    Ok(dir.join(format!(".{}.archsmith-{pid}.tmp", name.to_string_lossy())))
}

/// Removes temporaries of `path` left by archsmith runs that were killed (their process is gone).
fn remove_stale_temporaries(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!(".{}.archsmith-", name.to_string_lossy());
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = n.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".tmp")) else {
            continue;
        };
        let alive = pid
            .parse::<u32>()
            .is_ok_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if !alive && fs::remove_file(e.path()).is_ok() {
            crate::errln!(
                "archsmith: removed {}, left by a run that was killed",
                e.path().display()
            );
        }
    }
}

/// Writes `bytes` to a new temporary beside `path` with `path`'s permissions (a file that does not
/// exist yet, a bundled header, gets the temporary's own: the umask's), synced; returns it.
fn prepare(path: &Path, bytes: &[u8]) -> Result<PathBuf> {
    remove_stale_temporaries(path);
    let tmp = temporary_for(path, std::process::id())?;
    let perms = match fs::metadata(path) {
        Ok(m) => Some(m.permissions()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(e).with_context(|| format!("{}: cannot read permissions", path.display()))
        }
    };
    let result = (|| -> Result<()> {
        let mut f = fs::File::create_new(&tmp)
            .with_context(|| format!("{}: cannot create temporary file", tmp.display()))?;
        f.write_all(bytes)
            .with_context(|| format!("{}: write failed", tmp.display()))?;
        if let Some(perms) = perms {
            f.set_permissions(perms)
                .with_context(|| format!("{}: cannot set permissions", tmp.display()))?;
        }
        f.sync_all()
            .with_context(|| format!("{}: sync failed", tmp.display()))
    })();
    match result {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Replaces `path` by `bytes` atomically: a temporary file in the same directory with the same
/// permissions, synced, then renamed over the original.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_all_or_nothing(&[(path.to_path_buf(), bytes.to_vec())])
}

/// Replaces every file, or none where that can be helped: all temporaries are written and synced
/// first (a failure removes them and changes nothing), then renamed into place; a rename that
/// fails (rare: the directory changed underneath) stops with the list of files written and not.
///
/// Ctrl-C, SIGTERM or SIGHUP is held off meanwhile: one that comes while the temporaries are
/// written removes them and leaves every file as it was; one that comes while they are renamed
/// into place waits for the last rename. Either way the signal then ends the process as usual.
fn write_all_or_nothing(outputs: &[(PathBuf, Vec<u8>)]) -> Result<()> {
    let deferred = crate::interrupts::Deferred::start();
    let result = write_deferred(outputs, &deferred);
    if let Some(sig) = deferred.end() {
        crate::errln!(
            "archsmith: interrupted; {}",
            if result.is_ok() {
                "every rewritten file was already in place"
            } else {
                "nothing was rewritten"
            }
        );
        crate::interrupts::deliver(sig);
    }
    result
}

fn write_deferred(
    outputs: &[(PathBuf, Vec<u8>)],
    deferred: &crate::interrupts::Deferred,
) -> Result<()> {
    let mut ready = Vec::new();
    for (path, bytes) in outputs {
        if deferred.interrupted().is_some() {
            for (_, tmp) in &ready {
                let _ = fs::remove_file(tmp);
            }
            anyhow::bail!("interrupted: nothing was rewritten");
        }
        match prepare(path, bytes) {
            Ok(tmp) => ready.push((path, tmp)),
            Err(e) => {
                for (_, tmp) in &ready {
                    let _ = fs::remove_file(tmp);
                }
                return Err(e.context(format!(
                    "nothing was rewritten ({} file(s) were ready)",
                    ready.len()
                )));
            }
        }
    }
    let mut written: Vec<String> = Vec::new();
    for (i, (path, tmp)) in ready.iter().enumerate() {
        if let Err(e) = fs::rename(tmp, path) {
            let not: Vec<String> = ready[i..]
                .iter()
                .map(|(p, _)| p.display().to_string())
                .collect();
            for (_, t) in &ready[i..] {
                let _ = fs::remove_file(t);
            }
            anyhow::bail!(
                "{}: cannot replace it ({e}); rewritten: {}; not rewritten: {}",
                path.display(),
                if written.is_empty() {
                    "none".into()
                } else {
                    written.join(", ")
                },
                not.join(", ")
            );
        }
        written.push(path.display().to_string());
    }
    Ok(())
}

/// Rewrites (or, in [`Mode::DryRun`], previews) the sources under `paths`. A run that would write
/// is computed first and refused when a file it changes has uncommitted changes or is outside a git
/// work tree, unless `force`: what git cannot show or undo is not rewritten.
pub fn run_on_paths(
    cat: &Catalogue,
    paths: &[std::path::PathBuf],
    mode: Mode,
    force: bool,
) -> anyhow::Result<Report> {
    let files = discover(paths)?;
    let preview_mode = if mode == Mode::DryRun {
        Mode::DryRun
    } else {
        Mode::Check
    };
    let preview = run(cat, &files, preview_mode)?;
    if mode != Mode::Apply || preview.files_changed == 0 {
        return Ok(preview);
    }
    if !force {
        let changed: Vec<&Path> = preview
            .files
            .iter()
            .filter(|f| f.changed)
            .map(|f| f.path.as_path())
            .collect();
        ensure_clean(&changed)?;
    }
    run(cat, &files, Mode::Apply)
}

/// Refuses when any of `files` has uncommitted changes or is outside a git work tree.
pub fn ensure_clean(files: &[&Path]) -> anyhow::Result<()> {
    for f in files {
        let dir = f
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = f.file_name().unwrap_or_default();
        let out = crate::process::Cmd::new("git")
            .args([
                "status",
                "--porcelain",
                "--ignored",
                "--untracked-files=all",
                "--",
            ])
            .arg(name)
            .dir(dir)
            .output()?;
        if !out.success() {
            anyhow::bail!(
                "{}: not inside a git work tree, so the rewrite could not be reviewed or undone with git; commit it first or pass --force",
                f.display()
            );
        }
        if out.stdout.lines().any(|l| l.starts_with("!! ")) {
            anyhow::bail!(
                "{}: is ignored by git (generated or vendored?), so git has no copy to restore after a rewrite; pass --force to rewrite it anyway",
                f.display()
            );
        }
        if !out.stdout.trim().is_empty() {
            anyhow::bail!(
                "{}: has uncommitted changes (`git status`: {}); commit or stash them first, or pass --force",
                f.display(),
                out.stdout.trim()
            );
        }
    }
    Ok(())
}

impl Report {
    /// The aligned table people read (`--json` prints the report itself).
    pub fn table(&self, applied: bool) -> String {
        let report = self;
        let mut out = String::new();
        let verb = if applied { "changed" } else { "would change" };
        out.push_str(&format!(
            "{} file(s) scanned, {} {verb}, {} rewrite(s), {} review item(s) [{}]\n",
            report.files_scanned,
            report.files_changed,
            report.total_rewrites(),
            report.review_items,
            report.catalogue
        ));
        if let Some(v) = &report.torch_target_version {
            out.push_str(&format!(
                "stable ABI: the rewritten code needs torch >= {v} (build with -DTORCH_TARGET_VERSION for {v}; `verify binary --target` checks the built file)\n"
            ));
        }
        if !report.rewrites.is_empty() {
            let mut t = Table::new(["RULE", "REWRITES"]);
            for (rule, n) in &report.rewrites {
                t.row([rule.clone(), n.to_string()]);
            }
            out.push('\n');
            out.push_str(&t.render());
        }
        let items: Vec<_> = report
            .files
            .iter()
            .flat_map(|f| f.review.iter().map(move |r| (f, r)))
            .collect();
        if !items.is_empty() {
            out.push_str("\nreview (not changed; line numbers are those of the rewritten file):\n");
            for (f, r) in items {
                out.push_str(&format!(
                    "{}:{}: [{}] {}\n    {}\n    suggestion: {}\n",
                    f.path.display(),
                    r.line,
                    r.rule,
                    r.message,
                    r.code,
                    r.suggestion
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RoIAlign.pytorch's layout: a CPU and a GPU module, each binding `forward`. One operator
    /// namespace is registered once per process, so each module gets its own; a package with one
    /// module keeps the plain namespace.
    #[test]
    fn several_modules_get_an_operator_namespace_each() {
        let dir = tempfile::tempdir().unwrap();
        let module = |name: &str| {
            let p = dir.path().join(format!("{name}.cpp"));
            let src = "at::Tensor forward(at::Tensor x) { return x; }\n\
                       PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"forward\", &forward); }\n";
            fs::write(&p, src).unwrap();
            p
        };
        let files = [module("crop_cpu"), module("crop_gpu")];
        let cat = builtin().clone().with_stable_abi("roi");
        run(&cat, &files, Mode::Apply).unwrap();
        let text = |i: usize| fs::read_to_string(&files[i]).unwrap();
        assert!(
            text(0).contains("STABLE_TORCH_LIBRARY(roi_crop_cpu, m)"),
            "{}",
            text(0)
        );
        assert!(
            text(1).contains("forward = torch.ops.roi_crop_gpu.forward"),
            "{}",
            text(1)
        );
        let one = [module("single")];
        run(&cat, &one, Mode::Apply).unwrap();
        assert!(fs::read_to_string(&one[0])
            .unwrap()
            .contains("STABLE_TORCH_LIBRARY(roi, m)"));
    }

    /// `--check` writes nothing, so its places are those of the file as it is: rewrites on the
    /// same line before a review item, and an include added above it, do not move it.
    #[test]
    fn check_mode_places_are_those_of_the_file_as_read() {
        let src = "#include <THC/THC.h>\n\
                   void f(bool c, at::Tensor x) { AT_CHECK(c); float* p = x.data<float>(); AT_ASSERT(c); }\n";
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.cu");
        fs::write(&file, src).unwrap();
        let report = run(builtin(), std::slice::from_ref(&file), Mode::Check).unwrap();
        let f = &report.files[0];
        let line2 = src.lines().nth(1).unwrap();
        let col = |needle: &str| line2.find(needle).unwrap() + 1;
        let review = &f.review[0];
        assert_eq!(review.rule, "at-assert");
        assert_eq!((review.line, review.column), (2, col("AT_ASSERT")), "{f:?}");
        let site = |rule: &str| {
            let s = f.sites.iter().find(|s| s.rule == rule).unwrap();
            (s.start.line, s.start.column)
        };
        assert_eq!(site("at-check"), (2, col("AT_CHECK")));
        assert_eq!(site("data-ptr"), (2, col("data<")));
        assert_eq!(site("thc-header"), (1, 10));
    }
}
