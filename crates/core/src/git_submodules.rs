//! The git submodules a source tree declares (`.gitmodules`) and which of them are not filled in.
//!
//! A clone without `--recursive`, or a snapshot of a repository (a release tarball, GitHub's
//! archive, a fetched copy), leaves each submodule an empty directory, and the compiler is what
//! finds out, minutes into a build (`cutlass/cutlass.h: No such file or directory`). build-ext,
//! port-extension and JIT prebuilds read this before anything is compiled; build-torch's preflight
//! knows which of torch's submodules each configuration needs and shares [`fill_command`].
//!
//! `.gitmodules` is git's config syntax: `[submodule "NAME"]` sections with `path = …` and
//! `url = …`; keys are case-insensitive, values may be quoted, `#` and `;` start comments.
//! [`parse`] reads it from any bytes without panicking; a line it cannot read is skipped, as git
//! would refuse the file rather than guess.

use crate::process::Cmd;
use anyhow::Result;
use std::path::{Component, Path, PathBuf};

/// One `[submodule "NAME"]` section with a path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Submodule {
    pub name: String,
    /// Relative to the directory holding the `.gitmodules` that declares it.
    pub path: String,
    pub url: Option<String>,
}

/// The submodules of a `.gitmodules` text that name a relative path inside the repository (an
/// absolute path or one with `..` is not a submodule git would check out), in file order.
pub fn parse(text: &str) -> Vec<Submodule> {
    let mut out: Vec<Submodule> = Vec::new();
    let mut current: Option<Submodule> = None;
    let mut lines = text.lines();
    while let Some(raw) = lines.next() {
        // A value continued on the next line ends with a backslash.
        let mut line = raw.to_string();
        while line.ends_with('\\') && !line.ends_with("\\\\") {
            line.pop();
            match lines.next() {
                Some(next) => line.push_str(next),
                None => break,
            }
        }
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            out.extend(current.take().filter(|s| !s.path.is_empty()));
            current = section_name(header).map(|name| Submodule {
                name,
                path: String::new(),
                url: None,
            });
            continue;
        }
        let (Some(sub), Some((key, value))) = (current.as_mut(), line.split_once('=')) else {
            continue;
        };
        let value = unquote(value.trim());
        match key.trim().to_ascii_lowercase().as_str() {
            "path" if relative_inside(&value) => sub.path = value.trim_end_matches('/').to_string(),
            "url" => sub.url = Some(value),
            _ => {}
        }
    }
    out.extend(current.filter(|s| !s.path.is_empty()));
    out
}

/// `submodule "NAME"]` → NAME; another section → None.
fn section_name(header: &str) -> Option<String> {
    let header = header.split_once(']')?.0.trim();
    let rest = header.strip_prefix("submodule")?.trim_start();
    let quoted = rest.strip_prefix('"')?.strip_suffix('"')?;
    Some(quoted.replace("\\\"", "\"").replace("\\\\", "\\"))
}

/// A value without its comment and quotes: `"a b" # c` → `a b`.
fn unquote(value: &str) -> String {
    let mut out = String::new();
    let (mut quoted, mut escaped) = (false, false);
    for c in value.chars() {
        match (escaped, c) {
            (true, 'n') => out.push('\n'),
            (true, 't') => out.push('\t'),
            (true, c) => out.push(c),
            (false, '\\') => {
                escaped = true;
                continue;
            }
            (false, '"') => quoted = !quoted,
            (false, '#' | ';') if !quoted => break,
            (false, c) => out.push(c),
        }
        escaped = false;
    }
    out.trim().to_string()
}

fn relative_inside(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// A declared submodule whose directory is missing or empty.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Missing {
    /// Its path relative to [`Unfilled::root`].
    pub path: String,
    pub url: Option<String>,
    /// The commit the repository pins (a checkout's `git ls-tree`); None in a snapshot.
    pub commit: Option<String>,
    /// The top-level submodule that holds it (itself unless nested in a filled one): what
    /// `git submodule update --recursive` is given.
    pub top: String,
}

/// The submodules under a source directory that are not filled in.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Unfilled {
    /// The repository's root: the directory holding the `.gitmodules` that declares them.
    pub root: PathBuf,
    /// `root` is a git checkout (it has `.git`): `git submodule update` fills them.
    pub checkout: bool,
    pub missing: Vec<Missing>,
}

/// Nesting followed below the repository (a submodule's own `.gitmodules`).
const MAX_DEPTH: usize = 8;

/// The declared submodules at or under `dir` that are missing or empty, read from the
/// `.gitmodules` of `dir` or of the repository it lies in (the nearest ancestor that has one,
/// stopping at a `.git`), and from the `.gitmodules` of every filled submodule below. None when
/// every one is filled, or nothing declares any.
pub fn unfilled_under(dir: &Path) -> Result<Option<Unfilled>> {
    let dir = dir.canonicalize()?;
    let Some(root) = repository_root(&dir) else {
        return Ok(None);
    };
    let checkout = root.join(".git").exists();
    let mut missing = Vec::new();
    // (a repository, its path under root with a trailing `/`, its depth, its top-level submodule)
    let mut stack = vec![(root.clone(), String::new(), 0, None::<String>)];
    while let Some((repo, prefix, depth, top)) = stack.pop() {
        let Ok(bytes) = std::fs::read(repo.join(".gitmodules")) else {
            continue;
        };
        for sub in parse(&String::from_utf8_lossy(&bytes)) {
            let full = root.join(&prefix).join(&sub.path);
            // Only what lies inside the source (or holds it: a source inside an empty submodule).
            if !full.starts_with(&dir) && !dir.starts_with(&full) {
                continue;
            }
            let rel = format!("{prefix}{}", sub.path);
            let top = top.clone().unwrap_or_else(|| rel.clone());
            if filled(&full) {
                if depth < MAX_DEPTH {
                    stack.push((full, format!("{rel}/"), depth + 1, Some(top)));
                }
                continue;
            }
            missing.push(Missing {
                commit: checkout.then(|| pinned_commit(&repo, &sub.path)).flatten(),
                path: rel,
                url: sub.url,
                top,
            });
        }
    }
    if missing.is_empty() {
        return Ok(None);
    }
    missing.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Some(Unfilled {
        root,
        checkout,
        missing,
    }))
}

/// The nearest of `dir` and its ancestors with a `.gitmodules`; the search ends at the first one
/// with a `.git` (a repository's root) or at the top.
fn repository_root(dir: &Path) -> Option<PathBuf> {
    for d in dir.ancestors() {
        if d.join(".gitmodules").is_file() {
            return Some(d.to_path_buf());
        }
        if d.join(".git").exists() {
            return None;
        }
    }
    None
}

/// A submodule directory is filled when it holds anything besides a `.git` file.
fn filled(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .is_ok_and(|mut entries| entries.any(|e| e.is_ok_and(|e| e.file_name() != ".git")))
}

/// `git ls-tree HEAD -- PATH` in a checkout: `160000 commit SHA\tPATH`.
fn pinned_commit(repo: &Path, path: &str) -> Option<String> {
    let out = Cmd::new("git")
        .arg("-C")
        .arg(repo)
        .args(["ls-tree", "HEAD", "--", path])
        .read()
        .ok()?;
    let mut fields = out.split_whitespace();
    (fields.next() == Some("160000") && fields.next() == Some("commit"))
        .then(|| fields.next().map(str::to_string))
        .flatten()
}

/// The command that fills `paths` of the checkout at `root`.
pub fn fill_command(root: &Path, paths: &[String]) -> String {
    format!(
        "git -C {} submodule update --init --recursive -- {}",
        root.display(),
        paths.join(" ")
    )
}

/// The flag build-ext and port-extension take to build without the missing submodules.
pub const GO_ON_FLAG: &str = "--skip-missing-submodules";

impl Unfilled {
    /// The missing submodules' paths.
    pub fn paths(&self) -> Vec<String> {
        self.missing.iter().map(|m| m.path.clone()).collect()
    }

    /// What is missing, how to fill it (offline: what to provide), and how to go on without it.
    pub fn advice(&self, source: &Path, offline: bool) -> String {
        let n = self.missing.len();
        let mut text = format!(
            "{}: {n} git submodule{} it declares {} empty (a clone without --recursive, or a snapshot of the repository); the compiler would find out minutes into the build:",
            source.display(),
            if n == 1 { "" } else { "s" },
            if n == 1 { "is" } else { "are" },
        );
        let width = self.missing.iter().map(|m| m.path.len()).max().unwrap_or(0);
        for m in &self.missing {
            let url = m.url.as_deref().unwrap_or("(no url)");
            let at = m
                .commit
                .as_deref()
                .map(|c| format!(" at {c}"))
                .unwrap_or_default();
            text += &format!("\n  {:width$}  {url}{at}", m.path);
        }
        let mut tops: Vec<String> = self.missing.iter().map(|m| m.top.clone()).collect();
        tops.dedup();
        text += &match (offline, self.checkout) {
            (false, true) => format!("\nfill them: {}", fill_command(&self.root, &tops)),
            (false, false) => format!(
                "\nfill them: {} is not a git checkout: clone the repository again with `git clone --recursive URL`, or clone each URL above into its directory under {} at the commit the repository pins",
                self.root.display(),
                self.root.display()
            ),
            (true, _) => format!(
                "\noffline: copy a checkout of each URL above{} into its directory under {} (on a machine with network access: {})",
                if self.checkout { " at the commit shown" } else { " at the commit the repository pins" },
                self.root.display(),
                // A snapshot has no git to update its submodules with.
                if self.checkout {
                    fill_command(&self.root, &tops)
                } else {
                    "clone the repository again with `git clone --recursive URL`".to_string()
                }
            ),
        };
        text + &format!(
            "\nor build what does not need them: {GO_ON_FLAG} (what includes them fails and is reported; the rest is built)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GITMODULES: &str = r#"
# the kernels' headers
[submodule "cutlass"]
	path = csrc/dependencies/cutlass
	url = https://github.com/NVIDIA/cutlass.git
[submodule "docs theme"]
	path = "docs/theme" ; quoted, with a comment
	URL = https://example.com/theme.git
[core]
	path = not/a/submodule
[submodule "escape"]
	path = ../outside
[submodule "no path"]
	url = https://example.com/x.git
"#;

    #[test]
    fn parse_reads_git_config_sections_and_skips_what_git_would_not_check_out() {
        let subs = parse(GITMODULES);
        assert_eq!(
            subs,
            [
                Submodule {
                    name: "cutlass".into(),
                    path: "csrc/dependencies/cutlass".into(),
                    url: Some("https://github.com/NVIDIA/cutlass.git".into()),
                },
                Submodule {
                    name: "docs theme".into(),
                    path: "docs/theme".into(),
                    url: Some("https://example.com/theme.git".into()),
                },
            ]
        );
    }

    #[test]
    fn parse_never_panics_on_hostile_text() {
        let pieces = [
            "[",
            "]",
            "\"",
            "\\",
            "=",
            "\n",
            "[submodule \"",
            "path",
            "url",
            "#",
            ";",
            "é",
            "\0",
            "/..",
            "a",
            " ",
        ];
        let mut seed = 7u64;
        for _ in 0..5000 {
            let mut text = String::new();
            for _ in 0..(seed % 40) {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                text.push_str(pieces[(seed >> 33) as usize % pieces.len()]);
            }
            for s in parse(&text) {
                assert!(relative_inside(&s.path), "{text:?}");
            }
        }
    }

    fn tree(gitmodules: &str, filled: &[&str], empty: &[&str]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join(".gitmodules"), gitmodules).unwrap();
        for d in filled {
            std::fs::create_dir_all(t.path().join(d)).unwrap();
            std::fs::write(t.path().join(d).join("x.h"), "").unwrap();
        }
        for d in empty {
            std::fs::create_dir_all(t.path().join(d)).unwrap();
        }
        t
    }

    #[test]
    fn an_empty_or_absent_submodule_is_missing_a_filled_one_is_not() {
        let t = tree(GITMODULES, &["docs/theme"], &["csrc/dependencies/cutlass"]);
        let u = unfilled_under(t.path()).unwrap().unwrap();
        assert!(!u.checkout);
        let paths: Vec<&str> = u.missing.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(paths, ["csrc/dependencies/cutlass"]);
        // Filled: nothing to say.
        std::fs::write(t.path().join("csrc/dependencies/cutlass/cutlass.h"), "").unwrap();
        assert_eq!(unfilled_under(t.path()).unwrap(), None);
        // Absent altogether (a copy that keeps files only) is missing too.
        std::fs::remove_dir_all(t.path().join("docs")).unwrap();
        let u = unfilled_under(t.path()).unwrap().unwrap();
        assert_eq!(u.missing[0].path, "docs/theme");
    }

    #[test]
    fn a_source_below_the_repository_root_sees_only_its_own_submodules() {
        let t = tree(
            GITMODULES,
            &[],
            &["csrc/dependencies/cutlass", "docs/theme"],
        );
        let u = unfilled_under(&t.path().join("csrc")).unwrap().unwrap();
        assert_eq!(u.root, t.path().canonicalize().unwrap());
        let paths: Vec<&str> = u.missing.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(paths, ["csrc/dependencies/cutlass"]);
        std::fs::create_dir_all(t.path().join("other")).unwrap();
        assert_eq!(unfilled_under(&t.path().join("other")).unwrap(), None);
    }

    #[test]
    fn a_filled_submodule_s_own_submodules_are_read_and_filled_through_it() {
        let t = tree(
            "[submodule \"a\"]\n path = third_party/a\n url = u\n",
            &["third_party/a"],
            &[],
        );
        std::fs::write(
            t.path().join("third_party/a/.gitmodules"),
            "[submodule \"b\"]\n path = deps/b\n url = v\n",
        )
        .unwrap();
        let u = unfilled_under(t.path()).unwrap().unwrap();
        assert_eq!(u.missing[0].path, "third_party/a/deps/b");
        assert_eq!(u.missing[0].top, "third_party/a");
    }

    #[test]
    fn a_snapshot_gets_clone_advice_and_offline_what_to_copy() {
        let t = tree(GITMODULES, &["docs/theme"], &["csrc/dependencies/cutlass"]);
        let snapshot = unfilled_under(t.path()).unwrap().unwrap();
        let text = snapshot.advice(t.path(), false);
        assert!(
            text.contains("1 git submodule it declares is empty"),
            "{text}"
        );
        assert!(
            text.contains("csrc/dependencies/cutlass  https://github.com/NVIDIA/cutlass.git"),
            "{text}"
        );
        assert!(text.contains("is not a git checkout: clone the repository again with `git clone --recursive URL`"), "{text}");
        assert!(text.contains(GO_ON_FLAG), "{text}");
        let offline = snapshot.advice(t.path(), true);
        assert!(
            offline.contains(
                "offline: copy a checkout of each URL above at the commit the repository pins"
            ),
            "{offline}"
        );
        // A checkout (the commit it pins, the exact fill command) is the CLI test's:
        // tests/wrong_inputs.rs, empty_git_submodules_stop_builds_and_ports_before_any_work.
    }
}
