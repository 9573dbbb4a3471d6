//! Python environments: which interpreter, what it holds, and how packages get into it.
//!
//! * [`probe`]: the one answer to "which Python / torch / CUDA is this" (`env_scripts/probes/python_env.py`).
//! * [`import_check`]: what loading a compiled file in a fresh interpreter really does (the
//!   ground truth of the load check).
//! * [`installer`]: "uv or pip", the one way packages are installed (envs, toolchains, tools).
//! * [`torch_env`]: archsmith's own envs with a pinned torch from PyPI, made once and shared.
//! * [`target_env`]: `--torch`/`--cuda`/`--python`, the one declaration of which env a command uses.

pub mod import_check;
pub mod installer;
pub mod probe;
pub mod requirements;
pub mod target_env;
pub mod torch_env;

pub use probe::{probe, Depth, PythonInfo};
pub use target_env::TargetEnv;
pub use torch_env::{ensure_torch_env, TorchEnv};

use crate::process::which;
use anyhow::{Context, Result};
use std::path::PathBuf;

/// The interpreter new envs are made from: `$ARCHSMITH_PYTHON`, else `python3` on PATH.
pub fn host_python() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("ARCHSMITH_PYTHON").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    which("python3").context("no `python3` on PATH: install Python 3 (e.g. `apt-get install python3 python3-venv`) or set ARCHSMITH_PYTHON")
}
