//! Python environments with a pinned torch from PyPI, created once and shared.
//!
//! An env lives in `envs_dir()/torch-<ver>-py<X.Y>/`, made with the one [`Installer`] (uv, hard-linked
//! from uv's cache under archsmith's, or venv + pip) through [`provision_in_place`]: a file lock
//! serializes concurrent creators (parallel tests, two terminals) and the stamp written last marks
//! the env complete, so an interrupted install is wiped and redone instead of being mistaken for a
//! good one. An env is built where it stays: a venv's scripts name its path in their `#!` lines.

use super::installer::Installer;
use super::probe::{probe, Depth};
use crate::cache::provision_in_place;
use crate::kb::kb;
use crate::paths;
use crate::process::Cmd;
use crate::version::Version;
use anyhow::{bail, Context, Result};
use fs_err as fs;
use std::path::{Path, PathBuf};

/// Written by the build: the package set the env was made with. An env stamped with another set
/// (archsmith added a package) is made again.
const PACKAGES: &str = ".archsmith-env.json";

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

/// The `site-packages` of each env archsmith already provisioned for `torch` (any Python; none
/// is made): where a release's own files (its schemas, its headers) are read without its wheel.
pub fn provisioned_site_packages(torch: &Version) -> Vec<PathBuf> {
    let prefix = format!("torch-{torch}-py");
    let Ok(envs) = fs_err::read_dir(paths::envs_dir()) else {
        return Vec::new();
    };
    envs.flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter_map(|e| fs_err::read_dir(e.path().join("lib")).ok())
        .flat_map(|libs| libs.flatten())
        .map(|py| py.path().join("site-packages"))
        .filter(|d| d.is_dir())
        .collect()
}

/// Returns the env for `torch`, creating it on first use. Progress of the download is shown by the
/// installer itself (uv's or pip's progress bars on stderr).
pub fn ensure_torch_env(torch: &Version) -> Result<TorchEnv> {
    ensure_torch_env_with(torch, &super::host_python()?)
}

/// [`ensure_torch_env`] made from the interpreter `python` (another CPython than the host's):
/// one env per (torch, Python minor).
pub fn ensure_torch_env_with(torch: &Version, python: &Path) -> Result<TorchEnv> {
    let python = python.to_path_buf();
    let py_version = probe(&python, Depth::Files)?.python;
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
    let root = paths::envs_dir().join(format!("torch-{torch}-py{}", py_version.major_minor()));
    let packages = env_packages(torch);
    let env = TorchEnv {
        python: root.join("bin").join("python"),
        root: root.clone(),
        torch: torch.clone(),
    };
    let load = |dir: &Path| -> Result<Option<TorchEnv>> {
        Ok((stamped_packages(dir).as_ref() == Some(&packages)).then(|| env.clone()))
    };
    provision_in_place(
        &root,
        &format!("the torch {torch} env"),
        &load,
        &mut |dir, progress| {
            crate::offline::require_install(
                &format!("torch {torch}'s env ({})", packages.join(" ")),
                &format!("Give --python PATH, a Python that has torch {torch} (and torchvision) installed"),
            )?;
            progress(&format!(
                "creating {} with {} (one-time; cached in {})",
                dir.display(),
                packages.join(" "),
                paths::cache_dir().display()
            ));
            let installer = Installer::detect()?;
            let env_python = dir.join("bin").join("python");
            installer
                .venv(&python, dir)
                .and_then(|()| installer.install_into(&env_python, &packages))
                .with_context(|| format!(
                    "could not create the torch {torch} env; check that PyPI is reachable and that torch=={torch} exists for Python {py_version} (`pip index versions torch`)"
                ))?;
            let info = probe(&env_python, Depth::ImportTorch)?;
            if !info.imported {
                bail!(
                    "torch was installed in {} but does not import: {}",
                    dir.display(),
                    info.error.unwrap_or_default()
                );
            }
            if info.torch.as_ref() != Some(torch) {
                bail!(
                    "asked for torch {torch} but the env has {}",
                    info.torch.map(|v| v.to_string()).unwrap_or_default()
                );
            }
            let stamp = serde_json::json!({ "torch": torch.to_string(), "python": py_version.to_string(), "packages": packages });
            let path = dir.join(PACKAGES);
            fs::write(&path, serde_json::to_vec_pretty(&stamp)?)
                .with_context(|| format!("writing {}", path.display()))
        },
        &mut |msg| crate::errln!("archsmith: {msg}"),
    )
}

/// The package list a complete env was stamped with; None when the env is missing or incomplete.
fn stamped_packages(root: &Path) -> Option<Vec<String>> {
    if !root.join("bin").join("python").exists() {
        return None;
    }
    let text = fs::read(root.join(PACKAGES)).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
    serde_json::from_value(v.get("packages")?.clone()).ok()
}

/// torch plus what the commands that use the env need: numpy (torch warns without it), the build
/// front end for extensions (setuptools, wheel, ninja, cmake), and the torchvision paired with
/// this torch (ports compare against it). An older torch gets the knowledge base's pins beside it
/// (`setuptools<82`, `numpy<2`): the newest releases break it.
fn env_packages(torch: &Version) -> Vec<String> {
    let mut p = vec![
        format!("torch=={torch}"),
        "numpy".into(),
        "setuptools".into(),
        "wheel".into(),
        "ninja".into(),
        "cmake".into(),
    ];
    for pin in kb().torch_env_pins(torch) {
        let name = pin
            .requirement
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .next()
            .unwrap_or_default();
        match p.iter_mut().find(|q| q.as_str() == name) {
            Some(q) => *q = pin.requirement.clone(),
            None => p.push(pin.requirement.clone()),
        }
    }
    if let Some(tv) = kb().torch_row(torch).and_then(|r| r.torchvision.last()) {
        p.push(format!("torchvision=={tv}"));
    }
    p
}

/// A knowledge-base pin an env of some torch does not hold: the row, and the version installed.
#[derive(Debug)]
pub struct UnmetPin {
    pub pin: &'static crate::kb::TorchEnvPinRow,
    pub installed: String,
}

impl UnmetPin {
    /// `torch 2.0.1 needs setuptools<82; the env has setuptools 84.2.1: <symptom>`.
    pub fn message(&self, torch: &Version) -> String {
        format!(
            "torch {torch} needs {}; the env has {}: {}",
            self.pin.requirement, self.installed, self.pin.symptom
        )
    }

    /// The install command that meets it, for the interpreter `python`.
    pub fn fix(&self, python: &Path) -> String {
        format!(
            "{} -m pip install '{}'",
            python.display(),
            self.pin.requirement
        )
    }
}

/// The pins of `torch` that `packages` (distribution → version, the probe's `packages`) break.
/// A distribution the env lacks breaks none: the pin is about a version installed.
pub fn unmet_pins(
    torch: &Version,
    packages: &std::collections::BTreeMap<String, String>,
) -> Vec<UnmetPin> {
    use std::str::FromStr;
    let mut out = Vec::new();
    for pin in kb().torch_env_pins(torch) {
        let Ok(req) = pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(&pin.requirement)
        else {
            continue;
        };
        let Some(installed) = packages.get(&req.name.to_string()) else {
            continue;
        };
        let Ok(v) = pep440_rs::Version::from_str(installed) else {
            continue;
        };
        if let Some(pep508_rs::VersionOrUrl::VersionSpecifier(spec)) = &req.version_or_url {
            if !spec.contains(&v) {
                out.push(UnmetPin {
                    pin,
                    installed: format!("{} {installed}", req.name),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{env_packages, unmet_pins};

    #[test]
    fn pins_an_env_breaks_by_pep_440() {
        let torch: crate::version::Version = "2.0.1".parse().unwrap();
        let env = |s: &str, n: &str| {
            [("setuptools", s), ("numpy", n)]
                .into_iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let broken = unmet_pins(&torch, &env("84.2.1", "2.4.6"));
        let names: Vec<&str> = broken.iter().map(|u| u.pin.requirement.as_str()).collect();
        assert_eq!(names, ["setuptools<82", "numpy<2"]);
        assert_eq!(broken[0].installed, "setuptools 84.2.1");
        assert!(unmet_pins(&torch, &env("81.0.0", "1.26.4")).is_empty());
        let newer: crate::version::Version = "2.15.0".parse().unwrap();
        assert!(unmet_pins(&newer, &env("84.2.1", "2.4.6")).is_empty());
        assert!(unmet_pins(&torch, &Default::default()).is_empty());
    }

    #[test]
    fn an_older_torch_gets_the_knowledge_base_pins_in_place_of_the_newest() {
        let old = env_packages(&"2.0.1".parse().unwrap());
        assert!(old.contains(&"setuptools<82".to_string()), "{old:?}");
        assert!(old.contains(&"numpy<2".to_string()), "{old:?}");
        assert!(!old.iter().any(|p| p == "numpy" || p == "setuptools"));
        let mid = env_packages(&"2.2.2".parse().unwrap());
        assert!(mid.contains(&"numpy<2".to_string()) && mid.contains(&"setuptools".to_string()));
        let new = env_packages(&"2.15.0".parse().unwrap());
        assert!(new.contains(&"numpy".to_string()) && new.contains(&"setuptools".to_string()));
    }
}
