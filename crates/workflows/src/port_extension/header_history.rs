//! Where a torch header went: the release that stopped shipping it and what the target offers
//! instead, read from the releases' own include trees — the `torch/include/` members of each
//! release's Linux wheel, listed from its zip directory by HTTP range once and kept under the
//! cache (`torch-headers/torch-<v>.txt`), or the include directory of an env archsmith
//! provisioned for it. A removed header is a certain compile failure
//! ([`super::certain_failures`]); this says when it went and where its contents live now.

use crate::pypi::{IndexFile, Pypi};
use crate::version::Version;
use anyhow::{anyhow, bail, Result};
use fs_err as fs;
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::LazyLock;

/// Where a wheel keeps torch's headers.
const WHEEL_INCLUDE: &str = "torch/include/";
/// Where the C++ frontend's headers sit inside it (`torch/torch.h`); the build adds both.
const FRONTEND: &str = "torch/csrc/api/include/";

/// One release's headers, relative to its include directory, and where their text is.
struct Tree {
    headers: BTreeSet<String>,
    text: TextSource,
}

enum TextSource {
    /// An include directory on disk.
    Dir(PathBuf),
    /// The release's wheel on the index: a member read by range (kept once read).
    Wheel,
}

impl Tree {
    /// The path `header` has in this tree (either include root), if it ships it.
    fn find(&self, header: &str) -> Option<String> {
        [header.to_string(), format!("{FRONTEND}{header}")]
            .into_iter()
            .find(|h| self.headers.contains(h))
    }
}

/// The releases' include trees, each read once.
pub struct IncludeTrees<'a> {
    read: BTreeMap<Version, Tree>,
    say: &'a dyn Fn(&str),
    /// Only the trees inserted (tests that hold the real directories they compare).
    inserted_only: bool,
    /// torch's files on the index, read once (None when it could not be read).
    index: Option<Option<Vec<IndexFile>>>,
}

impl<'a> IncludeTrees<'a> {
    pub fn new(say: &'a dyn Fn(&str)) -> IncludeTrees<'a> {
        IncludeTrees {
            read: BTreeMap::new(),
            say,
            inserted_only: false,
            index: None,
        }
    }

    /// Trees that are only what [`Self::insert_dir`] gives.
    pub fn inserted_only(say: &'a dyn Fn(&str)) -> IncludeTrees<'a> {
        IncludeTrees {
            inserted_only: true,
            ..IncludeTrees::new(say)
        }
    }

    /// Adds `torch`'s include directory as installed (the target env's own).
    pub fn insert_dir(&mut self, torch: Version, include: PathBuf) -> Result<()> {
        let headers = crate::build_ext::source::tree_files(&include)?
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let text = TextSource::Dir(include);
        self.read.insert(torch, Tree { headers, text });
        Ok(())
    }

    fn of(&mut self, torch: &Version) -> Result<&Tree> {
        if !self.read.contains_key(torch) {
            if self.inserted_only {
                bail!("torch {torch}: not among the include trees given");
            }
            match provisioned_include(torch) {
                Some(dir) => self.insert_dir(torch.clone(), dir)?,
                None => {
                    let tree = self.read_wheel(torch)?;
                    self.read.insert(torch.clone(), tree);
                }
            }
        }
        self.read
            .get(torch)
            .ok_or_else(|| anyhow!("torch {torch}'s include tree was not read"))
    }

    /// `torch`'s Linux wheel on the index.
    fn wheel(&mut self, torch: &Version) -> Result<IndexFile> {
        let files = self
            .index()
            .ok_or_else(|| anyhow!("torch's file list could not be read"))?;
        crate::pypi::linux_wheel(files, torch)
            .cloned()
            .ok_or_else(|| anyhow!("PyPI has no Linux x86_64 wheel of torch {torch}"))
    }

    /// The text of `path` (relative to the include directory) as `torch` shipped it.
    fn text(&mut self, torch: &Version, path: &str) -> Result<String> {
        let bytes = match &self.of(torch)?.text {
            TextSource::Dir(dir) => fs::read(dir.join(path))?,
            TextSource::Wheel => {
                let file = self.wheel(torch)?;
                let member = format!("{WHEEL_INCLUDE}{path}");
                Pypi::new()
                    .members(&file, &[&member])?
                    .pop()
                    .flatten()
                    .ok_or_else(|| anyhow!("{} holds no {member}", file.filename))?
            }
        };
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The tree as `torch`'s Linux wheel lists it (its zip directory, kept once read: a kept
    /// list is read without the index).
    fn read_wheel(&mut self, torch: &Version) -> Result<Tree> {
        let kept = crate::paths::cache_dir()
            .join("torch-headers")
            .join(format!("torch-{torch}.txt"));
        let listed = match fs::read_to_string(&kept) {
            Ok(text) => text,
            Err(_) => {
                let wheel = self.wheel(torch)?;
                (self.say)(&format!(
                    "reading torch {torch}'s header list from its PyPI wheel's zip directory (once; kept in {})",
                    kept.display()
                ));
                let names = Pypi::new().member_names(&wheel, |n| {
                    n.starts_with(WHEEL_INCLUDE) && !n.ends_with('/')
                })?;
                let text = names.join("\n");
                crate::cache::store(&kept, text.as_bytes())?;
                text
            }
        };
        let headers = listed
            .lines()
            .filter_map(|l| l.strip_prefix(WHEEL_INCLUDE))
            .map(str::to_string)
            .collect();
        Ok(Tree {
            headers,
            text: TextSource::Wheel,
        })
    }

    fn index(&mut self) -> Option<&Vec<IndexFile>> {
        if self.index.is_none() {
            let files = Pypi::new().files("torch");
            if let Err(e) = &files {
                (self.say)(&format!(
                    "torch's releases on the index were not read ({e:#}): only those on disk are"
                ));
            }
            self.index = Some(files.ok());
        }
        self.index.as_ref().and_then(Option::as_ref)
    }

    /// One release per minor from `era` (all, when None) up to before `target`, oldest first:
    /// those on the index, those provisioned or kept. Of a minor, one on disk is taken before
    /// the lowest (headers go in minor releases).
    fn candidates(&mut self, era: Option<&Version>, target: &Version) -> Vec<Version> {
        let mut all: BTreeSet<Version> = self.read.keys().cloned().collect();
        let on_disk: BTreeSet<Version> = local_releases();
        all.extend(on_disk.iter().cloned());
        if !self.inserted_only {
            // Offline, only those on disk: an index that cannot be read is said once, not per
            // release.
            if let Some(files) = self.index() {
                all.extend(
                    files
                        .iter()
                        .filter(|f| crate::pypi::is_linux_x86_64(f))
                        .filter_map(|f| f.wheel_version()?.parse::<Version>().ok())
                        .filter(|v| !v.is_prerelease() && v.local().is_none()),
                );
            }
        } else {
            all.retain(|v| self.read.contains_key(v));
        }
        let floor = era.map(Version::major_minor);
        let mut per_minor: BTreeMap<Version, Version> = BTreeMap::new();
        for v in all {
            if v >= *target || floor.as_ref().is_some_and(|f| v < *f) {
                continue;
            }
            let readable = |v: &Version| self.read.contains_key(v) || on_disk.contains(v);
            let slot = per_minor
                .entry(v.major_minor())
                .or_insert_with(|| v.clone());
            if readable(&v) && !readable(slot) {
                *slot = v;
            }
        }
        per_minor.into_values().collect()
    }
}

/// An env's include directory archsmith provisioned for `torch` (any Python).
fn provisioned_include(torch: &Version) -> Option<PathBuf> {
    crate::python::provisioned_site_packages(torch)
        .into_iter()
        .map(|site| site.join("torch/include"))
        .find(|d| d.is_dir())
}

/// The releases whose tree is on disk: provisioned envs and kept header lists.
fn local_releases() -> BTreeSet<Version> {
    let envs = fs::read_dir(crate::paths::envs_dir()).into_iter().flatten();
    let kept = fs::read_dir(crate::paths::cache_dir().join("torch-headers"))
        .into_iter()
        .flatten();
    envs.chain(kept)
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix("torch-")?;
            let v = rest.split("-py").next()?.trim_end_matches(".txt");
            v.parse().ok()
        })
        .collect()
}

/// What became of a header the target does not ship.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Went {
    /// The last release read that shipped it; None when no release read did.
    pub last: Option<Version>,
    /// The first release read after it that did not (when `last` is None: the oldest read).
    pub first_without: Version,
    /// How many releases' trees were read.
    pub read: usize,
    /// Releases between `last` and `first_without` could not be read.
    pub gap: bool,
    /// What the target offers instead, said as a clause.
    pub instead: String,
}

impl Went {
    pub fn describe(&self, header: &str, target: &Version) -> String {
        match &self.last {
            None => format!(
                "#include <{header}>: none of the {} torch releases read from {} on ships it, nor does torch {target} or the source; {}",
                self.read, self.first_without, self.instead
            ),
            Some(last) => format!(
                "#include <{header}>: torch {last} shipped it, torch {} no longer does{}; {}",
                self.first_without,
                if self.gap {
                    " (the releases between were not read)"
                } else {
                    ""
                },
                self.instead
            ),
        }
    }
}

/// When `header` left torch between `era` and `target` (which does not ship it), and what the
/// target offers instead: the releases before the target are read newest first down to one
/// that ships it (each tree is kept, so a second port reads none); a release that cannot be read
/// is left out and said. None when no release before the target could be read.
pub fn went(
    header: &str,
    era: Option<&Version>,
    target: &Version,
    trees: &mut IncludeTrees,
) -> Result<Option<Went>> {
    let history = trees.candidates(era, target);
    let mut search = Search {
        header,
        history: &history,
        read: BTreeSet::new(),
        unread: BTreeSet::new(),
    };
    // The newest release read that lacks it (the target until one is read).
    let mut without = history.len();
    for i in (0..history.len()).rev() {
        match search.ships(i, trees) {
            Some(true) => {
                let last = history[i].clone();
                return Ok(Some(Went {
                    first_without: history.get(without).cloned().unwrap_or(target.clone()),
                    read: search.read.len(),
                    gap: (i + 1..without).any(|m| search.unread.contains(&m)),
                    instead: instead(header, Some(&last), target, trees)?,
                    last: Some(last),
                }));
            }
            Some(false) => without = i,
            None => {}
        }
    }
    let Some(&oldest) = search.read.first() else {
        return Ok(None);
    };
    Ok(Some(Went {
        last: None,
        first_without: history[oldest].clone(),
        read: search.read.len(),
        gap: false,
        instead: instead(header, None, target, trees)?,
    }))
}

/// The releases [`went`] looks at, and which it read or could not.
struct Search<'h> {
    header: &'h str,
    history: &'h [Version],
    read: BTreeSet<usize>,
    unread: BTreeSet<usize>,
}

impl Search<'_> {
    /// Whether release `i` ships the header, None when its tree cannot be read (said once).
    fn ships(&mut self, i: usize, trees: &mut IncludeTrees) -> Option<bool> {
        match trees.of(&self.history[i]) {
            Ok(t) => {
                self.read.insert(i);
                Some(t.find(self.header).is_some())
            }
            Err(e) => {
                (trees.say)(&format!(
                    "torch {}'s include tree left out: {e:#}",
                    self.history[i]
                ));
                self.unread.insert(i);
                None
            }
        }
    }
}

/// What the target offers in place of `header`: what the last copy (in `last`) only forwarded
/// to, else the target's headers of the same file name.
fn instead(
    header: &str,
    last: Option<&Version>,
    target: &Version,
    trees: &mut IncludeTrees,
) -> Result<String> {
    if let Some(last) = last {
        let path = trees
            .of(last)?
            .find(header)
            .unwrap_or_else(|| header.to_string());
        let text = trees.text(last, &path).ok();
        if let Some(forwarded) = text.as_deref().and_then(forwards_to) {
            let target_tree = trees.of(target)?;
            let (kept, gone): (Vec<&String>, Vec<&String>) = forwarded
                .iter()
                .partition(|h| target_tree.find(h).is_some());
            let list = |hs: &[&String]| {
                hs.iter()
                    .map(|h| format!("<{h}>"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Ok(match (kept.is_empty(), gone.is_empty()) {
                (false, true) => format!(
                    "its last copy (torch {last}) only included {}, which torch {target} has: include that instead",
                    list(&kept)
                ),
                (true, _) => format!(
                    "its last copy (torch {last}) only included {}, which torch {target} no longer has either",
                    list(&gone)
                ),
                (false, false) => format!(
                    "its last copy (torch {last}) only included {} (torch {target} has them) and {} (gone too)",
                    list(&kept),
                    list(&gone)
                ),
            });
        }
    }
    let name = header.rsplit('/').next().unwrap_or(header);
    let same: Vec<String> = trees
        .of(target)?
        .headers
        .iter()
        .filter(|h| h.rsplit('/').next() == Some(name))
        .map(|h| h.strip_prefix(FRONTEND).unwrap_or(h).to_string())
        .take(4)
        .collect();
    Ok(match same.as_slice() {
        [] => format!("torch {target} has no header named {name}"),
        hs => format!(
            "torch {target} has {name} at {}",
            hs.iter()
                .map(|h| format!("<{h}>"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// The headers a forwarding header includes, when it is nothing else: its text without comments
/// is only preprocessor lines (`#pragma once`, guards, `#error`), among them one `#include` or
/// more. None for a header with declarations of its own.
fn forwards_to(text: &str) -> Option<Vec<String>> {
    static COMMENTS: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?s)/\*.*?\*/|//[^\n]*").expect("comments"));
    static INCLUDE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r#"^#\s*include\s*[<"]([^>"]+)[>"]"#).expect("include"));
    let code = COMMENTS.replace_all(text, "");
    let lines: Vec<&str> = code
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() || !lines.iter().all(|l| l.starts_with('#')) {
        return None;
    }
    let included: Vec<String> = lines
        .iter()
        .filter_map(|l| INCLUDE.captures(l).map(|c| c[1].to_string()))
        .collect();
    (!included.is_empty()).then_some(included)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forwarding_header_is_only_directives_and_includes() {
        let shim = "#if !defined(TORCH_STABLE_ONLY)\n#pragma once\n// TODO: remove\n#include <ATen/cuda/Atomic.cuh>\n\n#else\n#error \"no\"\n#endif\n";
        assert_eq!(
            forwards_to(shim),
            Some(vec!["ATen/cuda/Atomic.cuh".to_string()])
        );
        assert_eq!(
            forwards_to("#pragma once\n/* multi\n line */\n#include <c10/macros/Macros.h>\n"),
            Some(vec!["c10/macros/Macros.h".to_string()])
        );
        assert_eq!(
            forwards_to("#pragma once\n#include <ATen/Tensor.h>\nnamespace at { struct G; }\n"),
            None
        );
        assert_eq!(forwards_to("#pragma once\n"), None);
        assert_eq!(forwards_to(""), None);
    }

    fn tree(dir: &std::path::Path, files: &[(&str, &str)]) -> PathBuf {
        for (rel, text) in files {
            let p = dir.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
        dir.to_path_buf()
    }

    /// Bisected over the trees given: the last release that shipped the header, the first that
    /// did not, what its last copy forwarded to or the target's header of the same name; a
    /// header no release had is said so, not blamed on torch.
    #[test]
    fn a_removed_header_is_placed_between_two_releases_with_what_replaced_it() {
        let d = tempfile::tempdir().unwrap();
        let v = |s: &str| s.parse::<Version>().unwrap();
        let t1 = tree(
            &d.path().join("1.10"),
            &[
                (
                    "ATen/CUDAGeneratorImpl.h",
                    "#pragma once\nnamespace at {}\n",
                ),
                (
                    "ATen/core/Macros.h",
                    "#pragma once\n#include <c10/macros/Macros.h>\n",
                ),
                ("c10/macros/Macros.h", "#pragma once\n"),
            ],
        );
        let t2 = tree(
            &d.path().join("1.11"),
            &[
                ("ATen/cuda/CUDAGeneratorImpl.h", "#pragma once\n"),
                (
                    "ATen/core/Macros.h",
                    "#pragma once\n#include <c10/macros/Macros.h>\n",
                ),
                ("c10/macros/Macros.h", "#pragma once\n"),
            ],
        );
        let t3 = tree(
            &d.path().join("2.15"),
            &[
                ("ATen/cuda/CUDAGeneratorImpl.h", "#pragma once\n"),
                ("c10/macros/Macros.h", "#pragma once\n"),
                ("torch/csrc/api/include/torch/torch.h", "#pragma once\n"),
            ],
        );
        let said = std::cell::RefCell::new(Vec::new());
        let say = |m: &str| said.borrow_mut().push(m.to_string());
        let mut trees = IncludeTrees::inserted_only(&say);
        trees.insert_dir(v("1.10.0"), t1).unwrap();
        trees.insert_dir(v("1.11.0"), t2).unwrap();
        trees.insert_dir(v("2.15.0"), t3).unwrap();
        let target = v("2.15.0");
        let moved = went("ATen/CUDAGeneratorImpl.h", None, &target, &mut trees)
            .unwrap()
            .unwrap();
        assert_eq!(
            moved.describe("ATen/CUDAGeneratorImpl.h", &target),
            "#include <ATen/CUDAGeneratorImpl.h>: torch 1.10.0 shipped it, torch 1.11.0 no longer does; torch 2.15.0 has CUDAGeneratorImpl.h at <ATen/cuda/CUDAGeneratorImpl.h>"
        );
        let forwarded = went("ATen/core/Macros.h", None, &target, &mut trees)
            .unwrap()
            .unwrap();
        assert_eq!(
            forwarded.describe("ATen/core/Macros.h", &target),
            "#include <ATen/core/Macros.h>: torch 1.11.0 shipped it, torch 2.15.0 no longer does; its last copy (torch 1.11.0) only included <c10/macros/Macros.h>, which torch 2.15.0 has: include that instead"
        );
        // The code's era after the release that still had it: the history starts there.
        let late = went(
            "ATen/CUDAGeneratorImpl.h",
            Some(&v("1.11")),
            &target,
            &mut trees,
        )
        .unwrap()
        .unwrap();
        assert_eq!(late.last, None);
        assert!(late
            .describe("ATen/CUDAGeneratorImpl.h", &target)
            .starts_with("#include <ATen/CUDAGeneratorImpl.h>: none of the 1 torch releases read from 1.11.0 on ships it, nor does torch 2.15.0 or the source; torch 2.15.0 has CUDAGeneratorImpl.h at"));
        let never = went("mylib/ops.h", None, &target, &mut trees)
            .unwrap()
            .unwrap();
        assert_eq!((never.last, never.read), (None, 2));
        assert!(said.borrow().is_empty(), "{said:?}");
        // A C++-frontend header is found under its own root.
        assert!(trees.of(&target).unwrap().find("torch/torch.h").is_some());
    }
}
