//! Test support: provisions what the side-by-side tests need, once per machine, under
//! `archsmith::paths::cache_dir()`, safe against parallel test processes (a file lock plus an
//! atomic rename of a fully built directory).
//!
//! The CUDA toolkit comes from NVIDIA's PyPI wheels. This is a stop-gap until
//! `archsmith::toolchain` (branch wip-tc) lands on main; then `cuda_toolkit` switches to it.
#![allow(dead_code)]

use archsmith::paths;
use archsmith::process::{which, Cmd};
use std::fs::File;
use std::path::{Path, PathBuf};

/// The CUDA release the tests build with: 13.5 is the first whose nvcc has `-concat`.
pub const CUDA: &str = "13.5";
pub const TORCH: &str = "2.15.0";

/// Runs `make` to fill `dir` unless it is already complete. `make` writes into a fresh temporary
/// sibling that is renamed into place, so a half-built directory is never visible.
fn provision(dir: &Path, make: impl FnOnce(&Path)) -> PathBuf {
    let done = dir.join(".complete");
    if done.exists() {
        return dir.to_path_buf();
    }
    let parent = dir.parent().expect("cache dir has a parent");
    std::fs::create_dir_all(parent).unwrap();
    let name = dir
        .file_name()
        .expect("cache dir has a name")
        .to_string_lossy()
        .into_owned();
    let lock_path = parent.join(format!("{name}.lock"));
    let lock = File::create(&lock_path)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", lock_path.display()));
    lock.lock()
        .unwrap_or_else(|e| panic!("cannot lock {}: {e}", lock_path.display()));
    if !done.exists() {
        let tmp = parent.join(format!("{name}.tmp{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        make(&tmp);
        std::fs::write(tmp.join(".complete"), b"").unwrap();
        let _ = std::fs::remove_dir_all(dir);
        std::fs::rename(&tmp, dir)
            .unwrap_or_else(|e| panic!("cannot move {} into place: {e}", tmp.display()));
    }
    drop(lock);
    dir.to_path_buf()
}

/// CUDA_HOME of a toolkit with nvcc, fatbinary, nvlink, ptxas, cuobjdump, the runtime and headers.
pub fn cuda_toolkit() -> PathBuf {
    let dir = paths::toolchains_dir().join(format!("tests-cuda-{CUDA}"));
    let root = provision(&dir, |tmp| {
        let spec = format!("cuda-toolkit[nvcc,nvvm,crt,cudart,cccl,cuobjdump]=={CUDA}.*");
        let target = tmp.join("site");
        let cmd = if which("uv").is_some() {
            Cmd::new("uv")
                .args([
                    "pip", "install", "--quiet", "--python", "python3", "--target",
                ])
                .arg(&target)
                .arg(&spec)
        } else {
            Cmd::new("python3")
                .args(["-m", "pip", "install", "--quiet", "--no-deps", "--target"])
                .arg(&target)
                .arg(&spec)
        };
        cmd.read()
            .unwrap_or_else(|e| panic!("provisioning CUDA {CUDA} from PyPI: {e:#}"));
        let home = target.join("nvidia/cu13");
        std::os::unix::fs::symlink("lib", home.join("lib64")).unwrap();
        if !home.join("lib/libcudart.so").exists() {
            std::os::unix::fs::symlink("libcudart.so.13", home.join("lib/libcudart.so")).unwrap();
        }
    });
    root.join("site/nvidia/cu13")
}

pub fn tool(name: &str) -> PathBuf {
    let p = cuda_toolkit().join("bin").join(name);
    assert!(
        p.exists(),
        "{} missing from the provisioned toolkit",
        p.display()
    );
    p
}

/// The torch wheel from PyPI, downloaded once into `paths::downloads_dir()`.
pub fn torch_wheel() -> PathBuf {
    let dir = paths::downloads_dir();
    let find = || {
        std::fs::read_dir(&dir)
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| {
                let n = p.file_name().unwrap_or_default().to_string_lossy();
                n.starts_with(&format!("torch-{TORCH}-")) && n.ends_with(".whl")
            })
    };
    if let Some(w) = find() {
        return w;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let lock = File::create(dir.join(format!("torch-{TORCH}.lock"))).unwrap();
    lock.lock().unwrap();
    if let Some(w) = find() {
        return w;
    }
    // pip writes to a temporary name and renames, so a concurrent reader never sees half a wheel.
    Cmd::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
        ])
        .arg(format!("torch=={TORCH}"))
        .arg("-d")
        .arg(&dir)
        .read()
        .unwrap_or_else(|e| panic!("downloading torch {TORCH}: {e:#}"));
    find().expect("pip reported success but no torch wheel is in the downloads dir")
}

/// A fresh scratch directory for one test, removed by the caller when done.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("archsmith-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
