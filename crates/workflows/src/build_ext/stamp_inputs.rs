//! The build stamp: a hash of everything that decides what a build produces, and the record next
//! to each delivered wheel that lets an unchanged request return it without building.
//!
//! Inputs: the source hash, torch's exact version, the Python version, nvcc's exact version, the
//! exported `TORCH_CUDA_ARCH_LIST`, the front end, and the compiler-flag variables the caller's
//! environment passes into the build. Job counts and compiler caches are left out: they change how
//! fast a wheel is made, not what is in it.
//!
//! Records, lookup and delivery are [`crate::stamp`]'s.

use super::EnvInfo;
use crate::toolchain::Toolchain;
use std::collections::BTreeMap;

/// Bump when what a build does changes in a way that changes its wheel (2: a stable-ABI wheel
/// gets its manylinux tag).
const SCHEMA: u32 = 2;

/// Environment variables that change what a build compiles.
pub const FLAG_VARS: &[&str] = &[
    "CC",
    "CXX",
    "CFLAGS",
    "CXXFLAGS",
    "CPPFLAGS",
    "LDFLAGS",
    "CUDAHOSTCXX",
    "NVCC_CCBIN",
    "NVCC_FLAGS",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "TORCH_NVCC_FLAGS",
];

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Inputs {
    pub schema: u32,
    pub source_sha256: String,
    pub torch: String,
    pub python: String,
    pub nvcc: String,
    pub torch_cuda_arch_list: String,
    pub builder: String,
    pub flags: BTreeMap<String, String>,
    /// `--own-arch-flags`: built without the arch guard (left out of the key when false, so
    /// stamps written before the guard existed still match).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub own_arch_flags: bool,
    /// `--cpu-only`: built without `FORCE_CUDA` (left out of the key when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cpu_only: bool,
    /// A stable-ABI build's `TORCH_TARGET_VERSION` (left out of the key when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_abi_target: Option<String>,
}

impl Inputs {
    pub fn new(
        source_hash: &str,
        env: &EnvInfo,
        tc: &Toolchain,
        arch_list: &str,
        builder: &str,
    ) -> Inputs {
        let flags = FLAG_VARS
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect();
        Inputs {
            schema: SCHEMA,
            source_sha256: source_hash.to_string(),
            torch: env.torch.to_string(),
            python: env.python_version.clone(),
            nvcc: tc.nvcc_version.to_string(),
            torch_cuda_arch_list: arch_list.to_string(),
            builder: builder.to_string(),
            flags,
            own_arch_flags: false,
            cpu_only: false,
            stable_abi_target: None,
        }
    }

    /// sha256 of the inputs' canonical JSON (fields in declaration order, flags sorted).
    pub fn key(&self) -> String {
        crate::stamp::key(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(arch: &str) -> Inputs {
        Inputs {
            schema: SCHEMA,
            source_sha256: "ab".into(),
            torch: "2.15.0+cu132".into(),
            python: "3.11.7".into(),
            nvcc: "13.2.86".into(),
            torch_cuda_arch_list: arch.into(),
            builder: "pip wheel".into(),
            flags: BTreeMap::new(),
            own_arch_flags: false,
            cpu_only: false,
            stable_abi_target: None,
        }
    }

    #[test]
    fn the_arch_list_is_part_of_the_stamp() {
        assert_eq!(inputs("7.5").key(), inputs("7.5").key());
        assert_ne!(inputs("7.5;8.9").key(), inputs("7.5").key());
        let own = Inputs {
            own_arch_flags: true,
            ..inputs("7.5")
        };
        assert_ne!(own.key(), inputs("7.5").key());
    }
}
