//! Step 8: the package's own test suite, run against the built wheel on CPU.
//!
//! A ported source that ships tests (`test_*.py`, `*_test.py`; pytest or unittest) gets them run in
//! the target env with the wheel on `PYTHONPATH`, from a copy of the tests and their helpers
//! alone, so the code tested is the wheel's and never the source tree's: a test file that sits
//! inside the package's own directory runs inside the installed package (its relative imports
//! reach the wheel's modules), and pytest imports each test file by its path
//! (`--import-mode=importlib`), so a `test/` package (the standard library's name) cannot shadow
//! what was built. pytest comes from the env,
//! else is installed beside it (as the import sweep installs the wheel's requirements).
//!
//! What the tests find is reported: counts, each failure named, tests that fail only because the
//! host has no GPU apart (`needs_gpu`), and files pytest could not collect, with why. Only a
//! collected test that fails against the built wheel fails the port: a file the harness could not
//! import is not the package's failure (`verify/smoke/package_tests.py`).

use super::VerifyFailure;
use crate::process::Cmd;
use anyhow::{Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Directories never searched for tests: build outputs, VCS data, vendored code, envs.
const NOT_TESTS: [&str; 9] = [
    ".git",
    "build",
    "dist",
    "third_party",
    "node_modules",
    ".venv",
    "venv",
    "site-packages",
    "__pycache__",
];

/// What the suite did.
#[derive(Debug, Clone, Serialize)]
pub struct TestsReport {
    /// The test files run, relative to the source.
    pub files: Vec<String>,
    pub passed: u64,
    pub failed: u64,
    /// Skipped by the suite itself.
    pub skipped: u64,
    /// Failed only because this host has no GPU.
    pub needs_gpu: u64,
    /// Files pytest could not collect (an import error).
    pub errors: u64,
    /// The first failures: `{test, error}`.
    pub failures: Vec<serde_json::Value>,
    /// The files pytest could not collect, and why: `{file, error}`.
    #[serde(default)]
    pub not_collected: Vec<serde_json::Value>,
    pub gpu: bool,
    pub seconds: f64,
}

/// The test files under `root`, relative to it, sorted.
pub fn find(root: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = ignore::WalkBuilder::new(root)
        .standard_filters(false)
        .filter_entry(|e| {
            let name = e.file_name().to_string_lossy();
            !(e.file_type().is_some_and(|t| t.is_dir())
                && (NOT_TESTS.contains(&name.as_ref()) || name.ends_with(".egg-info")))
        })
        .build()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .filter(|e| {
            let name = e.file_name().to_string_lossy();
            name.ends_with(".py") && (name.starts_with("test_") || name.ends_with("_test.py"))
        })
        .filter_map(|e| e.path().strip_prefix(root).ok().map(Path::to_path_buf))
        .collect();
    found.sort();
    found
}

/// Where the copied tests are.
struct Copied {
    /// The directories that hold copied tests, for the path they import their helpers from.
    test_dirs: Vec<PathBuf>,
    /// Tests of the package's own directory, run in place inside the installed package.
    in_site: Vec<PathBuf>,
    /// Files this run added to the installed package, removed when it is done.
    added: Vec<PathBuf>,
}

/// Copies what the tests need into `dest`: the test files with `conftest.py` and the Python
/// helpers beside them, and the source's top-level helper modules (`from helpers import …`), but
/// never a module the wheel installs (in `site`). A test inside the package's own directory runs
/// inside the installed package, as its own module (`pkg.pkg_test`, so `from .ops import f`
/// imports the wheel's `ops`): the wheel's copy when it ships its tests, else the source's, added
/// beside the wheel's modules for the run. Directories outside the package are copied whole
/// (their data files too).
fn copy_tests(root: &Path, files: &[PathBuf], dest: &Path, site: &Path) -> Result<Copied> {
    if dest.exists() {
        std::fs::remove_dir_all(dest).with_context(|| format!("clearing {}", dest.display()))?;
    }
    std::fs::create_dir_all(dest)?;
    // A name the wheel installs (`pkg/`, `pkg.py`, `_pkg.cpython-311-….so`).
    let installed = |name: &str| {
        site.join(name).exists()
            || site.join(format!("{name}.py")).exists()
            || crate::paths::entries_with_prefix(site, &format!("{name}."))
                .iter()
                .any(|p| p.extension().is_some_and(|x| x == "so"))
    };
    let in_package = |dir: &Path| {
        dir.components()
            .next()
            .is_some_and(|c| installed(&c.as_os_str().to_string_lossy()))
    };
    let mut dirs: Vec<&Path> = files.iter().filter_map(|f| f.parent()).collect();
    dirs.sort();
    dirs.dedup();
    // A directory inside one copied whole (`tests/unit` under `tests`) is already there.
    let whole: Vec<&Path> = dirs
        .iter()
        .copied()
        .filter(|d| !d.as_os_str().is_empty() && !in_package(d))
        .collect();
    // A package directory the wheel installs, that tests can run inside of.
    let installed_dir = |dir: &Path| {
        dir.components()
            .next()
            .is_some_and(|c| site.join(c).join("__init__.py").is_file())
    };
    let mut copied = Copied {
        test_dirs: dirs
            .iter()
            .filter(|d| !installed_dir(d))
            .map(|d| dest.join(d))
            .collect(),
        in_site: Vec::new(),
        added: Vec::new(),
    };
    dirs.retain(|d| !whole.iter().any(|w| w != d && d.starts_with(w)));
    copy_top_level_helpers(root, dest, &installed)?;
    for dir in dirs {
        if installed_dir(dir) {
            copied.in_site.extend(
                files
                    .iter()
                    .filter(|f| f.parent() == Some(dir))
                    .map(|f| site.join(f)),
            );
            copied
                .added
                .extend(copy_missing_tests(root, files, dir, site)?);
            continue;
        }
        if dir.as_os_str().is_empty() || in_package(dir) {
            // Only the tests and their conftest: the package's modules come from the wheel.
            copy_missing_tests(root, files, dir, dest)?;
            continue;
        }
        for e in ignore::WalkBuilder::new(root.join(dir))
            .standard_filters(false)
            .build()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        {
            let rel = e.path().strip_prefix(root).unwrap_or(e.path());
            copy_file(e.path(), &dest.join(rel))?;
        }
    }
    Ok(copied)
}

/// The top level's helpers: modules a test may import by name that the wheel does not install.
fn copy_top_level_helpers(
    root: &Path,
    dest: &Path,
    installed: &dyn Fn(&str) -> bool,
) -> Result<()> {
    for e in std::fs::read_dir(root)?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".py") else {
            continue;
        };
        if stem != "setup" && !installed(stem) && e.path().is_file() {
            copy_file(&e.path(), &dest.join(&name))?;
        }
    }
    Ok(())
}

/// Copies the tests of `dir` and its `conftest.py` from `root` to `base`, but not over a file
/// there (the wheel's own copy of its tests); returns the files it wrote.
fn copy_missing_tests(
    root: &Path,
    files: &[PathBuf],
    dir: &Path,
    base: &Path,
) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for f in files
        .iter()
        .filter(|f| f.parent() == Some(dir))
        .cloned()
        .chain([dir.join("conftest.py")])
    {
        let (from, to) = (root.join(&f), base.join(&f));
        if from.is_file() && !to.exists() {
            copy_file(&from, &to)?;
            written.push(to);
        }
    }
    Ok(written)
}

fn copy_file(from: &Path, to: &Path) -> Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    Ok(())
}

/// Runs the suite of the ported tree `root` in `python`'s env with the wheel installed in `site`.
/// `Ok(None)`: the source ships no tests. `Ok(Some(Err))`: a test failed.
pub fn run(
    root: &Path,
    python: &Path,
    site: &Path,
    beside: &[PathBuf],
    scratch: &Path,
) -> Result<Option<std::result::Result<TestsReport, VerifyFailure>>> {
    let files = find(root);
    if files.is_empty() {
        return Ok(None);
    }
    let started = std::time::Instant::now();
    let dir = scratch.join("package-tests");
    let copied = copy_tests(root, &files, &dir, site)?;
    let pytest: pep508_rs::Requirement = "pytest".parse().context("parsing `pytest`")?;
    let pytest_dir = crate::python::requirements::install_beside(python, &[pytest])
        .context("installing pytest beside the env to run the package's tests")?;
    let mut path = vec![site.to_path_buf()];
    path.extend(beside.iter().cloned());
    path.extend(pytest_dir.map(|(d, _)| d));
    // After the wheel: the tests' own helpers, importable by name as the source tree had them.
    path.push(dir.clone());
    path.extend(copied.test_dirs.iter().filter(|d| **d != dir).cloned());
    let script = super::recipe::data_root().join("verify/smoke/package_tests.py");
    crate::errln!(
        "archsmith: the package's tests: {} file(s), against the built wheel",
        files.len()
    );
    let out = Cmd::new(python)
        .arg(&script)
        .arg(&dir)
        .args(&copied.in_site)
        .env("PYTHONPATH", std::env::join_paths(&path)?)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .dir(&dir)
        .output();
    for f in &copied.added {
        let _ = std::fs::remove_file(f);
    }
    let out = out?;
    let report = TestsReport::read(&out, &files, started)?;
    crate::errln!("archsmith: {}", report.summary());
    for n in &report.not_collected {
        crate::errln!(
            "archsmith: not collected (not the package's failure): {}: {}",
            n["file"].as_str().unwrap_or("?"),
            n["error"].as_str().unwrap_or("?")
        );
    }
    // A file the harness could not import is reported, not held against the package.
    if report.failed == 0 {
        return Ok(Some(Ok(report)));
    }
    let first = report.failures.first().cloned().unwrap_or_default();
    Ok(Some(Err(VerifyFailure {
        stage: "tests",
        message: format!(
            "the package's own tests fail against the ported wheel: {}; first: {}: {} (run with --no-tests to skip them)",
            report.summary(),
            first["test"].as_str().unwrap_or("?"),
            first["error"].as_str().unwrap_or("?")
        ),
        smoke: Some(serde_json::to_value(&report)?),
    })))
}

impl TestsReport {
    /// The report `package_tests.py` printed last (`ARCHSMITH_TESTS {json}`).
    fn read(
        out: &crate::process::Output,
        files: &[PathBuf],
        started: std::time::Instant,
    ) -> Result<TestsReport> {
        let line = out
            .stdout
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("ARCHSMITH_TESTS "))
            .with_context(|| {
                format!(
                    "the package's tests reported nothing (exit {:?}): {}",
                    out.status,
                    out.stderr.lines().last().unwrap_or_default()
                )
            })?;
        let v: serde_json::Value = serde_json::from_str(line).context("the tests' report")?;
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        let list = |k: &str| v[k].as_array().cloned().unwrap_or_default();
        Ok(TestsReport {
            files: files.iter().map(|f| f.display().to_string()).collect(),
            passed: n("passed"),
            failed: n("failed"),
            skipped: n("skipped"),
            needs_gpu: n("needs_gpu"),
            errors: n("errors"),
            failures: list("failures"),
            not_collected: list("not_collected"),
            gpu: v["gpu"].as_bool().unwrap_or(false),
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// `12 passed, 1 failed, 2 skipped, 3 need a GPU (none here)`.
    pub fn summary(&self) -> String {
        let mut parts = vec![
            format!("{} passed", self.passed),
            format!("{} failed", self.failed),
            format!("{} skipped", self.skipped),
        ];
        if self.needs_gpu > 0 {
            parts.push(format!("{} need a GPU (none here)", self.needs_gpu));
        }
        if self.errors > 0 {
            parts.push(format!("{} file(s) could not be collected", self.errors));
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_files_are_found_outside_build_outputs_and_vendored_code() {
        let root = tempfile::tempdir().unwrap();
        for f in [
            "tests/test_ops.py",
            "tests/helpers.py",
            "test_top.py",
            "pkg/ops_test.py",
            "build/lib/tests/test_copy.py",
            "third_party/x/test_vendored.py",
            "pkg/testing.py",
        ] {
            let p = root.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        let found: Vec<String> = find(root.path())
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            found,
            ["pkg/ops_test.py", "test_top.py", "tests/test_ops.py"]
        );
    }
}
