//! Downloads of single distribution files from PyPI into archsmith's cache.
//!
//! pip does the resolving and downloading (it honours the user's pip configuration, index and
//! proxy); archsmith keeps one copy per file under `downloads_dir()`, so a second request for the
//! same release is a directory lookup.

use crate::paths;
use crate::process::Cmd;
use crate::pyenv::host_python;
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// Returns the path of the wheel for `name==version` for this machine's Python and platform,
/// downloading it (without dependencies) on first use.
pub fn download_wheel(name: &str, version: &str) -> Result<PathBuf> {
    let dir = paths::downloads_dir();
    if let Some(found) = find_cached(&dir, name, version) {
        return Ok(found);
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // Download into a private directory first and move the file in when pip has finished, so an
    // interrupted download is never taken for a complete wheel.
    let tmp = dir.join(format!(".partial-{name}-{version}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    eprintln!(
        "archsmith: downloading {name}=={version} from PyPI into {}",
        dir.display()
    );
    let result = Cmd::new(host_python()?)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--progress-bar",
            "on",
            "-d",
        ])
        .arg(&tmp)
        .arg(format!("{name}=={version}"))
        .run_inherit();
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e.context(format!("could not download {name}=={version}: check the name and version on PyPI (`pip index versions {name}`)")));
    }
    let mut moved = None;
    for entry in fs::read_dir(&tmp)? {
        let path = entry?.path();
        let Some(file) = path.file_name() else {
            continue;
        };
        let dest = dir.join(file);
        fs::rename(&path, &dest)
            .with_context(|| format!("moving {} into the cache", path.display()))?;
        moved = Some(dest);
    }
    let _ = fs::remove_dir_all(&tmp);
    match moved.or_else(|| find_cached(&dir, name, version)) {
        Some(p) => Ok(p),
        None => bail!("pip reported success but left no wheel for {name}=={version}"),
    }
}

/// A cached wheel whose file name starts with the normalized `name-version-`.
fn find_cached(dir: &Path, name: &str, version: &str) -> Option<PathBuf> {
    let prefix = format!("{}-{version}-", name.replace('-', "_"));
    let mut hits: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with(&prefix) && f.ends_with(".whl"))
        })
        .collect();
    hits.sort();
    hits.pop()
}
