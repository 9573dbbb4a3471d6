//! The private build directory of one build-ext run, under archsmith's cache.

use anyhow::{Context, Result};
use fs_err as fs;
use std::path::PathBuf;

/// Where scratch build dirs live: `cache_dir()/builds/ext/STAMP16/`.
pub fn scratch_root() -> PathBuf {
    crate::paths::cache_dir().join("builds").join("ext")
}

/// A private build directory under the cache, named by the stamp and held under a file lock for
/// the build's lifetime; removed when dropped (also after a failure). The path is the same for
/// every build of one stamp, so compiler caches see the same command lines (and with
/// `CCACHE_BASEDIR` at [`scratch_root`], builds of other stamps share hits too). Dirs of killed
/// runs (lock free) are removed by the next run.
pub struct Scratch {
    pub path: PathBuf,
    _lock: crate::cache::Lock,
}

impl Scratch {
    pub fn new(key: &str) -> Result<Scratch> {
        let base = scratch_root();
        fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
        let lock_of = |name: &str| base.join(format!("{name}.lock"));
        for e in fs::read_dir(&base)?.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            if let Ok(Some(_free)) = crate::cache::try_lock(&lock_of(&name)) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
        let name = &key[..16];
        let lock = crate::cache::lock(&lock_of(name), &mut || {
            crate::errln!("archsmith: waiting for another build of the same inputs to finish")
        })?;
        let path = base.join(name);
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path)?;
        Ok(Scratch { path, _lock: lock })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::env::var_os("ARCHSMITH_KEEP_SCRATCH").is_none() {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}
