//! Files that several of a package's extensions compile, compiled once.
//!
//! torch-scatter and torch-cluster put each op's `cpu/*_cpu.cpp` into both its `_cpu` and its
//! `_cuda` extension; the two compiles differ only in `-D` flags the file never reads
//! (`WITH_CUDA`, `TORCH_EXTENSION_NAME`), and in the build directory. A plain build compiles such a
//! file once per extension: on torch-scatter three compiles of ~55 s each of the ~1,850 CPU-s.
//!
//! The mechanism is ccache's preprocessor mode: it hashes the preprocessed text and the flags that
//! are not preprocessor flags, so a compile whose `-D`/`-I` differ but whose preprocessed text is
//! the same is a hit; `hash_dir = false` (`CCACHE_NOHASHDIR`) leaves the build directory out of the
//! hash (Python's `-g` would otherwise put it in; the object's debug info then names the first
//! extension's build directory, a scratch path). Direct mode is off: it hashes every flag, so in a
//! cache private to one build it never hits and would only read every header twice.
//!
//! The cache lives in the build's scratch dir: it starts empty, so a clean build stays a clean
//! build, and every hit is a file another extension of the same build compiled. The build hooks
//! (`crates/workflows/src/build_ext/build_hooks`) put the wrappers first on `PATH` only for the extensions that share
//! a file, and start one only once the running extensions that share its file have compiled it.
//! nvcc gets the real host compiler (`NVCC_CCBIN`): its own host steps compile temporary files
//! that never hit.

use super::{launcher, real_nvcc_host_compiler, write_wrapper, CacheKind, HOST_COMPILERS};
use crate::process::{which, Cmd};
use anyhow::Result;
use fs_err as fs;
use std::path::{Path, PathBuf};

/// A ccache private to one build, for the files several extensions compile.
#[derive(Debug)]
pub struct SharedSourceCache {
    launcher: PathBuf,
    dir: PathBuf,
    wrappers: PathBuf,
    /// A wrapper of the caller's `$CXX` (one word: a name on PATH or a path), which the hooks
    /// make the `$CXX` of the extensions that share a file.
    cxx: Option<PathBuf>,
    nvcc_ccbin: Option<PathBuf>,
}

/// How many compiles went through the cache, and how many of them another extension's compile of
/// the same file served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SharedSourceStats {
    pub compiles: u32,
    pub served: u32,
}

impl std::fmt::Display for SharedSourceStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} compiles served by another extension's compile of the same file",
            self.served, self.compiles
        )
    }
}

const COMMENT: &str = "written by archsmith build-ext: shared source files compile once";

/// ccache's settings for this cache, carried by the wrappers themselves so that a ccache the
/// package or the caller runs keeps its own.
fn settings(dir: &Path) -> Vec<String> {
    vec![
        format!("CCACHE_DIR={}", dir.display()),
        "CCACHE_NOHASHDIR=1".to_string(),
        "CCACHE_NODIRECT=1".to_string(),
        "CCACHE_NOCOMPRESS=1".to_string(),
    ]
}

impl SharedSourceCache {
    /// The cache and its wrappers under `scratch`, with ccache from `PATH` or archsmith's tools
    /// (installed from PyPI once). Err when ccache cannot be had (offline with none installed):
    /// the build then compiles shared files in each extension, as a plain build does.
    pub fn prepare(scratch: &Path) -> Result<SharedSourceCache> {
        let launcher = launcher(CacheKind::Ccache)?;
        let root = scratch.join("shared-source-cache");
        let (dir, wrappers) = (root.join("ccache"), root.join("bin"));
        fs::create_dir_all(&dir)?;
        fs::create_dir_all(&wrappers)?;
        let wrap = |name: &str, real: &Path| -> Result<PathBuf> {
            let mut argv = vec!["/usr/bin/env".to_string()];
            argv.extend(settings(&dir));
            argv.push(launcher.display().to_string());
            argv.push(real.display().to_string());
            write_wrapper(&wrappers.join(name), COMMENT, &argv)?;
            Ok(wrappers.join(name))
        };
        for name in HOST_COMPILERS {
            if let Some(real) = which(name) {
                wrap(name, &real)?;
            }
        }
        // torch's ninja path compiles with `$CXX` when it is set, not with the `c++` on PATH.
        let cxx = match std::env::var("CXX").ok().as_deref().map(str::trim) {
            Some(v) if !v.is_empty() && !v.contains(char::is_whitespace) => match v.contains('/') {
                true => Some(PathBuf::from(v)),
                false => which(v),
            },
            _ => None,
        };
        let cxx = cxx.map(|real| wrap("cxx-of-env", &real)).transpose()?;
        Ok(SharedSourceCache {
            launcher,
            dir,
            wrappers,
            cxx,
            nvcc_ccbin: real_nvcc_host_compiler(),
        })
    }

    /// The build's variables, for the hooks: they apply them to the extensions that share a file.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut vars = vec![(
            "ARCHSMITH_SHARED_SOURCE_WRAPPERS".to_string(),
            self.wrappers.display().to_string(),
        )];
        if let Some(cxx) = &self.cxx {
            vars.push((
                "ARCHSMITH_SHARED_SOURCE_CXX".to_string(),
                cxx.display().to_string(),
            ));
        }
        if let Some(ccbin) = &self.nvcc_ccbin {
            vars.push((
                "ARCHSMITH_SHARED_SOURCE_NVCC_CCBIN".to_string(),
                ccbin.display().to_string(),
            ));
        }
        vars
    }

    /// What the build's compiles through the cache came to; None when none went through it (no
    /// extension shared a file).
    pub fn stats(&self) -> Result<Option<SharedSourceStats>> {
        let text = Cmd::new(&self.launcher)
            .env("CCACHE_DIR", &self.dir)
            .arg("--print-stats")
            .read()?;
        Ok(parse_print_stats(&text).filter(|s| s.compiles > 0))
    }
}

/// ccache's `--print-stats` (one `name<TAB>value` per line): hits of either mode, and misses.
fn parse_print_stats(text: &str) -> Option<SharedSourceStats> {
    let value = |name: &str| {
        text.lines()
            .filter_map(|l| l.split_once('\t'))
            .find(|(k, _)| k.trim() == name)
            .and_then(|(_, v)| v.trim().parse::<u32>().ok())
    };
    let served = value("direct_cache_hit")? + value("preprocessed_cache_hit")?;
    let missed = value("cache_miss")?;
    Some(SharedSourceStats {
        compiles: served + missed,
        served,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_of_either_mode_and_misses_from_print_stats() {
        let text = "stats_updated_timestamp\t1764206000\ndirect_cache_hit\t0\n\
                    preprocessed_cache_hit\t3\ncache_miss\t8\nfiles_in_cache\t11\n";
        assert_eq!(
            parse_print_stats(text),
            Some(SharedSourceStats {
                compiles: 11,
                served: 3
            })
        );
        assert_eq!(parse_print_stats("cache_miss\t2\n"), None);
        assert_eq!(parse_print_stats("direct_cache_hit\tx\n"), None);
    }
}
