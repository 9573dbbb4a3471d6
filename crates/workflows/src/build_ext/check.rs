//! After a build: what the wheel really carries (the binary reader, against the plan) and whether
//! its extension modules import in the env.

use crate::arch::spec::Plan;
use crate::binary::expect::{check, Expectation};
use crate::binary::input::{audit_paths, Options, Outcome};
use crate::binary::Kind;
use crate::process::Cmd;
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

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
    /// No device code, and the package declares no CUDA code: the arch list did not apply.
    pub cpu_only: bool,
}

/// The bytes of the wheel's shared objects once installed (inflated).
pub fn shared_object_bytes(wheel: &Path) -> u64 {
    let Ok(mut w) = crate::wheel::Wheel::open(wheel) else {
        return 0;
    };
    let names: Vec<String> = w
        .names()
        .filter(|n| n.ends_with(".so") || n.contains(".so."))
        .map(str::to_string)
        .collect();
    names
        .iter()
        .filter_map(|n| w.span(n).ok().flatten())
        .map(|s| s.size)
        .sum()
}

/// The bytes each image (`sm_75`, `compute_90`) takes over the wheel's shared objects: what
/// each arch adds to it.
pub fn image_bytes(wheel: &Path) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for f in audit_paths(&[wheel.to_path_buf()], &Options::default()) {
        if let Outcome::Audited(a) = &f.outcome {
            for kind in [Kind::Elf, Kind::Ptx] {
                for (arch, bytes) in a.bytes(kind) {
                    *out.entry(arch.name(kind)).or_insert(0) += bytes;
                }
            }
        }
    }
    out
}

/// Audits every shared object in `wheel` against the plan: each file with device code must carry
/// the planned SASS and PTX in every container; at least one file must have device code when the
/// package `declares_cuda` (a package of C++ extensions only has none to plan, and says so).
/// `unpacked`: where the same run's load check unpacked the wheel ([`Options::unpacked`]).
pub fn audit_wheel(
    wheel: &Path,
    plan: &Plan,
    declares_cuda: bool,
    unpacked: Vec<(PathBuf, PathBuf)>,
) -> AuditSummary {
    let expect = Expectation {
        sass: plan.sass(),
        ptx: plan.ptx(),
    };
    let mut s = AuditSummary::default();
    let opts = Options {
        unpacked,
        ..Options::default()
    };
    for f in audit_paths(&[wheel.to_path_buf()], &opts) {
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
    if s.files.is_empty() && s.problems.is_empty() && !declares_cuda {
        s.cpu_only = true;
    } else if s.files.is_empty() && s.problems.is_empty() {
        s.problems.push(
            "no shared object in the wheel has device code: the extension was built without CUDA (does its setup.py need an env variable to build CUDA, e.g. WITH_CUDA=1?)"
                .into(),
        );
    }
    s.ok = s.problems.is_empty();
    s
}

impl AuditSummary {
    /// The summary's lines for people: each file's images, the CPU-only verdict, notes.
    pub fn rows(&self) -> Vec<(&'static str, String)> {
        let mut rows: Vec<(&'static str, String)> = self
            .files
            .iter()
            .map(|f| {
                let images: Vec<&str> = f.sass.iter().chain(&f.ptx).map(String::as_str).collect();
                ("audit", format!("{}: {}", f.path, images.join(" ")))
            })
            .collect();
        if self.cpu_only {
            rows.push((
                "audit",
                "no device code: a CPU-only build (--cpu-only, or a package that declares no CUDA code), so --arch did not apply".into(),
            ));
        }
        rows.extend(self.extra.iter().map(|x| ("note", x.clone())));
        rows
    }
}

/// A build meant to compile no GPU code (`--cpu-only`): any file with device code is a problem
/// (CUDA was built after all: the package's own switch did not apply).
pub fn audit_cpu_only(
    wheel: &Path,
    plan: &Plan,
    unpacked: Vec<(PathBuf, PathBuf)>,
) -> AuditSummary {
    let mut s = audit_wheel(wheel, plan, false, unpacked);
    for f in &s.files {
        s.problems.push(format!(
            "{}: carries device code ({}), but the build was --cpu-only",
            f.path,
            f.sass
                .iter()
                .chain(&f.ptx)
                .cloned()
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    s.cpu_only = s.files.is_empty() && s.problems.is_empty();
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

/// The import sweep probe: imports torch at once, then the module names it is handed, and
/// classifies each failure.
const IMPORT_SWEEP: &str = include_str!("../../../../verify/probes/import_sweep.py");

/// Why a module of the package did not import.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImportFailure {
    pub module: String,
    /// `missing` (a third-party module not installed), `removed-api` (a torch/NumPy name that is
    /// not there), or `error`.
    pub kind: String,
    pub error: String,
    /// For `missing`: the top-level module that is not installed.
    pub missing: Option<String>,
    /// The package's own frame nearest the failure.
    pub file: Option<String>,
    pub line: Option<u32>,
}

impl std::fmt::Display for ImportFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "import {}: {}", self.module, self.error)?;
        if let (Some(file), Some(line)) = (&self.file, self.line) {
            write!(f, " ({file}:{line})")?;
        }
        Ok(())
    }
}

/// What the sweep saw: the modules that imported and why the others did not.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Sweep {
    pub imported: Vec<String>,
    /// Those of `imported` with no `PyInit_`: operator libraries, loaded with
    /// `torch.ops.load_library` as their package loads them.
    #[serde(default)]
    pub operator_libraries: Vec<String>,
    pub failures: Vec<ImportFailure>,
}

impl Sweep {
    /// Third-party modules the package imports that are not installed.
    pub fn missing(&self) -> Vec<&str> {
        let mut m: Vec<&str> = self
            .failures
            .iter()
            .filter_map(|f| f.missing.as_deref())
            .collect();
        m.sort();
        m.dedup();
        m
    }
}

#[derive(serde::Deserialize)]
struct SweepLine {
    module: String,
    ok: bool,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    missing: Option<String>,
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    line: Option<u32>,
}

/// The import sweep, started before the wheel exists: a clean Python process in the env, without
/// archsmith's CUDA on any path, that imports torch at once and the package's modules when
/// [`ImportCheck::run`] hands them over.
pub struct ImportCheck {
    target: std::path::PathBuf,
    process: crate::process::Running,
}

impl ImportCheck {
    /// Starts the process; `target` (emptied now) is where the wheel will be unpacked, `extra`
    /// more directories for `sys.path` (requirements installed beside the env).
    pub fn start(
        python: &Path,
        target: &Path,
        extra: &[std::path::PathBuf],
    ) -> Result<ImportCheck> {
        let _ = fs::remove_dir_all(target);
        fs::create_dir_all(target).with_context(|| format!("creating {}", target.display()))?;
        let path = std::env::join_paths(
            std::iter::once(target.to_path_buf()).chain(extra.iter().cloned()),
        )
        .context("a path holds a `:`")?;
        let process = Cmd::new(python)
            .args(["-c", IMPORT_SWEEP])
            .env("PYTHONPATH", path)
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

    /// Unpacks `wheel` into the target and imports its extension modules (`all`: every module of
    /// the package, Python ones too).
    pub fn run(self, wheel: &Path, all: bool) -> Result<Sweep> {
        let mut zip = crate::wheel::Wheel::open(wheel)?;
        let names: Vec<String> = zip.names().map(str::to_string).collect();
        let names = names.iter().map(String::as_str);
        let mods = if all {
            package_modules(names.clone())
        } else {
            extension_modules(names.clone())
        };
        zip.extract_all(&self.target)?;
        if mods.is_empty() {
            bail!("the wheel holds no extension module (.so)");
        }
        let libraries = operator_libraries(&self.target, names);
        let tokens: Vec<String> = mods
            .iter()
            .map(|m| match libraries.contains(m) {
                true => format!("!{m}"),
                false => m.clone(),
            })
            .collect();
        let out = self.process.finish(&format!("{}\n", tokens.join(" ")))?;
        if !out.success() {
            bail!(
                "the import sweep could not run (torch itself does not import?): {}",
                out.stderr.trim()
            );
        }
        let mut sweep = Sweep::default();
        for l in out.stdout.lines().filter(|l| l.starts_with('{')) {
            let l: SweepLine = serde_json::from_str(l)
                .with_context(|| format!("the import sweep printed {l:?}"))?;
            if l.ok {
                if libraries.contains(&l.module) {
                    sweep.operator_libraries.push(l.module.clone());
                }
                sweep.imported.push(l.module);
            } else {
                sweep.failures.push(ImportFailure {
                    module: l.module,
                    kind: l.kind.unwrap_or_else(|| "error".into()),
                    error: l.error.unwrap_or_default(),
                    missing: l.missing,
                    file: l.file,
                    line: l.line,
                });
            }
        }
        Ok(sweep)
    }
}

/// The extension modules among `members` (unpacked under `root`) that export no `PyInit_`
/// function: operator libraries (`TORCH_LIBRARY`), which the package loads with
/// `torch.ops.load_library` and which must not be imported — loading one runs its
/// registrations. A file the binary reader cannot read stays a module (its import says why).
fn operator_libraries<'a>(
    root: &Path,
    members: impl IntoIterator<Item = &'a str>,
) -> std::collections::HashSet<String> {
    members
        .into_iter()
        .filter(|m| m.ends_with(".so"))
        .filter_map(|m| {
            let name = extension_modules([m]).pop()?;
            // Mapped, not read: an extension can be hundreds of MB; only its headers are read.
            let map = crate::binary::input::map(&root.join(m)).ok()?;
            let info = crate::binary::dynamic::read(&map).ok()?;
            info.python_init().is_none().then_some(name)
        })
        .collect()
}

/// Every module of the package among zip member names: Python modules (`pkg/sub/mod.py` →
/// `pkg.sub.mod`, `pkg/__init__.py` → `pkg`) and extension modules.
pub fn package_modules<'a>(members: impl IntoIterator<Item = &'a str> + Clone) -> Vec<String> {
    let mut mods: Vec<String> = members
        .clone()
        .into_iter()
        .filter(|m| !m.contains(".data/") && !m.contains(".dist-info/"))
        .filter_map(|m| {
            let stem = m.strip_suffix(".py")?;
            let stem = stem.strip_suffix("/__init__").unwrap_or(stem);
            (!stem.is_empty() && !stem.ends_with("__main__") && !stem.contains('-'))
                .then(|| stem.replace('/', "."))
        })
        .collect();
    mods.extend(extension_modules(members));
    mods.sort();
    mods.dedup();
    mods
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_every_module_of_a_package() {
        let members = [
            "pkg/__init__.py",
            "pkg/utils/io.py",
            "pkg/_C.cpython-311-x86_64-linux-gnu.so",
            "pkg/__main__.py",
            "pkg-1.0.dist-info/METADATA",
            "pkg-1.0.data/scripts/tool.py",
        ];
        assert_eq!(package_modules(members), ["pkg", "pkg._C", "pkg.utils.io"]);
    }

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
