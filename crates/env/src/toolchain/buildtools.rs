//! cmake and ninja for CUDA builds: the system's when both are recent enough, otherwise PyPI's `cmake`
//! and `ninja` wheels installed (pinned, hash-checked, verified) into `cache_dir()/tools/cmake-ninja`.

use crate::cache::{is_complete, provision};
use crate::process::{is_executable, which, Cmd};
use crate::python::installer::{Installer, Pinned};
use crate::version::Version;
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// CMake 3.24 added `CMAKE_CUDA_ARCHITECTURES` values like `90a` and `native`; kernels/CMakeLists.txt needs it.
pub const MIN_CMAKE: [u32; 2] = [3, 24];
const LOCK_FILE: &str = "archsmith-tools.lock.json";
const DIR_NAME: &str = "cmake-ninja";

#[derive(Debug, Clone, serde::Serialize)]
pub struct BuildTools {
    pub cmake: PathBuf,
    pub cmake_version: Version,
    pub ninja: PathBuf,
    pub ninja_version: Version,
    /// `system` or `pypi`.
    pub source: &'static str,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct ToolsLock {
    requirement: String,
    installer: String,
    packages: Vec<Pinned>,
    cmake_version: Version,
    ninja_version: Version,
}

/// The system's cmake (≥ 3.24) and ninja when both are on `PATH`, else the PyPI ones under `tools_dir`
/// (installed on first use).
pub fn ensure(tools_dir: &Path, progress: &mut dyn FnMut(&str)) -> Result<BuildTools> {
    if let Some(tools) = system()? {
        return Ok(tools);
    }
    let home = tools_dir.join(DIR_NAME);
    if let Some(tools) = load(&home)? {
        return Ok(tools);
    }
    crate::offline::require_install(
        "cmake (≥ 3.24) and ninja",
        "Put both on PATH (`pip install cmake ninja` into a Python env and add its bin/)",
    )?;
    let installer = Installer::detect()?;
    provision(
        tools_dir,
        DIR_NAME,
        "cmake and ninja",
        &load,
        &mut |staging, progress| build(staging, &installer, progress),
        progress,
    )
}

fn system() -> Result<Option<BuildTools>> {
    let (Some(cmake), Some(ninja)) = (which("cmake"), which("ninja")) else {
        return Ok(None);
    };
    let cmake_version = cmake_version(&cmake)?;
    if cmake_version < Version::new(&MIN_CMAKE) {
        return Ok(None);
    }
    let ninja_version = ninja_version(&ninja)?;
    Ok(Some(BuildTools {
        cmake,
        cmake_version,
        ninja,
        ninja_version,
        source: "system",
    }))
}

fn load(home: &Path) -> Result<Option<BuildTools>> {
    if !is_complete(home) {
        return Ok(None);
    }
    let Ok(text) = fs::read_to_string(home.join(LOCK_FILE)) else {
        return Ok(None);
    };
    let Ok(lock) = serde_json::from_str::<ToolsLock>(&text) else {
        return Ok(None);
    };
    let (Some(cmake), Some(ninja)) = (find_cmake(home), find_ninja(home)) else {
        return Ok(None);
    };
    Ok(Some(BuildTools {
        cmake,
        cmake_version: lock.cmake_version,
        ninja,
        ninja_version: lock.ninja_version,
        source: "pypi",
    }))
}

/// The real binaries inside the wheels (`bin/cmake` is a Python launcher bound to one interpreter).
fn find_cmake(home: &Path) -> Option<PathBuf> {
    let p = home.join("site/cmake/data/bin/cmake");
    is_executable(&p).then_some(p)
}

fn find_ninja(home: &Path) -> Option<PathBuf> {
    ["site/ninja/data/bin/ninja", "site/bin/ninja"]
        .iter()
        .map(|r| home.join(r))
        .find(|p| is_executable(p))
}

fn build(staging: &Path, installer: &Installer, progress: &mut dyn FnMut(&str)) -> Result<()> {
    let requirement = format!("cmake>={}.{}\nninja", MIN_CMAKE[0], MIN_CMAKE[1]);
    let work = staging.join(".archsmith-work");
    progress(&format!(
        "installing cmake and ninja from PyPI with {}",
        installer.describe()
    ));
    let pins = installer
        .resolve(&requirement, &work)
        .context("resolving cmake and ninja from PyPI")?;
    installer
        .install(&pins, &staging.join("site"), &work)
        .context("installing cmake and ninja from PyPI")?;
    let (Some(cmake), Some(ninja)) = (find_cmake(staging), find_ninja(staging)) else {
        bail!("the cmake/ninja wheels did not provide cmake/data/bin/cmake and an ninja binary: their layout changed");
    };
    let lock = ToolsLock {
        requirement: requirement.replace('\n', " "),
        installer: installer.describe().to_string(),
        packages: pins,
        cmake_version: cmake_version(&cmake)?,
        ninja_version: ninja_version(&ninja)?,
    };
    fs::write(
        staging.join(LOCK_FILE),
        serde_json::to_string_pretty(&lock)? + "\n",
    )?;
    crate::cache::remove_path(&work)?;
    Ok(())
}

/// `cmake version 4.4.4` → 4.4.4.
pub fn cmake_version(cmake: &Path) -> Result<Version> {
    let sh = crate::process::shell()?;
    let out = Cmd::from(xshell::cmd!(sh, "{cmake} --version")).read()?;
    out.lines()
        .next()
        .and_then(|l| l.strip_prefix("cmake version "))
        .and_then(|v| v.split(['-', '+']).next())
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("`{} --version` printed no version: {out}", cmake.display()))
}

fn ninja_version(ninja: &Path) -> Result<Version> {
    let sh = crate::process::shell()?;
    let out = Cmd::from(xshell::cmd!(sh, "{ninja} --version")).read()?;
    out.trim()
        .split(['.', '-'])
        .take(3)
        .collect::<Vec<_>>()
        .join(".")
        .parse()
        .with_context(|| format!("`{} --version` printed no version: {out}", ninja.display()))
}
