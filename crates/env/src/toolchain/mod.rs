//! CUDA toolchains: assembled from NVIDIA's PyPI wheels (CUDA 13.x), or found on the system (any CUDA).
//!
//! [`ensure`] is the one entry point commands and tests use: it returns a verified [`Toolchain`] for a CUDA
//! release, installing it first when needed.
//!
//! * CUDA ≥ 13: NVIDIA's meta-package `cuda-toolkit[nvcc,…]==X.Y.*` pins every component wheel to one release.
//!   [`pypi`] resolves it to exact versions and hashes, installs them with uv (or pip) into
//!   `toolchains_dir()/cuda-X.Y/`, lays that directory out as a `CUDA_HOME`, verifies it and records the
//!   versions in `archsmith-toolchain.lock.json`. The install is built in a private staging directory under a
//!   file lock and renamed into place only once verified, so a crash or a failed download never leaves
//!   something a later call would take for a good toolchain.
//! * CUDA 11.x/12.x: the `-cu12`/`-cu11` wheels ship `ptxas` but no `nvcc` (docs/research/arch.md §9).
//!   archsmith's own install from Debian's archive ([`debian_packages`]: 11.8 from bookworm, 12.4
//!   from trixie, NVIDIA's binaries) when there is one, else a toolkit on the machine ([`system`]),
//!   else the Debian install for a release the knowledge base has a row for; for any other
//!   release, an error that says where it looked and how to get one.

pub mod buildtools;
pub mod debian_packages;
pub mod glibc_math;
pub mod nvidia_wheels;
pub mod system;

use crate::process::Cmd;
use crate::version::Version;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Whether CUDA `cuda`'s toolkit can be assembled from PyPI: its major is at or after the first
/// whose wheels carry nvcc itself (the knowledge base's `[[cuda_major]]` packaging rows).
pub fn from_pypi(cuda: &Version) -> bool {
    crate::kb::kb()
        .first_pypi_nvcc_major()
        .is_some_and(|first| cuda.major() >= first)
}

/// Where a toolchain came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// Assembled by archsmith from PyPI wheels; `lock` lists the exact wheels.
    Pypi { lock: PathBuf },
    /// A toolkit installed on the machine, found through `found_via` (`CUDA_HOME`, `/usr/local/cuda-12.4`, `PATH`).
    System { found_via: String },
    /// Assembled by archsmith from Debian `suite`'s packages; `lock` lists them with their hashes.
    Debian { lock: PathBuf, suite: String },
}

impl Source {
    /// For people: `NVIDIA's PyPI wheels`, `system, CUDA_HOME`, `Debian trixie's packages`.
    pub fn label(&self) -> String {
        match self {
            Source::Pypi { .. } => "NVIDIA's PyPI wheels".into(),
            Source::System { found_via } => format!("system, {found_via}"),
            Source::Debian { suite, .. } => format!("Debian {suite}'s packages"),
        }
    }
}

/// A CUDA toolkit whose `nvcc --version` has been checked.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Toolchain {
    /// The release `nvcc --version` reports (`13.2`).
    pub cuda: Version,
    /// nvcc's full version (`13.2.78`).
    pub nvcc_version: Version,
    pub cuda_home: PathBuf,
    pub source: Source,
}

impl Toolchain {
    pub fn cuda_home(&self) -> &Path {
        &self.cuda_home
    }

    pub fn bin_dir(&self) -> PathBuf {
        self.cuda_home.join("bin")
    }

    pub fn nvcc(&self) -> PathBuf {
        self.bin_dir().join("nvcc")
    }

    pub fn ptxas(&self) -> PathBuf {
        self.bin_dir().join("ptxas")
    }

    pub fn cuobjdump(&self) -> PathBuf {
        self.bin_dir().join("cuobjdump")
    }

    /// `lib64` when present (system toolkits, and archsmith's, which links it), else `lib`.
    pub fn lib_dir(&self) -> PathBuf {
        let lib64 = self.cuda_home.join("lib64");
        if lib64.is_dir() {
            lib64
        } else {
            self.cuda_home.join("lib")
        }
    }

    /// The variables a build needs to find this toolkit, as `(name, value)`; `PATH` and `LD_LIBRARY_PATH`
    /// hold only the directories to prepend. `LD_LIBRARY_PATH` is set only for archsmith's own
    /// toolchains (PyPI's, Debian's), whose `libcudart.so.N` no system loader path knows.
    pub fn env_vars(&self) -> Vec<(&'static str, String)> {
        let home = self.cuda_home.display().to_string();
        let mut vars = vec![
            ("CUDA_HOME", home.clone()),
            ("CUDA_PATH", home),
            ("PATH", self.bin_dir().display().to_string()),
        ];
        if matches!(self.source, Source::Pypi { .. } | Source::Debian { .. }) {
            vars.push(("LD_LIBRARY_PATH", self.lib_dir().display().to_string()));
        }
        vars
    }

    /// Sourceable POSIX shell exports; `PATH`-like variables prepend to what is already set.
    pub fn shell_exports(&self) -> String {
        let mut out = String::new();
        for (name, value) in self.env_vars() {
            if name == "PATH" || name == "LD_LIBRARY_PATH" {
                out.push_str(&format!(
                    "export {name}={}\"${{{name}:+:${name}}}\"\n",
                    shell_quote(&value)
                ));
            } else {
                out.push_str(&format!("export {name}={}\n", shell_quote(&value)));
            }
        }
        out
    }

    /// The toolchain for the steps after this one in a GitHub Actions job: the lines to append to
    /// the file `$GITHUB_ENV` names and those to append to `$GITHUB_PATH`'s. The runner does not
    /// expand `$VAR` in `$GITHUB_ENV`, so `LD_LIBRARY_PATH` is written out with `current_ld`, the
    /// value it has now; `PATH` goes through `$GITHUB_PATH`, which prepends.
    pub fn github_env(&self, current_ld: Option<&str>) -> GithubEnv {
        let mut env = String::new();
        let mut path = String::new();
        let mut names = Vec::new();
        for (name, value) in self.env_vars() {
            match name {
                "PATH" => {
                    path.push_str(&value);
                    path.push('\n');
                }
                _ => {
                    let value = match current_ld {
                        Some(old) if name == "LD_LIBRARY_PATH" && !old.is_empty() => {
                            format!("{value}:{old}")
                        }
                        _ => value,
                    };
                    env.push_str(&github_env_line(name, &value));
                    names.push(name);
                }
            }
        }
        GithubEnv { env, path, names }
    }

    /// A [`Cmd`] for `program` with this toolkit first on `PATH` and `CUDA_HOME`/`CUDA_PATH` set.
    pub fn cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Cmd {
        let mut cmd = Cmd::new(program);
        for (name, value) in self.env_vars() {
            let value = if name == "PATH" || name == "LD_LIBRARY_PATH" {
                match std::env::var(name) {
                    Ok(old) if !old.is_empty() => format!("{value}:{old}"),
                    _ => value,
                }
            } else {
                value
            };
            cmd = cmd.env(name, value);
        }
        cmd
    }
}

/// What a GitHub Actions step appends to `$GITHUB_ENV` (`NAME=value` lines) and `$GITHUB_PATH`
/// (one directory a line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubEnv {
    pub env: String,
    pub path: String,
    /// The variables `env` sets, in order.
    pub names: Vec<&'static str>,
}

/// The files a GitHub Actions step appends to, from `$GITHUB_ENV` and `$GITHUB_PATH`.
#[derive(Debug, Clone)]
pub struct GithubFiles {
    pub env: std::path::PathBuf,
    pub path: std::path::PathBuf,
}

impl GithubFiles {
    /// Both variables must name a file; unset means this is not a GitHub Actions step.
    pub fn from_env() -> Result<GithubFiles> {
        let file = |var: &str| {
            match std::env::var_os(var) {
            Some(p) if !p.is_empty() => Ok(std::path::PathBuf::from(p)),
            _ => anyhow::bail!(
                "--format github appends to the file ${var} names, and ${var} is not set: run it inside a GitHub Actions step, or use --format shell (eval \"$(archsmith toolchain env --cuda VER)\") elsewhere"
            ),
        }
        };
        Ok(GithubFiles {
            env: file("GITHUB_ENV")?,
            path: file("GITHUB_PATH")?,
        })
    }

    /// Appends `lines`, as the runner expects of a step (other steps' lines stay).
    pub fn append(&self, lines: &GithubEnv) -> Result<()> {
        use std::io::Write;
        for (file, text) in [(&self.env, &lines.env), (&self.path, &lines.path)] {
            let mut f = fs_err::OpenOptions::new()
                .append(true)
                .create(true)
                .open(file)?;
            f.write_all(text.as_bytes())?;
        }
        Ok(())
    }
}

/// One `$GITHUB_ENV` entry: `NAME=value`, or the runner's multi-line form
/// (`NAME<<DELIM` … `DELIM`) when the value holds a line break, with a delimiter the value lacks.
fn github_env_line(name: &str, value: &str) -> String {
    if !value.contains(['\n', '\r']) {
        return format!("{name}={value}\n");
    }
    let mut delim = String::from("ARCHSMITH_EOF");
    while value.contains(&delim) {
        delim.push('_');
    }
    format!("{name}<<{delim}\n{value}\n{delim}\n")
}

/// `'value'` with embedded single quotes escaped, safe to paste into any POSIX shell.
pub fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// Returns a verified toolchain for `cuda`: for a 13.x (or later) release, archsmith's own from
/// PyPI when installed, else a system toolkit of that release, else installed from PyPI into
/// [`crate::paths::toolchains_dir`] (offline: an error naming where a toolkit was looked for); for
/// 11.x/12.x, archsmith's own from Debian's archive, else a system toolkit, else installed from
/// Debian's archive where the knowledge base has a row for the release. An installed toolchain
/// is returned after a few file reads.
pub fn ensure(cuda: &Version) -> Result<Toolchain> {
    ensure_with(cuda, debian_packages::Closure::Extensions)
}

/// [`ensure`] for a toolkit that builds torch itself: from Debian's archive, with the CUDA
/// libraries torch's CMake links ([`debian_packages::Closure::TorchBuild`]). A system toolkit or
/// a PyPI one is the same as for an extension.
pub fn ensure_for_torch_build(cuda: &Version) -> Result<Toolchain> {
    ensure_with(cuda, debian_packages::Closure::TorchBuild)
}

fn ensure_with(cuda: &Version, closure: debian_packages::Closure) -> Result<Toolchain> {
    check_requested(cuda)?;
    let search = system::Search::from_env();
    if !from_pypi(cuda) {
        return ensure_archive_or_system(&search, cuda, closure);
    }
    let dir = crate::paths::toolchains_dir();
    if let Some(tc) = nvidia_wheels::load(&nvidia_wheels::home(&dir, cuda))? {
        return Ok(tc);
    }
    // The machine's own toolkit of this very release (an air-gapped host's /usr/local/cuda, a
    // `module load`): the same nvcc PyPI would give, without the download.
    let looked = match system::find(&search, cuda) {
        Ok(tc) => return Ok(tc),
        Err(looked) => looked,
    };
    let mm = cuda.major_minor();
    crate::offline::require_install(
        &format!("CUDA {mm}'s toolkit (cuda-toolkit[nvcc,…]=={mm}.* from PyPI)"),
        &format!("Set CUDA_HOME to an installed CUDA {mm} toolkit or put its bin/nvcc on PATH"),
    )
    .map_err(|e| e.looked_at(&looked))?;
    nvidia_wheels::ensure(
        &dir,
        cuda,
        &crate::python::installer::Installer::detect()?,
        &mut |msg| crate::errln!("archsmith: {msg}"),
    )
}

/// 11.x/12.x: archsmith's Debian install of `cuda`, a system toolkit of it, or a Debian install
/// made now; else the system search's error (where it looked, how to get one).
fn ensure_archive_or_system(
    search: &system::Search,
    cuda: &Version,
    closure: debian_packages::Closure,
) -> Result<Toolchain> {
    use debian_packages::Closure;
    let dir = crate::paths::toolchains_dir();
    // The torch-build toolkit holds everything an extension build needs too.
    let served_by: &[Closure] = match closure {
        Closure::Extensions => &[Closure::Extensions, Closure::TorchBuild],
        Closure::TorchBuild => &[Closure::TorchBuild],
    };
    for c in served_by {
        if let Some(tc) = debian_packages::load(&debian_packages::home(&dir, cuda, *c))? {
            return Ok(tc);
        }
    }
    let looked = match system::find(search, cuda) {
        Ok(tc) => return Ok(tc),
        Err(looked) => looked,
    };
    let Some(row) = crate::kb::kb().debian_archive_toolkit(cuda) else {
        return system::require(search, cuda);
    };
    let mm = cuda.major_minor();
    crate::offline::require(
        &format!(
            "CUDA {mm}'s toolkit (Debian {}'s {})",
            row.suite.as_deref().unwrap_or("?"),
            row.package
        ),
        &format!("Set CUDA_HOME to an installed CUDA {mm} toolkit or put its bin/nvcc on PATH"),
    )
    .map_err(|e| e.looked_at(&looked))?;
    debian_packages::ensure(&dir, cuda, row, closure, &mut |msg| {
        crate::errln!("archsmith: {msg}")
    })
}

/// The lock file `file` of archsmith's toolchain at `home` when the toolchain is complete (its
/// stamp written last, the lock parses, `bin/nvcc` executable); None otherwise. Runs no program.
fn complete_lock<L: serde::de::DeserializeOwned>(home: &Path, file: &str) -> Option<L> {
    if !crate::cache::is_complete(home)
        || !crate::process::is_executable(&home.join("bin").join("nvcc"))
    {
        return None;
    }
    let text = fs_err::read_to_string(home.join(file)).ok()?;
    serde_json::from_str(&text).ok()
}

/// archsmith's toolchain at `home`, whichever way it was assembled; None when incomplete.
pub fn load_installed(home: &Path) -> Result<Option<Toolchain>> {
    match nvidia_wheels::load(home)? {
        Some(tc) => Ok(Some(tc)),
        None => debian_packages::load(home),
    }
}

/// Only `X.Y` or `X.Y.Z` make sense as a CUDA release.
fn check_requested(cuda: &Version) -> Result<()> {
    if !(2..=4).contains(&cuda.parts().len()) {
        bail!("`{cuda}` is not a CUDA release: give MAJOR.MINOR such as 13.2 (or a cuda-toolkit meta-package release, such as 13.2.2 or 13.0.3.0)");
    }
    if cuda.major() < 11 {
        bail!(
            "CUDA {cuda} is too old for archsmith: PyTorch's supported CUDA releases start at 11.x"
        );
    }
    Ok(())
}

/// What `nvcc --version` reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvccVersion {
    /// `13.2` from "release 13.2".
    pub release: Version,
    /// `13.2.78` from "V13.2.78".
    pub full: Version,
}

/// Parses the last line of `nvcc --version`: `Cuda compilation tools, release 13.2, V13.2.78`.
pub fn parse_nvcc_version(text: &str) -> Option<NvccVersion> {
    let re = regex::Regex::new(r"release (\d+\.\d+), V(\d+(?:\.\d+)*)").expect("valid regex");
    let caps = re.captures(text)?;
    Some(NvccVersion {
        release: caps[1].parse().ok()?,
        full: caps[2].parse().ok()?,
    })
}

/// Runs `nvcc --version` and parses it.
pub fn nvcc_version(nvcc: &Path) -> Result<NvccVersion> {
    let sh = crate::process::shell()?;
    let text = Cmd::from(xshell::cmd!(sh, "{nvcc} --version")).read()?;
    parse_nvcc_version(&text).with_context(|| {
        format!(
            "`{} --version` printed no \"release X.Y, VX.Y.Z\" line:\n{text}",
            nvcc.display()
        )
    })
}

/// True when an nvcc reporting `found` belongs to the requested CUDA release. Only major.minor is
/// compared: toolkit update releases (12.4.1) and meta-packages (13.2.2) number themselves differently
/// from the nvcc inside (V12.4.131, V13.2.86).
pub fn release_matches(found: &NvccVersion, requested: &Version) -> bool {
    found.release == requested.major_minor()
}

/// Compiles a one-line kernel with `nvcc -c` in `scratch`, then links it against the shared `libcudart`
/// (`-lcudart`, as torch links) so the library layout is proven too.
pub fn smoke_test(nvcc: &Path, scratch: &Path) -> Result<()> {
    fs_err::create_dir_all(scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let src = scratch.join("archsmith_probe.cu");
    fs_err::write(&src, "__global__ void archsmith_probe(float *x) { x[threadIdx.x] *= 2.0f; }\nint main() { return 0; }\n")?;
    let obj = scratch.join("archsmith_probe.o");
    Cmd::new(nvcc)
        .arg("-c")
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .dir(scratch)
        .read()
        .context("nvcc could not compile a one-line kernel")?;
    Cmd::new(nvcc)
        .arg(&obj)
        .args(["-cudart", "shared", "-o"])
        .arg(scratch.join("archsmith_probe"))
        .dir(scratch)
        .read()
        .context("nvcc compiled a kernel but could not link it against the shared libcudart")?;
    Ok(())
}

/// A toolkit found on this machine: one of archsmith's, or a system one.
#[derive(Debug, serde::Serialize)]
pub struct Listed {
    pub source: &'static str,
    pub cuda: Option<Version>,
    pub nvcc_version: Option<Version>,
    pub cuda_home: PathBuf,
    /// How it was found, or why it is unusable.
    pub note: String,
    pub usable: bool,
}

/// Every CUDA toolkit on this machine: archsmith's under `toolchains_dir()` (complete or not), then
/// system ones (CUDA_HOME, CUDA_PATH, /usr/local/cuda*, nvcc on PATH) with what their nvcc reports.
pub fn discover() -> Result<Vec<Listed>> {
    let dir = crate::paths::toolchains_dir();
    let mut rows = Vec::new();
    for home in crate::paths::entries_with_prefix(&dir, "cuda-") {
        rows.push(match load_installed(&home)? {
            Some(tc) => Listed {
                source: "archsmith",
                cuda: Some(tc.cuda.clone()),
                nvcc_version: Some(tc.nvcc_version.clone()),
                note: match &tc.source {
                    Source::Debian { suite, .. } => format!("Debian {suite}'s packages"),
                    _ => nvidia_wheels::read_lock(&home)
                        .map(|l| format!("PyPI via {}", l.installer))
                        .unwrap_or_default(),
                },
                cuda_home: home,
                usable: true,
            },
            None => Listed {
                source: "archsmith",
                cuda: None,
                nvcc_version: None,
                cuda_home: home,
                note: "incomplete: reinstalled by the next `toolchain install`".into(),
                usable: false,
            },
        });
    }
    let ours = dir.canonicalize().unwrap_or(dir.clone());
    for probe in system::Search::from_env().probe(None) {
        let canonical = probe
            .cuda_home
            .canonicalize()
            .unwrap_or(probe.cuda_home.clone());
        if canonical.starts_with(&ours) || !probe.cuda_home.exists() {
            continue;
        }
        let tc: Option<Toolchain> = probe.toolchain();
        rows.push(Listed {
            source: "system",
            cuda: tc.as_ref().map(|t| t.cuda.clone()),
            nvcc_version: tc.as_ref().map(|t| t.nvcc_version.clone()),
            cuda_home: probe.cuda_home.clone(),
            note: match &probe.result {
                Ok(_) => format!("found via {}", probe.found_via),
                Err(e) => format!("unusable: {}", e.lines().next().unwrap_or_default()),
            },
            usable: tc.is_some(),
        });
    }
    Ok(rows)
}

/// `toolchain install` for people: the toolkit, where it came from (a PyPI one's locked
/// packages) and how to use it.
pub fn install_table(
    tc: &Toolchain,
    lock: Option<&nvidia_wheels::LockFile>,
    seconds: f64,
    asked: &Version,
) -> String {
    let mut out = format!(
        "CUDA {} (nvcc {}) at {}\n",
        tc.cuda,
        tc.nvcc_version,
        tc.cuda_home.display()
    );
    match (&tc.source, lock) {
        (Source::Pypi { lock: path }, Some(lock)) => {
            out.push_str(&format!(
                "  from PyPI via {}; lock file {}\n",
                lock.installer,
                path.display()
            ));
            let mut t = crate::output::Table::headerless();
            for p in &lock.packages {
                t.row([format!("  {}", p.name), p.version.clone()]);
            }
            out.push_str(&t.render());
        }
        (Source::System { found_via }, _) => {
            out.push_str(&format!("  system toolkit found via {found_via}\n"))
        }
        (Source::Debian { .. }, _) => {
            if let Ok(lock) = debian_packages::read_lock(tc.cuda_home()) {
                out.push_str(&debian_packages::lock_table(&lock));
            }
        }
        _ => {}
    }
    out.push_str(&format!(
        "  ({seconds:.2}s)  use it with: eval \"$({} toolchain env --cuda {asked})\"\n",
        crate::output::program()
    ));
    out
}

/// `toolchain list` for people: every toolkit [`discover`] found, or how to get one.
pub fn listing_table(rows: &[Listed], dir: &Path) -> String {
    if rows.is_empty() {
        return format!(
            "no CUDA toolchains: none installed under {} and no system CUDA found\ninstall one with: {} toolchain install --cuda 13.2\n",
            dir.display(),
            crate::output::program()
        );
    }
    let opt = |v: &Option<Version>| v.as_ref().map_or("-".to_string(), |v| v.to_string());
    let mut t = crate::output::Table::new(["SOURCE", "CUDA", "NVCC", "CUDA_HOME", "NOTE"]);
    for r in rows {
        t.row([
            r.source.into(),
            opt(&r.cuda),
            opt(&r.nvcc_version),
            r.cuda_home.display().to_string(),
            r.note.clone(),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_env_lines_use_the_multiline_form_only_when_needed() {
        assert_eq!(github_env_line("CUDA_HOME", "/a b"), "CUDA_HOME=/a b\n");
        assert_eq!(
            github_env_line("X", "1\nARCHSMITH_EOF"),
            "X<<ARCHSMITH_EOF_\n1\nARCHSMITH_EOF\nARCHSMITH_EOF_\n"
        );
    }

    #[test]
    fn parses_nvcc_version_output() {
        let text = "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2026 NVIDIA Corporation\nBuilt on Tue_Feb_10\nCuda compilation tools, release 13.2, V13.2.78\nBuild cuda_13.2.r13.2/compiler.37434383_0\n";
        let v = parse_nvcc_version(text).unwrap();
        assert_eq!(v.release.to_string(), "13.2");
        assert_eq!(v.full.to_string(), "13.2.78");
        assert!(release_matches(&v, &"13.2".parse().unwrap()));
        assert!(!release_matches(&v, &"13.1".parse().unwrap()));
        assert!(release_matches(&v, &"13.2.2".parse().unwrap()));
        assert!(!release_matches(&v, &"13.20".parse().unwrap()));
        assert_eq!(parse_nvcc_version("gcc (Debian 12.2.0-14) 12.2.0"), None);
    }

    #[test]
    fn exports_are_sourceable_and_prepend_paths() {
        let tc = Toolchain {
            cuda: "13.2".parse().unwrap(),
            nvcc_version: "13.2.78".parse().unwrap(),
            cuda_home: PathBuf::from("/c/it's here"),
            source: Source::Pypi {
                lock: PathBuf::from("/c/lock.json"),
            },
        };
        let out = tc.shell_exports();
        assert!(
            out.contains("export CUDA_HOME='/c/it'\\''s here'\n"),
            "{out}"
        );
        assert!(
            out.contains("export PATH='/c/it'\\''s here/bin'\"${PATH:+:$PATH}\"\n"),
            "{out}"
        );
        assert!(out.contains("export LD_LIBRARY_PATH='/c/it'\\''s here/lib'\"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\"\n"), "{out}");
        let system = Toolchain {
            source: Source::System {
                found_via: "CUDA_HOME".into(),
            },
            ..tc
        };
        assert!(!system.shell_exports().contains("LD_LIBRARY_PATH"));
    }

    #[test]
    fn rejects_requests_that_are_not_releases() {
        for bad in ["13", "13.2.2.1.0", "10.2"] {
            let e = check_requested(&bad.parse().unwrap())
                .unwrap_err()
                .to_string();
            assert!(e.contains("CUDA"), "{bad}: {e}");
        }
        check_requested(&"13.2".parse().unwrap()).unwrap();
        check_requested(&"12.4".parse().unwrap()).unwrap();
        check_requested(&"13.0.3.0".parse().unwrap()).unwrap();
    }
}
