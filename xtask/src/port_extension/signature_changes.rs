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
