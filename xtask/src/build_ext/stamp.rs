//! The build stamp: a hash of everything that decides what a build produces, and the record next
//! to each delivered wheel that lets an unchanged request return it without building.
//!
//! Inputs: the source hash, torch's exact version, the Python version, nvcc's exact version, the
//! exported `TORCH_CUDA_ARCH_LIST`, the front end, and the compiler-flag variables the caller's
//! environment passes into the build. Job counts and compiler caches are left out: they change how
//! fast a wheel is made, not what is in it.
//!
//! The record `OUT/<wheel>.archsmith.json` holds the stamp, the inputs, the wheel's sha256 and the
//! build's outcome; a record counts only while the wheel beside it still has that sha256.

use super::source::{hash_file, hex};
use super::{EnvInfo, Outcome};
use crate::toolchain::Toolchain;
use anyhow::{Context, Result};
use fs_err as fs;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Bump when what a build does changes in a way that changes its wheel.
const SCHEMA: u32 = 1;

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
        }
    }

    /// sha256 of the inputs' canonical JSON (fields in declaration order, flags sorted).
    pub fn key(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        hex(&Sha256::digest(&json))
    }
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Record {
    stamp: String,
    inputs: Inputs,
    wheel_sha256: String,
    outcome: Outcome,
}

fn record_path(out: &Path, wheel_name: &str) -> PathBuf {
    out.join(format!("{wheel_name}.archsmith.json"))
}

/// The outcome recorded for `key` in `out`, if its wheel is still there unchanged.
pub fn lookup(out: &Path, key: &str) -> Option<Outcome> {
    for entry in fs::read_dir(out).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(wheel_name) = name.strip_suffix(".archsmith.json") else {
            continue;
        };
        let Ok(text) = fs::read(entry.path()) else {
            continue;
        };
        let Ok(rec) = serde_json::from_slice::<Record>(&text) else {
            continue;
        };
        if rec.stamp != key {
            continue;
        }
        let wheel = out.join(wheel_name);
        if hash_file(&wheel).ok().as_deref() == Some(rec.wheel_sha256.as_str()) {
            let mut o = rec.outcome;
            o.wheel = wheel;
            return Some(o);
        }
    }
    None
}

/// Removes `.NAME.partial-PID` files that a killed run (Ctrl-C during the final copy) left in `out`.
pub fn remove_stale_partials(out: &Path) {
    let Ok(rd) = fs::read_dir(out) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            continue;
        }
        let Some((_, pid)) = name.rsplit_once(".partial-") else {
            continue;
        };
        if pid
            .parse::<u32>()
            .is_ok_and(|p| !Path::new(&format!("/proc/{p}")).exists())
        {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Moves the built wheel into `out` atomically (a same-directory rename of a complete copy).
pub fn deliver(built: &Path, out: &Path) -> Result<PathBuf> {
    let name = built
        .file_name()
        .context("wheel without a file name")?
        .to_string_lossy()
        .into_owned();
    let dest = out.join(&name);
    let partial = out.join(format!(".{name}.partial-{}", std::process::id()));
    fs::copy(built, &partial)
        .with_context(|| format!("copying the wheel to {}", partial.display()))?;
    // An older record for this file name describes the wheel being replaced.
    let _ = fs::remove_file(record_path(out, &name));
    fs::rename(&partial, &dest)
        .with_context(|| format!("moving the wheel to {}", dest.display()))?;
    Ok(dest)
}

/// Writes the record for a delivered wheel (atomically).
pub fn record(out: &Path, inputs: &Inputs, outcome: &Outcome) -> Result<()> {
    let name = outcome
        .wheel
        .file_name()
        .context("wheel without a file name")?
        .to_string_lossy()
        .into_owned();
    let rec = Record {
        stamp: inputs.key(),
        inputs: inputs.clone(),
        wheel_sha256: hash_file(&outcome.wheel)?,
        outcome: outcome.clone(),
    };
    let path = record_path(out, &name);
    let tmp = out.join(format!(
        ".{name}.archsmith.json.partial-{}",
        std::process::id()
    ));
    fs::write(&tmp, serde_json::to_vec_pretty(&rec)?)?;
    fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
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
        }
    }

    fn outcome(wheel: PathBuf, stamp: &str) -> Outcome {
        Outcome {
            wheel,
            reused: false,
            stamp: stamp.into(),
            source: "x".into(),
            torch: "2.15.0+cu132".into(),
            cuda: "13.2".into(),
            nvcc: "13.2.86".into(),
            torch_cuda_arch_list: "7.5".into(),
            jobs: 1,
            nvcc_threads: 1,
            builder: "pip wheel".into(),
            log: None,
            build_seconds: 1.0,
            total_seconds: 1.0,
            audit: Default::default(),
            imported: vec![],
            warnings: vec![],
            cache_stats: None,
        }
    }

    #[test]
    fn a_record_counts_only_for_its_stamp_and_its_unchanged_wheel() {
        let scratch = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let built = scratch.path().join("x-1.0-cp311-cp311-linux_x86_64.whl");
        fs::write(&built, b"wheel bytes").unwrap();
        let wheel = deliver(&built, out.path()).unwrap();
        let i = inputs("7.5");
        record(out.path(), &i, &outcome(wheel.clone(), &i.key())).unwrap();
        assert_eq!(lookup(out.path(), &i.key()).unwrap().wheel, wheel);
        assert_ne!(inputs("7.5;8.9").key(), i.key());
        assert!(lookup(out.path(), &inputs("7.5;8.9").key()).is_none());
        // Only the wheel, its record and nothing half-written.
        let mut names: Vec<String> = fs::read_dir(out.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "x-1.0-cp311-cp311-linux_x86_64.whl",
                "x-1.0-cp311-cp311-linux_x86_64.whl.archsmith.json"
            ]
        );
        fs::write(&wheel, b"replaced by someone else").unwrap();
        assert!(lookup(out.path(), &i.key()).is_none());
    }
}
