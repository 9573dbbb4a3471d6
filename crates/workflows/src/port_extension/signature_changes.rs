//! The `at::`/`torch::` calls of a legacy extension that the target torch no longer binds, read
//! from the releases' own operator schemas (`native_functions.yaml`, which every torch wheel
//! from 1.12 carries): each becomes a review item at file:line naming the call's arity, the
//! schema of the last release that took it, the target's (or that the operator is gone) and the
//! release where it changed. A call the target cannot bind is a certain compile failure, so the
//! port stops before compiling ([`super::certain_failures`]).
//!
//! Each release's schemas are read once by HTTP range from its PyPI wheel (the zip directory and
//! one member, about 0.1 MB of a 1 GB wheel) and kept under the cache; the target's come from the
//! env the port builds with.

use super::ReviewRow;
use crate::build_ext::source;
use crate::codemod::aten_schema::{self, Schemas};
use crate::kb::kb;
use crate::version::Version;
use anyhow::{anyhow, Context, Result};
use fs_err as fs;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Where a torch wheel keeps the schemas.
pub const MEMBER: &str = "torchgen/packaged/ATen/native/native_functions.yaml";
/// The review items' rule.
pub const RULE: &str = "aten-signature";

/// The oldest release whose wheel ships [`MEMBER`] (1.11.0's does not).
pub fn oldest_with_schemas() -> Version {
    Version::new(&[1u64, 12, 0])
}

/// A release's schemas, each read once: from the kept copy, else from its PyPI wheel (kept).
pub struct Releases<'a> {
    read: BTreeMap<Version, Schemas>,
    say: &'a dyn Fn(&str),
    /// Only the releases inserted (tests that hold the real files they compare).
    inserted_only: bool,
}

impl<'a> Releases<'a> {
    pub fn new(say: &'a dyn Fn(&str)) -> Releases<'a> {
        Releases {
            read: BTreeMap::new(),
            say,
            inserted_only: false,
        }
    }

    /// Releases that are only what [`Self::insert`] gives: any other is unreadable.
    pub fn inserted_only(say: &'a dyn Fn(&str)) -> Releases<'a> {
        Releases {
            inserted_only: true,
            ..Releases::new(say)
        }
    }

    /// Adds a release read elsewhere (the target env's own file).
    pub fn insert(&mut self, torch: Version, schemas: Schemas) {
        self.read.insert(torch, schemas);
    }

    pub fn of(&mut self, torch: &Version) -> Result<&Schemas> {
        if self.inserted_only && !self.read.contains_key(torch) {
            anyhow::bail!("torch {torch}: not among the releases given");
        }
        if !self.read.contains_key(torch) {
            let text = kept_or_read(torch, self.say)?;
            self.read.insert(torch.clone(), Schemas::parse(&text));
        }
        self.read
            .get(torch)
            .ok_or_else(|| anyhow!("torch {torch}'s schemas were not read"))
    }
}

fn kept_path(torch: &Version) -> PathBuf {
    crate::paths::cache_dir()
        .join("torch-schemas")
        .join(format!("torch-{torch}.native_functions.yaml"))
}

fn kept_or_read(torch: &Version, say: &dyn Fn(&str)) -> Result<String> {
    let path = kept_path(torch);
    if let Ok(text) = fs::read_to_string(&path) {
        return Ok(text);
    }
    if let Some(text) = provisioned_copy(torch) {
        return Ok(text);
    }
    say(&format!(
        "reading torch {torch}'s operator schemas from its PyPI wheel (once; kept in {})",
        path.display()
    ));
    let pypi = crate::pypi::Pypi::new();
    let files = pypi.files("torch")?;
    let wheel = crate::pypi::linux_wheel(&files, torch)
        .ok_or_else(|| anyhow!("PyPI has no Linux x86_64 wheel of torch {torch}"))?;
    let spans = pypi.member_spans(wheel, |m| m == MEMBER)?;
    let (member, span) = spans
        .first()
        .ok_or_else(|| anyhow!("{} holds no {MEMBER}", wheel.filename))?;
    let scratch = tempfile::tempdir().context("creating a directory for the schemas")?;
    let tmp = scratch.path().join("native_functions.yaml");
    pypi.span_to_file(wheel, member, *span, &tmp)?;
    let text = fs::read_to_string(&tmp)?;
    crate::cache::store(&path, text.as_bytes())?;
    Ok(text)
}

/// The file as an env archsmith provisioned for `torch` installed it (any Python: the wheels of
/// one release ship the same file), so no wheel is read for a release already on disk.
fn provisioned_copy(torch: &Version) -> Option<String> {
    crate::python::provisioned_site_packages(torch)
        .into_iter()
        .find_map(|site| fs::read_to_string(site.join(MEMBER)).ok())
}

/// The release the code under `root` was written for and where that was read: `from_torch`
/// (`--from-torch`), else the lowest torch its requirement files (`torch==1.4.0`, `torch>=1.6`)
/// or its setup.py's requirement strings allow; None when nothing says.
pub fn era(root: &Path, from_torch: Option<&Version>) -> Result<Option<(Version, String)>> {
    if let Some(v) = from_torch {
        return Ok(Some((v.clone(), "--from-torch".into())));
    }
    let mut found: Vec<(Version, String)> = Vec::new();
    let files = crate::verify::pins::find_files(root)?;
    for pin in crate::verify::pins::read_pins(&files, root)?.pins {
        if pin.name == "torch" {
            if let Some(v) = pin.specifiers.as_ref().and_then(lowest_allowed) {
                let file = pin.file.strip_prefix(root).unwrap_or(&pin.file).display();
                found.push((v, format!("{file}:{} `{}`", pin.line, pin.text.trim())));
            }
        }
    }
    let setup = root.join("setup.py");
    if let Ok(text) = fs::read_to_string(&setup) {
        let requirement = regex::Regex::new(r#"["'](torch\s*[=~<>!][^"']*)["']"#)?;
        for (i, line) in text.lines().enumerate() {
            for c in requirement.captures_iter(line) {
                let specs = pep440_rs::VersionSpecifiers::from_str(c[1][5..].trim());
                if let Some(v) = specs.ok().as_ref().and_then(lowest_allowed) {
                    found.push((v, format!("setup.py:{} `{}`", i + 1, &c[1])));
                }
            }
        }
    }
    Ok(found.into_iter().min_by(|a, b| a.0.cmp(&b.0)))
}

/// When nothing states the era, the dead APIs the code used bound it: it compiled before the
/// earliest release that broke one of them (`fired`: the ids of the rules that rewrote or flagged
/// its code; each rule's `broke_in` is in `catalogue`), so it was written for the minor before
/// (`1.11` → 1.10; a `.0` → the previous major's first minor, a floor rather than a guess). None
/// when no rule that fired names a release (a compiler's break, a new API).
pub fn era_from_dead_apis<'a>(
    fired: impl IntoIterator<Item = &'a str>,
    catalogue: &crate::codemod::Catalogue,
) -> Option<(Version, String)> {
    let (broke, id) = fired
        .into_iter()
        .filter_map(|id| Some((catalogue.get(id)?.broke_in.clone()?, id)))
        .min_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1)))?;
    let era = match (broke.major(), broke.minor()) {
        (0, 0) => return None,
        (major, 0) => Version::new(&[major - 1, 0]),
        (major, minor) => Version::new(&[major, minor - 1]),
    };
    Some((
        era,
        format!("before torch {broke}, which broke what rule `{id}` ports"),
    ))
}

/// The lowest release `specs` allow (`==1.4.0`, `>=1.6`, `~=1.8.1`), None with no lower bound.
fn lowest_allowed(specs: &pep440_rs::VersionSpecifiers) -> Option<Version> {
    use pep440_rs::Operator::*;
    specs
        .iter()
        .filter(|s| {
            matches!(
                s.operator(),
                Equal | ExactEqual | GreaterThanEqual | GreaterThan | TildeEqual
            )
        })
        .map(|s| Version::new(s.version().release()))
        .max()
}

/// The schemas of `torch` for the stable port's dispatcher wrappers (the kept copy, a provisioned
/// env's, else its PyPI wheel's), each overload checked against the oldest release a wheel
/// using them targets (the dispatcher's, [`dispatcher_floor`]): the wheel claims that release,
/// and an overload it lacks would be looked up by name there and fail at run time. None, said
/// through `say`, when either cannot be read: the calls then stay review items.
pub fn stable_schemas(
    torch: &Version,
    say: &dyn Fn(&str),
) -> Option<std::sync::Arc<crate::codemod::aten_schema::Release>> {
    let floor = dispatcher_floor();
    let read = || -> Result<crate::codemod::aten_schema::Release> {
        let mut schemas = Schemas::parse(&kept_or_read(torch, say)?);
        let checked = match torch > &floor {
            true => {
                let older = Schemas::parse(&kept_or_read(&floor, say)?);
                schemas.reachable_from(&older, &floor.to_string());
                Some(floor.to_string())
            }
            false => None,
        };
        Ok(crate::codemod::aten_schema::Release {
            torch: torch.to_string(),
            schemas,
            floor: checked,
        })
    };
    match read() {
        Ok(release) => Some(std::sync::Arc::new(release)),
        Err(e) => {
            say(&format!(
                "no dispatcher wrappers: the operator schemas of torch {torch} and {floor} could not be read ({e:#}); ATen calls with no stable function stay review items"
            ));
            None
        }
    }
}

/// The oldest release that has `torch_call_dispatcher` (the dispatcher step's `since`), as a
/// release: 2.10.0.
pub fn dispatcher_floor() -> Version {
    let since: Version = crate::codemod::catalogue::STABLE_DISPATCH_SINCE
        .parse()
        .unwrap_or_else(|_| Version::new(&[2u64, 10]));
    Version::new(&[since.major(), since.minor(), 0])
}

/// The target env's own schemas (`purelib` of its Python), None for a torch older than 1.12.
pub fn from_env(purelib: &Path) -> Result<Option<Schemas>> {
    let path = purelib.join(MEMBER);
    if !path.is_file() {
        return Ok(None);
    }
    Ok(Some(Schemas::parse(&fs::read_to_string(&path)?)))
}

/// The review items of the calls under `root` that the `target` release does not bind, each
/// with its history over `era` (1.12 at the oldest) and the knowledge base's releases up to the
/// target. A release that cannot be read (offline, and not kept) is left out of the history,
/// which then starts at the oldest one read.
pub fn review(
    root: &Path,
    era: &Version,
    target: &Version,
    releases: &mut Releases,
) -> Result<Vec<ReviewRow>> {
    let mut history: Option<Vec<Version>> = None;
    let mut out = Vec::new();
    for rel in source::tree_files(root)?.iter().filter(|r| is_cpp(r)) {
        let src = fs::read(root.join(rel))?;
        let lines: Vec<&[u8]> = src.split(|&b| b == b'\n').collect();
        for call in aten_schema::calls(&src) {
            let now = releases.of(target)?.accepts(&call.name, call.args);
            if now == Some(true) {
                continue;
            }
            let history = match &mut history {
                Some(h) => h,
                None => history.insert(readable(era, target, releases)),
            };
            let then = match history.first() {
                Some(v) => releases.of(v)?.accepts(&call.name, call.args),
                None => None,
            };
            if then.is_none() && now.is_none() {
                continue; // not an operator of either release (a type, a helper)
            }
            let code = lines
                .get(call.line - 1)
                .map(|l| String::from_utf8_lossy(l).trim().to_string())
                .unwrap_or_default();
            out.push(ReviewRow {
                file: rel.display().to_string(),
                line: call.line,
                rule: RULE.into(),
                code,
                resolution: "to review".into(),
                suggestion: describe(&call, target, history, releases)?,
                explained: false,
            });
        }
    }
    Ok(out)
}

/// `era` and the knowledge base's releases after it and before `target` that can be read,
/// oldest first.
fn readable(era: &Version, target: &Version, releases: &mut Releases) -> Vec<Version> {
    let mut all: Vec<Version> = kb()
        .torch
        .iter()
        .map(|r| r.version.clone())
        .filter(|v| v > era && v < target)
        .chain(std::iter::once(era.clone()))
        .collect();
    all.sort();
    all.dedup();
    all.into_iter()
        .filter(|v| match releases.of(v) {
            Ok(_) => true,
            Err(e) => {
                (releases.say)(&format!("torch {v}'s schemas left out: {e:#}"));
                false
            }
        })
        .collect()
}

fn is_cpp(rel: &Path) -> bool {
    crate::codemod::catalogue::Lang::of_path(rel) == Some(crate::codemod::catalogue::Lang::Cpp)
}

/// What changed for `call`: the last release of `history` that bound it and its schema, the
/// first that did not, and the target's schema or that the operator is gone.
fn describe(
    call: &aten_schema::Call,
    target: &Version,
    history: &[Version],
    releases: &mut Releases,
) -> Result<String> {
    let sigs = |s: &Schemas| -> String {
        s.overloads(&call.name)
            .map_or("the operator is gone".into(), |o| {
                o.iter()
                    .map(|x| format!("`{}`", x.signature))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
    };
    let now = sigs(releases.of(target)?);
    let binds = |r: &mut Releases, v: &Version| -> Result<bool> {
        Ok(r.of(v)?.accepts(&call.name, call.args) == Some(true))
    };
    let Some(first) = history.first() else {
        return Ok(format!(
            "at::{}(…) with {} argument(s) does not bind in torch {target}: {now} (no older release's schemas could be read to say when it changed)",
            call.name, call.args
        ));
    };
    if !binds(releases, first)? {
        return Ok(format!(
            "at::{}(…) with {} argument(s) binds in no torch from {first} to {target}; torch {target}: {now}",
            call.name, call.args
        ));
    }
    // The first release of the history where the call stopped binding (the target if none).
    let (mut lo, mut hi) = (1usize, history.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        if binds(releases, &history[mid])? {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let last_ok = history[lo - 1].clone();
    let first_bad = history.get(lo).cloned().unwrap_or_else(|| target.clone());
    let then = sigs(releases.of(&last_ok)?);
    let todo = match releases.of(target)?.overloads(&call.name) {
        Some(_) => "pass what the new schema asks",
        None => "call its replacement",
    };
    Ok(format!(
        "at::{}(…) with {} argument(s) binds in torch {last_ok} ({then}) but not from torch {first_bad}; torch {target}: {now} — {todo}",
        call.name, call.args
    ))
}

/// The rule a derived argument is counted under.
pub const DERIVED_RULE: &str = "aten-derived-argument";

/// A call the target did not bind, completed with the arguments the knowledge base derives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derived {
    /// Relative to the tree.
    pub file: PathBuf,
    pub line: usize,
    pub op: String,
    /// Each argument passed: its declaration in the target's schema and the value.
    pub passed: Vec<(String, String)>,
    /// Why the values reproduce what the call computed before.
    pub why: Vec<String>,
}

impl Derived {
    pub fn describe(&self) -> String {
        let passed: Vec<String> = self
            .passed
            .iter()
            .map(|(decl, value)| format!("`{value}` for `{decl}`"))
            .collect();
        format!(
            "{}:{}: at::{}(…) passes {} ({})",
            self.file.display(),
            self.line,
            self.op,
            passed.join(", "),
            self.why.join("; ")
        )
    }
}

/// Completes, in the files under `root`, each `at::`/`torch::` call the `target` schemas do not
/// bind whose missing arguments the knowledge base derives ([`crate::kb::aten_arguments`]), at
/// their positions in the target's schema. A call that binds is never touched, so a second run
/// changes nothing; comments and literals are never read as calls. Files are written atomically.
pub fn derive_arguments(root: &Path, target: &Schemas) -> Result<Vec<Derived>> {
    let mut out = Vec::new();
    for rel in source::tree_files(root)?.iter().filter(|r| is_cpp(r)) {
        let path = root.join(rel);
        let src = fs::read(&path)?;
        let mut inserts: BTreeMap<usize, String> = BTreeMap::new();
        for call in aten_schema::calls(&src) {
            if target.accepts(&call.name, call.args) != Some(false) {
                continue;
            }
            let Some((at, derived)) = completion(&call, &src, target) else {
                continue;
            };
            for (offset, text) in at {
                inserts.entry(offset).or_default().push_str(&text);
            }
            out.push(Derived {
                file: rel.clone(),
                ..derived
            });
        }
        if inserts.is_empty() {
            continue;
        }
        let mut text = src;
        for (offset, insert) in inserts.iter().rev() {
            text.splice(*offset..*offset, insert.bytes());
        }
        crate::codemod::write_atomic(&path, &text)?;
    }
    Ok(out)
}

/// The insertions (byte offset, text) that make `call` bind one of the target's overloads, each
/// missing argument derived; None when an overload needs one the knowledge base does not derive,
/// or the call skips an argument before a derived one.
fn completion(
    call: &aten_schema::Call,
    src: &[u8],
    target: &Schemas,
) -> Option<(Vec<(usize, String)>, Derived)> {
    let arg_text = |i: usize| -> Option<String> {
        let span = call.arg_spans.get(i)?;
        Some(String::from_utf8_lossy(src.get(span.clone())?).into_owned())
    };
    'overloads: for o in target.overloads(&call.name)? {
        let derived: Vec<(usize, &crate::kb::aten_arguments::AtenDerivedArgumentRow)> = o
            .args
            .iter()
            .enumerate()
            .filter(|(_, a)| a.default.is_none())
            .filter_map(|(i, a)| Some((i, kb().derived_argument(&call.name, &a.name)?)))
            .collect();
        let kept: Vec<&aten_schema::Arg> = (0..o.args.len())
            .filter(|i| !derived.iter().any(|(d, _)| d == i))
            .map(|i| &o.args[i])
            .collect();
        let required = kept.iter().filter(|a| a.default.is_none()).count();
        let n = call.args;
        if derived.is_empty() || n == 0 || n < required || n > kept.len() {
            continue;
        }
        let mut at = Vec::new();
        let mut passed = Vec::new();
        let mut why = Vec::new();
        for (before, (i, row)) in derived.iter().enumerate() {
            // The derived argument's place among the call's own arguments.
            let q = i - before;
            if q > n {
                continue 'overloads; // the call leaves out an argument before it
            }
            let mut value = row.value.clone();
            for (k, a) in kept.iter().enumerate() {
                let hole = format!("{{{}}}", a.name);
                if value.contains(&hole) {
                    value = value.replace(&hole, &arg_text(k).filter(|_| k < n)?);
                }
            }
            match q < n {
                true => at.push((call.arg_spans[q].start, format!("{value}, "))),
                false => at.push((call.arg_spans[n - 1].end, format!(", {value}"))),
            }
            let a = &o.args[*i];
            passed.push((format!("{} {}", a.ty, a.name), value));
            why.push(row.why.clone());
        }
        let derived = Derived {
            file: PathBuf::new(),
            line: call.line,
            op: call.name.clone(),
            passed,
            why,
        };
        return Some((at, derived));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The earliest release that broke an API the code used bounds its era; rules with no
    /// release (a compiler's break) and ids no rule has say nothing.
    #[test]
    fn dead_apis_bound_the_era() {
        let cat = crate::codemod::builtin();
        let (era, why) = era_from_dead_apis(["thc-atomics-header", "no-such-rule"], cat).unwrap();
        assert_eq!(era.to_string(), "1.10");
        assert_eq!(
            why,
            "before torch 1.11, which broke what rule `thc-atomics-header` ports"
        );
        assert_eq!(era_from_dead_apis(["std-memory-header"], cat), None);
        assert_eq!(era_from_dead_apis([], cat), None);
    }

    /// Lines of torch 2.15.0's native_functions.yaml (from its PyPI wheel).
    const YAML_2_15: &str = "\
- func: leaky_relu_backward.grad_input(Tensor grad_output, Tensor self, Scalar negative_slope, bool self_is_result, *, Tensor(a!) grad_input) -> Tensor(a!)
- func: leaky_relu_backward(Tensor grad_output, Tensor self, Scalar negative_slope, bool self_is_result) -> Tensor
- func: grid_sampler_2d_backward(Tensor grad_output, Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners, bool[2] output_mask) -> (Tensor, Tensor)
- func: embedding_backward(Tensor grad, Tensor indices, SymInt num_weights, SymInt padding_idx, bool scale_grad_by_freq, bool sparse) -> Tensor
- func: sigmoid(Tensor self) -> Tensor
";

    const LEGACY: &str = "\
#include <torch/extension.h>
// at::leaky_relu_backward(g, x, 0.2) in a comment is no call
at::Tensor f(at::Tensor g, at::Tensor x, at::Tensor grid) {
  const char* s = \"at::leaky_relu_backward(g, x, 0.2)\";
  auto d = at::leaky_relu_backward(g, at::sigmoid(x), 0.2);
  auto gs = at::grid_sampler_2d_backward(
      g, x, grid,
      /*interpolation_mode=*/0, /*padding_mode=*/0);
  auto e = at::embedding_backward(g, x, 10, -1, false);
  return d + std::get<0>(gs) + e;
}
";

    fn ported(dir: &Path) -> (Vec<Derived>, String) {
        let target = Schemas::parse(YAML_2_15);
        let got = derive_arguments(dir, &target).unwrap();
        (got, fs::read_to_string(dir.join("ops.cu")).unwrap())
    }

    /// Issue 62: an added argument without a default that the call site implies is passed, at
    /// its place in the target's schema, with the reason; one the knowledge base does not
    /// derive (`embedding_backward`'s `sparse`) is left for the review; comments, literals and
    /// a multi-line call's layout are kept, and a second run changes nothing.
    #[test]
    fn derived_arguments_are_passed_where_the_schema_asks_and_only_once() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("ops.cu"), LEGACY).unwrap();
        let (got, text) = ported(dir.path());
        let want = LEGACY
            .replace(
                "auto d = at::leaky_relu_backward(g, at::sigmoid(x), 0.2);",
                "auto d = at::leaky_relu_backward(g, at::sigmoid(x), 0.2, false);",
            )
            .replace(
                "/*padding_mode=*/0);",
                "/*padding_mode=*/0, true, {true, true});",
            );
        assert_eq!(text, want);
        let lines: Vec<(usize, &str)> = got.iter().map(|d| (d.line, d.op.as_str())).collect();
        assert_eq!(
            lines,
            [(5, "leaky_relu_backward"), (6, "grid_sampler_2d_backward")]
        );
        assert_eq!(
            got[0].passed,
            [("bool self_is_result".to_string(), "false".to_string())]
        );
        assert!(got[0]
            .describe()
            .starts_with("ops.cu:5: at::leaky_relu_backward(…) passes `false` for `bool self_is_result` (a legacy call passes the forward's input"));
        assert_eq!(got[1].passed.len(), 2);
        let (again, same) = ported(dir.path());
        assert!(again.is_empty(), "{again:?}");
        assert_eq!(same, want);
    }

    /// Issue 62: the code's era is `--from-torch`, else the lowest torch its requirement files
    /// or setup.py allow; nothing said is None.
    #[test]
    fn the_era_is_read_from_the_flag_the_requirements_or_setup_py() {
        let dir = tempfile::tempdir().unwrap();
        let v = |s: &str| s.parse::<Version>().unwrap();
        assert_eq!(era(dir.path(), None).unwrap(), None);
        fs::write(
            dir.path().join("setup.py"),
            "setup(name='x', install_requires=[\"numpy\", 'torch>=1.13,<2'])\n",
        )
        .unwrap();
        let (got, said) = era(dir.path(), None).unwrap().unwrap();
        assert_eq!(got, v("1.13"));
        assert_eq!(said, "setup.py:1 `torch>=1.13,<2`");
        fs::write(dir.path().join("requirements.txt"), "torch==1.12.1\n").unwrap();
        let (got, said) = era(dir.path(), None).unwrap().unwrap();
        assert_eq!(got, v("1.12.1"));
        assert!(
            said.ends_with("requirements.txt:1 `torch==1.12.1`"),
            "{said}"
        );
        let flag = v("2.1.0");
        assert_eq!(era(dir.path(), Some(&flag)).unwrap().unwrap().0, flag);
        fs::write(dir.path().join("requirements.txt"), "torch<1.8\n").unwrap();
        assert_eq!(era(dir.path(), None).unwrap().unwrap().0, v("1.13"));
    }

    /// A derived argument after one the call leaves out is not guessed at.
    #[test]
    fn a_call_short_of_an_argument_before_the_derived_one_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let legacy = "auto d = at::leaky_relu_backward(g, x);\nauto e = at::grid_sampler_2d_backward(g, x, grid, 0);\n";
        fs::write(dir.path().join("ops.cu"), legacy).unwrap();
        let (got, text) = ported(dir.path());
        assert!(got.is_empty(), "{got:?}");
        assert_eq!(text, legacy);
    }
}
