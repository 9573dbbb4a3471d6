//! A package's requirements, installed beside a torch env rather than into it: the import sweep
//! puts the directory on `sys.path`, so a package whose `__init__` imports scipy is checked with
//! scipy present while the shared env stays as provisioned.
//!
//! Only what the env lacks is installed, each package without its dependencies; the dependencies
//! those bring (their own `Requires-Dist`) follow in further rounds, again only where the env lacks
//! them, so torch or NumPy are never installed a second time. Markers stay on the requirement
//! strings: the installer skips what does not apply to this interpreter.

use super::installer::Installer;
use super::probe::{probe_with, Ask, Depth};
use anyhow::{Context, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The `Requires-Dist` of a METADATA text that hold for every install (those behind an `extra`
/// left out).
pub fn requires_dist(origin: &str, metadata: &str) -> Result<Vec<pep508_rs::Requirement>> {
    let mut out = Vec::new();
    for line in metadata.lines() {
        let Some(spec) = line.strip_prefix("Requires-Dist:") else {
            if line.is_empty() {
                break; // the headers end; the description follows
            }
            continue;
        };
        let req = pep508_rs::Requirement::from_str(spec.trim())
            .with_context(|| format!("{origin}: Requires-Dist {spec:?}"))?;
        if !req
            .marker
            .try_to_string()
            .is_some_and(|m| m.contains("extra"))
        {
            out.push(req);
        }
    }
    Ok(out)
}

/// The requirements a wheel declares for every install, from its METADATA.
pub fn declared(wheel: &Path) -> Result<Vec<pep508_rs::Requirement>> {
    let mut zip = crate::wheel::Wheel::open(wheel)?;
    let Some(member) = zip
        .names()
        .find(|n| n.ends_with(".dist-info/METADATA") && n.matches('/').count() == 1)
        .map(str::to_string)
    else {
        anyhow::bail!("{}: no .dist-info/METADATA", wheel.display());
    };
    let text = String::from_utf8_lossy(&zip.read(&member)?).into_owned();
    requires_dist(&wheel.display().to_string(), &text)
}

/// Requirement lines of a requirements file (comments, options and `-r`/`-e` lines skipped).
pub fn from_requirements_txt(path: &Path) -> Result<Vec<pep508_rs::Requirement>> {
    let text = fs_err::read_to_string(path)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split(" #").next().unwrap_or_default().trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('-') {
            continue;
        }
        out.push(
            pep508_rs::Requirement::from_str(line)
                .with_context(|| format!("{}:{}: `{line}`", path.display(), i + 1))?,
        );
    }
    Ok(out)
}

/// Distributions installed in a `--target` directory (from their `.dist-info` names).
fn installed_in(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let stem = n.strip_suffix(".dist-info")?;
            Some(normalize(stem.split('-').next()?))
        })
        .collect()
}

/// PEP 503 normal form: `PyYAML` and `pyyaml`, `opencv_python` and `opencv-python` are one name.
fn normalize(name: &str) -> String {
    name.to_ascii_lowercase().replace(['_', '.'], "-")
}

/// Whether `req` is unmet by what the env has of it (`installed`: the probe's answer, its
/// version or None): absent, or (`versioned`) at a version it excludes (`setuptools<82` for
/// `pkg_resources`, which 82 dropped).
fn unmet(
    req: &pep508_rs::Requirement,
    installed: Option<&Option<String>>,
    versioned: bool,
) -> bool {
    let Some(Some(installed)) = installed else {
        return true;
    };
    if !versioned {
        return false;
    }
    match (&req.version_or_url, installed.parse::<pep440_rs::Version>()) {
        (Some(pep508_rs::VersionOrUrl::VersionSpecifier(spec)), Ok(v)) => !spec.contains(&v),
        _ => false,
    }
}

/// `wanted` (with what they require in turn) that the env of `python` lacks, installed into a
/// directory of archsmith's cache built once per set. None when the env has them all.
pub fn install_beside(
    python: &Path,
    wanted: &[pep508_rs::Requirement],
) -> Result<Option<(PathBuf, Vec<String>)>> {
    install_beside_needed(python, wanted, &[])
}

/// [`install_beside`], with `needed`: requirements for a module the package failed to import,
/// met only at a version their specifier allows (`setuptools<82` for `pkg_resources`). A
/// declared requirement is met by any installed version: a package's `numpy<1.20` pin must not
/// bring an old NumPy beside a torch built for a new one (torch-points-kernels 0.7.0's would be
/// built from source, and fail).
pub fn install_beside_needed(
    python: &Path,
    wanted: &[pep508_rs::Requirement],
    needed: &[pep508_rs::Requirement],
) -> Result<Option<(PathBuf, Vec<String>)>> {
    let all: Vec<pep508_rs::Requirement> = wanted.iter().chain(needed).cloned().collect();
    let wanted: &[pep508_rs::Requirement] = &all;
    // The requirements the env lacks, and the env's Python (one probe answers both).
    let lacking = |reqs: &[pep508_rs::Requirement]| -> Result<(Vec<String>, String)> {
        if reqs.is_empty() {
            return Ok((Vec::new(), String::new()));
        }
        let names: Vec<String> = reqs.iter().map(|r| r.name.to_string()).collect();
        let info = probe_with(
            python,
            Depth::Files,
            &Ask {
                distributions: &names,
                ..Ask::default()
            },
        )?;
        let mut out: Vec<String> = reqs
            .iter()
            .filter(|r| {
                let installed = info.distributions.get(&r.name.to_string());
                let versioned = needed.iter().any(|n| n.name == r.name);
                unmet(r, installed, versioned)
            })
            .map(ToString::to_string)
            .collect();
        out.sort();
        out.dedup();
        Ok((out, info.python.to_string()))
    };
    let (first, python_version) = lacking(wanted)?;
    if first.is_empty() {
        return Ok(None);
    }
    let key = crate::stamp::key(&(python_version, env_identity(python), &first));
    let what = format!("{} for the import check", first.join(", "));
    let dir = crate::cache::provision(
        &crate::paths::cache_dir().join("requirements"),
        &key,
        &what,
        &|dir| Ok(Some(dir.to_path_buf())),
        &mut |staging, progress| {
            let installer = Installer::detect()?;
            let mut tried: BTreeSet<String> = BTreeSet::new();
            let mut round = first.clone();
            for _ in 0..8 {
                round.retain(|r| !tried.contains(r));
                if round.is_empty() {
                    break;
                }
                progress(&format!(
                    "installing {} beside the env ({})",
                    round.join(", "),
                    installer.describe()
                ));
                installer.install_target(python, &round, staging, true)?;
                tried.extend(round.iter().cloned());
                // What the new arrivals require, less what the env or the directory has.
                let have = installed_in(staging);
                let mut next = Vec::new();
                for entry in std::fs::read_dir(staging)?.flatten() {
                    let meta = entry.path().join("METADATA");
                    if let Ok(text) = std::fs::read_to_string(&meta) {
                        next.extend(requires_dist(&meta.display().to_string(), &text)?);
                    }
                }
                next.retain(|r| !have.contains(&normalize(r.name.as_ref())));
                round = lacking(&next)?.0;
            }
            Ok(())
        },
        &mut |msg| crate::errln!("archsmith: {msg}"),
    )?;
    Ok(Some((dir, first)))
}

/// What keys a directory installed beside an env: what is installed there is what that env
/// lacks (a dependency the env has is left out), so two envs of one Python must not share one
/// (pytest put beside a Python that had pygments did not import in a torch env that had not).
/// The env's bin dir, not the interpreter: a venv's python is a link to its base's.
fn env_identity(python: &Path) -> PathBuf {
    python
        .parent()
        .and_then(|bin| std::fs::canonicalize(bin).ok())
        .unwrap_or_else(|| python.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The held-out warp-rnnt 0.4.0 imports `pkg_resources`, which setuptools 82 dropped: an env
    /// with setuptools 84 does not meet `setuptools<82`; a declared pin stays met by presence.
    #[test]
    fn a_requirement_is_met_only_at_a_version_it_allows() {
        let req = |s: &str| s.parse::<pep508_rs::Requirement>().unwrap();
        let have = |v: &str| Some(v.to_string());
        assert!(unmet(&req("setuptools<82"), Some(&have("84.2.1")), true));
        assert!(!unmet(&req("setuptools<82"), Some(&have("81.0.0")), true));
        assert!(!unmet(&req("numba"), Some(&have("0.60.0")), true));
        assert!(unmet(&req("numba"), Some(&None), false));
        assert!(unmet(&req("numba"), None, false));
        // A declared pin is met by any installed version (torch-points-kernels' `numpy<1.20`).
        assert!(!unmet(&req("numpy<1.20"), Some(&have("2.3.5")), false));
    }

    #[test]
    fn reads_requires_dist_without_extras_and_requirement_files() {
        let meta = "Metadata-Version: 2.1\nName: x\nRequires-Dist: six>=1.0\nRequires-Dist: pytest; extra == \"test\"\nRequires-Dist: pywin32; sys_platform == \"win32\"\n\nRequires-Dist: not-a-header\n";
        let r: Vec<String> = requires_dist("t", meta)
            .unwrap()
            .iter()
            .map(|r| r.name.to_string())
            .collect();
        assert_eq!(r, ["six", "pywin32"]);
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("requirements.txt");
        std::fs::write(
            &f,
            "# deps\nninja\nyacs  # config\n-r other.txt\nopencv-python>=4\n",
        )
        .unwrap();
        let r: Vec<String> = from_requirements_txt(&f)
            .unwrap()
            .iter()
            .map(|r| r.name.to_string())
            .collect();
        assert_eq!(r, ["ninja", "yacs", "opencv-python"]);
        assert_eq!(normalize("PyYAML"), "pyyaml");
        assert_eq!(normalize("opencv_python"), "opencv-python");
    }
}
