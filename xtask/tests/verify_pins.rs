//! `cargo xtask verify pins` on a fixture built from a real situation
//! (`tests/fixtures/pins-repo`: requirements.txt pins torch==2.3.1+cu121 while pyproject.toml
//! allows torch>=2.0,<2.3) and on small files written here.

mod support;

use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn pins(path: &Path, extra: &[&str]) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["verify", "pins"])
        .arg(path)
        .args(extra)
        .arg("--json")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), v, stderr)
}

fn finding<'a>(v: &'a Value, kind: &str) -> Option<&'a Value> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == kind)
}

#[test]
fn the_fixture_repository_contradicts_itself_across_files() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pins-repo");
    let (code, v, stderr) = pins(&repo, &["--gpu", "RTX 5090", "--python", "3.13"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(v["schema"], 1);
    let c = finding(&v, "contradiction").expect("the contradiction");
    let places: Vec<&str> = c["places"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        places[0].ends_with("pins-repo/requirements.txt:4"),
        "{places:?}"
    );
    assert!(
        places[1].ends_with("pins-repo/pyproject.toml:6"),
        "{places:?}"
    );
    assert!(c["message"]
        .as_str()
        .unwrap()
        .contains("`torch==2.3.1+cu121` and `torch>=2.0,<2.3`"));
    assert!(
        c["fix"]
            .as_str()
            .unwrap()
            .contains("to include 2.3.1+cu121"),
        "{c}"
    );
    let variant = finding(&v, "cuda variant").expect("cu121 vs cu118");
    assert!(
        variant["message"]
            .as_str()
            .unwrap()
            .contains("torchaudio==2.3.1+cu118 → cu118"),
        "{variant}"
    );
    assert!(finding(&v, "python").unwrap()["message"]
        .as_str()
        .unwrap()
        .contains("no wheel for Python 3.13"));
    let gpu = finding(&v, "gpu").unwrap();
    assert!(
        gpu["fix"]
            .as_str()
            .unwrap()
            .starts_with("torch ≥ 2.7 with cu128"),
        "{gpu}"
    );
    // The pairing in the fixture is right (torch 2.3.1 with torchvision 0.18.1): no finding.
    assert!(finding(&v, "pairing").is_none());
}

#[test]
fn pairs_markers_and_clean_files() {
    let dir = support::scratch("verify-pins");
    // The knowledge base pairs torch 2.4.1 with torchvision 0.19.1, not 0.18.1.
    std::fs::write(
        dir.join("requirements.txt"),
        "torch==2.4.1\ntorchvision==0.18.1\n",
    )
    .unwrap();
    let (code, v, _) = pins(&dir, &[]);
    assert_eq!(code, 1);
    let p = finding(&v, "pairing").expect("pairing");
    assert!(
        p["message"]
            .as_str()
            .unwrap()
            .contains("torch 2.4.1 is released with torchvision 0.19.1, not 0.18.1"),
        "{p}"
    );
    // Different pins under markers that cannot both hold are not a contradiction.
    std::fs::write(
        dir.join("requirements.txt"),
        "torch==2.3.1 ; python_version < \"3.12\"\ntorch==2.6.0 ; python_version >= \"3.12\"\n",
    )
    .unwrap();
    let (code, v, _) = pins(&dir, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["requirements"], 2);
    // A broken requirement names its file and line; no requirement files at all is bad input.
    std::fs::write(dir.join("requirements.txt"), "numpy\ntorch>=>2\n").unwrap();
    let (code, _, stderr) = pins(&dir, &[]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("requirements.txt:2: `torch>=>2` is not a PEP 508 requirement"),
        "{stderr}"
    );
    // Nightlies and release candidates are PEP 440 versions like any other: the CUDA variants a
    // nightly names are compared, and an rc is judged against the GPU like its release.
    std::fs::write(
        dir.join("requirements.txt"),
        "torch==2.8.0.dev20250601+cu128\ntorchvision==0.21.0+cu124\n",
    )
    .unwrap();
    let (code, v, _) = pins(&dir, &[]);
    assert_eq!(code, 1);
    let m = finding(&v, "cuda variant").expect("cuda variant")["message"].to_string();
    assert!(m.contains("torch==2.8.0.dev20250601+cu128 → cu128"), "{m}");
    std::fs::write(dir.join("requirements.txt"), "torch==2.6.0rc1+cu124\n").unwrap();
    let (code, v, _) = pins(&dir, &["--gpu", "RTX 5090"]);
    assert_eq!(code, 1);
    let m = finding(&v, "gpu").expect("gpu")["message"].to_string();
    assert!(
        m.contains("torch 2.6.0rc1+cu124 (cu124) has no image for RTX 5090"),
        "{m}"
    );
    std::fs::remove_file(dir.join("requirements.txt")).unwrap();
    let (code, _, stderr) = pins(&dir, &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no requirements*.txt"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 50: with stdout not a terminal (the plain `file:line:col` form), the contradiction's line
/// named only its first place; the other pin's place and the fix were in the table alone.
#[test]
fn the_plain_line_names_both_places_and_the_fix() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pins-repo");
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["verify", "pins"])
        .arg(&repo)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains(": contradiction "))
        .unwrap_or_else(|| panic!("no plain contradiction line:\n{stdout}"));
    assert!(line.contains("requirements.txt:"), "{line}");
    assert!(
        line.contains("(also at ") && line.contains("pyproject.toml:"),
        "{line}"
    );
    assert!(line.contains("; fix: "), "{line}");
    assert_eq!(out.status.code(), Some(1), "{stdout}");
}
