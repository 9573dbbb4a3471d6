//! Files from PyPI, cached in archsmith's download directory; Debian packages unpacked under
//! archsmith's tools ([`debian_package`]).
//!
//! pip does the resolving and downloading (it honours the user's pip configuration, index and
//! proxy); archsmith keeps one copy per file under `downloads_dir()`, so a second request for the
//! same release is a directory lookup. pip's progress goes to stderr so `--json` stays clean.

pub mod deb_file;
pub mod debian_archive;

use crate::paths;
use crate::process::Cmd;
use crate::python::host_python;
use crate::version::Version;
use anyhow::{anyhow, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// `pip index versions PACKAGE`: every release PyPI has (pip's own index access, so proxies and
/// mirrors configured for pip apply).
pub fn list_versions(package: &str) -> Result<Vec<Version>> {
    crate::offline::require(
        &format!("the list of {package}'s releases"),
        "Name the release yourself",
    )?;
    let python = host_python()?;
    let text = Cmd::new(&python)
        .args(["-m", "pip", "index", "versions", package, "--disable-pip-version-check"])
        .read()
        .with_context(|| format!("could not list the releases of {package} on PyPI; check that PyPI is reachable (`pip index versions {package}`)"))?;
    parse_pip_index_versions(&text)
        .with_context(|| format!("reading `pip index versions {package}` output"))
}

/// Parses `Available versions: 13.5.37, 13.4.92, …` from `pip index versions`.
pub fn parse_pip_index_versions(text: &str) -> Result<Vec<Version>> {
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Available versions:"))
        .ok_or_else(|| anyhow!("no `Available versions:` line in:\n{text}"))?;
    line.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<Version>().map_err(Into::into))
        .collect()
}

/// The cached wheel of `package==version` for this machine, downloading it on first use.
pub fn download_wheel(package: &str, version: &Version) -> Result<PathBuf> {
    let dir = paths::downloads_dir();
    if let Some(found) = find_cached_wheel(&dir, package, version)? {
        return Ok(found);
    }
    crate::offline::require_install(
        &format!("the wheel {package}=={version}"),
        "Download it where there is a network",
    )?;
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // Download into a private directory first so a half-written file never looks cached.
    let staging = tempfile::Builder::new()
        .prefix(".download-")
        .tempdir_in(&dir)
        .with_context(|| format!("creating a staging directory in {}", dir.display()))?;
    let python = host_python()?;
    let mut pip = Cmd::new(&python);
    for (k, v) in crate::offline::installer_env() {
        pip = pip.env(k, v);
    }
    pip.args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--progress-bar",
            "on",
            "-d",
        ])
        .arg(staging.path())
        .arg(format!("{package}=={version}"))
        .run_progress()
        .with_context(|| format!("could not download {package}=={version} from PyPI; check the name and version (`pip index versions {package}`)"))?;
    let fetched = find_cached_wheel(staging.path(), package, version)?.ok_or_else(|| {
        anyhow!(
            "pip downloaded {package}=={version} but no wheel for {} is in {}",
            std::env::consts::ARCH,
            staging.path().display()
        )
    })?;
    let dest = dir.join(fetched.file_name().unwrap_or_default());
    fs::rename(&fetched, &dest)
        .with_context(|| format!("moving {} to {}", fetched.display(), dest.display()))?;
    Ok(dest)
}

/// A wheel of `package==version` for this CPU in `dir`, by the wheel file-name convention
/// (`nvidia_cuda_nvcc-13.0.48-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl`).
fn find_cached_wheel(dir: &Path, package: &str, version: &Version) -> Result<Option<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    for entry in entries {
        let path = entry?.path();
        if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
            if is_wheel_for(name, package, version, std::env::consts::ARCH) {
                return Ok(Some(path));
            }
        }
    }
    Ok(None)
}

/// Whether `file` is a wheel of `package==version` for CPU `arch` (`x86_64`, `aarch64`).
pub fn is_wheel_for(file: &str, package: &str, version: &Version, arch: &str) -> bool {
    let Some(stem) = file.strip_suffix(".whl") else {
        return false;
    };
    let mut parts = stem.split('-');
    let (Some(name), Some(ver)) = (parts.next(), parts.next()) else {
        return false;
    };
    let platform = stem.rsplit('-').next().unwrap_or("");
    name.eq_ignore_ascii_case(&package.replace('-', "_"))
        && ver
            .parse::<Version>()
            .is_ok_and(|v| v == *version && v.parts().len() == version.parts().len())
        && (platform == "any" || platform.split('.').any(|tag| tag.ends_with(arch)))
}

/// Debian's package `name`, downloaded with `apt-get download` (fetching the package lists once
/// where a fresh machine has none) and unpacked with `dpkg-deb -x` under
/// `cache_dir()/tools/debian-NAME/root` once; no root is needed to unpack. The unpacked root.
pub fn debian_package(name: &str) -> Result<PathBuf> {
    debian_package_from(name, None)
}

/// [`debian_package`] from Debian suite `suite` (`sid`) instead of the machine's own suites: the
/// suite's signed index is read into apt directories of archsmith's own (apt checks its
/// signature with the machine's Debian keyring), the machine's apt configuration untouched.
/// Unpacked once under `tools/debian-NAME-SUITE/root`.
pub fn debian_package_from(name: &str, suite: Option<&str>) -> Result<PathBuf> {
    let tools = paths::cache_dir().join("tools");
    fs::create_dir_all(&tools)?;
    let root = |d: &Path| d.join("root");
    let (key, what) = match suite {
        Some(s) => (
            format!("debian-{name}-{s}"),
            format!("Debian {s}'s {name} package"),
        ),
        None => (format!("debian-{name}"), format!("Debian's {name} package")),
    };
    crate::cache::provision(
        &tools,
        &key,
        &what,
        &|d| Ok(root(d).is_dir().then(|| root(d))),
        &mut |staging, progress| {
            crate::offline::require(
                &what,
                &format!("Install it with the system's package manager (apt-get install {name})"),
            )?;
            progress(&format!("downloading {what} (apt-get download {name})"));
            let apt_options = match suite {
                Some(s) => private_apt(&staging.join("apt"), s)?,
                None => Vec::new(),
            };
            let download = || {
                Cmd::new("apt-get")
                    .args(&apt_options)
                    .args(["download", name])
                    .dir(staging)
                    .read()
            };
            if download().is_err() {
                let _ = Cmd::new("apt-get")
                    .args(&apt_options)
                    .args(["update", "-qq"])
                    .read();
                download().with_context(|| {
                    format!("could not download {what} (apt-get download {name})")
                })?;
            }
            let deb = fs::read_dir(staging)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .find(|p| p.extension().is_some_and(|x| x == "deb"))
                .context("apt-get download left no .deb")?;
            Cmd::new("dpkg-deb")
                .arg("-x")
                .arg(&deb)
                .arg(root(staging))
                .read()?;
            let _ = fs::remove_dir_all(staging.join("apt"));
            Ok(())
        },
        &mut |m| crate::errln!("archsmith: {m}"),
    )
}

/// The Debian mirror this machine's apt reads (the first `…/debian` URI of its sources, so a
/// host behind its own mirror uses it), else Debian's redirector.
pub fn debian_mirror() -> String {
    let mut texts: Vec<String> = fs::read_to_string("/etc/apt/sources.list")
        .ok()
        .into_iter()
        .collect();
    if let Ok(dir) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut files: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        texts.extend(files.iter().filter_map(|f| fs::read_to_string(f).ok()));
    }
    texts
        .iter()
        .flat_map(|t| t.split_whitespace())
        .map(|w| w.trim_end_matches('/'))
        .find(|w| w.starts_with("http") && w.ends_with("/debian"))
        .map(str::to_string)
        .unwrap_or_else(|| "http://deb.debian.org/debian".to_string())
}

/// apt options that read Debian `suite`'s main component into `dir` alone (no DEP-11 metadata,
/// no translations: the package list is all `apt-get download` needs).
fn private_apt(dir: &Path, suite: &str) -> Result<Vec<String>> {
    for sub in ["lists/partial", "cache/archives/partial"] {
        fs::create_dir_all(dir.join(sub))?;
    }
    let sources = dir.join("sources.list");
    fs::write(&sources, format!("deb {} {suite} main\n", debian_mirror()))?;
    let d = |p: &str| dir.join(p).display().to_string();
    Ok(vec![
        format!("-oDir::Etc::SourceList={}", sources.display()),
        "-oDir::Etc::SourceParts=/nonexistent".into(),
        format!("-oDir::State::Lists={}", d("lists")),
        format!("-oDir::Cache={}", d("cache")),
        "-oDir::State::status=/dev/null".into(),
        "-oAcquire::Languages=none".into(),
        "-oAcquire::IndexTargets::deb::DEP-11::DefaultEnabled=false".into(),
        "-oAcquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false".into(),
        "-oAcquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false".into(),
    ])
}
