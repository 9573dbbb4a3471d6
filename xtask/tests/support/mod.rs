//! Test support: what the side-by-side tests need, provisioned once per machine under
//! `archsmith::paths::cache_dir()` by archsmith's own code (`toolchain::ensure` and
//! `pypi::download_wheel`, both locked and staged, so parallel test processes do not race).
#![allow(dead_code)]

use archsmith::toolchain::{self, Toolchain};
use archsmith::version::Version;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The CUDA release the tests build with: 13.5 is the first whose nvcc has `-concat`.
pub const CUDA: &str = "13.5";
pub const TORCH: &str = "2.15.0";

pub fn cuda() -> &'static Toolchain {
    static TC: OnceLock<Toolchain> = OnceLock::new();
    TC.get_or_init(|| {
        let v: Version = CUDA.parse().expect("valid version");
        toolchain::ensure(&v).unwrap_or_else(|e| panic!("provisioning CUDA {CUDA}: {e:#}"))
    })
}

pub fn cuobjdump() -> PathBuf {
    let p = cuda().cuobjdump();
    assert!(
        p.exists(),
        "{} missing from the CUDA {CUDA} toolchain",
        p.display()
    );
    p
}

/// The torch wheel from PyPI, downloaded once into `paths::downloads_dir()`.
pub fn torch_wheel() -> PathBuf {
    let v: Version = TORCH.parse().expect("valid version");
    archsmith::downloads::download_wheel("torch", &v)
        .unwrap_or_else(|e| panic!("downloading torch {TORCH}: {e:#}"))
}

/// A fresh scratch directory for one test, removed by the caller when done.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("archsmith-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
