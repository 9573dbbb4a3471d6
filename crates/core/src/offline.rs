//! Air-gapped hosts: whether archsmith may download, and the one error every download point gives
//! when it may not.
//!
//! Offline is `--offline` / `ARCHSMITH_OFFLINE=1`, or found out at the first download: the package
//! index (or the HTTPS proxy in front of it) cannot be reached within a few seconds. Workflows then
//! use what exists — an env given with `--python`, a toolkit under `CUDA_HOME`, `/usr/local/cuda*`
//! or on `PATH`, cmake and ninja on `PATH` — and install only from a local wheel directory
//! (`--find-links DIR` / `ARCHSMITH_FIND_LINKS`). Each download point calls [`require`] with what it
//! would fetch and what would provide it instead, so a missing piece is one sentence and exit 2,
//! never a hang in a resolver's retries or a traceback.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// Set to `1` (by `--offline` too): download nothing.
pub const ENV: &str = "ARCHSMITH_OFFLINE";
/// A directory of wheels to install from instead of the index (by `--find-links` too).
pub const FIND_LINKS_ENV: &str = "ARCHSMITH_FIND_LINKS";

/// How long the index may take to accept a connection before the host is taken for air-gapped.
const PROBE_TIMEOUT: Duration = Duration::from_secs(4);

/// Why downloading is off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// `--offline` or `ARCHSMITH_OFFLINE=1`.
    Asked,
    /// The index (or proxy) named here did not answer.
    Unreachable(String),
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Asked => write!(f, "offline ({ENV}=1 or --offline)"),
            Reason::Unreachable(host) => write!(f, "offline ({host} cannot be reached)"),
        }
    }
}

/// A download that offline mode refused: what was needed and what would provide it.
#[derive(Debug, thiserror::Error)]
#[error(
    "{reason}: not on this machine, and would have to be downloaded: {what}. {provide}.{detail}"
)]
pub struct Refused {
    pub reason: Reason,
    pub what: String,
    pub provide: String,
    /// Where archsmith looked, one `\n  - …` line each (or empty).
    pub detail: String,
}

impl Refused {
    /// The same refusal with where archsmith looked appended.
    pub fn looked_at(mut self, lines: &str) -> Refused {
        self.detail = format!("\nLooked at:{lines}");
        self
    }
}

/// What the command line said: `--offline` and `--find-links` (a directory, checked).
#[derive(Debug, Clone, Default)]
pub struct Flags {
    pub offline: bool,
    pub find_links: Option<PathBuf>,
}

static FLAGS: OnceLock<Flags> = OnceLock::new();

/// Records the command line's flags for this process, once, before any work. Every child process
/// gets them as [`ENV`] and [`FIND_LINKS_ENV`] ([`child_env`], through `process::Cmd`), so the
/// helpers a workflow starts (nvcc-guard, the build hooks, pip and uv) see them too; nothing is
/// written into this process's own environment.
pub fn configure(flags: Flags) {
    // A second call (a test's) keeps the first: the flags are fixed for the process.
    let _ = FLAGS.set(flags);
}

/// True when `--offline` or `ARCHSMITH_OFFLINE` asks for offline mode (`1`, `true`, `yes`).
pub fn asked() -> bool {
    FLAGS.get().is_some_and(|f| f.offline)
        || std::env::var(ENV).is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"))
}

/// The local wheel directory to install from, when one is set (`--find-links` checked that it
/// is a directory; else `ARCHSMITH_FIND_LINKS`).
pub fn find_links() -> Option<PathBuf> {
    FLAGS.get().and_then(|f| f.find_links.clone()).or_else(|| {
        std::env::var_os(FIND_LINKS_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
}

/// The variables every child process starts with: the offline flags as the environment says them.
pub fn child_env() -> Vec<(&'static str, std::ffi::OsString)> {
    let mut env = Vec::new();
    if asked() {
        env.push((ENV, "1".into()));
    }
    if let Some(dir) = find_links() {
        env.push((FIND_LINKS_ENV, dir.into_os_string()));
    }
    env
}

/// Why this process must not download, or None when it may. Asks the network once per process,
/// and only when not told: callers reach this just before a download.
pub fn reason() -> Option<Reason> {
    if asked() {
        return Some(Reason::Asked);
    }
    static PROBED: OnceLock<Option<Reason>> = OnceLock::new();
    PROBED
        .get_or_init(|| {
            let (host, port) = index_endpoint();
            (!reachable(&host, port)).then(|| Reason::Unreachable(format!("{host}:{port}")))
        })
        .clone()
}

/// Ok when `what` may be downloaded; else the [`Refused`] error naming `provide`.
pub fn require(what: &str, provide: &str) -> Result<(), Refused> {
    match reason() {
        None => Ok(()),
        Some(reason) => Err(Refused {
            reason,
            what: what.to_string(),
            provide: provide.to_string(),
            detail: String::new(),
        }),
    }
}

/// Ok when a Python package may be installed: online, or offline with a wheel directory (the
/// installer is then pointed at it alone).
pub fn require_install(what: &str, provide: &str) -> Result<(), Refused> {
    if reason().is_some() && find_links().is_some() {
        return Ok(());
    }
    require(
        what,
        &format!("{provide}; or give --find-links DIR (a directory holding its wheels)"),
    )
}

/// The variables that point uv and pip at the wheel directory, and off the index when offline.
pub fn installer_env() -> Vec<(&'static str, String)> {
    let mut vars = Vec::new();
    if let Some(dir) = find_links() {
        let dir = dir.display().to_string();
        vars.push(("UV_FIND_LINKS", dir.clone()));
        vars.push(("PIP_FIND_LINKS", dir));
    }
    if reason().is_some() {
        vars.push(("UV_OFFLINE", "1".into()));
        vars.push(("UV_NO_INDEX", "1".into()));
        vars.push(("PIP_NO_INDEX", "1".into()));
    }
    vars
}

/// Whether a git URL needs the network (`https://`, `ssh://`, `git@host:`), as a local mirror
/// (a path, `file://`) does not.
pub fn is_remote(url: &str) -> bool {
    let url = url.trim();
    !(url.starts_with('/') || url.starts_with("file://") || url.starts_with('.'))
        && (url.contains("://") || url.contains('@'))
}

/// Where downloads go: an HTTPS proxy when one is set (direct connections may be refused there),
/// else the index URL uv or pip would use, else PyPI.
fn index_endpoint() -> (String, u16) {
    let url = first_set(&["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"])
        .unwrap_or_else(package_index);
    host_port(&url).unwrap_or_else(|| ("pypi.org".into(), 443))
}

/// The package index archsmith reads and downloads from: uv's and pip's own settings
/// (`UV_DEFAULT_INDEX`, `UV_INDEX_URL`, `PIP_INDEX_URL`; a mirror must speak the JSON Simple
/// API, PEP 691), else PyPI. One answer for every reader: [`crate::pypi`], uv and pip.
pub fn package_index() -> String {
    first_set(&["UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"])
        .map(|u| u.trim().trim_end_matches('/').to_string())
        .unwrap_or_else(|| "https://pypi.org/simple".into())
}

fn first_set(names: &[&str]) -> Option<String> {
    names
        .iter()
        .find_map(|n| std::env::var(n).ok().filter(|v| !v.trim().is_empty()))
}

/// `https://user@host:8443/path` → (`host`, 8443); the scheme's port when none is written.
fn host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let default = if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        80
    };
    let (host, port) = match authority.strip_prefix('[') {
        // `[v6addr]:port`
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            (host, after.strip_prefix(':').and_then(|p| p.parse().ok()))
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().ok()),
            None => (authority, None),
        },
    };
    let port = port.unwrap_or(default);
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// A TCP connection to `host:port` within the timeout, name lookup included (a lookup that hangs
/// on a host with no resolver counts as unreachable).
fn reachable(host: &str, port: u16) -> bool {
    use std::net::{TcpStream, ToSocketAddrs};
    let (tx, rx) = std::sync::mpsc::channel();
    let target = format!("{host}:{port}");
    std::thread::spawn(move || {
        let ok = target.to_socket_addrs().is_ok_and(|addrs| {
            addrs
                .into_iter()
                .any(|a| TcpStream::connect_timeout(&a, PROBE_TIMEOUT).is_ok())
        });
        let _ = tx.send(ok);
    });
    rx.recv_timeout(PROBE_TIMEOUT + Duration::from_secs(1))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_host_and_port_from_index_and_proxy_urls() {
        let hp = |u: &str| host_port(u).unwrap();
        assert_eq!(hp("https://pypi.org/simple"), ("pypi.org".into(), 443));
        assert_eq!(
            hp("http://user:pw@proxy.corp:3128"),
            ("proxy.corp".into(), 3128)
        );
        assert_eq!(hp("proxy.corp:8080"), ("proxy.corp".into(), 8080));
        assert_eq!(hp("https://[::1]:8443/x"), ("::1".into(), 8443));
        assert_eq!(hp("https://[::1]/x"), ("::1".into(), 443));
        assert_eq!(host_port("https:///path"), None);
    }

    #[test]
    fn local_git_mirrors_need_no_network() {
        assert!(is_remote("https://github.com/pytorch/pytorch"));
        assert!(is_remote("git@github.com:pytorch/pytorch.git"));
        assert!(is_remote("ssh://git@host/x"));
        assert!(!is_remote("/srv/mirrors/pytorch.git"));
        assert!(!is_remote("file:///srv/mirrors/pytorch.git"));
        assert!(!is_remote("./pytorch"));
    }

    #[test]
    fn a_refusal_names_what_and_what_would_provide_it() {
        let e = Refused {
            reason: Reason::Unreachable("pypi.org:443".into()),
            what: "CUDA 13.2's toolkit".into(),
            provide: "Set CUDA_HOME to an installed CUDA 13.2".into(),
            detail: String::new(),
        };
        let text = e.to_string();
        assert!(text.starts_with("offline (pypi.org:443 cannot be reached): not on this machine, and would have to be downloaded: CUDA 13.2's toolkit"), "{text}");
        assert!(text.ends_with("Set CUDA_HOME to an installed CUDA 13.2."));
        let text = e
            .looked_at("\n  - /usr/local/cuda: does not exist")
            .to_string();
        assert!(
            text.ends_with("CUDA 13.2.\nLooked at:\n  - /usr/local/cuda: does not exist"),
            "{text}"
        );
    }

    #[test]
    fn nothing_listens_on_a_closed_port() {
        // A port just released by the OS has no listener: refused at once, not timed out.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        assert!(!reachable("127.0.0.1", port));
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(reachable("127.0.0.1", l.local_addr().unwrap().port()));
    }
}
