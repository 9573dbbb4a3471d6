//! The Python rule catalogue: module APIs removed, deprecated or changed in behaviour
//! (`crates/codemod/rules/torch-python.toml`, a source and, where a wheel shows it, real-wheel evidence
//! per row). The same rows drive two front ends: the codemod ([`rewrite`]) applies a row's safe
//! rewrite to a package's Python sources or lists it for review, and `audit upgrade` reports each
//! row that breaks or warns between two torch releases. Sources are read as syntax trees
//! ([`reader`]), never as text.

pub mod build_script;
pub mod jit_calls;
pub mod reader;
pub mod rewrite;

use crate::version::Version;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

pub const BUILTIN_NAME: &str = "crates/codemod/rules/torch-python.toml";
const BUILTIN: &str = include_str!("../../../rules/torch-python.toml");

/// One API change: what, when, why, the fix, where it is documented, and how to rewrite it when
/// that is safe.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    pub api: String,
    /// `use` (any use), `call-without` (a call of the API lacking [`Self::keyword`]),
    /// `call-with` (a call of the API, or of anything under it, passing that keyword),
    /// `version-slice` (`X.__version__[...]`; `rewrite` names the version class a
    /// `float(X.__version__[:3]) < 1.4` comparison is rewritten with) or `index-0` (`x.data[0]`).
    #[serde(rename = "match")]
    pub matching: String,
    #[serde(default)]
    pub keyword: Option<String>,
    /// Whose releases the events below are: `torch` (default) or `numpy`.
    #[serde(default)]
    pub package: Option<String>,
    #[serde(default)]
    pub deprecated: Option<Version>,
    #[serde(default)]
    pub removed: Option<Version>,
    #[serde(default)]
    pub changed: Option<Version>,
    pub reason: String,
    pub fix: String,
    pub source: String,
    /// A safe rewrite of a `use` row: the expression that replaces the use (`str`, `math.inf`,
    /// `torch.nn.functional.interpolate`). A name of the same module keeps the file's alias
    /// (`F.upsample` → `F.interpolate`).
    #[serde(default)]
    pub rewrite: Option<String>,
    /// With `rewrite`: arguments the new API needs first (`"cuda"` for `torch.amp.autocast`), put
    /// into the call, or as a call of a bare decorator.
    #[serde(default)]
    pub call_args: Option<String>,
    /// With `rewrite`: the module it needs imported (`math`, `collections.abc`).
    #[serde(default)]
    pub import: Option<String>,
    /// A safe rewrite of a `call-without` row: the keyword argument to add (`indexing="ij"`).
    #[serde(default)]
    pub add_keyword: Option<String>,
    /// A safe rewrite of a `use` row whose call only wraps its one argument
    /// (`amp.float_function(f)` → `f`, `Variable(x)` → `x`): the call becomes its argument, and
    /// the name used as a bare decorator (`@amp.float_function`) is removed.
    #[serde(default)]
    pub unwrap: bool,
    #[serde(default)]
    pub evidence: Vec<Evidence>,
}

/// What a real torch wheel shows about a change.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    pub torch: Version,
    pub member: String,
    #[serde(default)]
    pub present: bool,
    #[serde(default)]
    pub absent: bool,
    #[serde(default)]
    pub contains: Option<String>,
    #[serde(default)]
    pub lacks: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    change: Vec<Change>,
}

fn dotted(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|p| {
            !p.is_empty()
                && !p.starts_with(|c: char| c.is_ascii_digit())
                && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

/// Parses a change table, checking each row can be applied.
pub fn parse_changes(origin: &str, text: &str) -> Result<Vec<Change>> {
    let t: Table = toml::from_str(text).with_context(|| format!("{origin}: not a change table"))?;
    for c in &t.change {
        let err = |what: &str| anyhow::anyhow!("{origin}: change `{}`: {what}", c.api);
        if !dotted(&c.api) {
            return Err(err(
                "api must be a dotted name such as torch.cuda.amp.autocast",
            ));
        }
        match c.matching.as_str() {
            "use" => {}
            "call-without" | "call-with" if c.keyword.is_some() => {}
            "version-slice" | "index-0" => {}
            m => {
                return Err(err(&format!(
                    "match `{m}` needs to be `use`, or `call-without`/`call-with` with a keyword"
                )))
            }
        }
        if c.deprecated.is_none() && c.removed.is_none() && c.changed.is_none() {
            return Err(err("no deprecated, removed or changed release"));
        }
        if c.source.trim().is_empty() {
            return Err(err("no source"));
        }
        if !matches!(c.package.as_deref(), None | Some("torch") | Some("numpy")) {
            return Err(err("package must be torch or numpy"));
        }
        if c.rewrite.is_some() && !matches!(c.matching.as_str(), "use" | "version-slice") {
            return Err(err(
                "`rewrite` is for `use` rows; a call-without row adds a keyword with `add_keyword`",
            ));
        }
        if let Some(r) = &c.rewrite {
            if !dotted(r) {
                return Err(err(&format!("rewrite {r:?} must be a dotted name")));
            }
        }
        if c.unwrap && (c.matching != "use" || c.rewrite.is_some()) {
            return Err(err("`unwrap` is for `use` rows without a `rewrite`"));
        }
        if c.add_keyword.is_some() && c.matching != "call-without" {
            return Err(err("`add_keyword` is for call-without rows"));
        }
        if (c.call_args.is_some() || c.import.is_some()) && c.rewrite.is_none() {
            return Err(err("`call_args` and `import` go with a `rewrite`"));
        }
        if let Some(m) = &c.import {
            let r = c.rewrite.as_deref().unwrap_or_default();
            if !dotted(m) || !(r == m || r.starts_with(&format!("{m}."))) {
                return Err(err(&format!(
                    "import {m:?} must be the module the rewrite {r:?} starts with"
                )));
            }
        }
    }
    Ok(t.change)
}

/// The built-in table.
pub fn builtin_changes() -> Vec<Change> {
    parse_changes(BUILTIN_NAME, BUILTIN)
        .unwrap_or_else(|e| panic!("the embedded change table is invalid: {e:#}"))
}

impl Change {
    /// The row as code scanning shows a rule: what changed in torch `to`, and the fix.
    pub fn rule_doc(&self, to: &Version) -> crate::lint::RuleDoc {
        crate::lint::RuleDoc {
            id: self.api.clone(),
            summary: format!(
                "{} {}: {}",
                self.api,
                self.event(to).unwrap_or_default(),
                self.reason
            ),
            help: format!("{} (source: {})", self.fix, self.source),
        }
    }

    fn is_numpy(&self) -> bool {
        self.package.as_deref() == Some("numpy")
    }

    /// What happened to it by torch release `to`, if anything. NumPy rows hold for every torch:
    /// every supported torch environment resolves NumPy 2.
    pub fn event(&self, to: &Version) -> Option<String> {
        let mut events = Vec::new();
        let whose = if self.is_numpy() { "NumPy " } else { "" };
        let holds = |v: &&Version| self.is_numpy() || *v <= to;
        if let Some(v) = self.removed.as_ref().filter(holds) {
            events.push(format!("removed in {whose}{v}"));
        }
        if let Some(v) = self.changed.as_ref().filter(holds) {
            events.push(format!("behaviour changed in {whose}{v}"));
        }
        if let Some(v) = self.deprecated.as_ref().filter(holds) {
            events.push(format!("deprecated since {whose}{v}"));
        }
        (!events.is_empty()).then(|| events.join(", "))
    }

    /// Whether the change already held at torch `from` (so the upgrade did not introduce it).
    pub fn before(&self, from: &Version) -> bool {
        self.is_numpy()
            || [&self.removed, &self.changed, &self.deprecated]
                .into_iter()
                .flatten()
                .all(|v| v <= from)
    }

    /// Whether `u` is what this row is about.
    pub fn matches(&self, u: &reader::Use) -> bool {
        match self.matching.as_str() {
            "use" => {
                u.path == self.api
                    || u.path.len() > self.api.len()
                        && u.path.starts_with(&self.api)
                        && u.path.as_bytes()[self.api.len()] == b'.'
            }
            "version-slice" => {
                u.path == self.api && matches!(u.shape, Some(reader::Shape::VersionSlice { .. }))
            }
            "index-0" => u.path == self.api && u.shape == Some(reader::Shape::IndexZero),
            "call-with" => {
                (u.path == self.api || u.path.starts_with(&format!("{}.", self.api)))
                    && u.call_keywords
                        .as_ref()
                        .is_some_and(|k| k.iter().any(|k| Some(k) == self.keyword.as_ref()))
            }
            _ => {
                u.path == self.api
                    && u.import.is_none()
                    && u.call_keywords
                        .as_ref()
                        .is_some_and(|k| !k.iter().any(|k| Some(k) == self.keyword.as_ref()))
            }
        }
    }
}

/// The most specific row about `u` among those that hold at torch `to` (`torch._six.inf` before
/// `torch._six`).
pub fn row_for<'c>(changes: &'c [Change], u: &reader::Use, to: &Version) -> Option<&'c Change> {
    changes
        .iter()
        .filter(|c| c.matches(u) && c.event(to).is_some())
        .max_by_key(|c| c.api.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_rows_are_refused_with_the_field_named() {
        let row = |extra: &str| {
            format!("[[change]]\napi = \"torch.x\"\nmatch = \"use\"\nremoved = \"2.0\"\nreason = \"r\"\nfix = \"f\"\nsource = \"s\"\n{extra}")
        };
        assert!(parse_changes("t", &row("")).is_ok());
        for (extra, says) in [
            ("add_keyword = \"a=1\"", "add_keyword"),
            ("rewrite = \"a b\"", "dotted name"),
            ("import = \"math\"", "go with a `rewrite`"),
            (
                "rewrite = \"math.inf\"\nimport = \"cmath\"",
                "must be the module",
            ),
            ("package = \"scipy\"", "package"),
        ] {
            let e = parse_changes("t", &row(extra)).unwrap_err().to_string();
            assert!(e.contains(says), "{extra}: {e}");
        }
    }

    #[test]
    fn numpy_rows_hold_for_every_torch() {
        let c = parse_changes(
            "t",
            "[[change]]\napi = \"numpy.float\"\nmatch = \"use\"\npackage = \"numpy\"\nremoved = \"1.24\"\nreason = \"r\"\nfix = \"f\"\nsource = \"s\"\n",
        )
        .unwrap();
        assert_eq!(
            c[0].event(&"2.0".parse().unwrap()).as_deref(),
            Some("removed in NumPy 1.24")
        );
    }
}
