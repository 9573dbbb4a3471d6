//! Step 8: the package's own test suite, run against the built wheel on CPU.
//!
//! A ported source that ships tests (`test_*.py`, `*_test.py`; pytest or unittest) gets them run in
//! the target env with the wheel on `PYTHONPATH`, from a copy of the test directories alone, so
//! the code tested is the wheel's and never the source tree's. pytest comes from the env, else is
//! installed beside it (as the import sweep installs the wheel's requirements). Tests that fail
//! only because the host has no GPU are counted apart (`needs_gpu`); a test that fails otherwise
//! fails the port with its name and first error (`env_scripts/smoke/package_tests.py`).

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

/// Copies what the tests need into `dest`: each directory holding a test file whole (helpers and
/// data beside them), except the source's top level, from which only the test files and
/// `conftest.py` come (the package itself must be imported from the wheel).
fn copy_tests(root: &Path, files: &[PathBuf], dest: &Path) -> Result<()> {
    if dest.exists() {
        std::fs::remove_dir_all(dest).with_context(|| format!("clearing {}", dest.display()))?;
    }
    let mut dirs: Vec<&Path> = files.iter().filter_map(|f| f.parent()).collect();
    dirs.sort();
    dirs.dedup();
    // A directory inside one copied whole (`tests/unit` under `tests`) is already there.
    let whole: Vec<&Path> = dirs
        .iter()
        .copied()
        .filter(|d| !d.as_os_str().is_empty())
        .collect();
    dirs.retain(|d| !whole.iter().any(|w| w != d && d.starts_with(w)));
    for dir in dirs {
        if dir.as_os_str().is_empty() {
            for f in files.iter().filter(|f| f.parent() == Some(dir)) {
                copy_file(&root.join(f), &dest.join(f))?;
            }
            if root.join("conftest.py").is_file() {
                copy_file(&root.join("conftest.py"), &dest.join("conftest.py"))?;
            }
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
    Ok(())
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
    copy_tests(root, &files, &dir)?;
    let pytest: pep508_rs::Requirement = "pytest".parse().context("parsing `pytest`")?;
    let pytest_dir = crate::python::requirements::install_beside(python, &[pytest])
        .context("installing pytest beside the env to run the package's tests")?;
    let mut path = vec![site.to_path_buf()];
    path.extend(beside.iter().cloned());
    path.extend(pytest_dir.map(|(d, _)| d));
    let script = super::recipe::data_root().join("env_scripts/smoke/package_tests.py");
    crate::errln!(
        "archsmith: the package's tests: {} file(s), against the built wheel",
        files.len()
    );
    let out = Cmd::new(python)
        .arg(&script)
        .arg(&dir)
        .env("PYTHONPATH", std::env::join_paths(&path)?)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .dir(&dir)
        .output()?;
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
    let report = TestsReport {
        files: files.iter().map(|f| f.display().to_string()).collect(),
        passed: n("passed"),
        failed: n("failed"),
        skipped: n("skipped"),
        needs_gpu: n("needs_gpu"),
        errors: n("errors"),
        failures: v["failures"].as_array().cloned().unwrap_or_default(),
        gpu: v["gpu"].as_bool().unwrap_or(false),
        seconds: started.elapsed().as_secs_f64(),
    };
    crate::errln!("archsmith: {}", report.summary());
    if report.failed + report.errors == 0 {
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
            parts.push(format!("{} file(s) did not import", self.errors));
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
