//! The rule catalogue: data (TOML), validated into [`Rule`]s.
//!
//! The built-in catalogue is `crates/codemod/rules/torch-legacy.toml`, compiled into the binary; `--rules`
//! loads another file with the same schema. Every rule records the torch release where the old form
//! broke (or `never` when it only warns), the replacement and at least one before/after test that
//! the test suite runs.

use super::lexer::{lex_c, lex_python, Token};
use super::pattern::Pattern;
use crate::version::Version;
use anyhow::{anyhow, bail, Context, Result};
use regex::bytes::Regex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

/// Counter key for the includes the engine adds on behalf of other rules.
pub const ADD_INCLUDE: &str = "add-include";

pub const BUILTIN_NAME: &str = "crates/codemod/rules/torch-legacy.toml";

/// Headers a rule may add beside the files it rewrites (`bundle = NAME`): small compatibility
/// layers a reviewer reads in one screen, compiled into the binary from `crates/codemod/rules/compat/`.
pub const BUNDLED: [(&str, &str); 3] = [
    (
        "archsmith_thc_blas.h",
        include_str!("../../rules/compat/archsmith_thc_blas.h"),
    ),
    (
        "archsmith_thc_tensor.h",
        include_str!("../../rules/compat/archsmith_thc_tensor.h"),
    ),
    (
        "archsmith_th_blas.h",
        include_str!("../../rules/compat/archsmith_th_blas.h"),
    ),
];

/// The text of a bundled header.
pub fn bundled(name: &str) -> Option<&'static str> {
    BUNDLED.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}
const BUILTIN: &str = include_str!("../../rules/torch-legacy.toml");
pub const STABLE_NAME: &str = "crates/codemod/rules/torch-stable.toml";
/// The id reports give the `--stable-abi` bindings step ([`super::stable_bindings`]).
pub const STABLE_BINDINGS: &str = "stable-bindings";
pub const STABLE_BINDINGS_WHY: &str = "pybind11 bindings tie a module to libtorch_python and one CPython; the stable ABI registers each function as an operator (STABLE_TORCH_LIBRARY, TORCH_BOX), called as torch.ops.NAMESPACE.name.";
/// The id reports give the `--stable-abi` dispatcher step ([`super::stable_dispatch`]), why it
/// rewrites, and the release whose stable C API it needs (`torch_call_dispatcher`, lists).
pub const STABLE_DISPATCH: &str = "stable-dispatch";
/// Bound functions whose schema has a list (`Tensor[]`, `int[]`): the stable boxing converts
/// lists from torch 2.10 on.
pub const STABLE_BINDINGS_LISTS: &str = "stable-bindings-lists";
pub const STABLE_DISPATCH_WHY: &str = "An ATen operator with no torch::stable function: called through torch_call_dispatcher by name and overload, with the schema of the torch the build uses, so the binary binds no ATen symbol.";
pub const STABLE_DISPATCH_SINCE: &str = "2.10";
const STABLE: &str = include_str!("../../rules/torch-stable.toml");

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    /// C, C++, CUDA sources and headers.
    #[default]
    Cpp,
    /// `setup.py`.
    Python,
    /// Any other `.py` file: the Python API rows apply, token rules only when they say so.
    PythonModule,
}

impl Lang {
    pub fn lexer(self) -> fn(&[u8]) -> Vec<Token> {
        match self {
            Lang::Cpp => lex_c,
            Lang::Python | Lang::PythonModule => lex_python,
        }
    }

    /// The language of a file by name, or None for files the codemod does not touch.
    pub fn of_path(path: &Path) -> Option<Lang> {
        let name = path.file_name()?.to_str()?;
        if name == "setup.py" {
            return Some(Lang::Python);
        }
        let ext = path.extension()?.to_str()?;
        if ext == "py" {
            return Some(Lang::PythonModule);
        }
        // Any case: `.C`, `.H` and `.CPP` are C++ to gcc too, and `.CU` files exist in the wild.
        matches!(
            ext.to_ascii_lowercase().as_str(),
            "c" | "cc" | "cpp" | "cxx" | "c++" | "h" | "hh" | "hpp" | "hxx" | "h++" | "cu" | "cuh"
        )
        .then_some(Lang::Cpp)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogueSpec {
    #[serde(default)]
    rule: Vec<RuleSpec>,
    /// Python API rows ([`super::python_source::Change`]), checked by their own parser.
    #[serde(default)]
    change: Vec<toml::Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuleKind {
    /// Replace a token pattern (with balanced holes) by a template.
    Rewrite,
    /// Delete a statement; with `unless_used`, only when the variable it declares is unused.
    Remove,
    /// Swap or drop an `#include`.
    Include,
    /// Report, with a suggested fix, but do not change.
    Review,
    /// A string literal in setup.py whose content matches `regex`: `drop` it from its list, or
    /// `review` it.
    PyString,
    /// A file that uses a name (`match`) without including the header that declares it
    /// (`include`) gains the `#include`: code that compiled only because an older standard
    /// library pulled the header in through another one.
    NeedsHeader,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    id: String,
    kind: RuleKind,
    #[serde(default)]
    lang: Lang,
    /// torch release where the old form stopped compiling (or working), or "never".
    broke_in: String,
    /// What else broke it when torch did not (`"GCC 11 (libstdc++)"`): shown in place of
    /// `broke_in`, which is then "never".
    broke_with: Option<String>,
    deprecated_in: Option<String>,
    /// Oldest torch that has the replacement.
    replacement_since: Option<String>,
    why: String,
    #[serde(rename = "match")]
    pattern: Option<String>,
    replace: Option<String>,
    #[serde(rename = "where", default)]
    where_: BTreeMap<String, String>,
    /// Holes whose text must not match the regex (`unless = { N = '^(stable|headeronly)$' }`):
    /// what `where` cannot say, the regex crate having no look-around.
    #[serde(default)]
    unless: BTreeMap<String, String>,
    include: Option<String>,
    /// Rewrite rules only: a hole's text passed through a named transform before it is put in
    /// the template (`{ A = "printf-to-args" }`); a match the transform declines is left alone.
    #[serde(default)]
    transform: BTreeMap<String, String>,
    unless_used: Option<String>,
    suggest: Option<String>,
    header: Option<String>,
    to: Option<String>,
    regex: Option<String>,
    action: Option<String>,
    /// Review rules only: quiet on lines that another rule already reports.
    #[serde(default)]
    secondary: bool,
    /// `include` rules with action = "drop-unused": the identifiers that mean the file still uses
    /// what the header declares.
    uses: Option<String>,
    /// The rule applies only to files whose bytes match this regex (a rule that brings in torch
    /// headers only where the file already uses torch).
    file_matches: Option<String>,
    /// The rule applies only inside the body of a `#define NAME` whose NAME matches this regex
    /// (a `CHECK_*` macro checks its caller's input).
    in_define: Option<String>,
    /// The rule skips files whose bytes match this regex (a file that includes glog, or defines
    /// its own `CHECK_EQ`, keeps the names that are not c10's there).
    unless_file_matches: Option<String>,
    /// Rewrite rules only: a [`BUNDLED`] header the rewrite calls into; it is written beside the
    /// file and included as `#include "NAME"`.
    bundle: Option<String>,
    #[serde(default)]
    test: Vec<RuleTest>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuleTest {
    pub before: String,
    /// Expected output; absent means "unchanged".
    pub after: Option<String>,
    /// Review items expected from this rule on `before`.
    #[serde(default)]
    pub review: usize,
}

#[derive(Debug, Clone)]
pub enum Action {
    Rewrite {
        pat: Pattern,
        replace: String,
        include: Option<String>,
        /// Holes whose text goes through a transform first.
        transforms: Vec<(String, Transform)>,
    },
    Remove {
        pat: Pattern,
        unless_used: Option<String>,
    },
    Review {
        pat: Pattern,
        suggest: String,
    },
    Include {
        /// Exact header name, or a prefix when `glob`.
        header: String,
        glob: bool,
        to: Option<String>,
        review: bool,
        suggest: String,
        /// `action = "drop-unused"`: the header is dropped only from a file none of whose code
        /// identifiers match this (`uses`; the names it could provide).
        drop_unless_uses: Option<Regex>,
    },
    PyString {
        regex: Regex,
        drop: bool,
        suggest: String,
    },
    NeedsHeader {
        pat: Pattern,
        header: String,
    },
}

/// What a rewrite can do to a hole's text besides copying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    /// A printf-style message and its values as the argument list `TORCH_CHECK` concatenates
    /// ([`super::printf::printf_to_args`]).
    PrintfToArgs,
    /// A TH/THC name less its `TH` prefix (`THCudaTensor_data` → `CudaTensor_data`): the name a
    /// bundled compatibility header gives the call, which no TH rule matches again.
    DropThPrefix,
    /// An ATen scalar-type constant less its `k` (`kLong` → `Long`): the enumerator of
    /// `torch::headeronly::ScalarType` it names.
    DropKPrefix,
}

impl Transform {
    /// Each transform by the name a catalogue gives it.
    const ALL: [(&'static str, Transform); 3] = [
        ("printf-to-args", Transform::PrintfToArgs),
        ("drop-th-prefix", Transform::DropThPrefix),
        ("drop-k-prefix", Transform::DropKPrefix),
    ];

    fn parse(name: &str) -> Option<Transform> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
    }

    /// The hole's new text, or None when the transform does not apply to it.
    pub fn apply(self, text: &[u8]) -> Option<Vec<u8>> {
        match self {
            Transform::PrintfToArgs => super::printf::printf_to_args(text),
            Transform::DropThPrefix => text
                .strip_prefix(b"TH")
                .filter(|rest| !rest.is_empty())
                .map(<[u8]>::to_vec),
            Transform::DropKPrefix => {
                // c10's aliases (`kInt64` for `kLong`, …) name the enumerator they alias.
                const ALIASES: [(&[u8], &[u8]); 8] = [
                    (b"kInt64", b"Long"),
                    (b"kInt32", b"Int"),
                    (b"kInt16", b"Short"),
                    (b"kInt8", b"Char"),
                    (b"kUInt8", b"Byte"),
                    (b"kFloat64", b"Double"),
                    (b"kFloat32", b"Float"),
                    (b"kFloat16", b"Half"),
                ];
                if let Some((_, e)) = ALIASES.iter().find(|(a, _)| *a == text) {
                    return Some(e.to_vec());
                }
                text.strip_prefix(b"k")
                    .filter(|rest| rest.first().is_some_and(u8::is_ascii_uppercase))
                    .map(<[u8]>::to_vec)
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub id: String,
    pub kind: RuleKind,
    pub lang: Lang,
    pub broke_in: Option<Version>,
    /// What broke the old form when torch did not (a compiler, a standard library).
    pub broke_with: Option<String>,
    pub deprecated_in: Option<Version>,
    pub replacement_since: Option<Version>,
    pub why: String,
    pub action: Action,
    /// Regexes on the captured text of holes.
    pub wheres: Vec<(String, Regex)>,
    /// Holes whose text must not match (`unless`).
    pub unlesses: Vec<(String, Regex)>,
    /// A catch-all review rule, quiet where a more specific rule reports the same line.
    pub secondary: bool,
    /// Files the rule applies to (all when None).
    pub file_matches: Option<Regex>,
    /// Files the rule leaves alone.
    pub unless_file_matches: Option<Regex>,
    /// Only inside the body of a `#define` whose macro name matches.
    pub in_define: Option<Regex>,
    /// The bundled header the rewrite needs beside the file.
    pub bundle: Option<String>,
    pub tests: Vec<RuleTest>,
}

#[derive(Debug, Clone)]
pub struct Catalogue {
    pub name: String,
    /// Token rules (C++/CUDA, setup.py).
    pub rules: Vec<Rule>,
    /// Python API rows, applied to `.py` files through their syntax tree.
    pub python: Vec<super::python_source::Change>,
    /// The torch release the port targets: which Python rows hold (default: the newest known).
    pub torch: Option<Version>,
    /// Whether the build-script edit runs (`arch-list-override`; off under `--ignore` of it).
    pub build_script: bool,
    /// With `--stable-abi` (the stable-ABI rules of [`stable`] follow the legacy ones): the
    /// operator namespace pybind11 bindings become ([`super::stable_bindings`]).
    pub stable_namespace: Option<String>,
    /// With `--stable-abi`: the operator schemas of the torch the build compiles against, from
    /// which ATen calls with no stable function get dispatcher wrappers
    /// ([`super::stable_dispatch`]); None leaves them review items.
    pub stable_schemas: Option<std::sync::Arc<super::aten_schema::Release>>,
}

impl Rule {
    /// False when the rule's pattern cannot match `text`: its longest literal token is nowhere
    /// in the bytes. Lexing the file and pairing its brackets for every rule, most of which match
    /// nothing in a given file, is what a codemod run spends its time on.
    pub fn may_match(&self, text: &[u8]) -> bool {
        let pat = match &self.action {
            Action::Rewrite { pat, .. }
            | Action::Remove { pat, .. }
            | Action::Review { pat, .. } => pat,
            _ => return true,
        };
        let longest = pat
            .elems
            .iter()
            .filter_map(|e| match e {
                super::pattern::Elem::Lit(bytes) => Some(bytes.as_slice()),
                super::pattern::Elem::Hole(..) => None,
            })
            .max_by_key(|b| b.len());
        longest.is_none_or(|lit| memchr::memmem::find(text, lit).is_some())
    }

    /// Whether the rule runs on a file of these bytes (`file_matches`, `unless_file_matches`).
    pub fn applies_to(&self, src: &[u8]) -> bool {
        self.file_matches.as_ref().is_none_or(|re| re.is_match(src))
            && !self
                .unless_file_matches
                .as_ref()
                .is_some_and(|re| re.is_match(src))
    }
}

/// A rule's optional regex over a file's bytes, compiled; a bad one is an error naming the field.
fn file_regex(
    text: &Option<String>,
    field: &str,
    err: &dyn Fn(&str) -> anyhow::Error,
) -> Result<Option<Regex>> {
    text.as_deref()
        .map(Regex::new)
        .transpose()
        .map_err(|e| err(&format!("{field}: bad regex: {e}")))
}

/// The built-in catalogue (parsed once): the token rules of `torch-legacy.toml` and the Python
/// rows of `torch-python.toml`.
pub fn builtin() -> &'static Catalogue {
    static CAT: OnceLock<Catalogue> = OnceLock::new();
    CAT.get_or_init(|| {
        let mut cat = Catalogue::parse(BUILTIN_NAME, BUILTIN).unwrap_or_else(|e| panic!("{e:#}"));
        cat.python = super::python_source::builtin_changes();
        cat.name = format!("{BUILTIN_NAME} + {}", super::python_source::BUILTIN_NAME);
        cat
    })
}

/// The stable-ABI catalogue (`torch-stable.toml`, parsed once): rules that move torch 2.x
/// extension code onto torch/csrc/stable and torch/headeronly.
pub fn stable() -> &'static Catalogue {
    static CAT: OnceLock<Catalogue> = OnceLock::new();
    CAT.get_or_init(|| Catalogue::parse(STABLE_NAME, STABLE).unwrap_or_else(|e| panic!("{e:#}")))
}

/// The lowest TORCH_TARGET_VERSION the stable-ABI rules that fired (`fired`, by id) allow: the
/// highest `replacement_since` among them (None when none fired).
pub fn stable_target<'a>(fired: impl Iterator<Item = &'a str>) -> Option<Version> {
    let stable = stable();
    fired
        .filter_map(|id| match id {
            // Calls through torch_call_dispatcher: the shim it needs.
            STABLE_DISPATCH | STABLE_BINDINGS_LISTS => STABLE_DISPATCH_SINCE.parse().ok(),
            id => stable.get(id).and_then(|r| r.replacement_since.clone()),
        })
        .max()
}

/// The `TORCH_TARGET_VERSION` value of a release, as torch/headeronly/version.h builds
/// `TORCH_VERSION_2_10_0`: major, minor and patch in the top three bytes (`0x020a000000000000`).
pub fn torch_target_macro(v: &Version) -> String {
    let part = |i: usize| v.parts().get(i).copied().unwrap_or(0);
    format!("0x{:02x}{:02x}{:02x}0000000000", part(0), part(1), part(2))
}

/// The release a `TORCH_TARGET_VERSION` value names (`0x020a000000000000` → 2.10.0): the inverse
/// of [`torch_target_macro`]; None for what is not such a value.
pub fn torch_target_release(value: &str) -> Option<Version> {
    let hex = value.strip_prefix("0x")?;
    if hex.len() != 16 {
        return None;
    }
    let v = u64::from_str_radix(hex, 16).ok()?;
    let byte = |shift: u32| ((v >> shift) & 0xff) as u32;
    Some(Version::new(&[byte(56), byte(48), byte(40)]))
}

/// A rule's `where` and `unless` regexes by hole: each names a hole of the pattern.
#[allow(clippy::type_complexity)]
fn hole_conditions(
    r: &RuleSpec,
    action: &Action,
) -> std::result::Result<(Vec<(String, Regex)>, Vec<(String, Regex)>), String> {
    let (mut wheres, mut unlesses) = (Vec::new(), Vec::new());
    let conditions =
        (r.where_.iter().map(|w| (w, false))).chain(r.unless.iter().map(|u| (u, true)));
    for ((hole, re), negated) in conditions {
        let pat = match action {
            Action::Rewrite { pat, .. }
            | Action::Remove { pat, .. }
            | Action::Review { pat, .. }
            | Action::NeedsHeader { pat, .. } => pat,
            _ => return Err("`where` applies only to pattern rules".into()),
        };
        if !pat.holes().any(|h| h == hole) {
            return Err(format!("where: `{hole}` is not a hole of the pattern"));
        }
        let re = Regex::new(re).map_err(|e| format!("where.{hole}: bad regex: {e}"))?;
        match negated {
            false => wheres.push((hole.clone(), re)),
            true => unlesses.push((hole.clone(), re)),
        }
    }
    Ok((wheres, unlesses))
}

fn version_field(
    origin: &str,
    id: &str,
    field: &str,
    v: &Option<String>,
) -> Result<Option<Version>> {
    match v.as_deref() {
        None | Some("never") => Ok(None),
        Some(s) => s.parse::<Version>().map(Some).map_err(|e| {
            anyhow!(
                "{origin}: rule `{id}`: {field} = {s:?} is not a torch version or \"never\": {e}"
            )
        }),
    }
}

impl Catalogue {
    /// Why the rule (or Python row, or built-in edit) named `id` by a report's counters exists.
    pub fn why(&self, id: &str) -> Option<String> {
        use super::python_source::{build_script, rewrite};
        if let Some(r) = self.rules.iter().find(|r| r.id == id) {
            return Some(r.why.clone());
        }
        if let Some(c) = self.python.iter().find(|c| c.api == id) {
            return Some(c.reason.clone());
        }
        match id {
            build_script::ARCH_LIST_OVERRIDE => Some(build_script::ARCH_LIST_OVERRIDE_WHY.into()),
            rewrite::IMPORTS => {
                Some("imports renamed, dropped or added with the Python rewrites".into())
            }
            ADD_INCLUDE => Some("a header a rewrite needs".into()),
            STABLE_BINDINGS => Some(STABLE_BINDINGS_WHY.into()),
            STABLE_DISPATCH => Some(STABLE_DISPATCH_WHY.into()),
            STABLE_BINDINGS_LISTS => Some("a bound function takes or returns a list (Tensor[], int[]): std::vector in C++, which the stable boxing converts from torch 2.10 on".into()),
            _ => None,
        }
    }

    pub fn load(path: &Path) -> Result<Catalogue> {
        let text = crate::input_file::read_text(path, "rule catalogue")
            .with_context(|| format!("reading rule catalogue {}", path.display()))?;
        Catalogue::parse(&path.display().to_string(), &text)
    }

    pub fn parse(origin: &str, text: &str) -> Result<Catalogue> {
        let spec: CatalogueSpec =
            toml::from_str(text).with_context(|| format!("{origin}: not a rule catalogue"))?;
        let mut rules = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for r in spec.rule {
            let id = r.id.clone();
            if !seen.insert(id.clone()) {
                bail!("{origin}: rule id `{id}` appears twice");
            }
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                bail!("{origin}: rule id `{id}`: expected lowercase words joined by `-`");
            }
            rules.push(Rule::from_spec(origin, r)?);
        }
        let python = if spec.change.is_empty() {
            Vec::new()
        } else {
            super::python_source::parse_changes(origin, text)?
        };
        if rules.is_empty() && python.is_empty() {
            bail!("{origin}: no [[rule]] and no [[change]]: not a rule catalogue");
        }
        Ok(Catalogue {
            name: origin.to_string(),
            rules,
            python,
            torch: None,
            build_script: true,
            stable_namespace: None,
            stable_schemas: None,
        })
    }

    /// The catalogue a run uses: `--rules FILE` or the built-in one, for `--torch`, with only
    /// the rules `--select`/`--ignore` leave (a pattern that names no rule is an error).
    pub fn chosen(
        rules: Option<&Path>,
        torch: Option<&Version>,
        stable_abi: Option<&str>,
        selection: &crate::lint::Selection,
    ) -> Result<std::borrow::Cow<'static, Catalogue>> {
        use std::borrow::Cow;
        let mut cat = match rules {
            Some(p) => Cow::Owned(Catalogue::load(p)?),
            None => Cow::Borrowed(builtin()),
        };
        if let Some(ns) = stable_abi {
            cat = Cow::Owned(cat.into_owned().with_stable_abi(ns));
        }
        if let Some(t) = torch {
            cat = Cow::Owned(cat.into_owned().for_torch(t));
        }
        if !selection.is_everything() {
            selection.check_known(
                &cat.rule_ids(),
                &format!("{} codemod --list-rules", crate::output::program()),
            )?;
            cat = Cow::Owned(cat.selected(selection));
        }
        Ok(cat)
    }

    /// Every rule id a report of this catalogue can name: the token rules, the Python rows (by
    /// API) and the build-script edit.
    pub fn rule_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.rules.iter().map(|r| r.id.clone()).collect();
        if self.stable_namespace.is_some() {
            ids.push(STABLE_BINDINGS.to_string());
            ids.push(STABLE_DISPATCH.to_string());
            ids.push(STABLE_BINDINGS_LISTS.to_string());
        }
        ids.extend(self.python.iter().map(|c| c.api.clone()));
        ids.push(super::python_source::build_script::ARCH_LIST_OVERRIDE.to_string());
        ids
    }

    /// The catalogue with only the rules `sel` allows.
    pub fn selected(&self, sel: &crate::lint::Selection) -> Catalogue {
        let mut cat = self.clone();
        cat.rules.retain(|r| sel.allows(&r.id));
        cat.python.retain(|c| sel.allows(&c.api));
        cat.build_script = sel.allows(super::python_source::build_script::ARCH_LIST_OVERRIDE);
        cat
    }

    /// Each rule as code scanning shows it: what it finds and what to do.
    pub fn rule_docs(&self) -> Vec<crate::lint::RuleDoc> {
        let mut docs: Vec<crate::lint::RuleDoc> = self
            .rules
            .iter()
            .map(|r| crate::lint::RuleDoc {
                id: r.id.clone(),
                summary: r.why.clone(),
                help: match &r.action {
                    Action::Review { suggest, .. } => format!("Review by hand: {suggest}"),
                    _ => format!(
                        "`archsmith codemod PATH` rewrites it (`--dry-run` shows the diff). {}",
                        r.why
                    ),
                },
            })
            .collect();
        let torch = self.target_torch();
        docs.extend(self.python.iter().map(|c| c.rule_doc(&torch)));
        docs.push(crate::lint::RuleDoc {
            id: super::python_source::build_script::ARCH_LIST_OVERRIDE.into(),
            summary: super::python_source::build_script::ARCH_LIST_OVERRIDE_WHY.into(),
            help: "`archsmith codemod setup.py` turns the assignment into os.environ.setdefault."
                .into(),
        });
        docs
    }

    /// The same catalogue, for a port to torch `torch`.
    pub fn for_torch(mut self, torch: &Version) -> Catalogue {
        self.torch = Some(torch.clone());
        self
    }

    /// This catalogue followed by the stable-ABI rules, each on the previous one's output, and
    /// pybind11 bindings registered as operators of `namespace`.
    pub fn with_stable_abi(mut self, namespace: &str) -> Catalogue {
        self.rules.extend(stable().rules.iter().cloned());
        self.name = format!("{} + {STABLE_NAME}", self.name);
        self.stable_namespace = Some(namespace.to_string());
        self
    }

    /// The torch release the Python rows are judged against.
    pub fn target_torch(&self) -> Version {
        self.torch
            .clone()
            .unwrap_or_else(|| crate::kb::kb().releases.newest_torch.clone())
    }

    pub fn get(&self, id: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.id == id)
    }
}

impl Rule {
    fn from_spec(origin: &str, r: RuleSpec) -> Result<Rule> {
        let id = r.id.as_str();
        let err = |what: &str| anyhow!("{origin}: rule `{id}` (kind = {:?}): {what}", r.kind);
        let broke_in = if r.broke_in == "never" {
            None
        } else {
            version_field(origin, id, "broke_in", &Some(r.broke_in.clone()))?
        };
        if r.broke_with.is_some() && broke_in.is_some() {
            return Err(err(
                "`broke_with` needs broke_in = \"never\" (torch did not break it)",
            ));
        }
        let lex = r.lang.lexer();
        let pattern = |p: &Option<String>| -> Result<Pattern> {
            let p = p
                .as_deref()
                .ok_or_else(|| err("expected `match = \"...\"`"))?;
            Pattern::compile(p, lex).map_err(|e| err(&format!("{e:#}")))
        };
        let action = match r.kind {
            RuleKind::Rewrite => {
                let pat = pattern(&r.pattern)?;
                let replace = r.replace.clone().ok_or_else(|| err("expected `replace`"))?;
                check_template(&pat, &replace, true).map_err(|e| err(&e))?;
                let mut transforms = Vec::new();
                for (hole, name) in &r.transform {
                    let t = Transform::parse(name).ok_or_else(|| {
                        let names: Vec<String> = Transform::ALL
                            .iter()
                            .map(|(n, _)| format!("{n:?}"))
                            .collect();
                        err(&format!(
                            "transform {name:?}: expected {}",
                            names.join(" or ")
                        ))
                    })?;
                    if !pat.holes().any(|h| h == hole) {
                        return Err(err(&format!(
                            "transform on {hole:?}, which is not a hole of the pattern"
                        )));
                    }
                    transforms.push((hole.clone(), t));
                }
                Action::Rewrite {
                    pat,
                    replace,
                    include: r.include.clone(),
                    transforms,
                }
            }
            RuleKind::Remove => {
                let pat = pattern(&r.pattern)?;
                if let Some(v) = &r.unless_used {
                    if !pat.holes().any(|h| h == v) {
                        return Err(err(&format!(
                            "unless_used = {v:?} is not a hole of the pattern"
                        )));
                    }
                }
                Action::Remove {
                    pat,
                    unless_used: r.unless_used.clone(),
                }
            }
            RuleKind::Review => {
                let pat = pattern(&r.pattern)?;
                let suggest = r.suggest.clone().ok_or_else(|| err("expected `suggest`"))?;
                check_template(&pat, &suggest, false).map_err(|e| err(&e))?;
                Action::Review { pat, suggest }
            }
            RuleKind::Include => include_action(&r, &err)?,
            RuleKind::NeedsHeader => Action::NeedsHeader {
                pat: pattern(&r.pattern)?,
                header: r
                    .include
                    .clone()
                    .ok_or_else(|| err("expected `include = \"HEADER\"`"))?,
            },
            RuleKind::PyString => py_string_action(&r, &err)?,
        };
        if r.secondary && r.kind != RuleKind::Review {
            return Err(err("`secondary` applies only to review rules"));
        }
        let (wheres, unlesses) = hole_conditions(&r, &action).map_err(|e| err(&e))?;
        Ok(Rule {
            id: r.id.clone(),
            kind: r.kind,
            lang: r.lang,
            broke_in,
            broke_with: r.broke_with.clone(),
            deprecated_in: version_field(origin, id, "deprecated_in", &r.deprecated_in)?,
            replacement_since: version_field(
                origin,
                id,
                "replacement_since",
                &r.replacement_since,
            )?,
            why: r.why.trim().to_string(),
            action,
            wheres,
            unlesses,
            secondary: r.secondary,
            file_matches: file_regex(&r.file_matches, "file_matches", &err)?,
            unless_file_matches: file_regex(&r.unless_file_matches, "unless_file_matches", &err)?,
            bundle: match &r.bundle {
                None => None,
                Some(b) if bundled(b).is_none() => {
                    return Err(err(&format!(
                        "bundle {b:?}: not one of archsmith's bundled headers"
                    )))
                }
                Some(_) if r.kind != RuleKind::Rewrite => {
                    return Err(err("`bundle` applies only to rewrite rules"))
                }
                Some(b) => Some(b.clone()),
            },
            in_define: r
                .in_define
                .as_deref()
                .map(Regex::new)
                .transpose()
                .map_err(|e| err(&format!("in_define: bad regex: {e}")))?,
            tests: r.test,
        })
    }
}

/// An `include` rule's action: swap or drop a header, or report it.
fn include_action(r: &RuleSpec, err: &dyn Fn(&str) -> anyhow::Error) -> Result<Action> {
    let h = r.header.clone().ok_or_else(|| err("expected `header`"))?;
    let (header, glob) = match h.strip_suffix('*') {
        Some(p) => (p.to_string(), true),
        None => (h, false),
    };
    let (review, drop_unused) = match r.action.as_deref() {
        None | Some("rewrite") => (false, false),
        Some("review") => (true, false),
        Some("drop-unused") => (false, true),
        Some(a) => {
            return Err(err(&format!(
                "action = {a:?}: expected \"rewrite\", \"review\" or \"drop-unused\""
            )))
        }
    };
    if glob && !review && !drop_unused {
        return Err(err(
            "a header glob can only be reviewed or dropped where unused (action = \"review\" | \"drop-unused\")",
        ));
    }
    let drop_unless_uses = match (drop_unused, r.uses.as_deref(), &r.to) {
        (false, None, _) => None,
        (true, Some(re), None) => Some(Regex::new(re).map_err(|e| err(&format!("uses: {e}")))?),
        (true, None, _) => return Err(err("action = \"drop-unused\" needs `uses`")),
        (true, Some(_), Some(_)) => return Err(err("action = \"drop-unused\" takes no `to`")),
        (false, Some(_), _) => return Err(err("`uses` needs action = \"drop-unused\"")),
    };
    Ok(Action::Include {
        header,
        glob,
        to: r.to.clone(),
        review,
        suggest: r.suggest.clone().unwrap_or_default(),
        drop_unless_uses,
    })
}

/// A `py-string` rule's action: drop the matching string from its list, or report it.
fn py_string_action(r: &RuleSpec, err: &dyn Fn(&str) -> anyhow::Error) -> Result<Action> {
    if r.lang != Lang::Python {
        return Err(err("py-string rules need lang = \"python\""));
    }
    let re = r.regex.as_deref().ok_or_else(|| err("expected `regex`"))?;
    let regex = Regex::new(re).map_err(|e| err(&format!("bad regex: {e}")))?;
    let drop = match r.action.as_deref() {
        Some("drop") => true,
        Some("review") => false,
        _ => return Err(err("expected action = \"drop\" or \"review\"")),
    };
    Ok(Action::PyString {
        regex,
        drop,
        suggest: r.suggest.clone().unwrap_or_default(),
    })
}

/// Every `$NAME` in `template` must be a hole of `pat`; with `once`, used at most once.
fn check_template(pat: &Pattern, template: &str, once: bool) -> Result<(), String> {
    let mut used: Vec<&str> = Vec::new();
    for r in crate::codemod::pattern::hole_refs(template) {
        let name = r.name;
        if once && used.contains(&name) {
            return Err(format!(
                "template `{template}` uses `${name}` twice (comments inside it would be duplicated)"
            ));
        }
        used.push(name);
        if !pat.holes().any(|h| h == name) {
            return Err(format!(
                "template `{template}` uses `${name}`, not a hole of the pattern"
            ));
        }
    }
    Ok(())
}

impl Catalogue {
    /// `codemod --list-rules`: each rule, its kind, the release it broke in and the one whose
    /// replacement it uses.
    pub fn rules_table(&self) -> String {
        let v = |v: &Option<crate::version::Version>| v.as_ref().map(ToString::to_string);
        let mut t = crate::output::Table::new(["RULE", "KIND", "BROKE IN", "REPLACEMENT SINCE"]);
        for r in &self.rules {
            t.row([
                r.id.to_string(),
                kind_name(r.kind),
                v(&r.broke_in)
                    .or_else(|| r.broke_with.clone())
                    .unwrap_or_else(|| "never (warns)".into()),
                v(&r.replacement_since).unwrap_or_else(|| "-".into()),
            ]);
        }
        format!("{}{} rules [{}]\n", t.render(), self.rules.len(), self.name)
    }
}

/// The kind as the catalogue spells it (`py-string`).
fn kind_name(kind: RuleKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}
