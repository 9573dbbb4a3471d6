//! `cargo xtask audit upgrade` on a fixture training script (`tests/fixtures/upgrade-project`)
//! and the change table held to the real torch wheels (2.1.2, 2.7.1, 2.15.0).

mod support;

use archsmith::audit_upgrade::{builtin_changes, check_evidence, parse_changes};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn audit(args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["audit", "upgrade"])
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn project() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/upgrade-project")
        .display()
        .to_string()
}

fn hits(v: &Value) -> Vec<(u64, String, bool)> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["line"].as_u64().unwrap(),
                f["api"].as_str().unwrap().to_string(),
                f["before_from"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn each_api_with_file_and_line_and_nothing_in_comments_or_strings() {
    let (code, v, stderr) = audit(&["--from", "2.3.1", "--to", "2.6.0", &project()]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(v["schema"], 1);
    let expected = [
        (6, "torch.cuda.amp.GradScaler", false),
        (14, "torch.load", false),
        (16, "torch.cuda.amp.GradScaler", false),
        (18, "torch.cuda.amp.autocast", false),
        (24, "torch.testing.assert_allclose", true),
    ];
    let got = hits(&v);
    assert_eq!(got, expected.map(|(l, a, b)| (l, a.to_string(), b)));
    let f = &v["findings"][1];
    assert!(f["file"]
        .as_str()
        .unwrap()
        .ends_with("upgrade-project/train.py"));
    assert_eq!(f["what"], "behaviour changed in 2.6");
    assert_eq!(f["code"], "torch.load");
    // The C++/CUDA source through the port catalogue.
    let native = v["native"].as_array().unwrap();
    assert_eq!(native.len(), 1);
    assert!(native[0]["path"].as_str().unwrap().ends_with("csrc/nms.cu"));
    assert_eq!(native[0]["rewrites"]["at-check"], 1);

    // Before 2.4 nothing of the amp deprecations applies; only the old assert.
    let (_, v, _) = audit(&["--from", "2.1.2", "--to", "2.3.1", &project()]);
    let apis: Vec<String> = hits(&v).into_iter().map(|h| h.1).collect();
    assert_eq!(apis, ["torch.testing.assert_allclose"]);
}

#[test]
fn users_extend_the_table_and_bad_input_exits_2() {
    let dir = support::scratch("audit-upgrade");
    let table = dir.join("ours.toml");
    std::fs::write(
        &table,
        "[[change]]\napi = \"torch.nn.functional.mse_loss\"\nmatch = \"use\"\ndeprecated = \"2.5\"\nreason = \"our house rule\"\nfix = \"our_loss\"\nsource = \"team wiki\"\n",
    )
    .unwrap();
    let with_table = || {
        audit(&[
            "--from",
            "2.3.1",
            "--to",
            "2.6.0",
            "--changes",
            table.to_str().unwrap(),
            &project(),
        ])
    };
    let (_, v, _) = with_table();
    assert!(
        hits(&v)
            .iter()
            .any(|h| h.0 == 19 && h.1 == "torch.nn.functional.mse_loss"),
        "{v}"
    );
    std::fs::write(&table, "[[change]]\napi = \"x\"\nmatch = \"sometimes\"\ndeprecated = \"2.5\"\nreason = \"r\"\nfix = \"f\"\nsource = \"s\"\n").unwrap();
    let (code, _, stderr) = with_table();
    assert_eq!(code, 2);
    assert!(stderr.contains("match `sometimes` needs to be"), "{stderr}");
    let (code, _, stderr) = audit(&["--from", "2.6.0", "--to", "2.3.1", &project()]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("--to 2.3.1 is not newer than --from 2.6.0"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every row's evidence holds in the real wheels, and a planted wrong row is caught.
#[test]
fn the_change_table_holds_against_the_real_wheels() {
    // Each member read from PyPI by range (kept under archsmith's cache), not whole wheels.
    let pypi = archsmith::pypi::Pypi::recorded(archsmith::pypi::repository_recordings());
    let files = pypi.files("torch").unwrap();
    let wheel_for = |v: &archsmith::version::Version, member: &str| {
        let wheel = archsmith::pypi::linux_wheel(&files, v)
            .ok_or_else(|| anyhow::anyhow!("no Linux wheel of torch {v} on PyPI"))?;
        Ok(pypi.members(wheel, &[member])?.remove(0))
    };
    let wrong = check_evidence(&builtin_changes(), &wheel_for).unwrap();
    assert!(wrong.is_empty(), "{wrong:#?}");
    let planted = parse_changes(
        "planted",
        "[[change]]\napi = \"torch.cuda.amp.autocast\"\nmatch = \"use\"\ndeprecated = \"2.0\"\nreason = \"r\"\nfix = \"f\"\nsource = \"s\"\nevidence = [ { torch = \"2.1.2\", member = \"torch/cuda/amp/autocast_mode.py\", contains = \"is deprecated\" }, { torch = \"2.7.1\", member = \"torch/_six.py\", present = true } ]\n",
    )
    .unwrap();
    let wrong = check_evidence(&planted, &wheel_for).unwrap();
    assert_eq!(wrong.len(), 2, "{wrong:#?}");
    assert!(wrong[0]
        .contains("torch 2.1.2 torch/cuda/amp/autocast_mode.py: does not contain `is deprecated`"));
}

/// Side by side with TorchFix (PyPI `torchfix`, the linter a user would pick for deprecated torch
/// APIs): on a file calling every name of TorchFix's own deprecated-symbol table and a bare
/// `torch.load`, every line TorchFix flags (TOR001 removed function, TOR101 deprecated function,
/// TOR102 torch.load without weights_only) is a finding of `audit upgrade`.
#[test]
fn finds_everything_torchfix_finds() {
    use archsmith::python::installer::{tool, Installer};
    let bin = tool("torchfix", "torchfix", &Installer::detect).unwrap();
    let site = bin.parent().unwrap().parent().unwrap().to_path_buf();
    let table = std::fs::read_to_string(site.join("torchfix/deprecated_symbols.yaml")).unwrap();
    let names: Vec<&str> = table
        .lines()
        .filter_map(|l| l.strip_prefix("- name: "))
        .map(str::trim)
        .collect();
    assert!(names.len() >= 20, "{names:?}");
    let dir = support::scratch("audit-vs-torchfix");
    let mut src = String::from("import torch\nimport functorch\n\n\ndef f(x, path):\n");
    for n in &names {
        src.push_str(&format!("    {n}(x)\n"));
    }
    src.push_str("    return torch.load(path)\n");
    let file = dir.join("uses.py");
    std::fs::write(&file, &src).unwrap();
    let python = archsmith::python::host_python().unwrap();
    let out = archsmith::process::Cmd::new(&python)
        .args(["-m", "torchfix", "--select", "ALL"])
        .arg(&file)
        .env("PYTHONPATH", &site)
        .output()
        .unwrap();
    let flagged: std::collections::BTreeSet<usize> = out
        .stdout
        .lines()
        .filter(|l| {
            [" TOR001 ", " TOR101 ", " TOR102 "]
                .iter()
                .any(|r| l.contains(r))
        })
        .filter_map(|l| l.strip_prefix(&format!("{}:", file.display())))
        .filter_map(|l| l.split(':').next()?.parse().ok())
        .collect();
    assert!(
        flagged.len() >= names.len(),
        "torchfix said:\n{}{}",
        out.stdout,
        out.stderr
    );
    let newest = archsmith::kb::kb().releases.newest_torch.to_string();
    let (code, v, err) = audit(&["--from", "1.0", "--to", &newest, file.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    let ours: std::collections::BTreeSet<usize> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["line"].as_u64().unwrap() as usize)
        .collect();
    let missed: Vec<&str> = flagged
        .iter()
        .filter(|l| !ours.contains(l))
        .map(|l| src.lines().nth(l - 1).unwrap_or_default())
        .collect();
    assert!(
        missed.is_empty(),
        "audit upgrade misses what TorchFix finds: {missed:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 60: a subdirectory that could not be read made the C++ half of the audit report "0
/// C++/CUDA file(s)" and exit 0, and an unreadable `.py` file counted as scanned. What could not
/// be read is named, and the result is not clean. Run as an unprivileged user (root reads
/// everything), so the test means the same as root in CI and as a developer.
#[test]
fn what_cannot_be_read_is_named_and_never_clean() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("project");
    std::fs::create_dir_all(root.join("csrc/locked")).unwrap();
    std::fs::write(
        root.join("csrc/locked/k.cu"),
        "void f() { AT_CHECK(true, \"x\"); }\n",
    )
    .unwrap();
    std::fs::write(root.join("train.py"), "import torch\n").unwrap();
    std::fs::write(root.join("secret.py"), "from torch._six import inf\n").unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).unwrap();
    for (p, mode) in [
        (tmp.path().to_path_buf(), 0o755),
        (home.clone(), 0o777),
        (root.clone(), 0o755),
        (root.join("csrc"), 0o755),
        (root.join("train.py"), 0o644),
        (root.join("csrc/locked"), 0o000),
        (root.join("secret.py"), 0o000),
    ] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    cmd.args(["audit", "upgrade", "--from", "2.0", "--to", "2.6"])
        .arg(&root)
        .arg("--json")
        .env("ARCHSMITH_HOME", &home);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.uid(65534).gid(65534);
    }
    let out = cmd.output().unwrap();
    let restore = |p: &Path| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755));
    restore(&root.join("csrc/locked")).unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{v}\n{stderr}");
    let unread: Vec<String> = v["unreadable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["path"].as_str().unwrap().to_string())
        .collect();
    assert!(
        unread.iter().any(|p| p.ends_with("csrc/locked")),
        "{unread:?}"
    );
    assert!(
        unread.iter().any(|p| p.ends_with("secret.py")),
        "{unread:?}"
    );
    assert_eq!(v["python_files"], 1, "{v}");
}
