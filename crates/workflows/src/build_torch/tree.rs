//! A PyTorch source tree as build-torch finds it: its version, its build front end, whether it is
//! a git checkout, the minimum tool versions its own build files demand, and which names its build
//! reads (the cross-check that keeps the plan honest).
//!
//! Everything here is read from the tree itself, so a checkout of any release answers for itself:
//! `version.txt`; `setup.py` + `tools/setup_helpers/cmake.py` (the front end up to 2.12) or
//! `pyproject.toml`'s `build-backend = "scikit_build_core…"` (2.13 on); `python_min_version` in
//! setup.py or `requires-python`; `cmake_minimum_required` and setup_helpers'
//! `CMAKE_MINIMUM_VERSION_STRING`; CMakeLists.txt's `GCC-X or newer is required` check.

use crate::process::Cmd;
use crate::version::Version;
use anyhow::{bail, Result};
use regex::Regex;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// How the tree turns environment variables into a CMake configure and a wheel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FrontEnd {
    /// `setup.py` + `tools/setup_helpers/cmake.py` (torch ≤ 2.12): prefix-forwarded `USE_*`,
    /// `BUILD_*`, `CMAKE_*`; configure skipped while `build/CMakeCache.txt` exists.
    SetupPy,
    /// scikit-build-core with `cmake/EnvVarForwarding.cmake` (torch ≥ 2.13).
    ScikitBuildCore,
}

impl FrontEnd {
    pub fn name(self) -> &'static str {
        match self {
            FrontEnd::SetupPy => "setup.py",
            FrontEnd::ScikitBuildCore => "scikit-build-core",
        }
    }
}

/// A checkout's commit, when the tree is a git work tree.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct GitState {
    pub head: String,
    /// The tag HEAD is exactly at (`v2.6.0`), if any.
    pub tag: Option<String>,
    /// Files differ from `head` (tracked changes; untracked files are not counted).
    pub dirty: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct TorchTree {
    pub root: PathBuf,
    /// `version.txt` as written (`2.6.0`, `2.7.0a0`).
    pub version_text: String,
    /// Its release numbers (`2.7.0` for `2.7.0a0`).
    pub version: Version,
    pub front_end: FrontEnd,
    pub git: Option<GitState>,
    /// The minimum Python the tree's own build demands.
    pub python_min: Option<Version>,
    /// The minimum CMake: the newest of `cmake_minimum_required` and setup_helpers' own floor.
    pub cmake_min: Option<Version>,
    /// The minimum GCC CMakeLists.txt demands.
    pub gcc_min: Option<Version>,
    /// Torch's own translation units (third_party and build directories not counted): what the
    /// disk estimate scales with.
    pub sources: SourceCount,
}

/// C/C++ and CUDA translation units in a tree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SourceCount {
    pub cxx: usize,
    pub cuda: usize,
}

impl SourceCount {
    /// Counts the `.c`/`.cc`/`.cpp` and `.cu` files under `root`, skipping `third_party/` (its
    /// size depends on which submodules were cloned), `build/` and hidden directories.
    pub fn of(root: &Path) -> SourceCount {
        let mut count = SourceCount::default();
        let walker = ignore::WalkBuilder::new(root)
            .standard_filters(false)
            .hidden(true)
            .follow_links(false)
            .filter_entry(|e| {
                let name = e.file_name().to_string_lossy();
                !(e.file_type().is_some_and(|t| t.is_dir())
                    && (name == "build" || name == "third_party"))
            })
            .build();
        for entry in walker.flatten() {
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            match entry.path().extension().and_then(|e| e.to_str()) {
                Some("c" | "cc" | "cpp") => count.cxx += 1,
                Some("cu") => count.cuda += 1,
                _ => {}
            }
        }
        count
    }
}

/// Errors that mean "this is not a torch tree", for exit 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotATorchTree(pub String);

impl TorchTree {
    /// Reads `root`. Not a tree (no `version.txt`, no known front end) is a [`NotATorchTree`].
    pub fn inspect(root: &Path) -> Result<TorchTree> {
        let read = |rel: &str| std::fs::read_to_string(root.join(rel)).ok();
        if !root.is_dir() {
            bail!(NotATorchTree(format!(
                "--src {}: no such directory; give a PyTorch checkout or an unpacked source tarball",
                root.display()
            )));
        }
        let Some(version_text) = read("version.txt").map(|v| v.trim().to_string()) else {
            bail!(NotATorchTree(format!(
                "--src {}: not a PyTorch source tree (no version.txt at its top); give the directory that holds setup.py or pyproject.toml and version.txt",
                root.display()
            )));
        };
        let version = release_numbers(&version_text).ok_or_else(|| {
            NotATorchTree(format!(
                "{}: version.txt says `{version_text}`, expected a version such as 2.6.0",
                root.join("version.txt").display()
            ))
        })?;
        let pyproject = read("pyproject.toml").unwrap_or_default();
        let setup_py = read("setup.py");
        let front_end = if backend(&pyproject).is_some_and(|b| b.starts_with("scikit_build_core")) {
            FrontEnd::ScikitBuildCore
        } else if setup_py.is_some() && root.join("tools/setup_helpers/cmake.py").is_file() {
            FrontEnd::SetupPy
        } else {
            bail!(NotATorchTree(format!(
                "{}: torch {version_text}, but neither front end is there: expected setup.py with tools/setup_helpers/cmake.py (torch ≤ 2.12) or pyproject.toml with build-backend = \"scikit_build_core.build\" (2.13 on)",
                root.display()
            )));
        };
        let cmakelists = read("CMakeLists.txt").unwrap_or_default();
        let setup_helpers = read("tools/setup_helpers/cmake.py").unwrap_or_default();
        let python_min = setup_py
            .as_deref()
            .and_then(python_min_from_setup_py)
            .or_else(|| requires_python(&pyproject));
        let cmake_min = [
            capture(
                &cmakelists,
                r"(?i)cmake_minimum_required\s*\(\s*VERSION\s+([0-9.]+)",
            ),
            capture(
                &setup_helpers,
                r#"CMAKE_MINIMUM_VERSION_STRING\s*=\s*"([0-9.]+)""#,
            ),
        ]
        .into_iter()
        .flatten()
        .max();
        let gcc_min = capture(
            &cmakelists,
            r"CMAKE_COMPILER_IS_GNUCXX\s+AND\s+CMAKE_CXX_COMPILER_VERSION\s+VERSION_LESS\s+([0-9.]+)",
        );
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        let git = git_state(&root);
        let sources = SourceCount::of(&root);
        Ok(TorchTree {
            root,
            version_text,
            version,
            front_end,
            git,
            python_min,
            cmake_min,
            gcc_min,
            sources,
        })
    }

    /// The version a wheel of this tree should carry: a release tag's (`v2.6.0` → `2.6.0`, where
    /// version.txt still says `2.6.0a0`, as on pytorch's release tags), else version.txt as written.
    pub fn release_version(&self) -> String {
        let tagged = self
            .git
            .as_ref()
            .and_then(|g| g.tag.as_deref())
            .and_then(|t| release_numbers(t.trim_start_matches('v')).map(|v| (t, v)))
            .filter(|(t, v)| *v == self.version && !t.contains(['a', 'b']) && !t.contains("rc"));
        match tagged {
            Some((_, v)) => v.to_string(),
            None => self
                .version_text
                .split('+')
                .next()
                .unwrap_or(&self.version_text)
                .to_string(),
        }
    }

    /// Whether a `third_party/` directory holds a checked-out submodule: one of the files
    /// setup.py's `check_submodules` looks for.
    pub fn has_submodule(&self, rel: &str) -> bool {
        let dir = self.root.join(rel);
        [
            "CMakeLists.txt",
            "Makefile",
            "setup.py",
            "LICENSE",
            "LICENSE.md",
            "LICENSE.txt",
        ]
        .iter()
        .any(|f| dir.join(f).exists())
    }
}

/// `2.6.0` → 2.6.0; `2.7.0a0` → 2.7.0; `2.6.0+git1234` → 2.6.0.
fn release_numbers(text: &str) -> Option<Version> {
    let v: Version = text.trim().parse().ok()?;
    (v.parts().len() >= 2).then(|| Version::new(v.parts()))
}

fn backend(pyproject: &str) -> Option<String> {
    let doc: toml::Table = toml::from_str(pyproject).ok()?;
    doc.get("build-system")?
        .get("build-backend")?
        .as_str()
        .map(str::to_string)
}

fn requires_python(pyproject: &str) -> Option<Version> {
    let doc: toml::Table = toml::from_str(pyproject).ok()?;
    let spec = doc.get("project")?.get("requires-python")?.as_str()?;
    capture(spec, r">=\s*([0-9.]+)")
}

fn python_min_from_setup_py(text: &str) -> Option<Version> {
    let re =
        Regex::new(r"python_min_version\s*=\s*\(\s*(\d+)\s*,\s*(\d+)\s*(?:,\s*(\d+))?").ok()?;
    let c = re.captures(text)?;
    let part = |i| c.get(i).map_or("0", |m| m.as_str());
    format!("{}.{}.{}", part(1), part(2), part(3)).parse().ok()
}

fn capture(text: &str, re: &str) -> Option<Version> {
    Regex::new(re)
        .ok()?
        .captures(text)?
        .get(1)?
        .as_str()
        .trim_end_matches('.')
        .parse()
        .ok()
}

fn git_state(root: &Path) -> Option<GitState> {
    if !root.join(".git").exists() {
        return None;
    }
    let head = Cmd::new("git")
        .arg("-C")
        .arg(root)
        .args(["rev-parse", "HEAD"])
        .read()
        .ok()?;
    let status = Cmd::new("git")
        .arg("-C")
        .arg(root)
        .args([
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--ignore-submodules=dirty",
        ])
        .read()
        .unwrap_or_default();
    let tag = Cmd::new("git")
        .arg("-C")
        .arg(root)
        .args(["describe", "--tags", "--exact-match", "HEAD"])
        .read()
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    Some(GitState {
        head: head.trim().to_string(),
        tag,
        dirty: !status.trim().is_empty(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_txt_forms() {
        assert_eq!(release_numbers("2.6.0").unwrap().to_string(), "2.6.0");
        assert_eq!(release_numbers("2.7.0a0").unwrap().to_string(), "2.7.0");
        assert_eq!(
            release_numbers("2.6.0+git12ab").unwrap().to_string(),
            "2.6.0"
        );
        assert!(release_numbers("main").is_none());
        assert!(release_numbers("2").is_none());
    }

    #[test]
    fn minima_from_the_tree_files() {
        let setup = "python_min_version = (3, 9, 0)\npython_min_version_str = ...";
        assert_eq!(
            python_min_from_setup_py(setup).unwrap().to_string(),
            "3.9.0"
        );
        let pyproject = "[project]\nrequires-python = \">=3.10\"\n[build-system]\nbuild-backend = \"scikit_build_core.build\"\n";
        assert_eq!(requires_python(pyproject).unwrap().to_string(), "3.10");
        assert_eq!(
            backend(pyproject).as_deref(),
            Some("scikit_build_core.build")
        );
        assert_eq!(
            capture(
                "cmake_minimum_required(VERSION 3.18 FATAL_ERROR)",
                r"(?i)cmake_minimum_required\s*\(\s*VERSION\s+([0-9.]+)"
            )
            .unwrap()
            .to_string(),
            "3.18"
        );
    }
}
