//! Air-gapped: every workflow run in a network namespace with no route (`unshare -n`), a fresh
//! archsmith home, a prepared torch env (`--python`) and a system CUDA toolkit (`CUDA_HOME`).
//! Nothing tells archsmith it is offline: it finds out at the first download it would make. What
//! exists is used; what is missing is named with what would provide it (exit 2), never a hang.
//! (The ports offline with `--python` are `port_extension.rs`'s CPU-only test.)

mod support;

use serde_json::Value;
use std::path::Path;

use support::{run_air_gapped as offline, AirGappedRun as Run};

fn json(r: &Run) -> Value {
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", r.stdout, r.stderr))
}

/// A refusal: exit 2, saying offline, what is missing and what would provide it.
fn assert_refused(r: &Run, what: &str, provide: &str) {
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("offline ("), "{}", r.stderr);
    assert!(r.stderr.contains(what), "{what} missing from {}", r.stderr);
    assert!(
        r.stderr.contains(provide),
        "{provide} missing from {}",
        r.stderr
    );
}

#[test]
fn every_workflow_uses_what_exists_and_names_what_is_missing() {
    let home = support::scratch("offline-home");
    let (_, python) = support::air_gapped(&home);
    let py = python.to_str().unwrap();
    let cuda_home = support::system_toolkit().cuda_home().display().to_string();

    // The network really is gone in there.
    let r = offline(&home, &["toolchain", "install", "--cuda", "13.5"]);
    assert_refused(&r, "CUDA 13.5's toolkit", "Set CUDA_HOME");
    assert!(r.stderr.contains("--find-links DIR"), "{}", r.stderr);
    assert!(
        r.stderr
            .contains(&format!("CUDA_HOME = {cuda_home}: nvcc reports CUDA 13.2")),
        "{}",
        r.stderr
    );

    // toolchain: the system toolkit of the release asked for.
    let r = offline(
        &home,
        &["toolchain", "install", "--cuda", support::TORCH_CUDA],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("system toolkit found via CUDA_HOME"),
        "{}",
        r.stdout
    );

    // verify env on the prepared env.
    let r = offline(
        &home,
        &["verify", "env", "--python", py, "--gpu-smoke", "--json"],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v = json(&r);
    let smoke = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "gpu smoke")
        .unwrap();
    assert_eq!(smoke["status"], "skipped");

    // kernels: built with the system toolkit (the default CUDA when archsmith has none of its
    // own), audited.
    let r = offline(&home, &["kernels", "--arch", "7.5", "--json"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v = json(&r);
    assert_eq!(v["cuda_home"], cuda_home.as_str(), "{v}");
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["cmake"].as_str().unwrap().contains("(system)"), "{v}");

    // build-torch's plan, preflight and environment from a local tree.
    let tree = support::scratch("offline-torch-tree");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch-tree-setup-py"),
        &tree,
    );
    let r = offline(
        &home,
        &[
            "build-torch",
            "--arch",
            "7.5",
            "--src",
            tree.to_str().unwrap(),
            "--python",
            py,
            "--dry-run",
            "--json",
        ],
    );
    let v = json(&r);
    let env_value = |name: &str| {
        v["prepared"]["plan"]["env"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["name"] == name))
            .map(|e| e["value"].as_str().unwrap_or("").to_string())
    };
    assert_eq!(
        env_value("CUDA_HOME").as_deref(),
        Some(cuda_home.as_str()),
        "{v}"
    );
    // …but a release to clone needs the network.
    let r = offline(&home, &["build-torch", "--arch", "7.5", "--torch", "2.6.0"]);
    assert_refused(&r, "pytorch v2.6.0's source", "Give --src DIR");

    // build-ext and port-extension: a source or env that would be downloaded is named.
    let r = offline(
        &home,
        &[
            "build-ext",
            "pypi:torchsort==0.1.9",
            "--arch",
            "7.5",
            "--python",
            py,
        ],
    );
    assert_refused(&r, "the sdist of torchsort==0.1.9", "--src DIR");
    let r = offline(
        &home,
        &["build-ext", "pypi:torchsort==0.1.9", "--arch", "7.5"],
    );
    assert_refused(&r, "torch 2.15.0's env", "Give --python PATH");
    let r = offline(
        &home,
        &[
            "port-extension",
            "maskrcnn",
            "--arch",
            "7.5",
            "--python",
            py,
        ],
    );
    assert_refused(
        &r,
        "https://github.com/facebookresearch/maskrcnn-benchmark at 57eec25",
        "Give --src DIR",
    );

    // Told, not found out: the same refusal, and a wheel directory lifts it for installs.
    let r = offline(
        &home,
        &["--offline", "toolchain", "install", "--cuda", "13.5"],
    );
    assert_refused(&r, "CUDA 13.5's toolkit", "Set CUDA_HOME");
    assert!(
        r.stderr.contains("ARCHSMITH_OFFLINE=1 or --offline"),
        "{}",
        r.stderr
    );
    let r = offline(
        &home,
        &[
            "toolchain",
            "install",
            "--cuda",
            "13.5",
            "--find-links",
            "/no/such/dir",
        ],
    );
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains("--find-links /no/such/dir: no such directory"),
        "{}",
        r.stderr
    );

    let _ = std::fs::remove_dir_all(&home);
    let _ = std::fs::remove_dir_all(&tree);
}

/// `ci/gpu-check.sh` refuses what it cannot run before it starts (its whole run, with and
/// without a GPU, is in docs/air-gapped.md: it builds the legacy-demo port, too slow for here).
#[test]
fn the_gpu_check_names_a_missing_binary_or_torch() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/gpu-check.sh");
    let run = |args: &[&str]| {
        std::process::Command::new("bash")
            .arg(&script)
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage:"));
    let out = run(&["/no/such/archsmith", "python3"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not an executable archsmith binary"));
    // A Python without torch (the host's, when it has none: never the whole check here).
    let host = archsmith::python::host_python().unwrap();
    let host_has_torch = std::process::Command::new(&host)
        .args(["-c", "import torch"])
        .status()
        .unwrap()
        .success();
    if !host_has_torch {
        let out = run(&[env!("CARGO_BIN_EXE_xtask"), host.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("cannot import torch"));
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (p, t) = (e.path(), to.join(e.file_name()));
        if p.is_dir() {
            copy_dir(&p, &t);
        } else {
            std::fs::copy(&p, &t).unwrap();
        }
    }
}

/// `--offline` and `--find-links` live in archsmith's process, not its environment, and reach
/// every child through the process runner: the program a workflow starts (here the `--python` it
/// probes, a stand-in that writes what it sees) finds `ARCHSMITH_OFFLINE=1` and the wheel
/// directory; without the flags, nothing.
#[test]
fn the_offline_flags_reach_every_child_process() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let wheels = dir.path().join("wheels");
    std::fs::create_dir(&wheels).unwrap();
    let python = dir.path().join("python3");
    std::fs::write(
        &python,
        format!(
            "#!/bin/sh\necho \"offline=$ARCHSMITH_OFFLINE links=$ARCHSMITH_FIND_LINKS\" >> {}\nexit 3\n",
            seen.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |flags: &[&str]| {
        let _ = std::fs::remove_file(&seen);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(flags)
            .args(["verify", "env", "--python"])
            .arg(&python)
            .env_remove("ARCHSMITH_OFFLINE")
            .env_remove("ARCHSMITH_FIND_LINKS")
            .env("ARCHSMITH_HOME", dir.path().join("home"))
            .output()
            .unwrap();
        assert_ne!(out.status.code(), Some(0));
        std::fs::read_to_string(&seen).unwrap_or_default()
    };
    let links = wheels.canonicalize().unwrap();
    let with = run(&["--offline", "--find-links", wheels.to_str().unwrap()]);
    assert!(
        with.lines()
            .next()
            .is_some_and(|l| l == format!("offline=1 links={}", links.display())),
        "{with:?}"
    );
    let without = run(&[]);
    assert!(
        without
            .lines()
            .next()
            .is_some_and(|l| l == "offline= links="),
        "{without:?}"
    );
}
