//! Build-once directories under archsmith's cache: built in a private staging directory while holding a
//! file lock, stamped complete, then renamed into place. A reader that finds the stamp may use the
//! directory without locking; a crash, a failed download or a failed verification leaves only a staging
//! directory, which the next lock holder deletes.

use anyhow::{Context, Result};
use std::fs::{self, File};
use std::path::{Path, PathBuf};

/// Written last into a finished directory: without it, a directory is not used.
pub const COMPLETE_STAMP: &str = ".archsmith-complete";

/// True when `dir` was finished by [`provision`].
pub fn is_complete(dir: &Path) -> bool {
    dir.join(COMPLETE_STAMP).is_file()
}

/// Builds a staging directory; the second argument reports progress.
pub type Build<'a> = dyn FnMut(&Path, &mut dyn FnMut(&str)) -> Result<()> + 'a;

/// Returns `load(parent/name)`, first building it with `build(staging)` when it is absent or incomplete.
///
/// `load` must return `None` for anything it does not accept; it runs on the finished directory only.
/// `build` gets an empty staging directory in `parent` (same filesystem, so the final rename is atomic);
/// links it creates inside must be relative. `what` names the thing in messages ("CUDA 13.2").
pub fn provision<T>(
    parent: &Path,
    name: &str,
    what: &str,
    load: &dyn Fn(&Path) -> Result<Option<T>>,
    build: &mut Build<'_>,
    progress: &mut dyn FnMut(&str),
) -> Result<T> {
    let dir = parent.join(name);
    if is_complete(&dir) {
        if let Some(t) = load(&dir)? {
            return Ok(t);
        }
    }
    fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let lock_path = parent.join(format!(".{name}.lock"));
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("opening lock file {}", lock_path.display()))?;
    if lock.try_lock().is_err() {
        progress(&format!(
            "waiting for another archsmith process installing {what} (lock {})",
            lock_path.display()
        ));
        lock.lock()
            .with_context(|| format!("locking {}", lock_path.display()))?;
    }
    // Someone else may have finished while we waited.
    if is_complete(&dir) {
        if let Some(t) = load(&dir)? {
            return Ok(t);
        }
    }
    if dir.symlink_metadata().is_ok() {
        progress(&format!("removing incomplete {what} at {}", dir.display()));
        remove_path(&dir)?;
    }
    let partial_prefix = format!(".{name}.partial-");
    for entry in fs::read_dir(parent)? {
        let entry = entry?;
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(&partial_prefix)
        {
            // Only the lock holder builds, so a staging directory seen now was left by a dead process.
            remove_path(&entry.path())?;
        }
    }
    let staging: PathBuf = parent.join(format!("{partial_prefix}{}", std::process::id()));
    fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;
    let built = build(&staging, progress).and_then(|()| {
        fs::write(staging.join(COMPLETE_STAMP), format!("{what}\n"))
            .with_context(|| format!("stamping {}", staging.display()))
    });
    if let Err(e) = built {
        let _ = remove_path(&staging);
        return Err(e);
    }
    fs::rename(&staging, &dir)
        .with_context(|| format!("moving {} to {}", staging.display(), dir.display()))?;
    load(&dir)?.with_context(|| {
        format!(
            "{what} at {} is not usable right after installing it",
            dir.display()
        )
    })
}

/// Removes a file, link or directory tree; absent is fine.
pub fn remove_path(path: &Path) -> Result<()> {
    let Ok(meta) = path.symlink_metadata() else {
        return Ok(());
    };
    let r = if meta.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    r.with_context(|| format!("removing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_marker(dir: &Path) -> Result<Option<String>> {
        Ok(fs::read_to_string(dir.join("marker")).ok())
    }

    #[test]
    fn a_failed_build_leaves_nothing_and_the_next_one_succeeds() {
        let parent = tempfile::tempdir().unwrap();
        let err = provision(
            parent.path(),
            "thing",
            "the thing",
            &load_marker,
            &mut |staging, _| {
                fs::write(staging.join("marker"), "half")?;
                anyhow::bail!("download failed")
            },
            &mut |_| {},
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "download failed");
        let names: Vec<_> = fs::read_dir(parent.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from(".thing.lock")]);

        let mut builds = 0;
        let mut build = |staging: &Path, _: &mut dyn FnMut(&str)| {
            builds += 1;
            fs::write(staging.join("marker"), "whole")?;
            Ok(())
        };
        let got = provision(
            parent.path(),
            "thing",
            "the thing",
            &load_marker,
            &mut build,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(got, "whole");
        let again = provision(
            parent.path(),
            "thing",
            "the thing",
            &load_marker,
            &mut build,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(again, "whole");
        assert_eq!(builds, 1, "the second call reuses the stamped directory");
    }

    #[test]
    fn an_unstamped_directory_is_rebuilt() {
        let parent = tempfile::tempdir().unwrap();
        fs::create_dir_all(parent.path().join("thing")).unwrap();
        fs::write(parent.path().join("thing/marker"), "stale").unwrap();
        fs::create_dir_all(parent.path().join(".thing.partial-1/x")).unwrap();
        let got = provision(
            parent.path(),
            "thing",
            "the thing",
            &load_marker,
            &mut |staging, _| Ok(fs::write(staging.join("marker"), "fresh")?),
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(got, "fresh");
        assert!(!parent.path().join(".thing.partial-1").exists());
    }
}
