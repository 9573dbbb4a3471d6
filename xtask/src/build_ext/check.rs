//! After a build: what the wheel really carries (the binary reader, against the plan) and whether
//! its extension modules import in the env.

use crate::arch::spec::Plan;
use crate::binary::expect::{check, Expectation};
use crate::binary::input::{audit_paths, Options, Outcome};
use crate::binary::Kind;
use crate::process::Cmd;
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::Path;

/// One shared object with device code.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SoAudit {
    pub path: String,
    pub sass: Vec<String>,
    pub ptx: Vec<String>,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct AuditSummary {
    pub ok: bool,
    pub files: Vec<SoAudit>,
    /// Missing images, unreadable files, or no device code at all.
    pub problems: Vec<String>,
    /// Images beyond the plan (not a failure: nvcc flags of the extension may add some).
    pub extra: Vec<String>,
}

/// Audits every shared object in `wheel` against the plan: each file with device code must carry
/// the planned SASS and PTX in every container; at least one file must have device code.
pub fn audit_wheel(wheel: &Path, plan: &Plan) -> AuditSummary {
    let expect = Expectation {
        sass: plan.sass(),
        ptx: plan.ptx(),
    };
    let mut s = AuditSummary::default();
    for f in audit_paths(&[wheel.to_path_buf()], &Options::default()) {
        let short = f.path.rsplit('!').next().unwrap_or(&f.path).to_string();
        match &f.outcome {
            Outcome::Failed(e) => s.problems.push(format!("{short}: unreadable: {e}")),
            Outcome::Audited(a) => {
                if !a.has_device_code() {
                    continue;
                }
                let names =
                    |k: Kind| -> Vec<String> { a.counts(k).keys().map(|x| x.name(k)).collect() };
                s.files.push(SoAudit {
                    path: short.clone(),
                    sass: names(Kind::Elf),
                    ptx: names(Kind::Ptx),
                });
                let c = check(a, &expect);
                for m in c.missing_sass.iter().chain(&c.missing_ptx) {
                    s.problems.push(format!(
                        "{short}: missing {} ({} of {} compilation units have it)",
                        m.name, m.containers_with, m.containers
                    ));
                }
                for x in c.extra_sass.iter().chain(&c.extra_ptx) {
                    s.extra.push(format!("{short}: {} beyond the plan", x.name));
                }
            }
        }
    }
    if s.files.is_empty() && s.problems.is_empty() {
        s.problems.push(
            "no shared object in the wheel has device code: the extension was built without CUDA (does its setup.py need an env variable to build CUDA, e.g. WITH_CUDA=1?)"
                .into(),
        );
    }
    s.ok = s.problems.is_empty();
    s
}

/// Python module names of the extension modules (`pkg/mod.cpython-311-x86_64-linux-gnu.so` →
/// `pkg.mod`) among zip member names.
pub fn extension_modules<'a>(members: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut mods: Vec<String> = members
        .into_iter()
        .filter(|m| !m.contains(".data/") && !m.contains(".libs/"))
        .filter_map(|m| {
            let stem = m.strip_suffix(".so")?;
            let (dir, file) = stem.rsplit_once('/').unwrap_or(("", stem));
            let name = file.split('.').next()?;
            // `libfoo.so` is a plain library, not a module (those carry a tag: `foo.cpython-311-….so`).
            if name.is_empty() || (name.starts_with("lib") && file == name) {
                return None;
            }
            Some(if dir.is_empty() {
                name.to_string()
            } else {
                format!("{}.{name}", dir.replace('/', "."))
            })
        })
        .collect();
    mods.sort();
    mods.dedup();
    mods
}

// Imports torch first (as users do), then waits for the module names on stdin: the process is
// started when the build starts, so torch's import (seconds) overlaps the compile instead of
// following it. An empty line (the build failed) ends it quietly.
const IMPORT_PY: &str = r#"
import importlib, sys
import torch
mods = sys.stdin.readline().split()
if not mods:
    sys.exit(0)
# The wheel was unpacked into sys.path[0] after this process started: forget cached listings.
importlib.invalidate_caches()
bad = []
for m in mods:
    try:
        importlib.import_module(m)
    except BaseException as e:
        bad.append(f"import {m}: {type(e).__name__}: {e}")
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
"#;

/// The import check, started before the wheel exists: a clean Python process in the env, without
/// archsmith's CUDA on any path, that imports torch at once and the wheel's extension modules when
/// [`ImportCheck::run`] hands them over.
pub struct ImportCheck {
    target: std::path::PathBuf,
    process: crate::process::Running,
}

impl ImportCheck {
    /// Starts the process; `target` (emptied now) is where the wheel will be unpacked.
    pub fn start(python: &Path, target: &Path) -> Result<ImportCheck> {
        let _ = fs::remove_dir_all(target);
        fs::create_dir_all(target).with_context(|| format!("creating {}", target.display()))?;
        let process = Cmd::new(python)
            .args(["-c", IMPORT_PY])
            .env("PYTHONPATH", target)
            .env_remove("CUDA_HOME")
            .env_remove("CUDA_PATH")
            .env_remove("LD_LIBRARY_PATH")
            .dir(target)
            .spawn_piped()?;
        Ok(ImportCheck {
            target: target.to_path_buf(),
            process,
        })
    }

    /// Unpacks `wheel` into the target and imports each of its extension modules. Returns them.
    pub fn run(self, wheel: &Path) -> Result<Vec<String>> {
        let mut zip = crate::wheel::Wheel::open(wheel)?;
        let mods = extension_modules(zip.names());
        zip.extract_all(&self.target)?;
        if mods.is_empty() {
            bail!("the wheel holds no extension module (.so)");
        }
        let out = self.process.finish(&format!("{}\n", mods.join(" ")))?;
        if !out.success() {
            let msg = out.stderr.trim();
            let lines: Vec<&str> = msg.lines().filter(|l| l.starts_with("import ")).collect();
            bail!(
                "{}",
                if lines.is_empty() {
                    msg.to_string()
                } else {
                    lines.join("\n")
                }
            );
        }
        Ok(mods)
    }
}

/// Unpacks the wheel into `target` and imports each extension module there (after `import torch`,
/// as users do), in a clean process without archsmith's CUDA on any path. Returns the modules.
pub fn import_wheel(wheel: &Path, python: &Path, target: &Path) -> Result<Vec<String>> {
    ImportCheck::start(python, target)?.run(wheel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_extension_modules() {
        let members = [
            "torchsort/__init__.py",
            "torchsort/isotonic_cpu.cpython-311-x86_64-linux-gnu.so",
            "torchsort/isotonic_cuda.cpython-311-x86_64-linux-gnu.so",
            "_C.abi3.so",
            "pkg.libs/libfoo-1234.so.1",
            "pkg-1.0.data/data/lib/x.so",
        ];
        assert_eq!(
            extension_modules(members),
            ["_C", "torchsort.isotonic_cpu", "torchsort.isotonic_cuda"]
        );
    }
}
