//! The one probe of a Python environment. `verify/probes/python_env.py` (standard library only) runs
//! inside the target interpreter and prints JSON; [`probe`] runs it and returns [`PythonInfo`].
//! `build-ext`, `port-extension`, the torch envs and `doctor` all ask it; `verify env` extends it.

use crate::process::Cmd;
use crate::version::Version;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The probe's source, compiled in so archsmith works from any directory.
pub const SCRIPT: &str = include_str!("../../../../verify/probes/python_env.py");

/// How much to ask: reading files only, or importing torch as well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Python, site-packages, pip, torch's version and CUDA variant from `torch/version.py`: no
    /// torch import, a fraction of a second.
    Files,
    /// Also imports torch: the archs it was built for, CUDA availability, devices (seconds).
    ImportTorch,
}

/// A device torch sees.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Device {
    pub name: String,
    pub cc: String,
}

/// What the probe reports; the keys of `python_env.py`'s JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PythonInfo {
    /// The interpreter asked (not part of the probe's JSON).
    #[serde(default)]
    pub interpreter: PathBuf,
    pub python: Version,
    pub purelib: PathBuf,
    /// `site.getsitepackages()`: purelib and, for a distribution's Python, where its packages
    /// live (Debian's `/usr/lib/python3/dist-packages`).
    #[serde(default)]
    pub site_packages: Vec<PathBuf>,
    /// The interpreter binary (`sys.executable` with links and venvs resolved).
    #[serde(default)]
    pub executable: Option<PathBuf>,
    /// `importlib.machinery.EXTENSION_SUFFIXES`: `.cpython-311-x86_64-linux-gnu.so`, `.abi3.so`, `.so`.
    #[serde(default)]
    pub extension_suffixes: Vec<String>,
    pub has_pip: bool,
    /// `torch.__version__` (`2.15.0+cu132`); None without torch.
    pub torch: Option<Version>,
    /// `torch.version.cuda`; None for CPU-only torch or without torch.
    pub cuda: Option<Version>,
    /// Whether torch was imported (only with [`Depth::ImportTorch`] and a torch present).
    pub imported: bool,
    pub arch_list: Vec<String>,
    pub cuda_available: bool,
    pub devices: Vec<Device>,
    /// Why torch could not be read or imported.
    pub error: Option<String>,
    /// `--modules`: whether each asked module is importable.
    #[serde(default)]
    pub modules: std::collections::BTreeMap<String, bool>,
    /// `torch.__config__.show()` (only with [`Depth::ImportTorch`]).
    #[serde(default)]
    pub config: Option<String>,
    /// "ok", or why a small CUDA computation failed; None when not asked or no GPU.
    #[serde(default)]
    pub gpu_smoke: Option<String>,
    /// "ok", or how a small CPU computation differed from plain Python; None when not asked.
    #[serde(default)]
    pub cpu_smoke: Option<String>,
    /// Where the torch package is (without importing it).
    #[serde(default)]
    pub torch_dir: Option<PathBuf>,
    /// torch and its usual companions: distribution name → version, from their metadata.
    #[serde(default)]
    pub packages: std::collections::BTreeMap<String, String>,
    /// `sys.path` entries inside a conda environment.
    #[serde(default)]
    pub conda_paths: Vec<String>,
    /// cuDNN as torch reports it (only with [`Depth::ImportTorch`]; None without cuDNN).
    #[serde(default)]
    pub cudnn: Option<Cudnn>,
    /// `--distributions`: each asked distribution's installed version, None when absent.
    #[serde(default)]
    pub distributions: std::collections::BTreeMap<String, Option<String>>,
}

/// cuDNN's versions as torch reports them: the one it was compiled against (`9.26.0`) and the
/// one it loaded (`92600`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cudnn {
    pub compile: Option<String>,
    pub runtime: Option<i64>,
    #[serde(default)]
    pub error: Option<String>,
}

/// What else to ask besides [`Depth`].
#[derive(Debug, Clone, Default)]
pub struct Ask<'a> {
    /// Modules whose presence to report (found, not imported).
    pub modules: &'a [&'a str],
    /// Run a small CUDA computation when a GPU is there (needs [`Depth::ImportTorch`]).
    pub gpu_smoke: bool,
    /// Run a small CPU computation (needs [`Depth::ImportTorch`]): a CPU-only build's proof.
    pub cpu_smoke: bool,
    /// Distributions whose installed version to report.
    pub distributions: &'a [String],
}

/// Runs the probe in `python` (isolated: `-I`, so no user site or `PYTHONPATH` leaks in).
pub fn probe(python: &Path, depth: Depth) -> Result<PythonInfo> {
    probe_with(python, depth, &Ask::default())
}

/// [`probe`], asking more.
pub fn probe_with(python: &Path, depth: Depth, ask: &Ask) -> Result<PythonInfo> {
    if python.components().count() > 1 && !python.exists() {
        anyhow::bail!(
            "{} does not exist: give the path of a Python interpreter (an env's bin/python)",
            python.display()
        );
    }
    let mut cmd = Cmd::new(python).args(["-I", "-c", SCRIPT]);
    if depth == Depth::ImportTorch {
        cmd = cmd.arg("--import-torch");
    }
    if !ask.modules.is_empty() {
        cmd = cmd.arg("--modules").arg(ask.modules.join(","));
    }
    if ask.gpu_smoke {
        cmd = cmd.arg("--gpu-smoke");
    }
    if ask.cpu_smoke {
        cmd = cmd.arg("--cpu-smoke");
    }
    if !ask.distributions.is_empty() {
        cmd = cmd.arg("--distributions").arg(ask.distributions.join(","));
    }
    let out = cmd
        .read()
        .with_context(|| format!("{} is not a working Python", python.display()))?;
    parse(&out, python)
}

/// Parses the probe's JSON.
pub fn parse(json: &str, interpreter: &Path) -> Result<PythonInfo> {
    let mut info: PythonInfo = serde_json::from_str(json).with_context(|| {
        format!(
            "{}: the Python probe printed something that is not its JSON:\n{json}",
            interpreter.display()
        )
    })?;
    info.interpreter = interpreter.to_path_buf();
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// The probe reads torch's version and CUDA variant from `torch/version.py` without importing
    /// torch (the fake package's `__init__.py` would raise if imported).
    #[test]
    fn reads_torch_version_py_without_importing_torch() {
        let Some(python) = crate::process::which("python3") else {
            panic!("python3 is needed for this test");
        };
        let site = tempfile::tempdir().unwrap();
        let torch = site.path().join("torch");
        fs::create_dir_all(&torch).unwrap();
        fs::write(torch.join("__init__.py"), "raise ImportError('imported')\n").unwrap();
        fs::write(
            torch.join("version.py"),
            "from typing import Optional\n__all__ = ['__version__']\n__version__ = '2.15.0+cu132'\ndebug = False\ncuda: Optional[str] = '13.2'\nhip: Optional[str] = None\n",
        )
        .unwrap();
        let script = site.path().join("probe.py");
        fs::write(&script, SCRIPT).unwrap();
        let run = |args: &[&str]| {
            let out = Cmd::new(&python)
                .arg(&script)
                .args(args)
                .env("PYTHONPATH", site.path())
                .read()
                .unwrap();
            parse(&out, &python).unwrap()
        };
        let info = run(&[]);
        assert_eq!(info.torch.unwrap().to_string(), "2.15.0+cu132");
        assert_eq!(info.cuda.unwrap().to_string(), "13.2");
        assert!(!info.imported);
        assert_eq!(info.error, None);

        fs::write(
            torch.join("version.py"),
            "__version__ = '2.15.0+cpu'\ncuda = None\n",
        )
        .unwrap();
        let cpu = run(&[]);
        assert_eq!(cpu.cuda, None);
        // Importing the broken package is reported, not a crash.
        let deep = run(&["--import-torch"]);
        assert!(!deep.imported);
        assert!(deep.error.unwrap().contains("imported"));
    }
}
