//! archsmith's data files (`patches/`: recipes, rule catalogues, patches, smoke tests; `kernels/`:
//! the test kernels) wherever the binary runs. Built in this repository (the binary under its
//! `target/`), they are read from the checkout, so edits show at once; installed anywhere else
//! (`cargo install`, the Python wheel), the copies compiled into the binary are written once under
//! the cache (`cache_dir()/data/<content hash>`, build-once) and read from there.

use crate::cache::provision;
use crate::paths::{cache_dir, repo_root};
use anyhow::Result;
use include_dir::{include_dir, Dir};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

static PATCHES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../patches");
static KERNELS: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../kernels");
static ENV_SCRIPTS: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../env_scripts");

/// Forces the embedded copies even inside the checkout (tests of an installed binary).
pub const EMBEDDED_ENV: &str = "ARCHSMITH_EMBEDDED_DATA";

fn running_from_checkout() -> bool {
    if std::env::var_os(EMBEDDED_ENV).is_some_and(|v| v == "1") {
        return false;
    }
    let target = repo_root().join("target");
    std::env::current_exe()
        .ok()
        .and_then(|e| std::fs::canonicalize(e).ok())
        .zip(std::fs::canonicalize(&target).ok())
        .is_some_and(|(exe, target)| exe.starts_with(target))
}

fn files<'a>(dir: &'a Dir<'a>, out: &mut Vec<&'a include_dir::File<'a>>) {
    out.extend(dir.files());
    for d in dir.dirs() {
        files(d, out);
    }
}

/// sha256 of every embedded path and its bytes.
fn content_hash() -> String {
    let mut h = Sha256::new();
    for (name, dir) in [
        ("patches/", &PATCHES),
        ("kernels/", &KERNELS),
        ("env_scripts/", &ENV_SCRIPTS),
    ] {
        let mut all = Vec::new();
        files(dir, &mut all);
        for f in all {
            h.update(name.as_bytes());
            h.update(f.path().to_string_lossy().as_bytes());
            h.update([0]);
            h.update(f.contents());
        }
    }
    crate::stamp::hex(&h.finalize())[..16].to_string()
}

fn write_all(dir: &Dir<'_>, root: &Path) -> Result<()> {
    let mut all = Vec::new();
    files(dir, &mut all);
    for f in all {
        let p = root.join(f.path());
        if let Some(parent) = p.parent() {
            fs_err::create_dir_all(parent)?;
        }
        fs_err::write(&p, f.contents())?;
    }
    Ok(())
}

/// The directory that holds `patches/`, `kernels/` and `env_scripts/`.
pub fn data_root() -> Result<PathBuf> {
    if running_from_checkout() {
        return Ok(repo_root());
    }
    let parent = cache_dir().join("data");
    fs_err::create_dir_all(&parent)?;
    provision(
        &parent,
        &format!("data-{}", content_hash()),
        "archsmith's data files",
        &|d| Ok(d.join("patches").is_dir().then(|| d.to_path_buf())),
        &mut |staging, _| {
            write_all(&PATCHES, &staging.join("patches"))?;
            write_all(&KERNELS, &staging.join("kernels"))?;
            write_all(&ENV_SCRIPTS, &staging.join("env_scripts"))
        },
        &mut |_| {},
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_copies_are_the_checkout_s_files() {
        let mut all = Vec::new();
        files(&PATCHES, &mut all);
        assert!(all
            .iter()
            .any(|f| f.path().ends_with("legacy-demo/recipe.toml")));
        for f in all {
            let on_disk = std::fs::read(repo_root().join("patches").join(f.path())).unwrap();
            assert_eq!(on_disk, f.contents(), "{}", f.path().display());
        }
    }
}
