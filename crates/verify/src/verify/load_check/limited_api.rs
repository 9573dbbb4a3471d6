//! CPython's limited API for a file tagged `abi3` (`_C.abi3.so`): every Python symbol it needs must
//! be one CPython's own headers declare when `Py_LIMITED_API` is the tag's floor — the names
//! read from the headers of this host's CPython, preprocessed with that `Py_LIMITED_API`, as the
//! compiler of an extension sees them; not from a list kept by hand.

use crate::process::Cmd;
use anyhow::{anyhow, Context, Result};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, OnceLock};

/// One `abi3` file's compliance.
#[derive(Debug, Clone, Serialize)]
pub struct Abi3Check {
    /// The oldest CPython the file claims (`3.10` from a `cp310-abi3` wheel tag; `3.9` untagged).
    pub floor: String,
    /// Python symbols it needs that the limited API of `floor` does not declare.
    pub violations: Vec<String>,
    /// The CPython whose headers said so.
    pub headers: String,
}

/// Whether `shown` (a path, or `WHEEL!member`) names a file built for CPython's limited API.
pub fn claims_abi3(shown: &str) -> bool {
    shown.ends_with(".abi3.so")
}

/// The floor a wheel's tag states (`legacy_demo-0.1-cp310-abi3-linux_x86_64.whl!…` → 3.10).
pub fn floor_of(shown: &str) -> (u32, u32) {
    let re = regex::Regex::new(r"-cp(\d)(\d+)-abi3-").expect("a valid regex");
    re.captures(shown)
        .and_then(|c| Some((c[1].parse().ok()?, c[2].parse().ok()?)))
        .unwrap_or((3, 9))
}

/// Checks the Python symbols among `undefined` against the limited API of `floor`.
pub fn check(undefined: &[&str], floor: (u32, u32)) -> Result<Abi3Check> {
    let (declared, headers) = declared(floor)?;
    let violations = undefined
        .iter()
        .filter(|s| s.starts_with("Py") || s.starts_with("_Py"))
        .filter(|s| !declared.contains(**s))
        .map(|s| s.to_string())
        .collect();
    Ok(Abi3Check {
        floor: format!("{}.{}", floor.0, floor.1),
        violations,
        headers,
    })
}

type Declared = (BTreeSet<String>, String);

/// The functions and data the host CPython's headers declare under `Py_LIMITED_API` = `floor`
/// (read once per floor).
fn declared(floor: (u32, u32)) -> Result<Declared> {
    static SEEN: OnceLock<Mutex<HashMap<(u32, u32), Declared>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    if let Some(d) = seen.lock().map_err(|_| anyhow!("poisoned"))?.get(&floor) {
        return Ok(d.clone());
    }
    let python = crate::python::host_python()?;
    let probe = Cmd::new(&python)
        .args([
            "-c",
            "import sys, sysconfig; print(sysconfig.get_paths()['include']); print('%d.%d.%d' % sys.version_info[:3])",
        ])
        .read()?;
    let mut lines = probe.lines();
    let (include, version) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    let header = std::path::Path::new(include).join("Python.h");
    if !header.is_file() {
        return Err(anyhow!(
            "CPython {version}'s headers are not installed ({} is missing): install its development headers (python3-dev) to check the limited API",
            header.display()
        ));
    }
    let limited = format!("-DPy_LIMITED_API=0x{:02X}{:02X}0000", floor.0, floor.1);
    let text = Cmd::new("cc")
        .args(["-E", "-P", &limited])
        .arg(format!("-I{include}"))
        .arg(&header)
        .read()
        .with_context(|| format!("preprocessing {} with {limited}", header.display()))?;
    let names = declared_names(&text);
    if names.len() < 300 {
        return Err(anyhow!(
            "{} declares only {} names under {limited}: not CPython's headers?",
            header.display(),
            names.len()
        ));
    }
    let d = (names, format!("CPython {version}"));
    seen.lock()
        .map_err(|_| anyhow!("poisoned"))?
        .insert(floor, d.clone());
    Ok(d)
}

/// Each exported declaration's name in preprocessed CPython headers: `PyAPI_FUNC(T) name(…)` and
/// `PyAPI_DATA(T) name;` both expand to a `visibility("default")` attribute.
fn declared_names(text: &str) -> BTreeSet<String> {
    let name = regex::Regex::new(r"\b(_?Py\w*)\s*[(;\[]").expect("a valid regex");
    text.lines()
        .filter_map(|line| {
            let (_, rest) = line.split_once("visibility (\"default\")))")?;
            name.captures(rest).map(|c| c[1].to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_comes_from_the_wheel_tag() {
        assert_eq!(
            floor_of("/d/legacy_demo-0.1-cp310-abi3-linux_x86_64.whl!legacy_demo/_C.abi3.so"),
            (3, 10)
        );
        assert_eq!(floor_of("/d/_C.abi3.so"), (3, 9));
        assert!(
            claims_abi3("x/_C.abi3.so") && !claims_abi3("x/_C.cpython-311-x86_64-linux-gnu.so")
        );
    }

    #[test]
    fn declarations_are_read_from_preprocessed_headers() {
        let text = "extern __attribute__ ((visibility (\"default\"))) PyTypeObject PyFloat_Type;\n\
                    __attribute__ ((visibility (\"default\"))) PyObject * PyModule_Create2(PyModuleDef*, int apiver);\n\
                    __attribute__ ((visibility (\"default\"))) Py_ssize_t PyObject_Size(PyObject *o);\n\
                    static inline int Py_IS_TYPE(PyObject *ob, PyTypeObject *type) { return 0; }\n";
        let names: Vec<String> = declared_names(text).into_iter().collect();
        assert_eq!(names, ["PyFloat_Type", "PyModule_Create2", "PyObject_Size"]);
    }
}
