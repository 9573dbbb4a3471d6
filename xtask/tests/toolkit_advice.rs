//! The "CUDA_HOME environment variable is not set" case: a torch built with CUDA 12.4 (torch
//! 2.6.0, PyPI's default build) on a machine with no CUDA toolkit. PyPI has no nvcc for 12.x and
//! torch refuses another major, so the answer is never "install CUDA 13.2": build-ext installs
//! NVIDIA's 12.4 from Debian's archive itself (tests/toolchain_debian.rs); where it cannot (offline,
//! nothing cached), doctor and build-ext give the same advice (that install, a CUDA 12.x toolkit
//! from the distribution or NVIDIA, or a torch built with CUDA 13.x as one pip command), and
//! build-ext stops before compiling.
//!
//! PyPI's torch 2.0.1 (cu117) with no CUDA on the machine at all builds with CUDA 11.8 from
//! Debian's archive, found without flags: `tests/build_ext.rs`'s variants test.
//!
//! The env holds torch 2.6.0's own `torch/version.py`, `torch/__init__.py` and METADATA, read from
//! its manylinux wheel on PyPI by HTTP range (about a megabyte, not the 766 MB wheel): archsmith
//! reads an env's torch from those files without importing it.

use archsmith::pypi::Pypi;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A venv under `home/envs/` (where doctor looks) whose site-packages holds torch 2.6.0's files.
fn cu124_env(home: &Path) -> PathBuf {
    torch_files_env(home, "2.6.0", "torch-2.6.0-cu124")
}

/// A venv `home/envs/NAME` whose site-packages holds torch `version`'s `version.py`, `__init__.py`
/// and METADATA, read from its cp311 manylinux wheel on PyPI by range.
fn torch_files_env(home: &Path, version: &str, name: &str) -> PathBuf {
    let root = home.join("envs").join(name);
    let status = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&root)
        .status()
        .unwrap();
    assert!(status.success());
    let python = root.join("bin/python");
    let site = Command::new(&python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .unwrap();
    let site = PathBuf::from(String::from_utf8(site.stdout).unwrap().trim());
    let pypi = Pypi::recorded(archsmith::pypi::repository_recordings());
    let wheel = pypi
        .files("torch")
        .unwrap()
        .into_iter()
        .find(|f| {
            f.wheel_version() == Some(version)
                && f.filename.contains("cp311")
                && f.filename.contains("manylinux")
                && f.filename.contains("x86_64")
        })
        .unwrap_or_else(|| panic!("torch {version}'s cp311 manylinux wheel on PyPI"));
    let metadata = format!("torch-{version}.dist-info/METADATA");
    let names = ["torch/version.py", "torch/__init__.py", metadata.as_str()];
    let members = pypi.members(&wheel, &names).unwrap();
    for (name, bytes) in names.iter().zip(members) {
        let dest = site.join(name);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(
            &dest,
            bytes.unwrap_or_else(|| panic!("{name} in the wheel")),
        )
        .unwrap();
    }
    python
}

fn xtask(args: &[&str], home: &Path) -> (Option<i32>, String, String) {
    // No CUDA anywhere this test can see: no CUDA_HOME, a PATH without nvcc.
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .env("ARCHSMITH_HOME", home)
        .env_remove("CUDA_HOME")
        .env_remove("CUDA_PATH")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The advice paragraph: from "torch 2.6.0+cu124 was built with" to the end of the pip line.
fn advice(text: &str) -> String {
    let start = text
        .find("torch 2.6.0+cu124 was built with CUDA 12.4")
        .unwrap_or_else(|| panic!("no advice in:\n{text}"));
    let rest = &text[start..];
    let end = rest.find("), then `").map_or(rest.len(), |i| i);
    rest[..end].to_string()
}

#[test]
fn a_cu12x_torch_without_a_toolkit_gets_advice_that_fits_it() {
    if Path::new("/usr/bin/nvcc").exists() {
        eprintln!("skipped: this machine has a system nvcc, the case is a machine without one");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let python = cu124_env(home.path());
    let ext = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tinyext");

    // Offline with a fresh archsmith home: nothing to reuse, nothing may be downloaded.
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args([
            "build-ext",
            ext.to_str().unwrap(),
            "--arch",
            "8.9",
            "--python",
        ])
        .arg(&python)
        .env("ARCHSMITH_HOME", home.path())
        .env("ARCHSMITH_OFFLINE", "1")
        .env_remove("CUDA_HOME")
        .env_remove("CUDA_PATH")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let (code, stderr) = (out.status.code(), String::from_utf8_lossy(&out.stderr));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("CUDA 12.4's toolkit (Debian trixie's nvidia-cuda-toolkit)"),
        "{stderr}"
    );
    let from_build_ext = advice(&stderr);
    for says in [
        "toolchain install --cuda 12.4`: NVIDIA's CUDA 12.x from Debian's archive, no root",
        "its extensions compile only with a CUDA 12.x nvcc, and PyPI has no nvcc for CUDA 12.x",
        "Debian 13 (trixie): apt-get install nvidia-cuda-toolkit (with the non-free component enabled) (CUDA 12.4)",
        "cuda-toolkit-12-4",
        "or move to a torch built with CUDA 13.",
        "pip install torch==",
        "needs NVIDIA driver ≥ 580",
    ] {
        assert!(from_build_ext.contains(says), "lacks `{says}`:\n{stderr}");
    }
    assert!(
        !stderr.contains("Or use a CUDA 13.x release"),
        "a CUDA 13 toolkit offered for a cu124 torch:\n{stderr}"
    );

    let (code, stdout, stderr) = xtask(&["doctor", "--json"], home.path());
    assert_eq!(code, Some(0), "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let notes: Vec<&str> = doc["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    let note = notes
        .iter()
        .find(|n| n.contains("torch 2.6.0+cu124 was built with"))
        .unwrap_or_else(|| panic!("doctor's notes: {notes:#?}"));
    assert_eq!(
        advice(note),
        from_build_ext,
        "doctor and build-ext disagree"
    );
    assert!(
        !notes.iter().any(|n| n.contains("no CUDA toolkit found: `")),
        "doctor still offers CUDA 13 alone: {notes:#?}"
    );
}

/// torch 2.0.1's cpp_extension imports `pkg_resources`, which setuptools 82 removed: a user's env
/// with torch 2.0.1 and today's setuptools is refused before anything compiles, with the pin that
/// fixes it (the knowledge base's `[[torch_env_pin]]`), not left to fail in `import
/// torch.utils.cpp_extension` inside the build.
#[test]
fn an_older_torch_beside_a_setuptools_without_pkg_resources_is_refused_with_the_pin() {
    let home = tempfile::tempdir().unwrap();
    let python = torch_files_env(home.path(), "2.0.1", "torch-2.0.1-new-setuptools");
    archsmith::python::installer::Installer::detect()
        .unwrap()
        .install_into(&python, &["setuptools==84.2.1".to_string()])
        .unwrap();
    let ext = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tinyext");
    let (code, _, stderr) = xtask(
        &[
            "build-ext",
            ext.to_str().unwrap(),
            "--arch",
            "7.5",
            "--python",
            python.to_str().unwrap(),
        ],
        home.path(),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("torch 2.0.1+cu117 needs setuptools<82; the env has setuptools 84.2.1: building any extension stops at `import torch.utils.cpp_extension`"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "{} -m pip install 'setuptools<82'",
            python.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("building tinyext"), "{stderr}");
}
