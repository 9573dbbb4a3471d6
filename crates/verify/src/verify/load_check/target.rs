//! The process an extension would be imported into: a Python env's interpreter with its torch
//! imported. What `import torch` leaves loaded is read from the files (the interpreter and its
//! libraries, `libtorch_global_deps` loaded `RTLD_GLOBAL`, then `torch._C` and everything it
//! needs), without running Python beyond the one probe.

use super::linker::{system_dirs, Objects, Process};
use crate::binary::dynamic::CxxAbi;
use crate::python::probe::{probe, Depth};
use crate::version::Version;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// A Python env to load extensions into.
pub struct Target {
    pub python: PathBuf,
    pub python_version: Version,
    pub torch: Option<Version>,
    pub cuda: Option<Version>,
    pub torch_dir: Option<PathBuf>,
    pub site_packages: PathBuf,
    /// The file name endings this Python imports modules from.
    pub extension_suffixes: Vec<String>,
    /// The C++ string ABI torch's `libc10` exports (Unknown without torch).
    pub torch_abi: CxxAbi,
    pub process: Process,
    /// The same process after a package made torch's libraries global
    /// (`ctypes.CDLL(torch._C.__file__, RTLD_GLOBAL)`, as cuda.core does before loading its
    /// tensor bridge, which binds torch's C shim `aoti_torch_*` without linking libtorch), and
    /// `torch._C`'s path.
    pub torch_global: Option<(Process, PathBuf)>,
    /// torch's shared libraries (`torch/lib/*.so*`), whose exports classify what an extension
    /// needs ([`super::torch_abi`]).
    pub torch_libs: Vec<std::sync::Arc<super::linker::Object>>,
}

impl Target {
    /// Reads the env of `python` (a venv's `bin/python` or any interpreter).
    pub fn from_python(python: &Path, objects: &mut Objects) -> Result<Target> {
        let info = probe(python, Depth::Files)?;
        let exe = match &info.executable {
            Some(e) => e.clone(),
            None => fs_err::canonicalize(python)
                .with_context(|| format!("resolving the interpreter {}", python.display()))?,
        };
        let interpreter = objects.get(&exe).map_err(|e| {
            anyhow::anyhow!(
                "{} is not an ELF interpreter this check can read: {e}",
                exe.display()
            )
        })?;
        let mut process = Process {
            machine: interpreter.machine,
            is_64: interpreter.is_64,
            ld_library_path: std::env::var_os("LD_LIBRARY_PATH")
                .map(|p| {
                    std::env::split_paths(&p)
                        .filter(|d| !d.as_os_str().is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            system_dirs: system_dirs(),
            ..Process::default()
        };
        process.preload(objects, &exe, true).map_err(|e| {
            anyhow::anyhow!(
                "the interpreter {} does not load: missing {e}",
                exe.display()
            )
        })?;
        let mut torch_abi = CxxAbi::Unknown;
        let mut torch_global = None;
        if let Some(dir) = &info.torch_dir {
            let lib = dir.join("lib");
            let global_deps = lib.join("libtorch_global_deps.so");
            // torch loads it RTLD_GLOBAL first; when that fails it preloads the CUDA libraries
            // itself, which this check does not follow (the torch._C closure still finds them).
            if global_deps.is_file() {
                let _ = process.preload(objects, &global_deps, true);
            }
            let c = torch_c_module(dir)?;
            let mut global = process.clone();
            if global.preload(objects, &c, true).is_ok() {
                torch_global = Some((global, c.clone()));
            }
            process.preload(objects, &c, false).map_err(|e| {
                anyhow::anyhow!(
                    "torch in {} does not import: {} cannot find {e}. Reinstall torch there first",
                    python.display(),
                    c.display()
                )
            })?;
            if let Ok(c10) = objects.get(&lib.join("libc10.so")) {
                torch_abi = c10.abi_offered;
            }
        }
        let torch_libs = info
            .torch_dir
            .as_deref()
            .map(|d| super::torch_abi::torch_libraries(d, objects))
            .unwrap_or_default();
        Ok(Target {
            python: python.to_path_buf(),
            python_version: info.python,
            torch: info.torch,
            cuda: info.cuda,
            torch_dir: info.torch_dir,
            site_packages: info.purelib,
            extension_suffixes: info.extension_suffixes,
            torch_abi,
            process,
            torch_global,
            torch_libs,
        })
    }
}

/// `torch/_C.cpython-*.so`.
fn torch_c_module(torch_dir: &Path) -> Result<PathBuf> {
    let entries = fs_err::read_dir(torch_dir)?;
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("_C.") && name.ends_with(".so") {
            return Ok(e.path());
        }
    }
    bail!(
        "{} has no _C extension module: torch there is incomplete; reinstall it",
        torch_dir.display()
    )
}
