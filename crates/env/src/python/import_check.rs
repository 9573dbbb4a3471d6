//! What Python really does with a compiled file: the ground truth the load check is measured
//! against (tests, `bench load-check`). One fresh interpreter per file, so that one crash or one
//! library left loaded cannot change the next answer.

use crate::process::Cmd;
use anyhow::{Context, Result};
use serde::Deserialize;
use std::path::Path;

/// Imports torch when the env has it (as an extension's package does first), loads the
/// package's own libraries its `__init__` would load first (`preload`, as
/// `torch.ops.load_library` does; `RTLD_GLOBAL:PATH` loads PATH global, as a package that makes
/// `torch._C` global first does), then loads the
/// file as the import system would: a module only when one of this Python's
/// `EXTENSION_SUFFIXES` ends its name, through `ExtensionFileLoader` (`dlopen` and `PyInit_`;
/// the package's `__init__` is not run), a plain library through `ctypes.CDLL` (what
/// `torch.ops.load_library` does). A module file with more in its stem than the module's name
/// (`MPI.mpich.cpython-312-….so`) is a variant its package chooses and loads with the same
/// loader (mpi4py picks its MPI build that way): loaded as that package does.
const SCRIPT: &str = r#"
import sys, os, json, ctypes, importlib.machinery, importlib.util
path, kind, name = sys.argv[1:4]
out = {"loads": False, "error": None}
try:
    import torch
except ImportError:
    pass
try:
    for library in sys.argv[4:]:
        if library.startswith("RTLD_GLOBAL:"):
            ctypes.CDLL(library[len("RTLD_GLOBAL:"):], mode=ctypes.RTLD_GLOBAL)
        else:
            ctypes.CDLL(library)
    if kind == "python-module":
        # The finder looks for exactly NAME + suffix, for each suffix of this Python.
        base = name.rpartition(".")[2]
        file = os.path.basename(path)
        variant = any(file.startswith(base + ".") and file.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES if s != ".so")
        if file not in [base + s for s in importlib.machinery.EXTENSION_SUFFIXES] and not variant:
            raise ModuleNotFoundError(f"No module named {name!r} (no file {base}<suffix> for this Python's extension suffixes)")
        loader = importlib.machinery.ExtensionFileLoader(name, path)
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        importlib.util.module_from_spec(spec)
    else:
        ctypes.CDLL(path)
    out["loads"] = True
except BaseException as e:
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"#;

/// What loading one file did.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct ImportOutcome {
    pub loads: bool,
    /// The exception, or how the interpreter died.
    pub error: Option<String>,
}

impl ImportOutcome {
    /// Whether the dynamic linker (or the import system's name and init lookup) refused the
    /// file, as opposed to the module's own init code raising once it was linked.
    pub fn link_failed(&self) -> bool {
        let Some(e) = &self.error else { return false };
        !self.loads
            && [
                "undefined symbol",
                "cannot open shared object file",
                "version `",
                "No module named",
                "does not define module export function",
                "wrong ELF class",
                "invalid ELF header",
            ]
            .iter()
            .any(|m| e.contains(m))
    }
}

/// Loads `file` (a `python-module` named `name`, or a `library`) in a fresh `python`, after the
/// libraries in `preload`.
pub fn import_in_fresh_interpreter(
    python: &Path,
    file: &Path,
    kind: &str,
    name: &str,
    preload: &[String],
) -> Result<ImportOutcome> {
    let out = Cmd::new(python)
        .args(["-I", "-c", SCRIPT])
        .arg(file)
        .args([kind, name])
        .args(preload)
        .output()?;
    match out.stdout.lines().last().filter(|l| l.starts_with('{')) {
        Some(line) => serde_json::from_str(line)
            .with_context(|| format!("reading the import check's answer `{line}`")),
        None => Ok(ImportOutcome {
            loads: false,
            error: Some(format!(
                "the interpreter exited with {:?} before answering: {}",
                out.status,
                out.stderr.lines().last().unwrap_or("")
            )),
        }),
    }
}
