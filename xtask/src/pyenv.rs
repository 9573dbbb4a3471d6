//! Python environments with a pinned torch from PyPI, created once and shared.
//!
//! An env lives in `envs_dir()/torch-<ver>-py<X.Y>/`. It is built with `uv` when one is available
//! (fast, hard-linked from uv's cache, which archsmith keeps under its own cache dir) and with
//! `python -m venv` + pip otherwise. A lock file serializes concurrent creators (parallel tests, two
//! terminals) and a stamp written last marks the env complete, so an interrupted install is wiped
//! and redone instead of being mistaken for a good one.

use crate::kb::kb;
use crate::paths;
use crate::process::{which, Cmd};
use crate::version::Version;
use anyhow::{bail, Context, Result};
use std::fs::{self, File};
use std::path::{Path, PathBuf};

const STAMP: &str = ".archsmith-env.json";

#[derive(Debug, Clone)]
pub struct TorchEnv {
    pub root: PathBuf,
    pub python: PathBuf,
    pub torch: Version,
}

impl TorchEnv {
    /// A command running this env's Python.
    pub fn python_cmd(&self) -> Cmd {
        Cmd::new(&self.python)
    }
}

/// How packages get installed into a new env.
#[derive(Debug, Clone)]
enum Installer {
    Uv(PathBuf),
    Pip,
}

/// Returns the env for `torch`, creating it on first use. Progress of the download is shown by the
/// installer itself (uv's or pip's progress bars on stderr).
pub fn ensure_torch_env(torch: &Version) -> Result<TorchEnv> {
    let python = host_python()?;
    let py_version = python_version(&python)?;
    if let Some(row) = kb().torch_row(torch) {
        if py_version.major_minor() < row.python_min || py_version.major_minor() > row.python_max {
            bail!(
                "torch {torch} publishes wheels for Python {}–{}, but `{}` is Python {py_version}. Install a matching Python and point ARCHSMITH_PYTHON at it",
                row.python_min,
                row.python_max,
                python.display()
            );
        }
    }
    let name = format!("torch-{torch}-py{}", py_version.major_minor());
    let root = paths::envs_dir().join(&name);
    let env = TorchEnv {
        python: root.join("bin").join("python"),
        root: root.clone(),
        torch: torch.clone(),
    };
    let packages = env_packages(torch);
    if stamped_packages(&root).as_ref() == Some(&packages) {
        return Ok(env);
    }
    fs::create_dir_all(paths::envs_dir())
        .with_context(|| format!("creating {}", paths::envs_dir().display()))?;
    let lock_path = paths::envs_dir().join(format!("{name}.lock"));
    let lock =
        File::create(&lock_path).with_context(|| format!("creating {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    // Another process may have finished while we waited for the lock.
    let stamped = stamped_packages(&root);
    if stamped.as_ref() == Some(&packages) {
        return Ok(env);
    }
    // A complete env with an older package set is topped up; anything else is rebuilt from scratch.
    let top_up = stamped.is_some();
    if !top_up && root.exists() {
        eprintln!("archsmith: removing incomplete env {}", root.display());
        fs::remove_dir_all(&root)
            .with_context(|| format!("removing incomplete env {}", root.display()))?;
    }
    if top_up {
        fs::remove_file(root.join(STAMP))
            .with_context(|| format!("un-stamping {}", root.display()))?;
    }
    eprintln!(
        "archsmith: {} {} with {} (one-time; cached in {})",
        if top_up { "updating" } else { "creating" },
        root.display(),
        packages.join(" "),
        paths::cache_dir().display()
    );
    let result = match installer() {
        Installer::Uv(uv) => {
            let uv_cmd = |args: &[&str]| uv_cmd(&uv).args(args);
            let venv = if top_up {
                Ok(())
            } else {
                uv_cmd(&["venv", "--quiet", "--python"])
                    .arg(&python)
                    .arg(&root)
                    .run_inherit()
            };
            venv.and_then(|_| {
                uv_cmd(&["pip", "install", "--python"])
                    .arg(&env.python)
                    .args(&packages)
                    .run_inherit()
            })
        }
        Installer::Pip => {
            let venv = if top_up {
                Ok(())
            } else {
                Cmd::new(&python)
                    .args(["-m", "venv"])
                    .arg(&root)
                    .run_inherit()
            };
            venv.and_then(|_| {
                Cmd::new(&env.python)
                    .args(["-m", "pip", "install", "--progress-bar", "on"])
                    .args(&packages)
                    .run_inherit()
            })
        }
    };
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&root);
        return Err(e.context(format!(
            "could not create the torch {torch} env; check that PyPI is reachable and that torch=={torch} exists for Python {py_version} (`pip index versions torch`)"
        )));
    }
    let installed = Cmd::new(&env.python)
        .args(["-c", "import torch; print(torch.__version__)"])
        .read()
        .context("torch was installed but does not import")?;
    let installed: Version = installed.trim().parse()?;
    if installed != *torch {
        bail!("asked for torch {torch} but the env has {installed}");
    }
    let stamp = serde_json::json!({ "torch": installed.to_string(), "python": py_version.to_string(), "packages": packages });
    fs::write(root.join(STAMP), serde_json::to_vec_pretty(&stamp)?)?;
    Ok(env)
}

/// The package list a complete env was stamped with; None when the env is missing or incomplete.
fn stamped_packages(root: &Path) -> Option<Vec<String>> {
    if !root.join("bin").join("python").exists() {
        return None;
    }
    let text = fs::read(root.join(STAMP)).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
    serde_json::from_value(v.get("packages")?.clone()).ok()
}

/// torch plus what the commands that use the env need: numpy (torch warns without it), the build
/// front end for extensions (setuptools, wheel, ninja, cmake), and the torchvision paired with
/// this torch (ports compare against it).
fn env_packages(torch: &Version) -> Vec<String> {
    let mut p = vec![
        format!("torch=={torch}"),
        "numpy".into(),
        "setuptools".into(),
        "wheel".into(),
        "ninja".into(),
        "cmake".into(),
    ];
    if let Some(tv) = kb().torch_row(torch).and_then(|r| r.torchvision.last()) {
        p.push(format!("torchvision=={tv}"));
    }
    p
}

fn installer() -> Installer {
    match uv_binary() {
        Some(uv) => Installer::Uv(uv),
        None => Installer::Pip,
    }
}

/// `uv` for installs: the one on PATH, else one archsmith bootstrapped into its cache with pip
/// (uv is a single static binary on PyPI). None when `ARCHSMITH_NO_UV` is set or bootstrapping
/// failed; callers then fall back to pip.
pub fn uv_binary() -> Option<PathBuf> {
    if std::env::var_os("ARCHSMITH_NO_UV").is_some() {
        return None;
    }
    if let Some(uv) = which("uv") {
        return Some(uv);
    }
    let dir = paths::cache_dir().join("tools").join("uv");
    let bin = dir.join("bin").join("uv");
    if bin.exists() {
        return Some(bin);
    }
    let python = host_python().ok()?;
    eprintln!(
        "archsmith: bootstrapping uv into {} (pip install --target)",
        dir.display()
    );
    let tmp = paths::cache_dir()
        .join("tools")
        .join(format!(".uv-{}", std::process::id()));
    let ok = Cmd::new(python)
        .args(["-m", "pip", "install", "--quiet", "--target"])
        .arg(&tmp)
        .arg("uv")
        .run_inherit()
        .is_ok();
    // Rename into place only when complete, so an interrupted bootstrap is never used.
    if ok && tmp.join("bin").join("uv").exists() && fs::rename(&tmp, &dir).is_ok() {
        return Some(bin);
    }
    let _ = fs::remove_dir_all(&tmp);
    bin.exists().then_some(bin)
}

/// A `uv` command with uv's cache inside archsmith's: installs hard-link from the same filesystem,
/// and CI caches one directory.
pub fn uv_cmd(uv: &Path) -> Cmd {
    Cmd::new(uv).env("UV_CACHE_DIR", paths::cache_dir().join("uv"))
}

/// The interpreter new envs are made from: `$ARCHSMITH_PYTHON`, else `python3` on PATH.
pub fn host_python() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("ARCHSMITH_PYTHON").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    which("python3").context("no `python3` on PATH: install Python 3 (e.g. `apt-get install python3 python3-venv`) or set ARCHSMITH_PYTHON")
}

pub fn python_version(python: &Path) -> Result<Version> {
    let out = Cmd::new(python)
        .args(["-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
        .read()?;
    Ok(out.trim().parse()?)
}
