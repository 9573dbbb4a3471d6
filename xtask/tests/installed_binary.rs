//! The `archsmith` binary away from this repository — this run's, copied out (default tier);
//! installed by `cargo install --path xtask` and from its wheel into a fresh venv (slow tier:
//! each compiles the crate again) — answers `--version`, `archs`, `verify env` and
//! `port-extension --dry-run` from the data compiled into it.

mod support;

use std::path::PathBuf;
use std::process::Command;

/// An installed `archsmith`, run from a directory outside the repository with its own cache.
struct Installed {
    bin: PathBuf,
    work: PathBuf,
    home: PathBuf,
}

impl Installed {
    fn new(bin: PathBuf, scratch: &std::path::Path) -> Installed {
        let work = scratch.join("project");
        std::fs::create_dir_all(&work).unwrap();
        Installed {
            bin,
            work,
            home: scratch.join("home"),
        }
    }

    /// `port-extension legacy-demo --dry-run`, its recipe and patches from the binary: the output.
    fn port_legacy_demo_dry_run(&self) -> String {
        let (code, out, err) = self.run(&[
            "port-extension",
            "legacy-demo",
            "--arch",
            "7.5,8.9,9.0",
            "--dry-run",
        ]);
        assert_eq!(code, 0, "{out}\n{err}");
        out
    }

    /// `verify env` on the provisioned torch env passes with its true torch version.
    fn verifies_the_torch_env(&self) {
        let env = archsmith::python::ensure_torch_env(&support::TORCH.parse().unwrap()).unwrap();
        let (code, out, err) = self.run(&[
            "verify",
            "env",
            "--python",
            env.python.to_str().unwrap(),
            "--expect",
            "torch==2.15.0",
        ]);
        assert_eq!(code, 0, "{out}\n{err}");
    }

    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(&self.bin)
            .args(args)
            .current_dir(&self.work)
            .env("ARCHSMITH_HOME", &self.home)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// `cargo install --path xtask` as a user runs it (debug profile, to share the compiled
/// dependencies with the wheel test's target directory under the cache), then the installed
/// binary outside the repository. The install compiles the crate a second time (about 200 s on
/// 2 cores, beyond what CI's time holds): it runs with `cargo test -- --ignored` (the slow
/// tier); the default tier runs the same checks on the binary this test run built, copied
/// outside the repository ([`the_binary_works_outside_the_repository_from_the_data_compiled_into_it`]).
#[test]
#[ignore = "slow tier (about 200 s): cargo install compiles the crate a second time; cargo test -- --ignored"]
fn cargo_install_gives_a_binary_that_works_outside_the_repository() {
    let dir = support::scratch("installed-binary");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    archsmith::process::Cmd::new(cargo)
        .args([
            "install",
            "--locked",
            "--debug",
            "--bin",
            "archsmith",
            "--path",
        ])
        .arg(archsmith::paths::repo_root().join("xtask"))
        .arg("--root")
        .arg(&dir)
        .arg("--target-dir")
        .arg(archsmith::paths::cache_dir().join("maturin-target"))
        // The test's own `cargo test` fetched every crate of this lockfile: no network needed.
        .env("CARGO_NET_OFFLINE", "true")
        .read()
        .unwrap();
    checks_outside_the_repository(&Installed::new(dir.join("bin/archsmith"), &dir));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The hermetic twin of the install above: the `archsmith` binary of this test run, copied to a
/// directory outside the repository and run from there with an empty cache, answers from the
/// data compiled into it.
#[test]
fn the_binary_works_outside_the_repository_from_the_data_compiled_into_it() {
    let dir = support::scratch("copied-binary");
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let bin = dir.join("bin/archsmith");
    std::fs::copy(env!("CARGO_BIN_EXE_archsmith"), &bin).unwrap();
    checks_outside_the_repository(&Installed::new(bin, &dir));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--version`, `--help`, `archs`, `port-extension legacy-demo --dry-run` (its recipe unpacked
/// from the binary), `verify env` and `completions` from an installed binary, run with its own
/// cache so the data it writes is seen being written.
fn checks_outside_the_repository(installed: &Installed) {
    let run = |args: &[&str]| installed.run(args);
    let home = installed.home.clone();
    let (code, out, _) = run(&["--version"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("archsmith "), "{out}");
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Usage: archsmith [OPTIONS] <COMMAND>"),
        "{out}"
    );
    let (code, out, err) = run(&["archs", "--arch", "7.5,8.9,9.0", "--gpu", "L4", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("\"torch_cuda_arch_list\": \"7.5;8.9;9.0\""),
        "{out}"
    );
    // The recipe, its rules and patches come from the binary itself.
    let out = installed.port_legacy_demo_dry_run();
    assert!(out.contains("thc-header"), "{out}");
    let data: Vec<_> = std::fs::read_dir(home.join("data"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .collect();
    assert_eq!(data.len(), 1);
    assert!(data[0]
        .path()
        .join("patches/legacy-demo/recipe.toml")
        .is_file());
    installed.verifies_the_torch_env();
    let (code, out, _) = run(&["completions", "bash"]);
    assert_eq!(code, 0);
    assert!(out.contains("_archsmith()"), "{out}");
}

/// The Python wheel (maturin from PyPI, `bindings = "bin"`), installed into a fresh venv outside
/// the repository: its `archsmith` runs `archs`, `port-extension --dry-run` and `verify env`.
/// maturin compiles the crate a second time, as `cargo install` does: the slow tier.
#[test]
#[ignore = "slow tier (about 200 s): maturin compiles the crate a second time; cargo test -- --ignored"]
fn the_wheel_installs_into_a_fresh_venv_and_runs() {
    use archsmith::python::installer::{tool, Installer};
    let maturin = tool("maturin", "maturin", &Installer::detect).unwrap();
    let scratch = support::scratch("archsmith-wheel");
    let wheels = scratch.join("wheels");
    // Its own target directory under the cache: the test's cargo holds this workspace's.
    let target = archsmith::paths::cache_dir().join("maturin-target");
    let manifest = archsmith::paths::repo_root().join("xtask/Cargo.toml");
    archsmith::process::Cmd::new(&maturin)
        .args(["build", "--profile", "dev", "--quiet", "-m"])
        .arg(&manifest)
        .arg("-o")
        .arg(&wheels)
        .arg("--target-dir")
        .arg(&target)
        .env("CARGO_NET_OFFLINE", "true")
        .read()
        .unwrap();
    let wheel = std::fs::read_dir(&wheels)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .unwrap();
    assert!(
        wheel
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("archsmith-0.1.0-py3-none-"),
        "{}",
        wheel.display()
    );
    let inst = Installer::detect().unwrap();
    let venv = scratch.join("venv");
    inst.venv(&archsmith::python::host_python().unwrap(), &venv)
        .unwrap();
    inst.install_into(&venv.join("bin/python"), &[wheel.display().to_string()])
        .unwrap();
    let bin = venv.join("bin/archsmith");
    let installed = Installed::new(bin, &scratch);
    let run = |args: &[&str]| installed.run(args);
    let (code, out, err) = run(&["archs", "--arch", "7.5,8.9,9.0", "--gpu", "L4"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("7.5;8.9;9.0"), "{out}");
    installed.port_legacy_demo_dry_run();
    installed.verifies_the_torch_env();
    let _ = std::fs::remove_dir_all(&scratch);
}
