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
pub use torch_env::{ensure_torch_env, ensure_torch_env_with, TorchEnv};

use crate::process::which;
use anyhow::{Context, Result};
use std::path::PathBuf;

/// A `--python` value: a path as given, or a bare command name (`python3`) found on PATH, as a
/// shell would run it; an error that says so when no such command is on PATH.
pub fn interpreter_arg(value: &str) -> Result<PathBuf, String> {
    if value.is_empty() {
        return Err("expected a Python interpreter: a path (.venv/bin/python) or a command on PATH (python3)".into());
    }
    if value.contains('/') {
        return Ok(PathBuf::from(value));
    }
    which(value).ok_or_else(|| {
        format!("no `{value}` on PATH: give the interpreter's path (e.g. .venv/bin/python)")
    })
}

/// The interpreter new envs are made from: `$ARCHSMITH_PYTHON`, else `python3` on PATH.
pub fn host_python() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("ARCHSMITH_PYTHON").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    which("python3").context("no `python3` on PATH: install Python 3 (e.g. `apt-get install python3 python3-venv`) or set ARCHSMITH_PYTHON")
}

#[cfg(test)]
mod interpreter_arg_tests {
    use super::interpreter_arg;

    /// `--python python3` found on PATH as a shell would (the GPU check passed it and
    /// `verify env` refused "no such file"); a path stays as given; a name not on PATH says so.
    #[test]
    fn a_bare_name_is_looked_up_on_path_and_a_path_is_kept() {
        let sh = interpreter_arg("sh").unwrap();
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        assert_eq!(
            interpreter_arg(".venv/bin/python").unwrap(),
            std::path::PathBuf::from(".venv/bin/python")
        );
        let e = interpreter_arg("no-such-interpreter-here").unwrap_err();
        assert!(
            e.contains("on PATH") && e.contains("no-such-interpreter-here"),
            "{e}"
        );
        assert!(interpreter_arg("").is_err());
    }
}
