//! Test support: what the side-by-side tests need, provisioned once per machine under
//! `archsmith::paths::cache_dir()` by archsmith's own code (`toolchain::ensure` and
//! `pypi::download_wheel`, both locked and staged, so parallel test processes do not race).
#![allow(dead_code)]

use archsmith::toolchain::{self, Toolchain};
use archsmith::version::Version;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The CUDA release the tests build with: 13.5 is the first whose nvcc has `-concat`.
pub const CUDA: &str = "13.5";
pub const TORCH: &str = "2.15.0";

pub fn cuda() -> &'static Toolchain {
    static TC: OnceLock<Toolchain> = OnceLock::new();
    TC.get_or_init(|| {
        let v: Version = CUDA.parse().expect("valid version");
        toolchain::ensure(&v).unwrap_or_else(|e| panic!("provisioning CUDA {CUDA}: {e:#}"))
    })
}

pub fn cuobjdump() -> PathBuf {
    let p = cuda().cuobjdump();
    assert!(
        p.exists(),
        "{} missing from the CUDA {CUDA} toolchain",
        p.display()
    );
    p
}

/// The torch wheel from PyPI, downloaded once into `paths::downloads_dir()`.
pub fn torch_wheel() -> PathBuf {
    let v: Version = TORCH.parse().expect("valid version");
    archsmith::downloads::download_wheel("torch", &v)
        .unwrap_or_else(|e| panic!("downloading torch {TORCH}: {e:#}"))
}

/// A fresh scratch directory for one test: removed when the test passes; kept, and named on
/// stderr, when it fails (what a failure left is what one reads first). Each suite run left
/// about fifteen of these in /tmp before, 40 MB a run.
pub fn scratch(name: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("archsmith-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

/// [`scratch`]'s directory; a `&Path` wherever one is asked for.
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept for the failure above: {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The CUDA release of the torch the tests use (torch 2.15.0 is built for 13.2): the toolkit an
/// air-gapped host would have installed for it.
pub const TORCH_CUDA: &str = "13.2";

/// The toolkit the air-gapped host has as its system's: CUDA [`TORCH_CUDA`], provisioned once
/// (online) under the shared cache.
pub fn system_toolkit() -> Toolchain {
    let cuda: Version = TORCH_CUDA.parse().expect("valid version");
    toolchain::ensure(&cuda).unwrap_or_else(|e| panic!("provisioning CUDA {cuda}: {e:#}"))
}

/// An air-gapped host prepared the way such hosts are: `archsmith` (the test binary) run in a
/// network namespace with no route (`unshare -n`), a fresh archsmith home (nothing provisioned),
/// the torch env's `bin/` on PATH (its cmake, ninja), uv on PATH, and a CUDA toolkit as the
/// system's (`CUDA_HOME`, its nvcc on PATH). Returns the command and the env's Python. Needs root
/// or unprivileged user namespaces (`unshare -rn`).
pub fn air_gapped(home: &std::path::Path) -> (std::process::Command, PathBuf) {
    let host = prepared_host();
    std::fs::create_dir_all(home).expect("the air-gapped home");
    let mut cmd = std::process::Command::new("unshare");
    cmd.arg(host.unshare_flag)
        .arg(env!("CARGO_BIN_EXE_xtask"))
        .env("ARCHSMITH_HOME", home)
        .env("CUDA_HOME", &host.cuda_home)
        .env("PATH", &host.path)
        .env_remove("ARCHSMITH_OFFLINE")
        .env_remove("CUDA_PATH")
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("CUDAHOSTCXX")
        .env_remove("CXX");
    (cmd, host.python.clone())
}

/// What every air-gapped run of a test process shares, provisioned (online) and looked up once.
struct PreparedHost {
    python: PathBuf,
    cuda_home: PathBuf,
    path: std::ffi::OsString,
    /// `-n` as root, `-rn` (a user namespace too) otherwise.
    unshare_flag: &'static str,
}

fn prepared_host() -> &'static PreparedHost {
    static HOST: OnceLock<PreparedHost> = OnceLock::new();
    HOST.get_or_init(|| {
        let env = archsmith::python::ensure_torch_env(&TORCH.parse().expect("valid version"))
            .unwrap_or_else(|e| panic!("provisioning torch {TORCH}: {e:#}"));
        let tc = system_toolkit();
        let uv = archsmith::python::installer::uv_binary().expect("uv (on PATH or bootstrapped)");
        let path = std::env::join_paths([
            env.python.parent().expect("bin/").to_path_buf(),
            tc.bin_dir(),
            uv.parent().expect("uv's directory").to_path_buf(),
            PathBuf::from("/usr/local/bin"),
            PathBuf::from("/usr/bin"),
            PathBuf::from("/bin"),
        ])
        .expect("PATH");
        let root = archsmith::process::Cmd::new("id")
            .arg("-u")
            .read()
            .is_ok_and(|u| u.trim() == "0");
        PreparedHost {
            python: env.python,
            cuda_home: tc.cuda_home().to_path_buf(),
            path,
            unshare_flag: if root { "-n" } else { "-rn" },
        }
    })
}

/// What one air-gapped run did.
pub struct AirGappedRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub wall: std::time::Duration,
}

/// `xtask ARGS` on the air-gapped host of [`air_gapped`], archsmith's home at `home`.
pub fn run_air_gapped(home: &std::path::Path, args: &[&str]) -> AirGappedRun {
    let (mut cmd, _) = air_gapped(home);
    let t = std::time::Instant::now();
    let out = cmd.args(args).output().expect("run unshare");
    AirGappedRun {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        wall: t.elapsed(),
    }
}

/// `git ARGS` in `dir`, as a test's fixture repository needs it: an identity of its own and no
/// signing (the machine's git configuration may have neither), failing the test when git fails.
pub fn git(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
        .args(["-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CPython 3.12 that runs (a pyenv shim on PATH may not, when pyenv's version is another).
pub fn python_312() -> Option<PathBuf> {
    archsmith::python::cpython_of(&"3.12".parse().unwrap()).ok()
}

/// An older torch on another Python for the proofs that need one: torch 2.11.0 (PyPI's first
/// CUDA 13 default) on CPython 3.12 where one runs here, else on the host's Python (said on
/// stderr).
pub fn older_torch_on_another_python() -> archsmith::python::TorchEnv {
    let oldest: Version = "2.11.0".parse().unwrap();
    match python_312() {
        Some(p) => archsmith::python::ensure_torch_env_with(&oldest, &p),
        None => {
            eprintln!("note: no python3.12 here: the torch 2.11.0 env uses the host's Python");
            archsmith::python::ensure_torch_env(&oldest)
        }
    }
    .unwrap()
}

/// Runs this crate's binary with `args`: its exit code, stdout and stderr.
pub fn xtask(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .expect("run xtask");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Starts `cmd`'s child with SIGINT's disposition `sigint` (SIG_DFL: as a terminal's Ctrl-C
/// finds a program), whatever this test process inherited: `cargo test &` in a script, or
/// `nohup`, starts the whole tree ignoring SIGINT, and archsmith, Python and the compilers keep
/// an ignored SIGINT ignored, so a test of Ctrl-C would then pass or fail by where the signal
/// lands (ninja alone catches it).
pub fn sigint_in_child(cmd: &mut std::process::Command, sigint: libc::sighandler_t) {
    use std::os::unix::process::CommandExt;
    // SAFETY: one async-signal-safe call between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGINT, sigint);
            Ok(())
        });
    }
}

/// The stable ABI's floor as a user meets it: torch 2.10.0 (PyPI's default, CUDA 12.8: the
/// other CUDA major than the build's torch) on CPython 3.10, its oldest Python, where one runs
/// here, else on the host's Python (said on stderr). A stable wheel built once against 2.15.0
/// must load and compute here.
pub fn stable_floor_torch() -> archsmith::python::TorchEnv {
    let floor: Version = "2.10.0".parse().unwrap();
    match archsmith::python::cpython_of(&"3.10".parse().unwrap()) {
        Ok(p) => archsmith::python::ensure_torch_env_with(&floor, &p),
        Err(e) => {
            eprintln!(
                "note: no python3.10 here ({e:#}): the torch 2.10.0 env uses the host's Python"
            );
            archsmith::python::ensure_torch_env(&floor)
        }
    }
    .unwrap()
}
