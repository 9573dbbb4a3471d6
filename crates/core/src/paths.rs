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
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(".cache").join("archsmith"),
        None => private_fallback(),
    }
}

/// With no `HOME` (a bare container, a cron job): a directory in the temp dir named for this user,
/// which [`check_cache_dir`] creates private (0700) or refuses when someone else could have made it.
fn private_fallback() -> PathBuf {
    std::env::temp_dir().join(format!("archsmith-{}", current_uid()))
}

/// This process's user: the owner of `/proc/self`.
fn current_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(0, |m| m.uid())
}

/// Checks the cache directory before any work: when `HOME` is unset it is the per-user fallback in
/// the temp dir, created private (0700) and refused when it exists but is not this user's alone (a
/// predictable shared path another user could have planted). Says which directory it uses.
pub fn check_cache_dir() -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let dir = cache_dir();
    if dir != private_fallback() {
        return Ok(());
    }
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| anyhow::anyhow!("HOME is not set and {} cannot be created ({e}); set {HOME_ENV} to a directory of yours", dir.display()))?;
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != current_uid() || meta.permissions().mode() & 0o077 != 0 {
        anyhow::bail!(
            "HOME is not set, and {} (archsmith's fallback cache) is not a directory private to you (owner uid {}, mode {:o}): someone else could have prepared it; set {HOME_ENV} to a directory of yours",
            dir.display(),
            meta.uid(),
            meta.permissions().mode() & 0o7777
        );
    }
    crate::errln!(
        "note: HOME is not set: archsmith's cache is {} (private to you); set {HOME_ENV} to choose another",
        dir.display()
    );
    Ok(())
}

/// Downloaded distribution files (wheels, sdists), keyed by file name as the registry names them.
pub fn downloads_dir() -> PathBuf {
    cache_dir().join("downloads")
}

/// What each torch release's libraries export, one list per release read from its PyPI wheel
/// (`verify binary --target 'torch>=2.11,<2.16'`).
pub fn torch_exports_dir() -> PathBuf {
    cache_dir().join("torch-exports")
}

/// Python environments with a pinned torch, one per (torch, python) pair.
pub fn envs_dir() -> PathBuf {
    cache_dir().join("envs")
}

/// CUDA toolchains assembled from NVIDIA's PyPI wheels, one per CUDA release.
pub fn toolchains_dir() -> PathBuf {
    cache_dir().join("toolchains")
}

/// The repository root (the workspace that holds `xtask/` and `crates/`), for commands that read
/// `patches/`, `kernels/` or `verify/`: two folders above this crate's manifest
/// (`crates/core`).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .unwrap_or(manifest)
        .to_path_buf()
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
