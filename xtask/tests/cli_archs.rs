//! `cargo xtask archs` and `doctor` end to end: the binary's output, JSON fields and exit codes.

use std::process::Command;

fn xtask(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .expect("run xtask");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn archs_json_has_the_documented_fields() {
    let (code, stdout, stderr) = xtask(&[
        "archs",
        "--arch",
        "7.5,8.9,9.0+PTX",
        "--json",
        "--gpu",
        "L4",
        "--gpu",
        "RTX 5090",
        "--gpu",
        "geforce rtx-3090",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["torch_cuda_arch_list"], "7.5;8.9;9.0+PTX");
    assert_eq!(
        v["gencode"],
        serde_json::json!([
            "-gencode=arch=compute_75,code=sm_75",
            "-gencode=arch=compute_89,code=sm_89",
            "-gencode=arch=compute_90,code=compute_90",
            "-gencode=arch=compute_90,code=sm_90"
        ])
    );
    assert_eq!(v["sass"], serde_json::json!(["sm_75", "sm_89", "sm_90"]));
    assert_eq!(v["ptx"], serde_json::json!(["compute_90"]));
    assert_eq!(v["cmake_cuda_architectures"], "75-real;89-real;90");
    assert_eq!(v["torch"]["assumed"], true);
    assert_eq!(v["cuda"]["assumed"], true);
    let gpus = v["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 3);
    for g in gpus {
        for key in ["name", "cc", "runs", "via", "reason"] {
            assert!(g.get(key).is_some(), "gpu entry lacks {key}: {g}");
        }
    }
    assert_eq!(gpus[0]["via"], "sm_89");
    assert_eq!(gpus[1]["via"], "compute_90");
    assert_eq!(gpus[2]["cc"], "8.6");
    assert_eq!(gpus[2]["runs"], false);
}

/// `--print` gives CI scripts the one value they need, the same as the JSON document's.
#[test]
fn archs_prints_plain_values_for_scripts() {
    let value = |what: &str| {
        let (code, out, err) = xtask(&["archs", "--arch", "sm_75, 8.9,Hopper", "--print", what]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out.lines().count(), 1, "{out}");
        out.trim_end().to_string()
    };
    let (_, json, _) = xtask(&["archs", "--arch", "sm_75, 8.9,Hopper", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value("torch-cuda-arch-list"), v["torch_cuda_arch_list"]);
    assert_eq!(
        value("cmake-cuda-architectures"),
        v["cmake_cuda_architectures"]
    );
    assert_eq!(value("sass"), "sm_75 sm_89 sm_90");
    assert_eq!(value("ptx"), "compute_90");
    assert_eq!(value("nvcc-flags").split(' ').count(), 4);
    let (code, _, err) = xtask(&["archs", "--arch", "7.5", "--print", "sass", "--json"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn archs_table_says_when_newest_releases_were_assumed() {
    let (code, stdout, _) = xtask(&["archs", "--arch", "9.0a", "--gpu", "H100", "--gpu", "B200"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("newest known"), "{stdout}");
    assert!(
        stdout.contains("TORCH_CUDA_ARCH_LIST      9.0a"),
        "{stdout}"
    );
    let h100 = stdout.lines().find(|l| l.contains("H100")).unwrap();
    let b200 = stdout.lines().find(|l| l.contains("B200")).unwrap();
    assert!(h100.contains(" yes ") && b200.contains(" NO "), "{stdout}");
}

#[test]
fn unsupported_archs_exit_2_with_a_specific_message() {
    let (code, stdout, stderr) = xtask(&["archs", "--arch", "5.0,9.0", "--cuda", "13.2"]);
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("5.0 is not supported by CUDA 13.2") && stderr.contains("12.9"),
        "{stderr}"
    );
    let (code, _, stderr) = xtask(&["archs", "--arch", "10.0a", "--torch", "2.6"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("10.0a is not accepted by torch 2.6") && stderr.contains("2.7"),
        "{stderr}"
    );
    let (code, _, stderr) = xtask(&["archs", "--arch", "9.0", "--gpu", "Voodoo 5"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown GPU `Voodoo 5`"), "{stderr}");
    // The message names the command that lists every known GPU, and that command lists them.
    assert!(stderr.contains("`archs --list-gpus` lists"), "{stderr}");
    let (code, out, err) = xtask(&["archs", "--list-gpus", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["document"], "gpus");
    let gpus = v["gpus"].as_array().unwrap();
    let known = archsmith::kb::kb().gpus.len();
    assert_eq!(gpus.len(), known);
    assert!(
        stderr.contains(&format!("one of the {known} GPUs")),
        "{stderr}"
    );
    assert!(gpus.iter().any(|g| g["name"] == "H100" && g["cc"] == "9.0"));
}

#[test]
fn hostile_specs_never_panic() {
    for spec in [
        "",
        ",,,",
        "+PTX",
        "\u{feff}9.0",
        "9.0+PTX+PTX",
        "sm_",
        "99999.9",
        "Hopper(8.0)",
        "💥",
        "9.\u{7f}0",
    ] {
        let (code, _, stderr) = xtask(&["archs", "--arch", spec]);
        assert_eq!(code, 2, "{spec:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{spec:?}: {stderr}");
    }
}

#[test]
fn doctor_runs_without_a_gpu_and_answers_for_a_named_one() {
    let (code, stdout, stderr) = xtask(&[
        "doctor",
        "--gpu",
        "RTX 5090",
        "--driver",
        "595.71.05",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let options = v["plan_for"]["torch"].as_array().unwrap();
    assert!(options
        .iter()
        .any(|o| o["variant"] == "cu128" && o["runs"] == true));
    assert!(options
        .iter()
        .filter(|o| o["runs"] == true)
        .all(|o| o["variant"].as_str().unwrap() >= "cu128"));
    let (code, stdout, _) = xtask(&["doctor", "--driver", "470.161.03"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("driver 470.161.03"), "{stdout}");
}

#[test]
fn verdicts_say_when_the_chosen_cuda_cannot_build_for_the_gpu() {
    let (code, stdout, _) = xtask(&[
        "archs", "--arch", "7.5", "--cuda", "13.0", "--gpu", "V100", "--json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let reason = v["gpus"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("CUDA 13.0 cannot compile for CC 7.0") && reason.contains("12.9 or older"),
        "{reason}"
    );
    // With a CUDA that can, no such caveat.
    let (_, stdout, _) = xtask(&[
        "archs", "--arch", "7.5", "--cuda", "12.9", "--torch", "2.8", "--gpu", "V100", "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(!v["gpus"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("cannot compile"));
}

/// `--torch` alone plans for the CUDA that release is built with on PyPI (torch 2.6.0: cu124), so
/// planning torch 2.6.0's own wheel list for an L4 answers instead of failing on CUDA 13.
#[test]
fn torch_alone_brings_its_pypi_cuda() {
    let (code, out, err) = xtask(&[
        "archs",
        "--arch",
        "5.0;6.0;7.0;7.5;8.0;8.6;9.0",
        "--torch",
        "2.6.0",
        "--gpu",
        "L4",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["cuda"]["version"], "12.4");
    assert_eq!(v["cuda"]["from_torch"], true);
    assert_eq!(v["cuda"]["assumed"], false);
    assert_eq!(v["gpus"][0]["runs"], true);
    assert_eq!(v["gpus"][0]["via"], "sm_86");
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("the variant torch 2.6.0 is built with on PyPI (cu124)"),
        "{notes}"
    );
    // An explicit --cuda still wins.
    let (code, out, _) = xtask(&[
        "archs", "--arch", "8.6", "--torch", "2.6.0", "--cuda", "12.6", "--json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (
            v["cuda"]["version"].as_str(),
            v["cuda"]["from_torch"].as_bool()
        ),
        (Some("12.6"), Some(false))
    );
}

/// The driver is honoured for every CUDA, including a release whose own driver floor the knowledge
/// base does not record (13.5): PTX from it needs at least the newest floor of an older 13.x.
#[test]
fn an_old_driver_cannot_jit_ptx_of_any_cuda() {
    for cuda in [None, Some("13.0"), Some("13.5")] {
        let mut args = vec![
            "archs",
            "--arch",
            "8.0+PTX",
            "--gpu",
            "H100",
            "--driver",
            "470.161.03",
            "--json",
        ];
        if let Some(c) = cuda {
            args.extend(["--cuda", c]);
        }
        let (code, out, err) = xtask(&args);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["gpus"][0]["runs"], false,
            "CUDA {cuda:?}: {}",
            v["gpus"][0]
        );
        assert!(v["gpus"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("driver 470.161.03 is older than"));
    }
}

/// Runs the binary with its stdout a pipe whose reader is already gone (`… | head -c 0`), so the
/// first write fails with EPIPE whatever the output's size.
fn with_closed_stdout(args: &[&str]) -> (i32, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_archsmith"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run archsmith");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 50: `archs … --json | head -c 10` exited 101 with std's "failed printing to stdout"
/// panic and a backtrace. Every output form ends quietly on a closed pipe: nothing on stderr, and
/// (issue 60) the status its work decides, not 0: `codemod --check` on a file it would change
/// exits 1 whether or not anyone reads the findings.
#[test]
fn a_closed_pipe_ends_every_output_form_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let cu = dir.path().join("legacy.cu");
    std::fs::write(
        &cu,
        "void f(at::Tensor x) { AT_CHECK(x.dim() == 2, \"2-D\"); }\n",
    )
    .unwrap();
    let cu = cu.to_str().unwrap();
    for (args, status) in [
        (&["archs", "--arch", "7.5,8.9,9.0", "--json"][..], 0),
        (&["archs", "--arch", "7.5,8.9,9.0"], 0),
        (&["archs", "--list-gpus"], 0),
        (&["codemod", "--check", "--format", "sarif", cu], 1),
        (&["codemod", "--check", "--format", "plain", cu], 1),
        (&["codemod", "--dry-run", cu], 0),
        (&["completions", "bash"], 0),
    ] {
        let (code, stderr) = with_closed_stdout(args);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
        assert_eq!(code, status, "{args:?}: {stderr}");
    }
}

/// Issue 50: a spec repeating `7.5` 25,000 times printed 24,999 identical "listed more than once"
/// lines (1 MB). One note per repeated arch or name, with its count.
#[test]
fn repeated_archs_and_names_get_one_note_each() {
    let spec = vec!["7.5"; 25_000].join(",") + ",Turing,Turing,8.9";
    let (code, stdout, stderr) = xtask(&["archs", "--arch", &spec, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let notes: Vec<&str> = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes.contains(&"7.5 listed 25002 times; merged"),
        "{notes:?}"
    );
    assert!(
        notes.contains(&"Turing listed 2 times; merged"),
        "{notes:?}"
    );
    assert!(notes.len() <= 4, "{notes:?}");
    let (_, table, _) = xtask(&["archs", "--arch", &spec]);
    assert!(table.len() < 4000, "{} bytes:\n{table}", table.len());
}

/// Issue 60: a GPU with a matching SASS image still runs nothing under a driver older than the
/// build's CUDA major needs (CUDA 13 needs ≥ 580): `archs` says so, as `doctor` does.
#[test]
fn a_driver_below_the_cuda_floor_runs_nothing_even_with_matching_sass() {
    let (code, stdout, stderr) = xtask(&[
        "archs", "--arch", "8.0", "--gpu", "A100", "--driver", "535.54", "--cuda", "13.2", "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let gpu = &v["gpus"][0];
    assert_eq!(gpu["runs"], false, "{gpu}");
    let reason = gpu["reason"].as_str().unwrap();
    assert!(reason.contains("driver 535.54 < 580"), "{reason}");
    // The same driver runs a CUDA 12 build of it.
    let (_, stdout, _) = xtask(&[
        "archs", "--arch", "8.0", "--gpu", "A100", "--driver", "535.54", "--cuda", "12.4", "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["gpus"][0]["runs"], true, "{}", v["gpus"][0]);
}

/// Issue 60: `--torch 2.15.0+cpu` was "planned for CUDA 13.2, the variant … is built with": a
/// CPU build has no CUDA, and the note says so.
#[test]
fn a_cpu_torch_is_said_to_run_no_gpu_code() {
    let (code, stdout, stderr) =
        xtask(&["archs", "--arch", "8.9", "--torch", "2.15.0+cpu", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("torch 2.15.0+cpu is a CPU-only build"),
        "{notes}"
    );
    assert!(!notes.contains("the variant torch"), "{notes}");
}
