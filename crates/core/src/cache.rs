//! The one build-once mechanism for archsmith's cache, and the file locks under it.
//!
//! [`provision`]: a directory built in a private staging directory while holding a file lock, stamped
//! complete, then renamed into place. A reader that finds the stamp may use the directory without
//! locking; a crash, a failed download or a failed verification leaves only a staging directory,
//! which the next lock holder deletes. [`provision_in_place`] is the same for what cannot move once
//! built (a virtual environment's scripts name its path): built where it stays, stamped last.
//! [`lock`] / [`try_lock`]: the exclusive file locks both use, for callers that hold a directory
//! while they work in it (a CMake build tree, a port's work tree, a build's scratch directory).

use anyhow::{Context, Result};
use std::fs::{self, File};
use std::path::Path;

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
    build_once(parent, name, what, Layout::Staged, load, build, progress)
}

/// Like [`provision`], for a directory that must be built where it will stay (a virtual environment:
/// its scripts' `#!` lines name its path). Under the lock, an unstamped `dir` is removed and built
/// again in place; the stamp is written last, so an interrupted build is never taken for a good one.
pub fn provision_in_place<T>(
    dir: &Path,
    what: &str,
    load: &dyn Fn(&Path) -> Result<Option<T>>,
    build: &mut Build<'_>,
    progress: &mut dyn FnMut(&str),
) -> Result<T> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        anyhow::bail!(
            "{} is not a directory inside archsmith's cache",
            dir.display()
        );
    };
    let name = name.to_string_lossy();
    build_once(parent, &name, what, Layout::InPlace, load, build, progress)
}

/// Where a build writes: a staging directory renamed into place, or the final directory itself.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    Staged,
    InPlace,
}

/// The one sequence behind [`provision`] and [`provision_in_place`]: use a stamped directory as it
/// is; otherwise take the lock, look again (another process may have finished while we waited),
/// clear what a dead or failed build left, build, stamp last, and (staged) rename into place.
fn build_once<T>(
    parent: &Path,
    name: &str,
    what: &str,
    layout: Layout,
    load: &dyn Fn(&Path) -> Result<Option<T>>,
    build: &mut Build<'_>,
    progress: &mut dyn FnMut(&str),
) -> Result<T> {
    let dir = parent.join(name);
    let finished = |dir: &Path| -> Result<Option<T>> {
        if is_complete(dir) {
            load(dir)
        } else {
            Ok(None)
        }
    };
    if let Some(t) = finished(&dir)? {
        return Ok(t);
    }
    let lock_path = parent.join(format!(".{name}.lock"));
    let _lock = lock(&lock_path, &mut || {
        progress(&format!(
            "waiting for another archsmith process making {what} (lock {})",
            lock_path.display()
        ))
    })?;
    if let Some(t) = finished(&dir)? {
        return Ok(t);
    }
    if dir.symlink_metadata().is_ok() {
        progress(&format!(
            "removing incomplete or outdated {what} at {}",
            dir.display()
        ));
        remove_path(&dir)?;
    }
    let partial_prefix = format!(".{name}.partial-");
    for entry in fs::read_dir(parent).with_context(|| format!("reading {}", parent.display()))? {
        let entry = entry.with_context(|| format!("reading {}", parent.display()))?;
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(&partial_prefix)
        {
            // Only the lock holder builds, so a staging directory seen now was left by a dead process.
            remove_path(&entry.path())?;
        }
    }
    let target = match layout {
        Layout::Staged => parent.join(format!("{partial_prefix}{}", std::process::id())),
        Layout::InPlace => dir.clone(),
    };
    fs::create_dir_all(&target).with_context(|| format!("creating {}", target.display()))?;
    let built = build(&target, progress).and_then(|()| {
        fs::write(target.join(COMPLETE_STAMP), format!("{what}\n"))
            .with_context(|| format!("stamping {}", target.display()))
    });
    if let Err(e) = built {
        let _ = remove_path(&target);
        return Err(e);
    }
    if layout == Layout::Staged {
        fs::rename(&target, &dir)
            .with_context(|| format!("moving {} to {}", target.display(), dir.display()))?;
    }
    load(&dir)?.with_context(|| {
        format!(
            "{what} at {} is not usable right after making it",
            dir.display()
        )
    })
}

/// An exclusive lock on a file, released when dropped (or when the process dies).
#[derive(Debug)]
pub struct Lock {
    _file: File,
}

fn open_lock_file(path: &Path) -> Result<File> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening lock file {}", path.display()))
}

/// Takes the exclusive lock on `path` (created with its parent if missing), waiting for it if
/// another process holds it; `waiting` is called once before waiting, to say so.
pub fn lock(path: &Path, waiting: &mut dyn FnMut()) -> Result<Lock> {
    let file = open_lock_file(path)?;
    if file.try_lock().is_err() {
        waiting();
        file.lock()
            .with_context(|| format!("locking {}", path.display()))?;
    }
    Ok(Lock { _file: file })
}

/// The lock on `path` if no other process holds it now.
pub fn try_lock(path: &Path) -> Result<Option<Lock>> {
    let file = open_lock_file(path)?;
    Ok(file.try_lock().is_ok().then_some(Lock { _file: file }))
}

/// Writes `bytes` to `path` through a temporary name, so a kept file is never half written.
pub fn store(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| anyhow::anyhow!("{} has no parent directory", path.display()))?;
    fs_err::create_dir_all(dir)?;
    let tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a file in {}", dir.display()))?;
    fs_err::write(tmp.path(), bytes)?;
    tmp.persist(path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
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

    #[test]
    fn in_place_builds_where_the_directory_stays_and_a_failure_leaves_nothing() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("env");
        let err = provision_in_place(
            &dir,
            "the env",
            &load_marker,
            &mut |d, _| {
                fs::write(d.join("marker"), "half")?;
                anyhow::bail!("install failed")
            },
            &mut |_| {},
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "install failed");
        assert!(!dir.exists(), "a failed build is removed");

        let built_in = std::cell::RefCell::new(Vec::new());
        let mut build = |d: &Path, _: &mut dyn FnMut(&str)| {
            built_in.borrow_mut().push(d.to_path_buf());
            fs::write(d.join("marker"), "whole")?;
            Ok(())
        };
        for _ in 0..2 {
            let got =
                provision_in_place(&dir, "the env", &load_marker, &mut build, &mut |_| {}).unwrap();
            assert_eq!(got, "whole");
        }
        assert_eq!(
            *built_in.borrow(),
            vec![dir.clone()],
            "built once, in the directory itself"
        );

        // An unstamped directory (an interrupted build) is removed and built again.
        fs::remove_file(dir.join(COMPLETE_STAMP)).unwrap();
        fs::write(dir.join("leftover"), "x").unwrap();
        provision_in_place(&dir, "the env", &load_marker, &mut build, &mut |_| {}).unwrap();
        assert!(!dir.join("leftover").exists());
    }

    #[test]
    fn a_held_lock_is_not_taken_twice() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/x.lock");
        let held = try_lock(&path).unwrap();
        assert!(held.is_some(), "the parent is created and the lock taken");
        assert!(
            try_lock(&path).unwrap().is_none(),
            "a second handle cannot take it"
        );
        drop(held);
        assert!(try_lock(&path).unwrap().is_some());
    }
}
