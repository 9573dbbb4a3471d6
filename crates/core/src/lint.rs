//! Findings as linters print them, for the commands that check sources (`audit upgrade`,
//! `codemod --check`, `verify pins`): the `file:line:col: rule message` lines ruff and compilers
//! print (the default when stdout is not a terminal, so editors and `grep` jump through them),
//! GitHub workflow annotations, and SARIF 2.1.0 for code scanning, with each rule's help and, where
//! the rewrite is one exact replacement, the fix. Also the `--select`/`--ignore` rule selection the
//! three share.

use anyhow::{bail, Result};
use serde::Serialize;
use serde_json::{json, Value};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// 1-based line and column; the column counts Unicode code points (SARIF's `unicodeCodePoints`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl Position {
    /// Line `line`, column 1.
    pub fn line(line: usize) -> Position {
        Position { line, column: 1 }
    }
}

/// Where each line of a text starts, so that mapping many offsets to lines costs a binary search
/// each: a generated file with one finding per line has as many look-ups as lines, and counting
/// newlines from the start for each one made `codemod --check` quadratic.
///
/// Columns likewise: a line of megabytes (minified or generated code) with thousands of findings
/// on it would be counted from its start once per finding, so a long line's columns are counted
/// once into checkpoints every [`COLUMN_STRIDE`] bytes, and a look-up counts from the nearest one.
#[derive(Debug, Clone)]
pub struct LineIndex<'a> {
    text: &'a [u8],
    /// Byte offset of the first byte of each line; `starts[0] == 0`.
    starts: Vec<usize>,
    /// Per long line (by its start), `(offset, column)` checkpoints in order, made on first use.
    checkpoints: std::cell::RefCell<std::collections::HashMap<usize, Vec<(usize, usize)>>>,
}

/// Bytes between two column checkpoints of a long line.
const COLUMN_STRIDE: usize = 4096;

/// Code points in `bytes` as a lossy decode counts them (a maximal invalid sequence counts once).
fn code_points(bytes: &[u8]) -> usize {
    bytes
        .utf8_chunks()
        .map(|c| c.valid().chars().count() + usize::from(!c.invalid().is_empty()))
        .sum()
}

impl<'a> LineIndex<'a> {
    pub fn new(text: &'a [u8]) -> LineIndex<'a> {
        let mut starts = vec![0];
        starts.extend(
            text.iter()
                .enumerate()
                .filter(|(_, &c)| c == b'\n')
                .map(|(i, _)| i + 1),
        );
        LineIndex {
            text,
            starts,
            checkpoints: Default::default(),
        }
    }

    /// 1-based line of byte `offset` (clamped to the text's end).
    pub fn line(&self, offset: usize) -> usize {
        let offset = offset.min(self.text.len());
        self.starts.partition_point(|&s| s <= offset)
    }

    /// Byte offset where 1-based line `line` starts (clamped to the last line).
    pub fn line_start(&self, line: usize) -> usize {
        self.starts[line.clamp(1, self.starts.len()) - 1]
    }

    /// The position of byte `offset` (clamped to the text's end; a maximal run of bytes that are
    /// not UTF-8 counts once, as a lossy decode shows it).
    pub fn position(&self, offset: usize) -> Position {
        let offset = offset.min(self.text.len());
        let line = self.line(offset);
        let line_start = self.line_start(line);
        if offset - line_start <= COLUMN_STRIDE {
            let column = 1 + code_points(&self.text[line_start..offset]);
            return Position { line, column };
        }
        let mut cache = self.checkpoints.borrow_mut();
        let marks = cache
            .entry(line_start)
            .or_insert_with(|| self.column_checkpoints(line_start));
        let i = marks.partition_point(|&(at, _)| at <= offset);
        let (at, before) = marks[i - 1];
        let column = 1 + before + code_points(&self.text[at..offset]);
        Position { line, column }
    }

    /// `(offset, code points before it)` from the line's start, every [`COLUMN_STRIDE`] bytes at
    /// a byte that starts a character (a count split there adds up to the whole line's).
    fn column_checkpoints(&self, line_start: usize) -> Vec<(usize, usize)> {
        let end = self.text[line_start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(self.text.len(), |p| line_start + p);
        let mut marks = vec![(line_start, 0)];
        let mut at = line_start;
        let mut count = 0;
        while at + COLUMN_STRIDE < end {
            let mut next = at + COLUMN_STRIDE;
            // A continuation byte (0b10xx_xxxx) would split a character's count.
            while next < end && self.text[next] & 0xC0 == 0x80 {
                next += 1;
            }
            count += code_points(&self.text[at..next]);
            marks.push((next, count));
            at = next;
        }
        marks
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Diagnostic {
    pub rule: String,
    pub file: PathBuf,
    pub start: Position,
    /// Where the flagged code ends, when known.
    pub end: Option<Position>,
    pub message: String,
    /// What to do about it, in words.
    pub help: String,
    /// The exact text that replaces `start..end` (a safe rewrite), when there is one.
    pub replacement: Option<String>,
    /// Other places the finding involves (the second pin of a contradiction).
    pub related: Vec<(PathBuf, Position)>,
}

/// A rule as the SARIF `tool.driver.rules` entry describes it.
#[derive(Debug, Clone)]
pub struct RuleDoc {
    pub id: String,
    pub summary: String,
    pub help: String,
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The aligned table (the default on a terminal).
    Table,
    /// One JSON document (docs/json.md), as `--json`.
    Json,
    /// `file:line:col: rule message`, one finding a line (the default when not a terminal).
    Plain,
    /// GitHub Actions workflow commands: annotations on the pull request's lines.
    Github,
    /// SARIF 2.1.0, for code scanning (`github/codeql-action/upload-sarif`).
    Sarif,
}

impl Format {
    /// `--format` if given, `json` under `--json`, else table on a terminal and plain otherwise.
    pub fn resolve(format: Option<Format>, json: bool) -> Format {
        match (format, json) {
            (Some(f), _) => f,
            (None, true) => Format::Json,
            (None, false) if std::io::stdout().is_terminal() => Format::Table,
            (None, false) => Format::Plain,
        }
    }
}

/// `--select` / `--ignore`: rule ids, or prefixes ending in `*` (`thc-*`).
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub select: Vec<String>,
    pub ignore: Vec<String>,
}

impl Selection {
    fn matches(pattern: &str, id: &str) -> bool {
        match pattern.strip_suffix('*') {
            Some(prefix) => id.starts_with(prefix),
            None => pattern == id,
        }
    }

    /// Whether findings of `id` are reported (and, for the codemod, rewritten).
    pub fn allows(&self, id: &str) -> bool {
        (self.select.is_empty() || self.select.iter().any(|p| Self::matches(p, id)))
            && !self.ignore.iter().any(|p| Self::matches(p, id))
    }

    pub fn is_everything(&self) -> bool {
        self.select.is_empty() && self.ignore.is_empty()
    }

    /// Refuses a pattern that names no rule of `known`: a typo would silently check nothing.
    pub fn check_known(&self, known: &[String], list_with: &str) -> Result<()> {
        for p in self.select.iter().chain(&self.ignore) {
            if !known.iter().any(|id| Self::matches(p, id)) {
                let near: Vec<&str> = known
                    .iter()
                    .filter(|id| {
                        let stem = p.trim_end_matches('*');
                        id.starts_with(stem) || strsim::levenshtein(stem, id) <= 2
                    })
                    .map(String::as_str)
                    .take(5)
                    .collect();
                let hint = if near.is_empty() {
                    String::new()
                } else {
                    format!(" (did you mean {}?)", near.join(", "))
                };
                bail!("no rule `{p}`{hint}; `{list_with}` lists the rule ids");
            }
        }
        Ok(())
    }
}

/// `path` as a finding names it: relative to the current directory when under it.
fn shown(path: &Path) -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    let rel = path.strip_prefix(&cwd).unwrap_or(path);
    rel.components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect::<PathBuf>()
        .display()
        .to_string()
}

/// The options the source checks share (`audit upgrade`, `codemod`, `verify pins`), flattened
/// into their arguments.
#[derive(Debug, clap::Args)]
pub struct FindingsArgs {
    /// How to print the findings: table (default on a terminal), plain (`file:line:col: rule
    /// message`, the default otherwise), json (as --json), github (workflow annotations) or sarif
    /// (SARIF 2.1.0, for code scanning).
    #[arg(long, value_enum, value_name = "FORMAT", conflicts_with = "json")]
    pub format: Option<Format>,
    /// Only these rules: ids as --list-rules prints them, or a prefix ending in `*` (repeatable,
    /// or comma-separated).
    #[arg(long, value_name = "RULE", value_delimiter = ',')]
    pub select: Vec<String>,
    /// Not these rules (same forms as --select).
    #[arg(long, value_name = "RULE", value_delimiter = ',')]
    pub ignore: Vec<String>,
}

impl FindingsArgs {
    pub fn selection(&self) -> Selection {
        Selection {
            select: self.select.clone(),
            ignore: self.ignore.clone(),
        }
    }

    /// The format to print in: as asked, else [`Format::resolve`] for a check, or the table (the
    /// JSON document under `--json`) for a command that is not one (`codemod` writing files).
    pub fn format(&self, json: bool, is_check: bool) -> Format {
        match (self.format, is_check) {
            (Some(f), _) => f,
            (None, true) => Format::resolve(None, json),
            (None, false) if json => Format::Json,
            (None, false) => Format::Table,
        }
    }
}

/// `file:line:col: rule message`, one finding a line, then `summary`.
pub fn plain(diags: &[Diagnostic], summary: &str) -> String {
    let mut out = String::new();
    for d in diags {
        // One line a finding, whole: a contradiction's other places and the fix are on it too
        // (`grep` and an editor's quickfix list see nothing else).
        let mut line = format!(
            "{}:{}:{}: {} {}",
            shown(&d.file),
            d.start.line,
            d.start.column,
            d.rule,
            one_line(&d.message)
        );
        if !d.related.is_empty() {
            let places: Vec<String> = d
                .related
                .iter()
                .map(|(f, p)| format!("{}:{}:{}", shown(f), p.line, p.column))
                .collect();
            line += &format!(" (also at {})", places.join(", "));
        }
        if !d.help.is_empty() {
            line += &format!("; fix: {}", one_line(&d.help));
        }
        out += &line;
        out.push('\n');
    }
    out += summary;
    out
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// GitHub Actions `::error` commands (escaped as the runner's toolkit escapes them), then
/// `summary` as a notice.
pub fn github(diags: &[Diagnostic], summary: &str) -> String {
    let data = |s: &str| {
        s.replace('%', "%25")
            .replace('\r', "%0D")
            .replace('\n', "%0A")
    };
    let property = |s: &str| data(s).replace(':', "%3A").replace(',', "%2C");
    let mut out = String::new();
    for d in diags {
        let mut props = format!(
            "file={},line={},col={}",
            property(&shown(&d.file)),
            d.start.line,
            d.start.column
        );
        if let Some(e) = d.end {
            props += &format!(",endLine={},endColumn={}", e.line, e.column);
        }
        props += &format!(",title={}", property(&format!("archsmith {}", d.rule)));
        let mut message = d.message.clone();
        for (f, p) in &d.related {
            message += &format!("\nalso at {}:{}:{}", shown(f), p.line, p.column);
        }
        if !d.help.is_empty() {
            message += &format!("\nfix: {}", d.help);
        }
        out += &format!("::error {props}::{}\n", data(&message));
    }
    let summary = summary.trim_end();
    if !summary.is_empty() {
        out += &format!("::notice title=archsmith::{}\n", data(summary));
    }
    out
}

/// A file's URI: relative (resolved against `%SRCROOT%`, the current directory) when under the
/// current directory, else an absolute `file://` URI; bytes outside RFC 3986's unreserved set and
/// `/` are percent-encoded.
fn uri(path: &Path) -> (String, bool) {
    let cwd = std::env::current_dir().unwrap_or_default();
    let (rel, relative) = match path.strip_prefix(&cwd) {
        Ok(r) => (r.to_path_buf(), true),
        Err(_) if path.is_relative() => (path.to_path_buf(), true),
        Err(_) => (path.to_path_buf(), false),
    };
    let enc = percent_encoded(&rel);
    if relative {
        (enc.trim_start_matches("./").to_string(), true)
    } else {
        (format!("file://{enc}"), false)
    }
}

fn percent_encoded(path: &Path) -> String {
    let mut enc = String::new();
    for b in path.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            enc.push(b as char);
        } else {
            enc += &format!("%{b:02X}");
        }
    }
    enc
}

fn location(path: &Path, start: Position, end: Option<Position>) -> Value {
    let (uri, relative) = uri(path);
    let mut artifact = json!({ "uri": uri });
    if relative {
        artifact["uriBaseId"] = json!("%SRCROOT%");
    }
    json!({ "physicalLocation": { "artifactLocation": artifact, "region": region(start, end) } })
}

fn region(start: Position, end: Option<Position>) -> Value {
    let mut r = json!({ "startLine": start.line, "startColumn": start.column });
    if let Some(e) = end {
        r["endLine"] = json!(e.line);
        r["endColumn"] = json!(e.column);
    }
    r
}

/// The SARIF 2.1.0 log of one run of `command` (`audit upgrade`): every rule of `rules` that a
/// finding names, with its help; each finding with its location, related locations and, where
/// it has one, the exact fix.
pub fn sarif(command: &str, rules: &[RuleDoc], diags: &[Diagnostic]) -> Value {
    let mut used: Vec<RuleDoc> = Vec::new();
    for d in diags {
        if !used.iter().any(|r| r.id == d.rule) {
            used.push(
                rules
                    .iter()
                    .find(|r| r.id == d.rule)
                    .cloned()
                    .unwrap_or_else(|| RuleDoc {
                        id: d.rule.clone(),
                        summary: d.rule.clone(),
                        help: d.help.clone(),
                    }),
            );
        }
    }
    used.sort_by(|a, b| a.id.cmp(&b.id));
    let driver_rules: Vec<Value> = used
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "shortDescription": { "text": one_line(&r.summary) },
                "fullDescription": { "text": r.summary },
                "help": { "text": r.help },
                "defaultConfiguration": { "level": "error" },
            })
        })
        .collect();
    let results: Vec<Value> = diags
        .iter()
        .map(|d| {
            let index = used.iter().position(|r| r.id == d.rule).unwrap_or(0);
            let mut text = d.message.trim_end().to_string();
            if !d.help.is_empty() {
                let stop = if text.ends_with('.') { "" } else { "." };
                text += &format!("{stop} Fix: {}", d.help);
            }
            let mut result = json!({
                "ruleId": d.rule,
                "ruleIndex": index,
                "level": "error",
                "message": { "text": text },
                "locations": [location(&d.file, d.start, d.end)],
            });
            if !d.related.is_empty() {
                result["relatedLocations"] = d
                    .related
                    .iter()
                    .enumerate()
                    .map(|(i, (f, p))| {
                        let mut l = location(f, *p, None);
                        l["id"] = json!(i);
                        l
                    })
                    .collect();
            }
            if let (Some(rep), Some(end)) = (&d.replacement, d.end) {
                let (uri, relative) = uri(&d.file);
                let mut artifact = json!({ "uri": uri });
                if relative {
                    artifact["uriBaseId"] = json!("%SRCROOT%");
                }
                result["fixes"] = json!([{
                    "description": { "text": d.help },
                    "artifactChanges": [{
                        "artifactLocation": artifact,
                        "replacements": [{
                            "deletedRegion": region(d.start, Some(end)),
                            "insertedContent": { "text": rep },
                        }],
                    }],
                }]);
            }
            result
        })
        .collect();
    // %SRCROOT%: the directory the command ran in, as the absolute URI SARIF requires.
    let cwd = std::env::current_dir().unwrap_or_default();
    let root = format!("file://{}/", percent_encoded(&cwd).trim_end_matches('/'));
    let mut driver = sarif_driver();
    driver["rules"] = json!(driver_rules);
    sarif_log(json!({
        "tool": { "driver": driver },
        "automationDetails": { "id": format!("archsmith/{}/", command.replace(' ', "-")) },
        "originalUriBaseIds": { "%SRCROOT%": { "uri": root } },
        "columnKind": "unicodeCodePoints",
        "results": results,
    }))
}

/// archsmith as SARIF's `tool.driver`.
fn sarif_driver() -> Value {
    json!({
        "name": "archsmith",
        "version": env!("CARGO_PKG_VERSION"),
        "informationUri": "https://github.com/archsmith/archsmith",
    })
}

/// A SARIF 2.1.0 log of the one `run`.
fn sarif_log(run: Value) -> Value {
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [run],
    })
}

/// The SARIF log of a run that stopped on bad input: no results, and the invocation marked
/// unsuccessful with the error, so code scanning shows the failure instead of an empty upload.
pub fn sarif_error(message: &str) -> Value {
    sarif_log(json!({
        "tool": { "driver": sarif_driver() },
        "results": [],
        "invocations": [{
            "executionSuccessful": false,
            "exitCode": 2,
            "toolExecutionNotifications": [{ "level": "error", "message": { "text": message } }],
        }],
    }))
}

/// Prints `report` in `format`: the table and the JSON document as every command does, or its
/// findings (`findings(report)`: the findings, the rules they name and a one-line summary).
pub fn emit<T: Serialize>(
    format: Format,
    command: &str,
    doc: crate::output::Document,
    report: &T,
    table: impl FnOnce(&T) -> String,
    findings: impl FnOnce(&T) -> (Vec<Diagnostic>, Vec<RuleDoc>, String),
) -> Result<()> {
    match format {
        Format::Table => crate::output::emit(false, doc, report, table),
        Format::Json => crate::output::emit(true, doc, report, table),
        Format::Plain | Format::Github | Format::Sarif => {
            let (diags, rules, summary) = findings(report);
            let summary = format!("{}\n", summary.trim_end());
            match format {
                Format::Plain => crate::out!("{}", plain(&diags, &summary)),
                Format::Github => crate::out!("{}", github(&diags, &summary)),
                _ => crate::outln!(
                    "{}",
                    serde_json::to_string_pretty(&sarif(command, &rules, &diags))?
                ),
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long line's columns from checkpoints equal a count from the line's start, through
    /// multi-byte characters and bytes that are not UTF-8.
    #[test]
    fn long_line_columns_equal_a_count_from_the_start() {
        let mut text = b"ab\n".to_vec();
        for i in 0..5000u32 {
            text.extend_from_slice("x\u{e9}\u{20ac}\u{1F600}".as_bytes());
            if i % 7 == 0 {
                text.extend_from_slice(b"\xe2\x82\xff\x80");
            }
        }
        text.extend_from_slice(b"\nz");
        let index = LineIndex::new(&text);
        for offset in (0..text.len())
            .step_by(997)
            .chain([text.len() - 3, text.len()])
        {
            let line = index.line(offset);
            let start = index.line_start(line);
            let naive = 1 + String::from_utf8_lossy(&text[start..offset])
                .chars()
                .count();
            assert_eq!(
                index.position(offset),
                Position {
                    line,
                    column: naive
                },
                "{offset}"
            );
        }
    }

    fn diag(rule: &str, line: usize) -> Diagnostic {
        Diagnostic {
            rule: rule.into(),
            file: PathBuf::from("src/a b.cu"),
            start: Position { line, column: 3 },
            end: Some(Position { line, column: 11 }),
            message: "AT_CHECK is gone, use: TORCH_CHECK, 100%".into(),
            help: "TORCH_CHECK".into(),
            replacement: Some("TORCH_CHECK".into()),
            related: vec![],
        }
    }

    #[test]
    fn positions_count_code_points_from_one() {
        let text = "ab\nçé AT_CHECK\n".as_bytes();
        let at = text.windows(8).position(|w| w == b"AT_CHECK").unwrap();
        let index = LineIndex::new(text);
        assert_eq!(index.position(at), Position { line: 2, column: 4 });
        assert_eq!(index.position(0), Position { line: 1, column: 1 });
        assert_eq!(index.position(9999).line, 3);
    }

    #[test]
    fn plain_and_github_forms() {
        let d = [diag("at-check", 7)];
        assert_eq!(
            plain(&d, "1 finding\n"),
            "src/a b.cu:7:3: at-check AT_CHECK is gone, use: TORCH_CHECK, 100%; fix: TORCH_CHECK\n1 finding\n"
        );
        let g = github(&d, "1 finding\n");
        assert!(g.starts_with(
            "::error file=src/a b.cu,line=7,col=3,endLine=7,endColumn=11,title=archsmith at-check::AT_CHECK is gone, use: TORCH_CHECK, 100%25%0Afix: TORCH_CHECK\n"
        ), "{g}");
        assert!(g.ends_with("::notice title=archsmith::1 finding\n"), "{g}");
    }

    #[test]
    fn sarif_names_each_rule_once_with_its_fix() {
        let rules = [RuleDoc {
            id: "at-check".into(),
            summary: "AT_CHECK was removed".into(),
            help: "Use TORCH_CHECK".into(),
        }];
        let s = sarif(
            "codemod",
            &rules,
            &[diag("at-check", 1), diag("at-check", 2)],
        );
        let run = &s["runs"][0];
        assert_eq!(run["tool"]["driver"]["rules"].as_array().unwrap().len(), 1);
        let r = &run["results"][1];
        assert_eq!(r["ruleId"], "at-check");
        assert_eq!(
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            "src/a%20b.cu"
        );
        assert_eq!(
            r["locations"][0]["physicalLocation"]["region"]["startLine"],
            2
        );
        let rep = &r["fixes"][0]["artifactChanges"][0]["replacements"][0];
        assert_eq!(rep["insertedContent"]["text"], "TORCH_CHECK");
        assert_eq!(rep["deletedRegion"]["endColumn"], 11);
    }

    #[test]
    fn selection_by_id_and_prefix_and_unknown_ids_refused() {
        let s = Selection {
            select: vec!["thc-*".into(), "at-check".into()],
            ignore: vec!["thc-state".into()],
        };
        assert!(s.allows("at-check") && s.allows("thc-blas"));
        assert!(!s.allows("thc-state") && !s.allows("data-ptr"));
        let known = vec![
            "at-check".to_string(),
            "thc-blas".into(),
            "thc-state".into(),
        ];
        assert!(s.check_known(&known, "x").is_ok());
        let bad = Selection {
            select: vec!["at-chek".into()],
            ignore: vec![],
        };
        let e = bad
            .check_known(&known, "archsmith codemod --list-rules")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("no rule `at-chek` (did you mean at-check?)"),
            "{e}"
        );
        assert!(e.to_string().contains("--list-rules"), "{e}");
    }
}
