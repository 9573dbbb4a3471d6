//! Preflight for the search path the wheel's libraries are installed with. torch's CMake installs
//! `libtorch_python.so`, `libtorch.so`, `libc10.so`… side by side into `torch/lib` and gives them
//! `CMAKE_INSTALL_RPATH` — upstream `$ORIGIN` (`cmake/Dependencies.cmake`), so each finds the
//! others wherever the wheel is installed. A tree patched for a distribution's `/usr/lib`
//! (Debian's `1020-dirtyhack.patch` sets it to `""`) builds every step, packs the wheel, and then
//! `import torch` fails: `libtorch.so.2.6: cannot open shared object file`. That is how the whole
//! build of Debian's tree ended, 3 h 25 min in (docs/build-torch.md); this check says so in the
//! first second.
//!
//! The value is read from `set(CMAKE_INSTALL_RPATH …)` in the file itself: a plain `set()` hides
//! a cache value, so `--set CMAKE_INSTALL_RPATH=…` (a `-D`) cannot repair it from outside.

use super::preflight::Check;
use regex::Regex;
use std::path::Path;
use std::sync::OnceLock;

const NAME: &str = "install rpath";
const FILE: &str = "cmake/Dependencies.cmake";
/// Upstream's line (torch 2.6.0's cmake/Dependencies.cmake).
const UPSTREAM: &str = r#"set(CMAKE_INSTALL_RPATH "${_rpath_portable_origin}")"#;

/// The value of the last `set(CMAKE_INSTALL_RPATH …)` in `text`, quotes removed, with its line.
pub fn install_rpath(text: &str) -> Option<(usize, String)> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"(?m)^[ \t]*set[ \t]*\([ \t]*CMAKE_INSTALL_RPATH\b([^)]*)\)")
            .expect("valid regex")
    });
    let c = re.captures_iter(text).last()?;
    let whole = c.get(0)?;
    let line = text[..whole.start()].matches('\n').count() + 1;
    let value = c[1].trim().trim_matches('"').to_string();
    Some((line, value))
}

/// Whether an install RPATH reaches the library's own directory wherever it is installed.
fn reaches_origin(value: &str) -> bool {
    value.contains("$ORIGIN")
        || value.contains("${ORIGIN}")
        || value.contains("_rpath_portable_origin")
}

/// The patch under `debian/patches` that writes `line`, when the tree is a Debian source package.
fn debian_patch(root: &Path, line: &str) -> Option<String> {
    let dir = root.join("debian/patches");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    names.sort();
    names.into_iter().find_map(|p| {
        let text = std::fs::read_to_string(&p).ok()?;
        text.lines()
            .any(|l| l.strip_prefix('+').is_some_and(|l| l.trim() == line))
            .then(|| p.strip_prefix(root).unwrap_or(&p).display().to_string())
    })
}

/// The tree's install RPATH for the wheel's libraries.
pub fn check(root: &Path) -> Check {
    let path = root.join(FILE);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Check::ok(
            NAME,
            format!("no {FILE}: not torch's CMake layout, nothing to read"),
        );
    };
    let Some((line, value)) = install_rpath(&text) else {
        return Check::warn(
            NAME,
            format!("{FILE} sets no CMAKE_INSTALL_RPATH: the wheel's libraries are installed without a search path and may not find each other"),
            format!("add upstream's line to {FILE}: `{UPSTREAM}`"),
        );
    };
    if reaches_origin(&value) {
        return Check::ok(
            NAME,
            format!("{FILE}:{line} installs the libraries with `{value}`: they find each other in torch/lib"),
        );
    }
    let written = text
        .lines()
        .nth(line - 1)
        .map(str::trim)
        .unwrap_or_default()
        .to_string();
    let origin = match debian_patch(root, &written) {
        Some(patch) => format!(" ({patch} writes it, for libraries installed to /usr/lib)"),
        None => String::new(),
    };
    let shown = if value.is_empty() {
        "empty".to_string()
    } else {
        format!("`{value}`")
    };
    Check::fail(
        NAME,
        format!(
            "{FILE}:{line} sets CMAKE_INSTALL_RPATH {shown}{origin}: the build finishes and packs the wheel, then `import torch` fails with `libtorch.so: cannot open shared object file` (torch/lib's libraries do not find each other)"
        ),
        format!(
            "put back upstream's line in {FILE}:{line}: `{UPSTREAM}` (a --set CMAKE_INSTALL_RPATH cannot override it: the file's set() hides the cache value)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::super::preflight::Status;
    use super::*;

    const UPSTREAM_FILE: &str = "# RPATH stuff\nif(APPLE)\n  set(_rpath_portable_origin \"@loader_path\")\nelse()\n  set(_rpath_portable_origin $ORIGIN)\nendif(APPLE)\nset(CMAKE_SKIP_BUILD_RPATH  FALSE)\nset(CMAKE_BUILD_WITH_INSTALL_RPATH FALSE)\nset(CMAKE_INSTALL_RPATH \"${_rpath_portable_origin}\")\nset(CMAKE_INSTALL_RPATH_USE_LINK_PATH TRUE)\n";

    fn tree(deps: Option<&str>, patch: Option<&str>) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        if let Some(text) = deps {
            std::fs::create_dir_all(t.path().join("cmake")).unwrap();
            std::fs::write(t.path().join(FILE), text).unwrap();
        }
        if let Some(p) = patch {
            std::fs::create_dir_all(t.path().join("debian/patches")).unwrap();
            std::fs::write(t.path().join("debian/patches/1020-dirtyhack.patch"), p).unwrap();
        }
        t
    }

    #[test]
    fn reads_the_last_set_and_its_line() {
        assert_eq!(
            install_rpath(UPSTREAM_FILE),
            Some((9, "${_rpath_portable_origin}".to_string()))
        );
        // USE_LINK_PATH is another variable; a later set wins.
        assert_eq!(
            install_rpath("set(CMAKE_INSTALL_RPATH_USE_LINK_PATH TRUE)\n"),
            None
        );
        assert_eq!(
            install_rpath(
                "set(CMAKE_INSTALL_RPATH \"$ORIGIN\")\n  set( CMAKE_INSTALL_RPATH \"\")\n"
            ),
            Some((2, String::new()))
        );
    }

    #[test]
    fn debians_empty_install_rpath_fails_naming_its_patch_and_upstreams_line() {
        let debian = UPSTREAM_FILE.replace(
            "set(CMAKE_INSTALL_RPATH \"${_rpath_portable_origin}\")",
            "set(CMAKE_INSTALL_RPATH \"\")",
        );
        let patch = "--- pytorch.orig/cmake/Dependencies.cmake\n+++ pytorch/cmake/Dependencies.cmake\n@@ -10,10 +10,10 @@\n-set(CMAKE_INSTALL_RPATH \"${_rpath_portable_origin}\")\n+set(CMAKE_INSTALL_RPATH \"\")\n";
        let t = tree(Some(&debian), Some(patch));
        let c = check(t.path());
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(
            c.detail.starts_with("cmake/Dependencies.cmake:9 sets CMAKE_INSTALL_RPATH empty (debian/patches/1020-dirtyhack.patch writes it"),
            "{}",
            c.detail
        );
        let fix = c.fix.unwrap();
        assert!(fix.contains(UPSTREAM), "{fix}");

        let t = tree(Some(UPSTREAM_FILE), Some(patch));
        let c = check(t.path());
        assert_eq!(c.status, Status::Ok, "{c:?}");
        let t = tree(Some("set(CMAKE_BUILD_WITH_INSTALL_RPATH FALSE)\n"), None);
        assert_eq!(check(t.path()).status, Status::Warn);
        let t = tree(None, None);
        assert_eq!(check(t.path()).status, Status::Ok);
    }
}
