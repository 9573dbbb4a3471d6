//! Output for people and machines: every command prints either a short aligned table or, with
//! `--json`, one JSON document on stdout.

use serde::Serialize;

/// The program as the user invoked it, for the commands a message tells them to run:
/// `archsmith` when installed as such, else `cargo xtask` (this repository's alias).
pub fn program() -> &'static str {
    let exe = std::env::args_os().next().unwrap_or_default();
    let stem = std::path::Path::new(&exe)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if stem == "archsmith" {
        "archsmith"
    } else {
        "cargo xtask"
    }
}

/// The error document `--json` promises (docs/json.md) for a command that ends in an error: exit 2.
pub fn print_error_document(message: &str) {
    let _ = print_json(
        documents::ERROR,
        &serde_json::json!({ "error": { "message": message, "exit_code": 2 } }),
    );
}

/// How a command ended. Commands decide it from their typed outcome; `main` turns it into the
/// process status, in one place (an `Err` from a command is bad input or a broken environment:
/// exit 2, with the error document under `--json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done, and everything it checked holds.
    Success,
    /// 1: done, and what it checked does not hold: a finding, a failed build, audit or import,
    /// something `--check` would change.
    Failed,
    /// 2: refused before the work began (a failed preflight, input the knowledge base rejects).
    Refused,
    /// The status of the program archsmith ran in its own place (`nvcc-guard` runs nvcc).
    Program(i32),
}

impl Exit {
    /// The process status.
    pub fn code(self) -> i32 {
        match self {
            Exit::Success => 0,
            Exit::Failed => 1,
            Exit::Refused => 2,
            Exit::Program(code) => code,
        }
    }

    /// [`Exit::Success`] when `ok`, else [`Exit::Failed`].
    pub fn passed(ok: bool) -> Exit {
        if ok {
            Exit::Success
        } else {
            Exit::Failed
        }
    }

    /// A report's documented exit code (0, 1 or 2; its JSON carries the number) as an `Exit`.
    pub fn from_code(code: i32) -> Exit {
        match code {
            0 => Exit::Success,
            1 => Exit::Failed,
            2 => Exit::Refused,
            other => Exit::Program(other),
        }
    }

    /// The worse of two: a command that ran two checks ends as its worse one.
    pub fn worst(self, other: Exit) -> Exit {
        if other.code() > self.code() {
            other
        } else {
            self
        }
    }
}

/// `print!` that never panics: once the reader went away (`archsmith … | head`) the rest of the
/// output is dropped quietly, instead of std's "failed printing to stdout" panic, and the command
/// ends with the status its checks decide: a CI job that pipes a failing check into `head` still
/// fails. Every line archsmith prints for people or machines goes through these four.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write_stdout(format_args!($($arg)*)) };
}

/// `println!` that ends quietly on a closed pipe (see [`out!`]).
#[macro_export]
macro_rules! outln {
    () => { $crate::output::write_stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprint!` that never panics: on a closed stderr the text is dropped and the work goes on.
#[macro_export]
macro_rules! errout {
    ($($arg:tt)*) => { $crate::output::write_stderr(format_args!($($arg)*)) };
}

/// `eprintln!` that never panics (see [`errout!`]).
#[macro_export]
macro_rules! errln {
    () => { $crate::output::write_stderr(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::write_stderr(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Set once stdout's reader has gone: later output is dropped.
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes to stdout for [`out!`]/[`outln!`].
pub fn write_stdout(args: std::fmt::Arguments) {
    to_stdout(|out| std::io::Write::write_fmt(out, args));
}

/// Writes bytes as they are to stdout (a patch of a file that is not UTF-8), quiet on a closed
/// pipe as [`out!`] is.
pub fn write_stdout_bytes(bytes: &[u8]) {
    to_stdout(|out| std::io::Write::write_all(out, bytes));
}

/// One write to stdout, unless its reader has gone; a failure goes to [`stdout_failed`].
fn to_stdout(write: impl FnOnce(&mut std::io::StdoutLock) -> std::io::Result<()>) {
    if STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    if let Err(e) = write(&mut std::io::stdout().lock()) {
        stdout_failed(&e);
    }
}

/// Writes to stderr for [`errout!`]/[`errln!`]. Progress and messages on a stderr that went
/// away are dropped and the work goes on: its exit status must not change with where stderr went.
pub fn write_stderr(args: std::fmt::Arguments) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// Stdout failed. A closed pipe is the reader's choice: print nothing more, and let the command
/// finish with the status its work decides (exiting 0 here turned every failed check piped into
/// `head` into a pass). Anything else (a full disk under `> report.json`) loses output a user
/// relies on: say so, status 2.
fn stdout_failed(e: &std::io::Error) {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
        return;
    }
    write_stderr(format_args!("error: cannot write to stdout: {e}\n"));
    std::process::exit(2);
}

/// A plain-text table whose columns are padded to their widest cell.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// A table without a header line (key/value listings).
    pub fn headerless() -> Table {
        Table::default()
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn render(&self) -> String {
        let ncols = std::iter::once(&self.header)
            .chain(&self.rows)
            .map(Vec::len)
            .max()
            .unwrap_or(0);
        let mut widths = vec![0usize; ncols];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.header)
            .chain(&self.rows)
            .filter(|r| !r.is_empty())
        {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                line.push_str(c);
                if i + 1 < r.len() {
                    line.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A JSON document archsmith prints: its name and the version of its shape. Every `--json`
/// document is an object whose first two keys are `"schema": VERSION` and `"document": NAME`, so a
/// consumer can refuse a shape it does not know; docs/json.md describes each one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Document {
    pub name: &'static str,
    /// Raised whenever a key is removed or changes meaning; adding keys keeps it.
    pub version: u32,
}

/// The documents, one per `--json` output.
pub mod documents {
    use super::Document;

    /// Each document once: its constant and, from the same lines, [`ALL`], so a document cannot
    /// be printed without being in the list docs/json.md is checked against.
    macro_rules! documents {
        ($($(#[$doc:meta])* $id:ident = $name:literal, $version:literal;)*) => {
            $($(#[$doc])* pub const $id: Document = Document { name: $name, version: $version };)*
            /// All of them, for the check that docs/json.md describes each.
            pub const ALL: &[Document] = &[$($id),*];
        };
    }

    documents! {
        ARCHS = "archs", 1;
        AUDIT_UPGRADE = "audit-upgrade", 1;
        BENCH_AUDIT = "bench-audit", 1;
        BENCH_LOAD_CHECK = "bench-load-check", 1;
        BENCH_TORCH_RANGE = "bench-torch-range", 1;
        BENCH_ABI_CHECKERS = "bench-abi-checkers", 1;
        BENCH_BUILD_EXT = "bench-build-ext", 1;
        BENCH_BUILD_EXT_PACKAGES = "bench-build-ext-packages", 1;
        BENCH_CODEMOD = "bench-codemod", 1;
        BENCH_JIT_HOOK = "bench-jit-hook", 1;
        BENCH_JIT_PREBUILD = "bench-jit-prebuild", 1;
        BENCH_MANYLINUX = "bench-manylinux", 1;
        BENCH_MEMORY_LIMIT = "bench-memory-limit", 1;
        BENCH_STABLE_PORT = "bench-stable-port", 1;
        BUILD_EXT = "build-ext", 1;
        BUILD_EXT_VARIANTS = "build-ext-variants", 1;
        BUILD_TORCH = "build-torch", 1;
        BUILD_TORCH_BEFORE_CLONE = "build-torch-before-clone", 1;
        BUILD_TORCH_VERIFY_WHEEL = "build-torch-verify-wheel", 1;
        CODEMOD = "codemod", 1;
        CODEMOD_RULES = "codemod-rules", 1;
        CORPUS = "corpus", 1;
        DOCTOR = "doctor", 1;
        /// What any command prints with `--json` when it stops on bad input (exit 2).
        ERROR = "error", 1;
        GPUS = "gpus", 1;
        KB_CHECK = "kb-check", 1;
        KB_CHECK_DEBIAN = "kb-check-debian", 1;
        KB_CHECK_GPUS = "kb-check-gpus", 1;
        KB_CHECK_MANYLINUX = "kb-check-manylinux", 1;
        KB_CHECK_TORCH = "kb-check-torch", 1;
        KERNELS = "kernels", 1;
        PORT_EXTENSION = "port-extension", 1;
        PORT_EXTENSION_TREE = "port-extension-tree", 1;
        TOOLCHAIN_ENV = "toolchain-env", 1;
        TOOLCHAIN_INSTALL = "toolchain-install", 1;
        TOOLCHAIN_LIST = "toolchain-list", 1;
        TRACE_BUILD = "trace-build", 1;
        VERIFY_BINARY = "verify-binary", 1;
        VERIFY_ENV = "verify-env", 1;
        VERIFY_PINS = "verify-pins", 1;
    }
}

/// `--json`, declared once: every command flattens it into its arguments (`#[command(flatten)]`),
/// as the linters flatten `lint::FindingsArgs`.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct JsonOutput {
    /// Print one JSON document on stdout (schemas: docs/json.md) instead of the table; progress
    /// and errors still go to stderr.
    #[arg(long)]
    pub json: bool,
}

/// Prints a command's report: JSON for machines with `--json`, the rendered table otherwise.
pub fn emit<T: Serialize>(
    json: bool,
    doc: Document,
    report: &T,
    render: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    if json {
        print_json(doc, report)
    } else {
        crate::out!("{}", render(report));
        Ok(())
    }
}

/// `value` as the document `doc`: `schema` and `document` first, then the value's own keys.
pub fn document_json<T: Serialize>(doc: Document, value: &T) -> anyhow::Result<serde_json::Value> {
    use serde_json::Value;
    let mut map = serde_json::Map::new();
    map.insert("schema".into(), doc.version.into());
    map.insert("document".into(), doc.name.into());
    match serde_json::to_value(value)? {
        Value::Object(fields) => map.extend(fields),
        // A bug, not bad input: a document names its lists.
        _ => anyhow::bail!("the {} document must be a JSON object", doc.name),
    }
    Ok(Value::Object(map))
}

/// Prints `value` as the pretty JSON document `doc`.
pub fn print_json<T: Serialize>(doc: Document, value: &T) -> anyhow::Result<()> {
    crate::outln!(
        "{}",
        serde_json::to_string_pretty(&document_json(doc, value)?)?
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_lead_with_their_schema_and_name() {
        let v = document_json(documents::ARCHS, &serde_json::json!({"sass": ["sm_75"]})).unwrap();
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["schema", "document", "sass"]);
        assert_eq!(v["document"], "archs");
        assert!(document_json(documents::TOOLCHAIN_LIST, &[1, 2]).is_err());
    }

    /// docs/json.md describes every document at its current version.
    #[test]
    fn every_document_is_described_in_the_docs() {
        let docs = std::fs::read_to_string(crate::paths::repo_root().join("docs/json.md")).unwrap();
        let mut names = std::collections::HashSet::new();
        for d in documents::ALL {
            assert!(names.insert(d.name), "{} twice", d.name);
            let heading = format!("## `{}`, schema {}\n", d.name, d.version);
            assert!(docs.contains(&heading), "docs/json.md lacks {heading:?}");
        }
        let described = docs.matches("\n## `").count();
        assert_eq!(
            described,
            documents::ALL.len(),
            "docs/json.md describes a document archsmith does not print"
        );
    }

    #[test]
    fn aligns_columns_by_display_width() {
        let mut t = Table::new(["GPU", "CC", "runs"]);
        t.row(["RTX 5090", "12.0", "no"]);
        t.row(["L4", "8.9", "yes"]);
        assert_eq!(
            t.render(),
            "GPU       CC    runs\nRTX 5090  12.0  no\nL4        8.9   yes\n"
        );
    }
}
