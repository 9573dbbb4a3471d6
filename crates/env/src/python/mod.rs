//! Python environments: which interpreter, what it holds, and how packages get into it.
//!
//! * [`probe`]: the one answer to "which Python / torch / CUDA is this" (`verify/probes/python_env.py`).
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
pub use torch_env::{ensure_torch_env, ensure_torch_env_with, provisioned_site_packages, TorchEnv};

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
        let path = PathBuf::from(value);
        if path.is_dir() {
            // An env's directory (`--python .venv`) means its interpreter.
            let inside = path.join("bin/python");
            return if inside.is_file() {
                Ok(inside)
            } else {
                Err(format!(
                    "{value} is a directory with no bin/python: give the path of a Python interpreter (an env's bin/python)"
                ))
            };
        }
        return Ok(path);
    }
    which(value).ok_or_else(|| {
        format!("no `{value}` on PATH: give the interpreter's path (e.g. .venv/bin/python)")
    })
}

/// A `--python` value where a release may stand for an interpreter (variant builds): `3.12`, or an
/// interpreter as [`interpreter_arg`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PythonChoice {
    Release(crate::version::Version),
    Interpreter(PathBuf),
}

/// Parses a [`PythonChoice`]: `MAJOR.MINOR` is a release, anything else an interpreter.
pub fn python_choice(value: &str) -> Result<PythonChoice, String> {
    let is_release = value.split('.').count() == 2
        && value
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if is_release {
        return value
            .parse()
            .map(PythonChoice::Release)
            .map_err(|e| format!("{value}: {e}"));
    }
    interpreter_arg(value).map(PythonChoice::Interpreter)
}

impl PythonChoice {
    /// The interpreter: as given, or [`cpython_of`] the release.
    pub fn interpreter(&self) -> Result<PathBuf> {
        match self {
            PythonChoice::Interpreter(p) => Ok(p.clone()),
            PythonChoice::Release(v) => cpython_of(v),
        }
    }
}

/// A CPython of release `minor` (`3.12`) on this machine: `python3.12` on PATH, else the newest
/// pyenv build of it (`~/.pyenv/versions/*/bin/python3.12`), each asked for its version; an
/// error naming where it looked and how to get one otherwise (archsmith downloads no Python).
pub fn cpython_of(minor: &crate::version::Version) -> Result<PathBuf> {
    let mm = minor.major_minor();
    let name = format!("python{mm}");
    let is_it =
        |p: &std::path::Path| probe(p, Depth::Files).is_ok_and(|i| i.python.major_minor() == mm);
    if let Some(p) = which(&name).filter(|p| is_it(p)) {
        return Ok(p);
    }
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")))
        .map(|r| r.join("versions"));
    // The builds of that release by their directory names, newest first; only those are run.
    let mut candidates: Vec<(crate::version::Version, PathBuf)> = pyenv
        .as_deref()
        .and_then(|d| std::fs::read_dir(d).ok())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version: crate::version::Version = e.file_name().to_str()?.parse().ok()?;
            (version.major_minor() == mm).then(|| (version, e.path().join("bin").join(&name)))
        })
        .collect();
    candidates.sort();
    if let Some((_, p)) = candidates.into_iter().rev().find(|(_, p)| is_it(p)) {
        return Ok(p);
    }
    anyhow::bail!(
        "no Python {mm} on this machine (looked for `{name}` on PATH and in {}): install it (`uv python install {mm}`, `pyenv install {mm}`, `apt-get install {name}`) or give its path",
        pyenv.map_or("~/.pyenv/versions".into(), |p| format!("{}/*/bin", p.display()))
    )
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
    use super::{interpreter_arg, python_choice, PythonChoice};

    /// A variant's Python: `3.12` is a release, anything else an interpreter; `3.12.1` is
    /// neither a release to look for (the env is per minor) nor a command, so it is refused.
    #[test]
    fn a_python_choice_is_a_release_or_an_interpreter() {
        assert_eq!(
            python_choice("3.12"),
            Ok(PythonChoice::Release("3.12".parse().unwrap()))
        );
        assert!(matches!(
            python_choice("/opt/py/bin/python3"),
            Ok(PythonChoice::Interpreter(_))
        ));
        assert!(python_choice("3.12.1").is_err());
        assert!(python_choice("").is_err());
        let missing = PythonChoice::Release("3.99".parse().unwrap())
            .interpreter()
            .unwrap_err();
        assert!(format!("{missing}").contains("no Python 3.99"), "{missing}");
    }

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
