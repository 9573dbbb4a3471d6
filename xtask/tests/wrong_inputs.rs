//! The corpus of wrong and ambiguous inputs (`fixtures/wrong-inputs/cases.toml`): every one exits 2
//! before any work, with a message that names the fix, and with `--json` prints the error document
//! on stdout. Versions are checked against the knowledge base, so none is planned for silently.

mod support;

use std::path::Path;
use std::process::Command;

#[derive(serde::Deserialize)]
struct Corpus {
    case: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    args: Vec<String>,
    says: String,
    #[serde(default)]
    json: bool,
    /// The command refuses in its own report (stdout, this JSON document) instead of an error.
    #[serde(default)]
    report: Option<String>,
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(args: &[String], home: &Path) -> Run {
    run_with(args, home, &[])
}

fn run_with(args: &[String], home: &Path, env: &[(&str, &str)]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .envs(env.iter().copied())
        // Nothing here may reach the network or a real GPU; an empty cache makes any provisioning
        // the command started visible as a failure rather than a slow pass.
        .env("ARCHSMITH_HOME", home)
        .env("ARCHSMITH_PYTORCH_GIT", "file:///nonexistent/pytorch")
        .output()
        .expect("running the binary");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn every_wrong_input_exits_2_naming_the_fix() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/wrong-inputs/cases.toml"),
    )
    .unwrap();
    let corpus: Corpus = toml::from_str(&text).unwrap();
    assert!(corpus.case.len() >= 60, "{} cases", corpus.case.len());
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let dir_s = dir.path().display().to_string();
    let ext = tempfile::tempdir().unwrap();
    std::fs::write(
        ext.path().join("setup.py"),
        "from setuptools import setup\nsetup()\n",
    )
    .unwrap();
    let ext_s = ext.path().display().to_string();
    let mut problems = Vec::new();
    let mut json_checked = 0;
    for case in &corpus.case {
        let args: Vec<String> = case
            .args
            .iter()
            .map(|a| a.replace("{dir}", &dir_s).replace("{ext}", &ext_s))
            .collect();
        let says = case.says.replace("{dir}", &dir_s);
        let shown = args.join(" ");
        let r = run(&args, home.path());
        let (stream, text) = match case.report {
            Some(_) => ("stdout", &r.stdout),
            None => ("stderr", &r.stderr),
        };
        if r.code != Some(2) {
            problems.push(format!("`{shown}`: exit {:?}, not 2\n{}", r.code, r.stderr));
        } else if !text.contains(&says) {
            problems.push(format!("`{shown}`: {stream} lacks `{says}`:\n{text}"));
        }
        if !case.json {
            continue;
        }
        json_checked += 1;
        let mut with_json = args.clone();
        if !with_json.iter().any(|a| a == "--json") {
            with_json.push("--json".into());
        }
        let r = run(&with_json, home.path());
        let doc: Result<serde_json::Value, _> = serde_json::from_str(&r.stdout);
        if let Some(name) = &case.report {
            match doc {
                Ok(d) if d["document"] == name.as_str() && r.code == Some(2) => {}
                _ => problems.push(format!(
                    "`{shown} --json`: exit {:?}, no {name} document on stdout:\n{}",
                    r.code, r.stdout
                )),
            }
            continue;
        }
        match doc {
            Ok(d)
                if d["document"] == "error"
                    && d["error"]["exit_code"] == 2
                    && r.code == Some(2) =>
            {
                let message = d["error"]["message"].as_str().unwrap_or("");
                if !message.contains(&says) && !says.starts_with("--") {
                    problems.push(format!(
                        "`{shown} --json`: message lacks `{says}`: {message}"
                    ));
                }
            }
            _ => problems.push(format!(
                "`{shown} --json`: exit {:?}, no error document on stdout:\n{}",
                r.code, r.stdout
            )),
        }
    }
    assert!(json_checked >= 20, "{json_checked} cases with --json");
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// A spec of 25,000 elements is not echoed back whole: the error stays short.
#[test]
fn a_huge_input_is_echoed_bounded() {
    let home = tempfile::tempdir().unwrap();
    // 100 KB: under the kernel's limit on one argument.
    let spec = "x.y,".repeat(25_000);
    let r = run(
        &["archs".into(), "--arch".into(), spec, "--json".into()],
        home.path(),
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.len() < 2_000, "{} bytes on stderr", r.stderr.len());
    assert!(r.stdout.len() < 2_000, "{} bytes on stdout", r.stdout.len());
}

/// Source extensions in any case (`.CU`, `.C`, `.CPP`, `.H`) are C++/CUDA to the codemod.
#[test]
fn codemod_reads_upper_case_source_extensions() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    for name in ["k.CU", "a.C", "b.CPP", "c.H"] {
        std::fs::write(
            dir.path().join(name),
            "#include <torch/extension.h>\nvoid f(at::Tensor x) { AT_CHECK(x.is_cuda(), \"x\"); }\n",
        )
        .unwrap();
    }
    let r = run(
        &[
            "codemod".into(),
            dir.path().display().to_string(),
            "--check".into(),
            "--json".into(),
        ],
        home.path(),
    );
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(doc["files_changed"], 4, "{doc}");
}

/// A source whose git submodules are empty (a clone without `--recursive`) stops build-ext and
/// port-extension before any work, naming each submodule and the command that fills it; nothing
/// is provisioned for it.
#[test]
fn empty_git_submodules_stop_builds_and_ports_before_any_work() {
    let home = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let s = src.path();
    std::fs::write(
        s.join(".gitmodules"),
        "[submodule \"cutlass\"]\n\tpath = csrc/dependencies/cutlass\n\turl = https://github.com/NVIDIA/cutlass.git\n",
    )
    .unwrap();
    std::fs::create_dir_all(s.join("csrc/dependencies/cutlass")).unwrap();
    std::fs::write(
        s.join("setup.py"),
        "from setuptools import setup\nfrom torch.utils.cpp_extension import CUDAExtension, BuildExtension\nsetup(name='gemm', ext_modules=[CUDAExtension('gemm', ['csrc/gemm.cu'], include_dirs=['csrc/dependencies/cutlass/include'])], cmdclass={'build_ext': BuildExtension})\n",
    )
    .unwrap();
    std::fs::write(s.join("csrc/gemm.cu"), "#include <cutlass/cutlass.h>\n").unwrap();
    let dir = s.display().to_string();
    let runs = [
        vec!["build-ext", &dir, "--arch", "8.0"],
        vec!["port-extension", "--src", &dir, "--arch", "8.0"],
    ];
    let expect = |r: &Run, fill: &str| {
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        for says in [
            "1 git submodule it declares is empty",
            "csrc/dependencies/cutlass  https://github.com/NVIDIA/cutlass.git",
            fill,
            "or build what does not need them: --skip-missing-submodules",
        ] {
            assert!(r.stderr.contains(says), "lacks `{says}`:\n{}", r.stderr);
        }
    };
    // Offline, said as such (the default tier runs without a network): the advice for a machine
    // that has one. Online, the same lists end in `fill them: …` (git_submodules' unit tests).
    let offline = [("ARCHSMITH_OFFLINE", "1")];
    for args in &runs {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        expect(
            &run_with(&args, home.path(), &offline),
            "(on a machine with network access: clone the repository again with `git clone --recursive URL`)",
        );
    }
    // A checkout that pins the submodule: the exact command, and the commit it pins.
    support::git(s, &["init", "-q"]);
    let sha = "89abcdef0123456789abcdef0123456789abcdef";
    let gitlink = format!("160000,{sha},csrc/dependencies/cutlass");
    support::git(s, &["update-index", "--add", "--cacheinfo", &gitlink]);
    support::git(s, &["commit", "-qm", "pin"]);
    let root = s.canonicalize().unwrap();
    let fill = format!(
        "(on a machine with network access: git -C {} submodule update --init --recursive -- csrc/dependencies/cutlass)",
        root.display()
    );
    for args in &runs {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let r = run_with(&args, home.path(), &offline);
        expect(&r, &fill);
        assert!(
            r.stderr.contains(&format!("cutlass.git at {sha}")),
            "{}",
            r.stderr
        );
    }
    // Nothing was provisioned: no env, no toolkit, no port work tree.
    for made in ["envs", "toolchains", "port"] {
        assert!(!home.path().join(made).exists(), "{made} was made");
    }
}

/// A reader that went away (`archsmith … | head -n 3` under `set -o pipefail`) changes nothing
/// about the verdict: a failed check still exits 1, refused input 2. The pipe's read end is
/// closed before the program starts, so every write it makes meets a closed pipe.
#[test]
fn a_closed_pipe_keeps_the_exit_status() {
    use archsmith::binary::synth::{self, Store};
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A module with SASS for sm_90 only: `--expect-arch 12.0+PTX` fails.
    let c = synth::container(&[synth::entry(2, 90, 0, &synth::fake_cubin(1), Store::Raw)]);
    std::fs::create_dir(d.join("wheel")).unwrap();
    std::fs::write(
        d.join("wheel/_C.so"),
        synth::elf64(&[(archsmith::binary::EXEC_SECTION, c)]),
    )
    .unwrap();
    std::fs::write(d.join("k.cu"), "void f() { AT_CHECK(true, \"x\"); }\n").unwrap();
    std::fs::create_dir(d.join("repo")).unwrap();
    std::fs::write(d.join("repo/requirements.txt"), "torch==2.3.1\n").unwrap();
    std::fs::write(d.join("repo/requirements-dev.txt"), "torch==2.4.0\n").unwrap();
    let at = |p: &str| d.join(p).display().to_string();
    let cases: [(Vec<String>, i32); 5] = [
        (
            vec![
                "verify".into(),
                "binary".into(),
                at("wheel"),
                "--expect-arch".into(),
                "12.0+PTX".into(),
            ],
            1,
        ),
        (vec!["verify".into(), "pins".into(), at("repo")], 1),
        (
            vec!["verify".into(), "pins".into(), at("repo"), "--json".into()],
            1,
        ),
        (
            vec![
                "codemod".into(),
                at("k.cu"),
                "--check".into(),
                "--json".into(),
            ],
            1,
        ),
        (
            vec![
                "archs".into(),
                "--arch".into(),
                "10.1".into(),
                "--json".into(),
            ],
            2,
        ),
    ];
    for (args, code) in cases {
        let open = run(&args, home.path());
        assert_eq!(
            open.code,
            Some(code),
            "{args:?} without a pipe:\n{}",
            open.stderr
        );
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let status = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(&args)
            .env("ARCHSMITH_HOME", home.path())
            .stdout(writer)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(code), "{args:?} into a closed pipe");
    }
}

/// Issue 60: `--format sarif` on bad input printed nothing, so CI uploaded an empty file. It
/// prints a SARIF log whose invocation failed with the error, as `--json` prints its document.
#[test]
fn bad_input_under_format_sarif_prints_a_sarif_log() {
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing-here").display().to_string();
    for args in [
        vec!["verify", "pins", &missing, "--format", "sarif"],
        vec!["codemod", "--check", "--format=sarif", &missing],
        vec![
            "audit", "upgrade", "--from", "2.6", "--to", "2.0", "--format", "sarif",
        ],
        vec!["codemod", "--check", "--format", "sarif", "--no-such-flag"],
    ] {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let r = run(&args, home.path());
        assert_eq!(r.code, Some(2), "{args:?}: {}", r.stderr);
        let log: serde_json::Value = serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: no SARIF on stdout ({e}): {}", r.stdout));
        assert_eq!(log["version"], "2.1.0");
        let inv = &log["runs"][0]["invocations"][0];
        assert_eq!(inv["executionSuccessful"], false, "{args:?}: {log}");
        let text = inv["toolExecutionNotifications"][0]["message"]["text"]
            .as_str()
            .unwrap();
        assert!(!text.is_empty(), "{args:?}");
    }
}

/// Issue 60: a `--python` that is no Python printed an 8.8 KB error holding the whole probe
/// script. The message names the file and what went wrong in a line.
#[test]
fn a_python_that_is_not_one_gets_a_short_error() {
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let not_python = dir.path().join("python");
    std::fs::write(&not_python, "not a program\n").unwrap();
    let r = run(
        &[
            "verify".into(),
            "env".into(),
            "--python".into(),
            not_python.display().to_string(),
        ],
        home.path(),
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("is not a working Python"), "{}", r.stderr);
    assert!(
        r.stderr.len() < 600,
        "{} bytes: {}",
        r.stderr.len(),
        r.stderr
    );
}
