//! The port's work tree: a private copy of the source under archsmith's cache, made a git
//! repository whose one commit is the unported source, so the patches apply with `git apply` and
//! the whole change (rules + patches) is `git diff`.

use crate::build_ext::source;
use crate::process::Cmd;
use anyhow::{bail, Context, Result};
use fs_err as fs;
use std::path::{Path, PathBuf};

pub struct WorkTree {
    pub root: PathBuf,
}

/// One patch file that applied, and the files it touched.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Applied {
    pub patch: String,
    pub files: Vec<String>,
}

fn git(dir: &Path) -> Cmd {
    Cmd::new("git")
        .args([
            "-c",
            "user.name=archsmith",
            "-c",
            "user.email=archsmith@localhost",
            "-c",
            "core.autocrlf=false",
            "-c",
            "commit.gpgsign=false",
        ])
        .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap_or(dir))
        .dir(dir)
}

impl WorkTree {
    /// Replaces `root` with a copy of `src` (build outputs and VCS data left out) and commits it.
    pub fn create(src: &Path, root: &Path) -> Result<WorkTree> {
        if root.exists() {
            fs::remove_dir_all(root)
                .with_context(|| format!("removing the old work tree {}", root.display()))?;
        }
        fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
        source::copy_tree(src, root)
            .with_context(|| format!("copying {} to {}", src.display(), root.display()))?;
        let wt = WorkTree {
            root: root.to_path_buf(),
        };
        wt.git(["init", "-q"])?;
        wt.git(["add", "-A"])?;
        wt.git(["commit", "-q", "-m", "unported source"])?;
        Ok(wt)
    }

    fn git<const N: usize>(&self, args: [&str; N]) -> Result<String> {
        git(&self.root).args(args).read()
    }

    /// Applies `patch` (written against the output of the rules); fails without changing
    /// anything when it does not apply.
    pub fn apply(&self, patch: &Path) -> Result<Applied> {
        let name = patch
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let check = git(&self.root)
            .args(["apply", "--check", "--verbose"])
            .arg(patch)
            .output()?;
        if !check.success() {
            bail!(
                "patch {} does not apply to the tree the rules produced:\n{}\nThe patch must be made against the ported tree: run `{} port-extension … --dry-run`, edit the work tree it names, and regenerate the patch with `git diff`.",
                patch.display(),
                check.stderr.trim(),
                crate::output::program()
            );
        }
        let files = git(&self.root)
            .args(["apply", "--numstat"])
            .arg(patch)
            .read()?
            .lines()
            .filter_map(|l| l.split('\t').nth(2).map(str::to_string))
            .collect();
        git(&self.root).arg("apply").arg(patch).read()?;
        Ok(Applied { patch: name, files })
    }

    /// The unified diff of everything changed since the unported source.
    pub fn diff(&self) -> Result<String> {
        self.git(["diff", "--no-color", "--no-ext-diff"])
    }

    /// Source-relative paths of the changed files.
    pub fn changed_files(&self) -> Result<Vec<String>> {
        Ok(self
            .git(["diff", "--name-only"])?
            .lines()
            .map(str::to_string)
            .collect())
    }
}

/// The checkout of `url` at `commit`, fetched once into `cache` (a shallow fetch of that commit).
pub fn git_checkout(url: &str, commit: &str, cache: &Path) -> Result<PathBuf> {
    // A full commit id pins the tree (and its checkout is reused); a tag or branch (a recipe-less
    // port's `git+URL@REV`) is fetched again each time.
    let pinned = commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit());
    let dir = if pinned {
        cache.join(&commit[..12])
    } else {
        let safe: String = commit
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        cache.join(format!("rev-{safe}"))
    };
    let done = dir.join(".git").join("archsmith-complete");
    if pinned && done.is_file() {
        return Ok(dir);
    }
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    let fetch = || -> Result<()> {
        if crate::offline::is_remote(url) {
            crate::offline::require(
                &format!("{url} at {commit}"),
                "Give --src DIR, a checkout of that commit",
            )?;
        }
        git(&dir).args(["init", "-q"]).read()?;
        git(&dir)
            .args(["fetch", "-q", "--depth", "1", url, commit])
            .read()?;
        git(&dir)
            .args(["checkout", "-q", "--detach", "FETCH_HEAD"])
            .read()?;
        // Submodules too, as `git clone --recursive` would: a checkout without them fails at a
        // missing header. One that cannot be fetched (another host) stays empty, and the port
        // says so before it builds (build_ext::source::unfilled_submodules).
        if dir.join(".gitmodules").is_file() {
            let update = git(&dir).args([
                "submodule",
                "update",
                "--init",
                "--recursive",
                "--depth",
                "1",
            ]);
            if let Err(e) = update.read() {
                crate::errln!("archsmith: note: {url}'s submodules could not be fetched: {e:#}");
            }
        }
        Ok(())
    };
    if let Err(e) = fetch() {
        let _ = fs::remove_dir_all(&dir);
        bail!(
            "could not fetch {url} at {commit}: {e:#}\nWithout network access to that host, pass --src DIR with a checkout of that commit"
        );
    }
    let head = git(&dir).args(["rev-parse", "HEAD"]).read()?;
    if pinned && head != commit {
        bail!("{url}: fetched {head}, expected {commit}");
    }
    fs::write(&done, commit)?;
    Ok(dir)
}

/// HEAD of the git checkout at `dir`, if it is one.
pub fn head_commit(dir: &Path) -> Option<String> {
    git(dir)
        .args(["rev-parse", "HEAD"])
        .read()
        .ok()
        .filter(|s| s.len() == 40)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_source_is_fetched_at_the_pinned_commit_once() {
        let tmp = tempfile::tempdir().unwrap();
        let upstream = tmp.path().join("upstream");
        fs::create_dir_all(&upstream).unwrap();
        fs::write(upstream.join("setup.py"), "v1\n").unwrap();
        git(&upstream).args(["init", "-q"]).read().unwrap();
        git(&upstream).args(["add", "-A"]).read().unwrap();
        git(&upstream)
            .args(["commit", "-q", "-m", "v1"])
            .read()
            .unwrap();
        let pinned = head_commit(&upstream).unwrap();
        fs::write(upstream.join("setup.py"), "v2\n").unwrap();
        git(&upstream)
            .args(["commit", "-qam", "v2"])
            .read()
            .unwrap();

        let url = upstream.display().to_string();
        let cache = tmp.path().join("cache");
        let dir = git_checkout(&url, &pinned, &cache).unwrap();
        assert_eq!(fs::read_to_string(dir.join("setup.py")).unwrap(), "v1\n");
        assert_eq!(head_commit(&dir).unwrap(), pinned);
        // cached: the upstream may vanish
        fs::remove_dir_all(&upstream).unwrap();
        assert_eq!(git_checkout(&url, &pinned, &cache).unwrap(), dir);

        let e = format!(
            "{:#}",
            git_checkout(&url, &"0".repeat(40), &cache).unwrap_err()
        );
        assert!(e.contains("pass --src DIR"), "{e}");
    }

    #[test]
    fn work_tree_diff_shows_changes_and_a_bad_patch_changes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir_all(src.join("build")).unwrap();
        fs::write(src.join("a.cpp"), "int a;\n").unwrap();
        fs::write(src.join("build/junk.o"), "x").unwrap();
        let wt = WorkTree::create(&src, &tmp.path().join("wt")).unwrap();
        assert!(!wt.root.join("build").exists());
        assert_eq!(wt.diff().unwrap(), "");
        let good = tmp.path().join("good.patch");
        fs::write(
            &good,
            "--- a/a.cpp\n+++ b/a.cpp\n@@ -1 +1 @@\n-int a;\n+int b;\n",
        )
        .unwrap();
        let bad = tmp.path().join("bad.patch");
        fs::write(
            &bad,
            "--- a/a.cpp\n+++ b/a.cpp\n@@ -1 +1 @@\n-int zzz;\n+int c;\n",
        )
        .unwrap();
        let e = format!("{:#}", wt.apply(&bad).unwrap_err());
        assert!(
            e.contains("bad.patch does not apply") && e.contains("a.cpp"),
            "{e}"
        );
        assert_eq!(wt.diff().unwrap(), "");
        let applied = wt.apply(&good).unwrap();
        assert_eq!(applied.files, ["a.cpp"]);
        assert_eq!(wt.changed_files().unwrap(), ["a.cpp"]);
        assert!(wt.diff().unwrap().contains("+int b;"));
        assert_eq!(fs::read_to_string(src.join("a.cpp")).unwrap(), "int a;\n");
    }
}
