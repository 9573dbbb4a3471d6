//! CUDA 13.x toolchains assembled from NVIDIA's PyPI wheels.
//!
//! One install is `toolchains_dir()/cuda-X.Y/`:
//!
//! ```text
//! cuda-13.2/                          CUDA_HOME
//!   bin -> wheels/nvidia/cu13/bin       nvcc, ptxas, cuobjdump, fatbinary, nvlink, …
//!   include, lib, nvvm -> wheels/nvidia/cu13/…
//!   lib64 -> lib                        (nvcc.profile in 13.0/13.1 and most build systems look here)
//!   wheels/                             `pip install --target`; lib/ gains libX.so -> libX.so.N links
//!   archsmith-toolchain.lock.json       exact wheel versions and hashes, installer, nvcc version
//!   .archsmith-complete                 written last, after verification
//! ```
//!
//! It is built in `.cuda-X.Y.partial-PID/` while holding `.cuda-X.Y.lock`, and renamed into place only after
//! `nvcc --version` reported the requested release and a kernel compiled and linked.

use super::{nvcc_version, release_matches, smoke_test, Source, Toolchain};
use crate::cache::{provision, remove_path};
use crate::python::installer::{Installer, Pinned};
use crate::version::Version;
use anyhow::{bail, Context, Result};
use fs_err as fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The lock file written next to each toolchain.
pub const LOCK_FILE: &str = "archsmith-toolchain.lock.json";
const LOCK_SCHEMA: u32 = 1;

/// The `cuda-toolkit` extras archsmith installs: compiler, runtime, headers, and `cuobjdump` where it exists
/// (the knowledge base's `cuobjdump_from` for the major). `curand` brings libcurand and its headers, which
/// many extensions include.
pub fn extras(cuda: &Version) -> Vec<&'static str> {
    let mut extras = vec!["nvcc", "nvvm", "crt", "cudart", "cccl"];
    let cuobjdump_from = crate::kb::kb()
        .cuda_major(cuda.major())
        .and_then(|m| m.cuobjdump_from.as_ref());
    if cuobjdump_from.is_some_and(|from| cuda.major_minor() >= *from) {
        extras.push("cuobjdump");
    }
    extras.push("curand");
    extras
}

/// `cuda-toolkit[nvcc,…]==13.2.*`: NVIDIA's meta-package pins every component (nvvm included) to the release,
/// so ptxas and cicc always agree. A longer request (`13.2.2`, `13.0.3.0`) pins the meta-package exactly.
pub fn requirement(cuda: &Version) -> String {
    let pin = if cuda.parts().len() <= 2 {
        format!("=={}.*", cuda.major_minor())
    } else {
        format!("=={cuda}")
    };
    format!("cuda-toolkit[{}]{pin}", extras(cuda).join(","))
}

/// What `archsmith-toolchain.lock.json` records.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LockFile {
    pub schema: u32,
    /// The release asked for (`13.2`).
    pub cuda: Version,
    pub requirement: String,
    /// `uv 0.13.9` or `pip 24.0`.
    pub installer: String,
    pub nvcc_release: Version,
    pub nvcc_version: Version,
    pub packages: Vec<Pinned>,
}

/// `toolchains_dir/cuda-X.Y`: where the toolchain for `cuda` lives.
pub fn home(toolchains_dir: &Path, cuda: &Version) -> PathBuf {
    toolchains_dir.join(format!("cuda-{cuda}"))
}

/// Returns the toolchain at `toolchains_dir/cuda-X.Y`, installing it first if it is absent or incomplete.
pub fn ensure(
    toolchains_dir: &Path,
    cuda: &Version,
    installer: &Installer,
    progress: &mut dyn FnMut(&str),
) -> Result<Toolchain> {
    provision(
        toolchains_dir,
        &format!("cuda-{cuda}"),
        &format!("CUDA {cuda}"),
        &load,
        &mut |staging, progress| build(staging, cuda, installer, progress),
        progress,
    )
}

/// The toolchain at `home` when it is complete (stamp, lock file and nvcc present); `None` otherwise.
/// Runs no program, so a warm call costs a few file reads.
pub fn load(home: &Path) -> Result<Option<Toolchain>> {
    let Some(lock) = super::complete_lock::<LockFile>(home, LOCK_FILE) else {
        return Ok(None);
    };
    if lock.schema != LOCK_SCHEMA {
        return Ok(None);
    }
    let lock_path = home.join(LOCK_FILE);
    Ok(Some(Toolchain {
        cuda: lock.nvcc_release,
        nvcc_version: lock.nvcc_version,
        cuda_home: home.to_owned(),
        source: Source::Pypi { lock: lock_path },
    }))
}

/// Reads a toolchain's lock file.
pub fn read_lock(home: &Path) -> Result<LockFile> {
    let path = home.join(LOCK_FILE);
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn build(
    staging: &Path,
    cuda: &Version,
    installer: &Installer,
    progress: &mut dyn FnMut(&str),
) -> Result<()> {
    let start = Instant::now();
    fs::create_dir_all(staging).with_context(|| format!("creating {}", staging.display()))?;
    let work = staging.join(".archsmith-work");
    let requirement = requirement(cuda);
    progress(&format!(
        "resolving {requirement} with {}",
        installer.describe()
    ));
    let pins = installer.resolve(&requirement, &work).map_err(|e| {
        let text = format!("{e:#}");
        // The index answered but has no such release: say which ones it has. (Only then: listing
        // would just time out again when the network is the problem.)
        let unsatisfiable = text.contains("No solution found") || text.contains("No matching distribution");
        let hint = match unsatisfiable.then(available_releases).flatten() {
            Some(list) => format!("CUDA releases with nvcc on PyPI: {list}"),
            None => "complete nvcc toolchains are on PyPI from CUDA 13.0 (https://pypi.org/project/cuda-toolkit/#history); \
                     check the network if the installer's error below is a connection failure"
                .to_string(),
        };
        e.context(format!("CUDA {cuda} could not be resolved from PyPI (`{requirement}`). {hint}"))
    })?;
    let summary = pins
        .iter()
        .map(|p| format!("{}=={}", p.name, p.version))
        .collect::<Vec<_>>()
        .join(" ");
    progress(&format!("installing {summary}"));
    installer
        .install(&pins, &staging.join("wheels"), &work)
        .with_context(|| {
            format!(
                "installing the CUDA {cuda} wheels into {}",
                staging.display()
            )
        })?;
    lay_out(staging, cuda)?;
    let nvcc = staging.join("bin").join("nvcc");
    let found = nvcc_version(&nvcc)?;
    if !release_matches(&found, cuda) {
        bail!(
            "the wheels for CUDA {cuda} installed an nvcc reporting release {} (V{}); refusing to use it",
            found.release,
            found.full
        );
    }
    progress(&format!(
        "verifying nvcc {}: compiling and linking a kernel",
        found.full
    ));
    smoke_test(&nvcc, &work.join("smoke"))?;
    let lock = LockFile {
        schema: LOCK_SCHEMA,
        cuda: cuda.clone(),
        requirement,
        installer: installer.describe().to_string(),
        nvcc_release: found.release,
        nvcc_version: found.full,
        packages: pins,
    };
    fs::write(
        staging.join(LOCK_FILE),
        serde_json::to_string_pretty(&lock)? + "\n",
    )?;
    remove_path(&work)?;
    progress(&format!(
        "CUDA {cuda} ready in {:.1}s",
        start.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// `13.0, 13.1, 13.2, …`: the CUDA releases (13.x and later) that have a `cuda-toolkit` meta-package on PyPI.
fn available_releases() -> Option<String> {
    let mut releases: Vec<Version> = crate::downloads::list_versions("cuda-toolkit")
        .ok()?
        .into_iter()
        .filter(super::from_pypi)
        .map(|v| v.major_minor())
        .collect();
    releases.sort();
    releases.dedup();
    (!releases.is_empty()).then(|| {
        releases
            .iter()
            .map(Version::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// Turns `staging/wheels/nvidia/cuNN` into a `CUDA_HOME`: relative links for every top-level directory, a
/// `lib64 -> lib` link, and an unversioned `libX.so` beside each `libX.so.N`.
pub fn lay_out(staging: &Path, cuda: &Version) -> Result<()> {
    let rel = PathBuf::from("wheels")
        .join("nvidia")
        .join(format!("cu{}", cuda.major()));
    let real = staging.join(&rel);
    if !real.join("bin").join("nvcc").is_file() {
        bail!(
            "the CUDA {cuda} wheels did not provide {}: NVIDIA's wheel layout may have changed",
            Path::new("nvidia")
                .join(format!("cu{}", cuda.major()))
                .join("bin/nvcc")
                .display()
        );
    }
    let lib = real.join("lib");
    if lib.is_dir() {
        for entry in fs::read_dir(&lib)? {
            let file_name = entry?.file_name().to_string_lossy().into_owned();
            if let Some(unversioned) = unversioned_name(&file_name) {
                let link = lib.join(&unversioned);
                if link.symlink_metadata().is_err() {
                    symlink(Path::new(&file_name), &link)?;
                }
            }
        }
        if real.join("lib64").symlink_metadata().is_err() {
            symlink(Path::new("lib"), &real.join("lib64"))?;
        }
    }
    let mut entries = fs::read_dir(&real)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<Vec<_>>>()?;
    entries.sort();
    for name in entries {
        let link = staging.join(&name);
        if link.symlink_metadata().is_err() {
            symlink(&rel.join(&name), &link)?;
        }
    }
    Ok(())
}

/// `libcudart.so.13` → `libcudart.so`; `libnvvm.so.4` → `libnvvm.so`; anything else → `None`.
pub fn unversioned_name(file: &str) -> Option<String> {
    let idx = file.find(".so.")?;
    let suffix = &file[idx + 4..];
    if suffix.is_empty()
        || !suffix
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    Some(file[..idx + 3].to_string())
}

fn symlink(target: &Path, link: &Path) -> Result<()> {
    std::os::unix::fs::symlink(target, link)
        .with_context(|| format!("linking {} -> {}", link.display(), target.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_the_whole_component_set_to_the_release() {
        assert_eq!(
            requirement(&"13.2".parse().unwrap()),
            "cuda-toolkit[nvcc,nvvm,crt,cudart,cccl,cuobjdump,curand]==13.2.*"
        );
        // cuobjdump has no wheel before 13.2.
        assert_eq!(
            requirement(&"13.0".parse().unwrap()),
            "cuda-toolkit[nvcc,nvvm,crt,cudart,cccl,curand]==13.0.*"
        );
        assert_eq!(
            requirement(&"13.2.2".parse().unwrap()),
            "cuda-toolkit[nvcc,nvvm,crt,cudart,cccl,cuobjdump,curand]==13.2.2"
        );
    }

    #[test]
    fn unversioned_library_names() {
        assert_eq!(
            unversioned_name("libcudart.so.13").as_deref(),
            Some("libcudart.so")
        );
        assert_eq!(
            unversioned_name("libcurand.so.10.4.2").as_deref(),
            Some("libcurand.so")
        );
        assert_eq!(unversioned_name("libcudart_static.a"), None);
        assert_eq!(unversioned_name("libcudart.so"), None);
        assert_eq!(unversioned_name("libfoo.so.13.x"), None);
    }

    #[test]
    fn incomplete_directories_are_not_toolchains() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("cuda-13.2");
        fs::create_dir_all(home.join("bin")).unwrap();
        assert!(load(&home).unwrap().is_none(), "no stamp");
        fs::write(home.join(crate::cache::COMPLETE_STAMP), "x").unwrap();
        assert!(load(&home).unwrap().is_none(), "stamp but no lock file");
        fs::write(home.join(LOCK_FILE), "{not json").unwrap();
        assert!(load(&home).unwrap().is_none(), "unreadable lock file");
    }
}
