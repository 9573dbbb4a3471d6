//! `build-ext SRC --torch A,B --kernels-layout`: the variants laid out as a local kernel
//! repository of Hugging Face's `kernels` loader (`get_local_kernel(path)`), and each variant
//! loaded by that loader in its own env.
//!
//! The layout is the loader's (`kernels` 0.17's `resolver.py` and `variants.py`, read
//! 2026-11-28): `build/<variant>/` per torch and CUDA, named
//! `torch{MAJOR}{MINOR}-{cxx11|cxx98}-cu{CUDA}-{arch}-linux`, holding the kernel's Python package
//! flattened (its `__init__.py` imported under the metadata's `id`, so relative imports of the
//! extension work) and a `metadata.json` (`id`, `name`, `version`, `license`, `python-depends`,
//! `backend: {type: cuda, archs}`). A variant has no Python in its name: the loader expects one
//! build to serve every Python, so a package built per Python (`--python`) has no such layout.

use crate::binary::dynamic::CxxAbi;
use crate::version::Version;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// The `kernels` release the layout is loaded with to prove it.
pub const LOADER: &str = "kernels==0.17.2";

/// One variant as laid out, and what the loader said.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LaidOut {
    /// `torch215-cxx11-cu132-x86_64-linux`.
    pub variant: String,
    pub torch: Version,
    pub files: usize,
    /// The loader, in this variant's env, found this variant and imported it.
    pub loaded: bool,
    /// The loader's answer: the module it imported, or its error.
    pub detail: String,
}

/// The repository: `OUT/kernels/NAME/`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Layout {
    pub repo: PathBuf,
    pub name: String,
    pub variants: Vec<LaidOut>,
}

/// The loader's variant name for a torch (`2.15.0+cu132`), its CUDA (`13.2`) and C++ ABI.
pub fn variant_name(torch: &Version, cuda: Option<&str>, abi: CxxAbi) -> Result<String> {
    let parts = torch.parts();
    let (Some(major), Some(minor)) = (parts.first(), parts.get(1)) else {
        bail!("torch {torch}: no major.minor");
    };
    let abi = match abi {
        CxxAbi::Cxx11 => "cxx11",
        CxxAbi::PreCxx11 => "cxx98",
        other => bail!("torch {torch}'s libraries show no one C++ ABI ({other:?}): the kernels layout names one"),
    };
    let Some(cuda) = cuda.filter(|c| !c.is_empty()) else {
        bail!("torch {torch} is a CPU build: the kernels layout here is for CUDA variants");
    };
    let cu: String = cuda.split('.').take(2).collect();
    Ok(format!(
        "torch{major}{minor}-{abi}-cu{cu}-{}-linux",
        std::env::consts::ARCH
    ))
}

/// The wheel's kernel package: the top-level directory with an `__init__.py` and an extension
/// module. Its name, and its members.
fn kernel_package(names: &[String]) -> Result<(String, Vec<String>)> {
    let mut candidates: Vec<&str> = names
        .iter()
        .filter_map(|n| n.strip_suffix("/__init__.py"))
        .filter(|d| !d.contains('/'))
        .filter(|d| {
            names
                .iter()
                .any(|n| n.starts_with(&format!("{d}/")) && n.ends_with(".so"))
        })
        .collect();
    candidates.sort();
    match candidates.as_slice() {
        [one] => Ok((
            one.to_string(),
            names
                .iter()
                .filter(|n| n.starts_with(&format!("{one}/")))
                .cloned()
                .collect(),
        )),
        [] => bail!("the wheel has no top-level package with an extension module: the kernels layout holds one kernel package"),
        many => bail!(
            "the wheel has {} packages with extension modules ({}): the kernels layout holds one",
            many.len(),
            many.join(", ")
        ),
    }
}

/// Lays `wheel` out as `repo/build/<variant>/`: the package's files flattened, and its
/// `metadata.json`. The kernel's name and the number of files.
pub fn lay_out(
    repo: &Path,
    wheel: &Path,
    variant: &str,
    archs: &[String],
) -> Result<(String, usize)> {
    let mut w = crate::wheel::Wheel::open(wheel)?;
    let names: Vec<String> = w.names().map(str::to_string).collect();
    let (package, members) = kernel_package(&names)?;
    let dir = repo.join("build").join(variant);
    crate::cache::remove_path(&dir)?;
    for m in &members {
        let rel = &m[package.len() + 1..];
        let to = dir.join(rel);
        if let Some(parent) = to.parent() {
            fs_err::create_dir_all(parent)?;
        }
        fs_err::write(&to, w.read(m)?)?;
    }
    let digest = crate::stamp::hash_file(wheel)?;
    let name = package.replace('_', "-");
    let metadata = serde_json::json!({
        "id": format!("_{package}_cuda_{}", &digest[..7]),
        "name": name,
        "version": 1,
        "license": license(&mut w, &names).unwrap_or_else(|| "unknown".into()),
        "python-depends": [],
        "backend": { "type": "cuda", "archs": archs },
    });
    fs_err::write(
        dir.join("metadata.json"),
        serde_json::to_string_pretty(&metadata)? + "\n",
    )?;
    Ok((name, members.len()))
}

/// The wheel's `License:` (or `License-Expression:`) from its METADATA.
fn license(w: &mut crate::wheel::Wheel, names: &[String]) -> Option<String> {
    let meta = names.iter().find(|n| n.ends_with(".dist-info/METADATA"))?;
    let text = String::from_utf8(w.read(meta).ok()?).ok()?;
    text.lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| {
            l.strip_prefix("License-Expression: ")
                .or_else(|| l.strip_prefix("License: "))
        })
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `get_local_kernel(repo)` of [`LOADER`], installed beside the env of `python`: the module it
/// imported (`ok`), or its error.
pub fn load_with_kernels(python: &Path, repo: &Path) -> Result<(bool, String)> {
    let req: pep508_rs::Requirement = LOADER
        .parse()
        .map_err(|e| anyhow::anyhow!("{LOADER}: {e}"))?;
    let beside = crate::python::requirements::install_beside(python, &[req])
        .with_context(|| format!("installing {LOADER} beside {}", python.display()))?;
    let script = [
        "import sys",
        "from pathlib import Path",
        "from kernels import get_local_kernel",
        "try:",
        "    k = get_local_kernel(Path(sys.argv[1]), trust_remote_code=True)",
        "    print('imported', k.__name__, 'from', Path(k.__file__).parent.name)",
        "except Exception as e:",
        "    print(type(e).__name__ + ':', str(e).strip().splitlines()[-1])",
        "    sys.exit(1)",
    ]
    .join("\n");
    let mut cmd = crate::process::Cmd::new(python)
        .args(["-c", &script])
        .arg(repo);
    if let Some((dir, _)) = &beside {
        cmd = cmd.env("PYTHONPATH", dir);
    }
    let out = cmd.output()?;
    let said = match out.stdout.trim() {
        "" => out
            .stderr
            .trim()
            .lines()
            .last()
            .unwrap_or_default()
            .to_string(),
        s => s.to_string(),
    };
    Ok((out.status == Some(0), said))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_names_are_the_loaders() {
        let v = |s: &str| s.parse::<Version>().unwrap();
        let arch = std::env::consts::ARCH;
        assert_eq!(
            variant_name(&v("2.15.0+cu132"), Some("13.2"), CxxAbi::Cxx11).unwrap(),
            format!("torch215-cxx11-cu132-{arch}-linux")
        );
        assert_eq!(
            variant_name(&v("2.0.1+cu117"), Some("11.7"), CxxAbi::PreCxx11).unwrap(),
            format!("torch20-cxx98-cu117-{arch}-linux")
        );
        assert!(variant_name(&v("2.6.0+cpu"), None, CxxAbi::Cxx11).is_err());
        assert!(variant_name(&v("2.6.0"), Some("12.4"), CxxAbi::Unknown).is_err());
    }

    #[test]
    fn the_kernel_package_is_the_one_with_an_extension_module() {
        let names: Vec<String> = [
            "tinyext/__init__.py",
            "tinyext/_C.cpython-311-x86_64-linux-gnu.so",
            "helpers/__init__.py",
            "tinyext-0.1.0.dist-info/METADATA",
        ]
        .map(String::from)
        .to_vec();
        let (pkg, members) = kernel_package(&names).unwrap();
        assert_eq!(pkg, "tinyext");
        assert_eq!(members.len(), 2);
        let two: Vec<String> = names
            .iter()
            .cloned()
            .chain(["helpers/_h.so".to_string()])
            .collect();
        assert!(format!("{}", kernel_package(&two).unwrap_err()).contains("2 packages"));
    }
}
