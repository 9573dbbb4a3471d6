//! archsmith's data files wherever the binary runs: `patches/` (recipes and their patches),
//! `kernels/` (the test kernels), `verify/` (the probes and smoke tests that run inside an env),
//! the rule catalogues beside the codemod engine and the build and JIT hooks beside build-ext
//! (each under its path in the repository, [`DIRS`]). Built in this repository (the binary under its
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
static VERIFY: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../verify");
static RULES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../codemod/rules");
static BUILD_HOOKS_DIR: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/src/build_ext/build_hooks");
static JIT_HOOK_DIR: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/src/build_ext/jit_hook");

/// The rule catalogues a recipe names by file name (`torch-legacy.toml`), under the data root.
pub const RULES_DIR: &str = "crates/codemod/rules";
/// What build-ext puts on a build's `PYTHONPATH` (`sitecustomize.py`, the job pool).
pub const BUILD_HOOKS: &str = "crates/workflows/src/build_ext/build_hooks";
/// The load() hook of a JIT tree's prebuild.
pub const JIT_HOOK: &str = "crates/workflows/src/build_ext/jit_hook";

/// Each embedded folder and its path under the data root, which is the repository's path.
static DIRS: [(&str, &Dir<'_>); 6] = [
    ("patches", &PATCHES),
    ("kernels", &KERNELS),
    ("verify", &VERIFY),
    (RULES_DIR, &RULES),
    (BUILD_HOOKS, &BUILD_HOOKS_DIR),
    (JIT_HOOK, &JIT_HOOK_DIR),
];

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
    for (name, dir) in DIRS {
        let mut all = Vec::new();
        files(dir, &mut all);
        for f in all {
            h.update(name.as_bytes());
            h.update(b"/");
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

/// The directory that holds `patches/`, `kernels/`, `verify/` and the rest of [`DIRS`], each at its
/// path in the repository.
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
            for (name, dir) in DIRS {
                write_all(dir, &staging.join(name))?;
            }
            Ok(())
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
        for (name, dir) in DIRS {
            let mut all = Vec::new();
            files(dir, &mut all);
            assert!(!all.is_empty(), "{name}");
            for f in all {
                let on_disk = std::fs::read(repo_root().join(name).join(f.path())).unwrap();
                assert_eq!(on_disk, f.contents(), "{name}/{}", f.path().display());
            }
        }
    }
}
