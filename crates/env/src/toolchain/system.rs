//! CUDA toolkits installed on the machine: `CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda*`, `nvcc` on `PATH`.
//!
//! CUDA 11.x/12.x cannot be assembled from PyPI (the `-cu12`/`-cu11` "nvcc" wheels ship only `ptxas`), so
//! for those releases archsmith uses a system toolkit whose `nvcc --version` matches, or stops and says how
//! to get one.

use super::{nvcc_version, release_matches, NvccVersion, Source, Toolchain};
use crate::version::Version;
use anyhow::{bail, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where to look; [`Search::from_env`] is the real machine, tests build their own.
#[derive(Debug, Clone, Default)]
pub struct Search {
    pub cuda_home: Option<PathBuf>,
    pub cuda_path: Option<PathBuf>,
    /// Directories holding `cuda`, `cuda-X.Y` installs (`/usr/local`).
    pub prefixes: Vec<PathBuf>,
    /// The `PATH` to find `nvcc` on.
    pub path: Option<OsString>,
}

impl Search {
    pub fn from_env() -> Search {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Search {
            cuda_home: var("CUDA_HOME"),
            cuda_path: var("CUDA_PATH"),
            prefixes: vec![PathBuf::from("/usr/local")],
            path: std::env::var_os("PATH"),
        }
    }

    /// Every candidate `(found_via, cuda_home)` in the order torch itself looks (`CUDA_HOME`, `CUDA_PATH`,
    /// then `nvcc` on `PATH`), with `/usr/local/cuda-X.Y` for `want` first among the fixed locations.
    pub fn candidates(&self, want: Option<&Version>) -> Vec<(String, PathBuf)> {
        let mut out = Vec::new();
        if let Some(h) = &self.cuda_home {
            out.push(("CUDA_HOME".to_string(), h.clone()));
        }
        if let Some(h) = &self.cuda_path {
            out.push(("CUDA_PATH".to_string(), h.clone()));
        }
        for prefix in &self.prefixes {
            if let Some(want) = want {
                out.push((
                    String::new(),
                    prefix.join(format!("cuda-{}", want.major_minor())),
                ));
            }
            out.push((String::new(), prefix.join("cuda")));
            let versioned = crate::paths::entries_with_prefix(prefix, "cuda-");
            out.extend(versioned.into_iter().map(|p| (String::new(), p)));
        }
        if let Some(path) = &self.path {
            for dir in std::env::split_paths(path) {
                let nvcc = dir.join("nvcc");
                if crate::process::is_executable(&nvcc) {
                    // torch's _find_cuda_home: the parent of the directory holding nvcc (symlinks resolved).
                    let real = nvcc.canonicalize().unwrap_or(nvcc.clone());
                    if let Some(home) = real.parent().and_then(Path::parent) {
                        out.push((
                            format!("nvcc on PATH ({})", nvcc.display()),
                            home.to_owned(),
                        ));
                    }
                }
            }
        }
        for (via, home) in &mut out {
            if via.is_empty() {
                *via = home.display().to_string();
            }
        }
        let mut seen = std::collections::HashSet::new();
        out.retain(|(_, home)| seen.insert(home.canonicalize().unwrap_or(home.clone())));
        out
    }

    /// Every candidate with what its nvcc reported (or why it could not be asked).
    pub fn probe(&self, want: Option<&Version>) -> Vec<Probe> {
        self.candidates(want)
            .into_iter()
            .map(|(found_via, cuda_home)| {
                let nvcc = cuda_home.join("bin").join("nvcc");
                let result = if !cuda_home.exists() {
                    Err("does not exist".to_string())
                } else if !crate::process::is_executable(&nvcc) {
                    Err(format!("has no executable {}", nvcc.display()))
                } else {
                    nvcc_version(&nvcc).map_err(|e| format!("{e:#}"))
                };
                Probe {
                    found_via,
                    cuda_home,
                    result,
                }
            })
            .collect()
    }
}

/// One place looked at.
#[derive(Debug, Clone)]
pub struct Probe {
    pub found_via: String,
    pub cuda_home: PathBuf,
    pub result: Result<NvccVersion, String>,
}

impl Probe {
    pub fn toolchain(&self) -> Option<Toolchain> {
        let v = self.result.as_ref().ok()?;
        Some(Toolchain {
            cuda: v.release.clone(),
            nvcc_version: v.full.clone(),
            cuda_home: self.cuda_home.clone(),
            source: Source::System {
                found_via: self.found_via.clone(),
            },
        })
    }
}

/// No system toolkit of a CUDA release PyPI has no nvcc for: where archsmith looked, and (as its
/// message) how to get that release. A caller that knows why that release is needed (a torch of
/// that major) adds what fits it.
#[derive(Debug)]
pub struct NoToolkit {
    pub cuda: Version,
    /// One `\n  - PLACE: what was there` line per place.
    pub looked: String,
}

impl std::fmt::Display for NoToolkit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cuda = &self.cuda;
        let major = cuda.major();
        let mm = cuda.major_minor();
        write!(
            f,
            "no CUDA {cuda} toolkit found, and CUDA {major}.x cannot be installed from PyPI: NVIDIA's `-cu{major}` wheels ship ptxas but no nvcc.\nLooked at:{}",
            self.looked
        )?;
        let archive: Vec<String> = crate::kb::kb()
            .debian_archive_releases(major)
            .iter()
            .map(|c| {
                format!(
                    "`{} toolchain install --cuda {c}`",
                    crate::output::program()
                )
            })
            .collect();
        if !archive.is_empty() {
            write!(
                f,
                "\narchsmith installs CUDA {major}.x from Debian's archive without root: {} (a torch built for another {major}.x minor accepts it).",
                archive.join(" or ")
            )?;
        }
        let packages: Vec<String> = crate::kb::kb()
            .cuda_packages_for(major)
            .into_iter()
            .map(|p| p + "; ")
            .collect();
        write!(
            f,
            "\nTo get CUDA {major}.x: {}or NVIDIA's installer for {mm} (runfile from https://developer.nvidia.com/cuda-toolkit-archive, or `apt install cuda-toolkit-{}` from NVIDIA's apt repository), then set CUDA_HOME=/usr/local/cuda-{mm} or put its nvcc on PATH.",
            packages.concat(),
            mm.to_string().replace('.', "-")
        )
    }
}

impl std::error::Error for NoToolkit {}

/// The first system toolkit whose nvcc reports `cuda`, or an error listing every place looked at and how
/// to get that release.
pub fn require(search: &Search, cuda: &Version) -> Result<Toolchain> {
    let looked = match find(search, cuda) {
        Ok(tc) => return Ok(tc),
        Err(looked) => looked,
    };
    let mm = cuda.major_minor();
    if super::from_pypi(cuda) {
        bail!("no system CUDA {cuda} toolkit found.\nLooked at:{looked}\narchsmith installs CUDA {mm} from PyPI: `{} toolchain install --cuda {mm}`", crate::output::program());
    }
    Err(NoToolkit {
        cuda: cuda.clone(),
        looked,
    }
    .into())
}

/// The first system toolkit whose nvcc reports `cuda`, or every place looked at (one
/// `\n  - PLACE: what was there` line each).
pub fn find(search: &Search, cuda: &Version) -> Result<Toolchain, String> {
    let probes = search.probe(Some(cuda));
    if let Some(p) = probes
        .iter()
        .find(|p| p.result.as_ref().is_ok_and(|v| release_matches(v, cuda)))
    {
        return Ok(p.toolchain().expect("probe succeeded"));
    }
    let mut looked = String::new();
    for p in &probes {
        let what = match &p.result {
            Ok(v) => format!("nvcc reports CUDA {} (V{})", v.release, v.full),
            Err(e) => e.lines().next().unwrap_or_default().to_string(),
        };
        if p.found_via == p.cuda_home.display().to_string() {
            looked.push_str(&format!("\n  - {}: {what}", p.cuda_home.display()));
        } else {
            looked.push_str(&format!(
                "\n  - {} = {}: {what}",
                p.found_via,
                p.cuda_home.display()
            ));
        }
    }
    if search.cuda_home.is_none() {
        looked.push_str("\n  - CUDA_HOME: not set");
    }
    if !probes
        .iter()
        .any(|p| p.found_via.starts_with("nvcc on PATH"))
    {
        looked.push_str("\n  - PATH: no nvcc");
    }
    Err(looked)
}
