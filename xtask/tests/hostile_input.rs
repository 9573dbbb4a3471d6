//! Hostile and careless input (issue 15's classes): a missing `HOME` never sends the cache to a
//! shared, predictable path, and a CI script that asks for `--json` gets a document even when the
//! command stops on bad input.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn xtask(args: &[&str], envs: &[(&str, &std::path::Path)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    cmd.env_clear().env("PATH", "/usr/bin:/bin").args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn without_home_the_cache_is_private_or_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, out, err) = xtask(
        &["archs", "--arch", "7.5", "--print", "sass"],
        &[("TMPDIR", tmp.path())],
    );
    assert_eq!((code, out.trim()), (0, "sm_75"), "{err}");
    assert!(
        err.contains("HOME is not set: archsmith's cache is"),
        "{err}"
    );
    let dirs: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().collect();
    assert_eq!(dirs.len(), 1);
    let dir = dirs[0].path();
    assert!(dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("archsmith-"));
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{}", dir.display());
    // A fallback directory anyone could have prepared is refused before any work.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, _, err) = xtask(
        &["archs", "--arch", "7.5", "--print", "sass"],
        &[("TMPDIR", tmp.path())],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is not a directory private to you") && err.contains("ARCHSMITH_HOME"),
        "{err}"
    );
}

#[test]
fn bad_input_with_json_prints_an_error_document() {
    let home = tempfile::tempdir().unwrap();
    let (code, out, err) = xtask(
        &["archs", "--arch", "garbage", "--json"],
        &[("ARCHSMITH_HOME", home.path())],
    );
    assert_eq!(code, 2);
    assert!(err.contains("error: invalid --arch `garbage`"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((&v["schema"], &v["document"]), (&1.into(), &"error".into()));
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("`garbage` is not an arch"));
    assert_eq!(v["error"]["exit_code"], 2);
    // Without --json, stdout stays empty.
    let (code, out, _) = xtask(
        &["archs", "--arch", "garbage"],
        &[("ARCHSMITH_HOME", home.path())],
    );
    assert_eq!((code, out.as_str()), (2, ""));
}

/// Every argument is validated before any work, a dry run included, naming the argument at fault.
#[test]
fn port_extension_validates_every_argument_up_front() {
    let home = tempfile::tempdir().unwrap();
    for (args, says) in [
        (
            &["--arch", "garbage"][..],
            "--arch garbage: `garbage` is not an arch",
        ),
        (
            &["--arch", "3.5"][..],
            "--arch 3.5: 3.5 is not supported by CUDA",
        ),
        (&["--cuda", "99.0"][..], "--cuda 99.0: unknown CUDA release"),
        (
            &["--torch", "99.0"][..],
            "--torch 99.0: unknown torch release",
        ),
    ] {
        let mut all = vec!["port-extension", "legacy-demo", "--dry-run"];
        all.extend(args);
        let (code, _, err) = xtask(&all, &[("ARCHSMITH_HOME", home.path())]);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!home.path().join("port").exists(), "{args:?}: work started");
    }
}
