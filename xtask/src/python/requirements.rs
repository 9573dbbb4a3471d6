//! A wheel's declared requirements (`Requires-Dist`), installed beside a torch env rather than into
//! it: the import sweep puts the directory on `sys.path`, so a package whose `__init__` imports
//! scipy is checked with scipy present while the shared env stays as provisioned.

use super::installer::Installer;
use super::probe::{probe_with, Ask, Depth};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The requirements a wheel declares for every install (those behind an `extra` left out), as
/// written in its METADATA.
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
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(spec) = line.strip_prefix("Requires-Dist:") else {
            if line.is_empty() {
                break; // the headers end; the description follows
            }
            continue;
        };
        let req = pep508_rs::Requirement::from_str(spec.trim())
            .with_context(|| format!("{}: Requires-Dist {spec:?}", wheel.display()))?;
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

/// The declared requirements of `wheel` that the env of `python` lacks, installed (without their
/// own dependencies: the env has torch and NumPy) into a directory of archsmith's cache, built once
/// per set. None when the env has them all.
pub fn install_beside(python: &Path, wheel: &Path) -> Result<Option<(PathBuf, Vec<String>)>> {
    let reqs = declared(wheel)?;
    if reqs.is_empty() {
        return Ok(None);
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
    let mut missing: Vec<String> = reqs
        .iter()
        .filter(|r| {
            info.distributions
                .get(&r.name.to_string())
                .is_none_or(Option::is_none)
        })
        .map(|r| {
            let mut r = r.clone();
            r.marker = Default::default();
            r.to_string()
        })
        .collect();
    if missing.is_empty() {
        return Ok(None);
    }
    missing.sort();
    let key = crate::stamp::key(&(info.python.to_string(), &missing));
    let parent = crate::paths::cache_dir().join("requirements");
    let what = format!("{} for the import check", missing.join(", "));
    let dir = crate::cache::provision(
        &parent,
        &key,
        &what,
        &|dir| Ok(Some(dir.to_path_buf())),
        &mut |staging, progress| {
            let installer = Installer::detect()?;
            progress(&format!("installing {what} ({})", installer.describe()));
            installer.install_target(python, &missing, staging, true)
        },
        &mut |msg| eprintln!("archsmith: {msg}"),
    )?;
    Ok(Some((dir, missing)))
}
