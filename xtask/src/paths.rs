//! Where archsmith keeps what it downloads and builds.
//!
//! One cache directory owned by the tool: `$ARCHSMITH_HOME` if set, else `$XDG_CACHE_HOME/archsmith`,
//! else `~/.cache/archsmith`. Everything heavy (Python envs with torch, CUDA toolchains from PyPI,
//! downloaded wheels and sdists) lives under it, so tests and commands share one provisioned copy and
//! CI can cache a single directory.

use std::path::{Path, PathBuf};

pub const HOME_ENV: &str = "ARCHSMITH_HOME";

pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(HOME_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir).join("archsmith");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    home.join(".cache").join("archsmith")
}

/// Downloaded distribution files (wheels, sdists), keyed by file name as the registry names them.
pub fn downloads_dir() -> PathBuf {
    cache_dir().join("downloads")
}

/// Python environments with a pinned torch, one per (torch, python) pair.
pub fn envs_dir() -> PathBuf {
    cache_dir().join("envs")
}

/// CUDA toolchains assembled from NVIDIA's PyPI wheels, one per CUDA release.
pub fn toolchains_dir() -> PathBuf {
    cache_dir().join("toolchains")
}

/// The repository root (the workspace that holds `xtask/`), for commands that read `patches/`,
/// `kernels/` or `verify/`.
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The entries of `dir` whose names start with `prefix` (`cuda-`), sorted; none if `dir` is missing.
pub fn entries_with_prefix(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect();
    out.sort();
    out
}
