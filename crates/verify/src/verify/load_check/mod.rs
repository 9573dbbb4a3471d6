//! Will it load? For each compiled module of an extension (a `.so`, a directory, a wheel), what
//! importing it after `import torch` in a target Python env would do — read from the ELF files,
//! nothing imported:
//!
//! 1. the CPython tag of the file name against the env's Python (else Python never finds it);
//! 2. each `DT_NEEDED` library found (torch's, the `nvidia-*` wheels', the system's) — a missing
//!    `libcudart.so.N` names the CUDA major it was built for;
//! 3. each needed GLIBC/GLIBCXX/CXXABI version defined by its library;
//! 4. each undefined symbol bound (for torch's: the C++ ABI and the torch it was built for);
//! 5. a module's `PyInit_<name>`.
//!
//! The first failure is the verdict's reason, with the fix. [`linker`] is the loader model,
//! [`target`] reads what `import torch` leaves loaded.

pub mod driver_need;
pub mod limited_api;
pub mod linker;
pub mod release_exports;
pub mod release_range;
pub mod target;
pub mod torch_abi;

use crate::binary::dynamic::{demangle, CxxAbi};
use crate::kb::kb;
use anyhow::{Context, Result};
use linker::{file_name, LinkFailure, Objects};
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
pub use target::Target;

/// What `verify binary --target` checks files against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadTarget {
    /// A Python env (its interpreter), after `import torch`.
    Env(PathBuf),
    /// The torch releases a range admits (`torch>=2.11,<2.16`), by their real exports.
    Releases(String),
}

impl LoadTarget {
    /// A value starting `torch` and a comparison (`torch>=2.11`, `torch ==2.15.*`) is a range;
    /// anything else the path of a Python.
    pub fn parse(value: &str) -> Result<LoadTarget, String> {
        let rest = value.trim_start();
        if let Some(after) = rest.strip_prefix("torch") {
            if after.trim_start().starts_with(['<', '>', '=', '!', '~']) {
                release_exports::releases_in(value).map_err(|e| format!("{e:#}"))?;
                return Ok(LoadTarget::Releases(value.to_string()));
            }
        }
        if value.is_empty() {
            return Err(
                "expected a Python (an env's bin/python) or a range such as 'torch>=2.11,<2.16'"
                    .into(),
            );
        }
        crate::python::interpreter_arg(value).map(LoadTarget::Env)
    }

    /// The env and the range among `targets`: at most one of each.
    pub fn split(targets: &[LoadTarget]) -> Result<(Option<&Path>, Option<&str>)> {
        let envs: Vec<&Path> = targets
            .iter()
            .filter_map(|t| match t {
                LoadTarget::Env(p) => Some(p.as_path()),
                LoadTarget::Releases(_) => None,
            })
            .collect();
        let ranges: Vec<&str> = targets
            .iter()
            .filter_map(|t| match t {
                LoadTarget::Releases(r) => Some(r.as_str()),
                LoadTarget::Env(_) => None,
            })
            .collect();
        if envs.len() > 1 || ranges.len() > 1 {
            anyhow::bail!(
                "--target: give one Python env and/or one torch range (got {} env(s), {} range(s)); for several releases write one range, e.g. 'torch>=2.11,<2.16'",
                envs.len(),
                ranges.len()
            );
        }
        Ok((envs.first().copied(), ranges.first().copied()))
    }
}

/// `verify binary --target`: `paths` against the env and/or the range among `targets`.
pub fn check_targets(targets: &[LoadTarget], paths: &[PathBuf]) -> Result<TargetChecks> {
    let (python, range) = LoadTarget::split(targets)?;
    if python.is_none() && range.is_none() {
        return Ok(TargetChecks::default());
    }
    // A wheel is unpacked once for both checks (and the command's audit).
    let inputs = Inputs::read(paths)?;
    let load = python
        .map(|python| LoadReport::of_inputs(python, &inputs))
        .transpose()?;
    let range = range
        .map(|spec| release_range::RangeReport::of_inputs(spec, &inputs))
        .transpose()?;
    Ok(TargetChecks {
        load,
        range,
        inputs: Some(inputs),
    })
}

/// What `--target`s found, and the files they read (kept for the rest of the command).
#[derive(Default)]
pub struct TargetChecks {
    pub load: Option<LoadReport>,
    pub range: Option<release_range::RangeReport>,
    pub inputs: Option<Inputs>,
}

impl TargetChecks {
    /// The wheels the checks unpacked, for the command's audit to read from: each wheel read
    /// once ([`Inputs::unpacked`]).
    pub fn unpacked(&self) -> Vec<(PathBuf, PathBuf)> {
        self.inputs
            .as_ref()
            .map(Inputs::unpacked)
            .unwrap_or_default()
    }

    /// Everything loads where it was checked (true when nothing was).
    pub fn loads(&self) -> bool {
        self.load.as_ref().is_none_or(|l| l.loads)
            && self.range.as_ref().is_none_or(|r| r.loads_everywhere)
    }

    /// The checks' sections of `verify binary`'s JSON document.
    pub fn add_to(&self, doc: &mut serde_json::Value) -> Result<()> {
        if let Some(l) = &self.load {
            l.add_to(doc)?;
        }
        if let Some(r) = &self.range {
            r.add_to(doc)?;
        }
        Ok(())
    }

    /// The checks' tables, each after a blank line (empty when none ran).
    pub fn tables(&self) -> String {
        let load = self.load.as_ref().map(|l| l.table());
        let range = self.range.as_ref().map(|r| r.table());
        load.into_iter()
            .chain(range)
            .map(|t| format!("\n{t}"))
            .collect()
    }
}

/// How many undefined symbols a verdict lists.
const SHOWN_SYMBOLS: usize = 5;

/// What loading one file would do.
#[derive(Debug, Clone, Serialize)]
pub struct LoadVerdict {
    /// The file as the user named it (a wheel member as `WHEEL!member`).
    pub path: String,
    /// `python-module` (has a CPython tag or `PyInit_`) or `library`.
    pub kind: &'static str,
    pub loads: bool,
    /// The first reason it does not load, one line.
    pub reason: Option<String>,
    /// What to do about it.
    pub fix: Option<String>,
    /// `undefined-symbol`, `missing-library`, `missing-version`, `python-tag`, `no-init`, `wrong-machine`.
    pub failure: Option<&'static str>,
    /// The first undefined symbols, demangled where they are C++.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub undefined: Vec<String>,
    /// The C++ string ABI of what it needs (`cxx11`, `pre-cxx11`, `unknown`).
    pub cxx_abi: CxxAbi,
    /// The CUDA major its `libcudart.so.N` (or cuBLAS, NVRTC) implies.
    pub cuda_major: Option<u32>,
    /// The newest GLIBC and GLIBCXX versions it needs.
    pub glibc: Option<String>,
    pub glibcxx: Option<String>,
    /// The torch its package metadata pins (`torch==2.6.0`), when known.
    pub built_for: Option<String>,
    /// Libraries of its own package it needs that no search path reaches: counted as loaded by
    /// the package first (`torch.ops.load_library`), as torchaudio and torio do.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub package_preloads: Vec<String>,
    /// It binds symbols of torch's own libraries without linking them, so it loads only once its
    /// package has made `torch._C` global (`ctypes.CDLL(torch._C.__file__, RTLD_GLOBAL)`, as
    /// cuda.core does for its tensor bridge): counted as loading, and said.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub needs_torch_global: bool,
    /// What it needs from torch, classified against this env's torch libraries: the stable ABI's
    /// C shims alone, or unstable symbols that tie it to this release. None where it needs
    /// nothing from torch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torch_abi: Option<torch_abi::TorchAbi>,
}

impl LoadVerdict {
    /// What the package loads first, for [`crate::python::import_check`]: its own libraries, and
    /// `RTLD_GLOBAL:` torch._C when it needs torch's libraries global.
    pub fn preloads(&self, target: &Target) -> Vec<String> {
        let mut p = self.package_preloads.clone();
        if let (true, Some((_, c))) = (self.needs_torch_global, &target.torch_global) {
            p.insert(0, format!("RTLD_GLOBAL:{}", c.display()));
        }
        p
    }
}

/// The verdicts for a set of files against one target, for the table and `--json`.
#[derive(Debug, Serialize)]
pub struct LoadReport {
    pub python: PathBuf,
    pub python_version: String,
    pub torch: Option<String>,
    pub cuda: Option<String>,
    pub torch_cxx_abi: CxxAbi,
    pub modules: Vec<LoadVerdict>,
    /// Whether every file loads.
    pub loads: bool,
}

impl LoadReport {
    /// Checks `paths` against the env of `python`.
    pub fn check(python: &Path, paths: &[PathBuf]) -> Result<LoadReport> {
        LoadReport::of_inputs(python, &Inputs::read(paths)?)
    }

    /// Checks files already read ([`Inputs::read`]) against the env of `python`.
    pub fn of_inputs(python: &Path, inputs: &Inputs) -> Result<LoadReport> {
        let mut objects = Objects::default();
        let target = Target::from_python(python, &mut objects)?;
        let modules = check_candidates(&target, &mut objects, &inputs.candidates)?;
        Ok(LoadReport {
            python: target.python.clone(),
            python_version: target.python_version.to_string(),
            torch: target.torch.as_ref().map(|t| t.to_string()),
            cuda: target.cuda.as_ref().map(|c| c.to_string()),
            torch_cxx_abi: target.torch_abi,
            loads: modules.iter().all(|m| m.loads),
            modules,
        })
    }

    /// The verify-binary document with this report under `load`.
    pub fn add_to(&self, doc: &mut serde_json::Value) -> Result<()> {
        if let Some(map) = doc.as_object_mut() {
            map.insert("load".into(), serde_json::to_value(self)?);
        }
        Ok(())
    }

    /// One line per file (`loads` / `DOES NOT LOAD`), then each failure's reason and fix.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut out = format!(
            "load check against {} (Python {}, torch {}, CUDA {})\n",
            self.python.display(),
            self.python_version,
            self.torch.as_deref().unwrap_or("not installed"),
            self.cuda.as_deref().unwrap_or("none"),
        );
        let width = self
            .modules
            .iter()
            .map(|m| m.path.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let _ = writeln!(out, "{:<width$}  {:<13}  reason", "file", "verdict");
        for m in &self.modules {
            let verdict = if m.loads { "loads" } else { "DOES NOT LOAD" };
            let _ = writeln!(
                out,
                "{:<width$}  {verdict:<13}  {}",
                m.path,
                m.reason.as_deref().unwrap_or("")
            );
        }
        for m in &self.modules {
            if let Some(abi) = &m.torch_abi {
                let _ = writeln!(out, "\n{}: {}", m.path, abi.verdict);
            }
        }
        for m in self.modules.iter().filter(|m| !m.loads) {
            let _ = writeln!(
                out,
                "\n{}:\n  {}\n  fix: {}",
                m.path,
                m.reason.as_deref().unwrap_or(""),
                m.fix.as_deref().unwrap_or("")
            );
            for s in m.undefined.iter().skip(1) {
                let _ = writeln!(out, "  also undefined: {s}");
            }
        }
        let failing = self.modules.iter().filter(|m| !m.loads).count();
        let _ = writeln!(
            out,
            "\n{} of {} files load",
            self.modules.len() - failing,
            self.modules.len()
        );
        out
    }
}

/// The compiled modules and torch extensions under `dir`: a CPython or stable-ABI tag in the file
/// name, a plain `NAME.so` exporting `PyInit_NAME`, or any library that links torch (torchvision's
/// `_C.so`, loaded with `torch.ops.load_library`); not the copies auditwheel vendors in `NAME.libs/`.
/// Files are read through `objects`, so the check that follows reads none of them again.
pub fn compiled_modules(dir: &Path, objects: &mut Objects) -> Result<Vec<PathBuf>> {
    let all = shared_objects(dir)
        .with_context(|| format!("listing the compiled modules under {}", dir.display()))?;
    Ok(all
        .into_iter()
        .filter(|p| !vendored(dir, p))
        .filter(|p| {
            let n = file_name(p);
            let stem = n.split('.').next().unwrap_or("");
            n.contains(".cpython-")
                || n.contains(".abi3.")
                || objects.get(p).is_ok_and(|o| {
                    o.exports(&format!("PyInit_{stem}"))
                        || o.needed
                            .iter()
                            .any(|l| l.starts_with("libc10") || l.starts_with("libtorch"))
                })
        })
        .collect())
}

/// Whether `file` lies in a `NAME.libs/` directory under `dir`: a copy auditwheel vendored, which
/// loads only as a dependency of the package's own files.
pub fn vendored(dir: &Path, file: &Path) -> bool {
    file.strip_prefix(dir)
        .unwrap_or(file)
        .components()
        .any(|c| c.as_os_str().to_string_lossy().ends_with(".libs"))
}

/// `verify env`'s items: one failure per torch-facing compiled module of the env that will not
/// load after `import torch` (named, with the reason and the fix), or one item saying how many
/// load. Modules that have nothing to do with torch and would not load (an optional backend whose
/// library is absent: numba's TBB layer, CuPy's cuTENSOR) are listed in one skipped item: they are
/// not this env's torch's doing, and a big image carries several.
pub fn env_items(python: &Path, site: &Path) -> Vec<crate::verify::checks::Item> {
    use crate::verify::checks::{item, Status};
    let name = "compiled modules load";
    let checked = (|| -> Result<Vec<(LoadVerdict, bool)>> {
        let mut objects = Objects::default();
        let target = Target::from_python(python, &mut objects)?;
        let modules = compiled_modules(site, &mut objects)?;
        let verdicts = check_paths(&target, &mut objects, &modules)?;
        Ok(verdicts
            .into_iter()
            .map(|v| {
                let facing = v.loads || uses_torch(&v, site, &mut objects);
                (v, facing)
            })
            .collect())
    })();
    let checked = match checked {
        Ok(v) => v,
        Err(e) => return vec![item(name, Status::Fail, format!("{e:#}"))],
    };
    let shown = |v: &LoadVerdict| in_site(site, &v.path);
    let mut failing: Vec<_> = checked
        .iter()
        .filter(|(v, facing)| !v.loads && *facing)
        .map(|(v, _)| {
            let detail = format!(
                "{}; fix: {}",
                v.reason.as_deref().unwrap_or(""),
                v.fix.as_deref().unwrap_or("")
            );
            item(format!("loads: {}", shown(v)), Status::Fail, detail)
        })
        .collect();
    let unrelated: Vec<String> = checked
        .iter()
        .filter(|(v, facing)| !v.loads && !*facing)
        .map(|(v, _)| format!("{} ({})", shown(v), v.reason.as_deref().unwrap_or("")))
        .collect();
    let unrelated_item = (!unrelated.is_empty()).then(|| {
        item(
            "modules that do not use torch",
            Status::Skipped,
            format!(
                "{} would not load, not counted against torch (optional parts of their packages, imported only when used): {}",
                unrelated.len(),
                unrelated.join("; ")
            ),
        )
    });
    if failing.is_empty() {
        let loading: Vec<&LoadVerdict> = checked
            .iter()
            .filter(|(_, facing)| *facing)
            .map(|(v, _)| v)
            .collect();
        failing.push(all_load_item(name, site, &loading));
    }
    failing.extend(unrelated_item);
    failing
}

/// The one item of an env whose torch-facing compiled modules all load.
fn all_load_item(
    name: &str,
    site: &Path,
    verdicts: &[&LoadVerdict],
) -> crate::verify::checks::Item {
    use crate::verify::checks::{item, Status};
    let packages: std::collections::BTreeSet<_> = verdicts
        .iter()
        .filter_map(|v| {
            Path::new(&v.path)
                .strip_prefix(site)
                .ok()?
                .components()
                .next()
        })
        .collect();
    let global = match verdicts.iter().filter(|v| v.needs_torch_global).count() {
        0 => String::new(),
        n => format!("; {n} bind torch's symbols without linking it and load once their package makes torch._C global (RTLD_GLOBAL)"),
    };
    // Which of them survive the next torch: the stable ABI's alone, or tied to this release.
    let abi: Vec<_> = verdicts
        .iter()
        .filter_map(|v| v.torch_abi.as_ref())
        .collect();
    let tied = abi
        .iter()
        .filter(|a| a.tally.kind == torch_abi::AbiKind::Tied)
        .count();
    let abi = match abi.len() {
        0 => String::new(),
        n => format!(
            "; of the {n} that need torch's symbols, {} use only its stable ABI and {tied} are tied to this torch",
            n - tied
        ),
    };
    item(
        name,
        Status::Ok,
        format!("all {} compiled modules of {} packages load after import torch (read from their ELF files){global}{abi}", verdicts.len(), packages.len()),
    )
}

/// Whether a module that would not load is torch's concern: it links torch's libraries, needs
/// one of torch's symbols (C++ `c10::`/`at::`/`torch::`, the stable C shim `aoti_torch_*`), its
/// package pins torch, or it lies in torch's own packages.
fn uses_torch(v: &LoadVerdict, site: &Path, objects: &mut Objects) -> bool {
    const TORCH_PACKAGES: [&str; 3] = ["torch", "torchvision", "torchaudio"];
    let top = Path::new(&v.path)
        .strip_prefix(site)
        .ok()
        .and_then(|p| p.components().next())
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    if v.built_for.is_some() || top.is_some_and(|t| TORCH_PACKAGES.contains(&t.as_str())) {
        return true;
    }
    let torch_symbol = |s: &str| {
        [
            "c10::",
            "at::",
            "torch::",
            "caffe2::",
            "aoti_torch_",
            "_ZN3c10",
            "_ZN2at",
            "_ZN5torch",
        ]
        .iter()
        .any(|p| s.starts_with(p))
    };
    if v.undefined.iter().any(|s| torch_symbol(s)) {
        return true;
    }
    objects.get(Path::new(&v.path)).is_ok_and(|o| {
        o.needed
            .iter()
            .any(|l| l.starts_with("libtorch") || l.starts_with("libc10"))
            || o.undefined.iter().any(|n| torch_symbol(&n.name))
    })
}

/// One file to check: where it is on disk and what to call it.
struct Candidate {
    file: PathBuf,
    shown: String,
    /// The `*.dist-info` directories beside its top-level package, for the torch pin.
    site: Option<PathBuf>,
}

/// Checks every ELF shared object under `paths` (files, directories walked, wheels unpacked to a
/// temporary directory so that `$ORIGIN` works) against `target`.
pub fn check_paths(
    target: &Target,
    objects: &mut Objects,
    paths: &[PathBuf],
) -> Result<Vec<LoadVerdict>> {
    check_candidates(target, objects, &Inputs::read(paths)?.candidates)
}

fn check_candidates(
    target: &Target,
    objects: &mut Objects,
    candidates: &[Candidate],
) -> Result<Vec<LoadVerdict>> {
    let mut verdicts = Vec::new();
    let mut packages = PackageLibraries::default();
    for c in candidates {
        if let Some(v) = check_file(target, objects, &mut packages, c)? {
            verdicts.push(v);
        }
    }
    Ok(verdicts)
}

/// The files a load check reads, read once per command: every ELF shared object under the
/// paths given, with the temporary directories their wheels were unpacked to (alive as long as
/// this is).
pub struct Inputs {
    candidates: Vec<Candidate>,
    /// Each wheel as given and the directory it was unpacked to (removed when this is dropped).
    unpacked: Vec<(PathBuf, tempfile::TempDir)>,
}

impl Inputs {
    /// Every ELF shared object under `paths`: files, directories walked, wheels unpacked to a
    /// temporary directory so that `$ORIGIN` works.
    pub fn read(paths: &[PathBuf]) -> Result<Inputs> {
        let mut out = Vec::new();
        let mut unpacked = Vec::new();
        for path in paths {
            if path.extension().is_some_and(|e| e == "whl") {
                let dir =
                    tempfile::tempdir().context("creating a directory to unpack the wheel")?;
                crate::wheel::Wheel::open(path)?.extract_all(dir.path())?;
                out.extend(shared_objects(dir.path())?.into_iter().map(|f| Candidate {
                    shown: format!(
                        "{}!{}",
                        path.display(),
                        f.strip_prefix(dir.path()).unwrap_or(&f).display()
                    ),
                    file: f,
                    site: Some(dir.path().to_path_buf()),
                }));
                unpacked.push((path.clone(), dir));
            } else if path.is_dir() {
                out.extend(shared_objects(path)?.into_iter().map(|f| Candidate {
                    shown: f.display().to_string(),
                    site: site_of(&f),
                    file: f,
                }));
            } else {
                if !path.is_file() {
                    anyhow::bail!(
                        "{} does not exist: name a .so file, a directory or a wheel",
                        path.display()
                    );
                }
                out.push(Candidate {
                    shown: path.display().to_string(),
                    site: site_of(path),
                    file: path.clone(),
                });
            }
        }
        Ok(Inputs {
            candidates: out,
            unpacked,
        })
    }

    /// Each wheel as given and where it is unpacked: for the audit of the same command, which
    /// then reads its members from these files instead of inflating them again.
    pub fn unpacked(&self) -> Vec<(PathBuf, PathBuf)> {
        self.unpacked
            .iter()
            .map(|(wheel, dir)| (wheel.clone(), dir.path().to_path_buf()))
            .collect()
    }
}

/// `path` as a site-packages report names it: relative to `site` when under it.
fn in_site(site: &Path, path: &str) -> String {
    Path::new(path)
        .strip_prefix(site)
        .map_or_else(|_| path.to_string(), |p| p.display().to_string())
}

/// Every file under `dir` that is an ELF shared object (by its header), sorted.
pub fn shared_objects(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in ignore::WalkBuilder::new(dir)
        .standard_filters(false)
        .build()
    {
        let entry = entry.with_context(|| format!("walking {}", dir.display()))?;
        let p = entry.path();
        let name = file_name(p);
        if entry.file_type().is_some_and(|t| t.is_file())
            && (name.ends_with(".so") || name.contains(".so."))
            && is_elf(p)
        {
            found.push(p.to_path_buf());
        }
    }
    found.sort();
    Ok(found)
}

fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// The site-packages-like directory a file's top-level package sits in: the nearest ancestor
/// holding a `*.dist-info`.
fn site_of(file: &Path) -> Option<PathBuf> {
    file.ancestors()
        .skip(1)
        .find(|d| {
            std::fs::read_dir(d)
                .map(|rd| {
                    rd.flatten()
                        .any(|e| e.file_name().to_string_lossy().ends_with(".dist-info"))
                })
                .unwrap_or(false)
        })
        .map(Path::to_path_buf)
}

/// `(major, minor)` of a `name.cpython-311-x86_64-linux-gnu.so` file name.
pub fn cpython_tag(name: &str) -> Option<(u64, u64)> {
    let rest = name.split(".cpython-").nth(1)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if digits.len() < 2 {
        return None;
    }
    Some((digits[..1].parse().ok()?, digits[1..].parse().ok()?))
}

fn check_file(
    target: &Target,
    objects: &mut Objects,
    packages: &mut PackageLibraries,
    c: &Candidate,
) -> Result<Option<LoadVerdict>> {
    let Ok(object) = objects.get(&c.file) else {
        // Not a shared object this check reads (a linker script named .so, a 32-bit leftover).
        return Ok(None);
    };
    let name = file_name(&c.file).to_string();
    // A module exports `PyInit_*`; a file without one (torchao's `_C.abi3.so`, libtorchaudio) is
    // a library its package loads with `torch.ops.load_library`, whatever its name says.
    let is_module = object.python_init.is_some();
    let mut v = LoadVerdict {
        path: c.shown.clone(),
        kind: if is_module {
            "python-module"
        } else {
            "library"
        },
        loads: true,
        reason: None,
        fix: None,
        failure: None,
        undefined: Vec::new(),
        cxx_abi: object.abi_needed,
        cuda_major: cuda_major(&object.needed),
        glibc: newest(&object.version_needs, "GLIBC_"),
        glibcxx: newest(&object.version_needs, "GLIBCXX_"),
        built_for: c.site.as_deref().and_then(|s| torch_pin(s, &c.file)),
        package_preloads: Vec::new(),
        needs_torch_global: false,
        torch_abi: target
            .torch
            .as_ref()
            .and_then(|t| torch_abi::read(&object, &target.torch_libs, &t.to_string())),
    };
    if is_module && python_tag_refused(target, &name, &mut v) {
        return Ok(Some(v));
    }
    let mut link = target.process.link(objects, object.clone(), packages.of(c));
    if let (Some(LinkFailure::UndefinedSymbols { .. }), Some((global, _))) =
        (&link.failure, &target.torch_global)
    {
        let again = global.link(objects, object.clone(), packages.of(c));
        if again.failure.is_none() {
            v.needs_torch_global = true;
            link = again;
        }
    }
    v.package_preloads = link
        .from_package
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    match link.failure {
        Some(f) => explain(target, &mut v, f),
        None if is_module => {
            let module = name.split('.').next().unwrap_or("");
            let init = format!("PyInit_{module}");
            if !object.exports(&init) {
                v.fail(
                    "no-init",
                    format!("dynamic module does not define module export function ({init})"),
                    "the file was renamed or is not a Python module: import it under the name it was built as".into(),
                );
            }
        }
        None => {}
    }
    Ok(Some(v))
}

/// Whether the import system would never find module file `name` in this Python (a CPython tag
/// of another version): the verdict says so.
fn python_tag_refused(target: &Target, name: &str, v: &mut LoadVerdict) -> bool {
    let py = target.python_version.major_minor();
    let suffixes = &target.extension_suffixes;
    let stem = name.split('.').next().unwrap_or("");
    // The import system looks for exactly `stem + suffix`: `x.cpython-39-….so` is not `x.so`.
    // A stem with more in it (`MPI.mpich.cpython-312-….so`) under one of this Python's suffixes
    // is a variant its package loads itself (mpi4py chooses its MPI build so): not refused. Only
    // a tagged suffix says so: `x.cpython-39-….so` also ends in the bare `.so`.
    if suffixes.is_empty()
        || suffixes.iter().any(|s| name == format!("{stem}{s}"))
        || suffixes
            .iter()
            .any(|s| s != ".so" && name.ends_with(s.as_str()))
    {
        return false;
    }
    let built = match cpython_tag(name) {
        Some((major, minor)) => {
            format!("built for CPython {major}.{minor}; this env is Python {py}")
        }
        None => format!(
            "its name ends in none of Python {py}'s extension suffixes ({})",
            suffixes.join(" ")
        ),
    };
    v.fail(
        "python-tag",
        format!("{built}: Python does not find it"),
        format!(
            "install the cp{}{} build of the package, or rebuild it with this Python",
            py.major(),
            py.minor()
        ),
    );
    true
}

/// Every shared object of each top-level package met, by file name, listed once per package
/// (torch's own directory holds thousands of files and dozens of libraries to check).
#[derive(Default)]
struct PackageLibraries {
    by_package: HashMap<PathBuf, HashMap<String, PathBuf>>,
    none: HashMap<String, PathBuf>,
}

impl PackageLibraries {
    /// The libraries of `c`'s top-level package (none outside a site).
    fn of(&mut self, c: &Candidate) -> &HashMap<String, PathBuf> {
        let top = c.site.as_ref().and_then(|site| {
            let first = c.file.strip_prefix(site).ok()?.components().next()?;
            Some(site.join(first)).filter(|t| t.is_dir())
        });
        let Some(top) = top else {
            return &self.none;
        };
        self.by_package.entry(top).or_insert_with_key(|top| {
            shared_objects(top)
                .unwrap_or_default()
                .into_iter()
                .map(|p| (file_name(&p).to_string(), p))
                .collect()
        })
    }
}

impl LoadVerdict {
    fn fail(&mut self, failure: &'static str, reason: String, fix: String) {
        self.loads = false;
        self.failure = Some(failure);
        self.reason = Some(reason);
        self.fix = Some(fix);
    }
}

/// Turns the loader's failure into the reason a user reads and the fix.
fn explain(target: &Target, v: &mut LoadVerdict, f: LinkFailure) {
    let rebuild = format!(
        "or rebuild it against this torch: `{} build-ext SRC --python {}`",
        crate::output::program(),
        target.python.display()
    );
    match f {
        LinkFailure::MissingLibrary { soname, needed_by } => {
            let fix = match (
                cuda_major(std::slice::from_ref(&soname)),
                target.cuda.as_ref(),
            ) {
                (Some(want), Some(have)) if want != have.major() => format!(
                    "it was built for CUDA {want}; this env's torch {} uses CUDA {have}: install the package's cu{}x build, {rebuild}",
                    torch_name(target),
                    have.major()
                ),
                (Some(want), _) => format!("install CUDA {want}'s runtime (the nvidia-cuda-runtime-cu{want} wheel) or put its lib directory on LD_LIBRARY_PATH"),
                _ => format!("install what provides {soname}, or put its directory on LD_LIBRARY_PATH"),
            };
            v.fail(
                "missing-library",
                format!("{soname}: cannot open shared object file (needed by {needed_by})"),
                fix,
            );
        }
        LinkFailure::MissingVersion {
            version,
            file,
            required_by,
        } => {
            let fix = if version.starts_with("GLIBCXX_") || version.starts_with("CXXABI_") {
                format!("it was built with a newer g++ than this host's {file}: rebuild it with the host's compiler, or install a newer libstdc++ (a newer OS or conda's libstdcxx-ng)")
            } else if version.starts_with("GLIBC_") {
                "it was built on a newer glibc than this host's: install its manylinux build for an older glibc, or rebuild it here".to_string()
            } else {
                format!("install the {file} it was built against, {rebuild}")
            };
            v.fail(
                "missing-version",
                format!("version `{version}' not found (required by {required_by})"),
                fix,
            );
        }
        LinkFailure::UndefinedSymbols {
            required_by,
            symbols,
        } => undefined_symbols(target, v, &required_by, &symbols, &rebuild),
        LinkFailure::WrongMachine { machine, want } => v.fail(
            "wrong-machine",
            format!("built for ELF machine {machine}, the interpreter is machine {want}"),
            "install the build for this platform".into(),
        ),
    }
}

fn torch_name(target: &Target) -> String {
    target
        .torch
        .as_ref()
        .map(|t| t.to_string())
        .unwrap_or_else(|| "none".into())
}

/// The first undefined symbols, demangled; for torch's, the C++ ABI and the torch it was built for.
fn undefined_symbols(
    target: &Target,
    v: &mut LoadVerdict,
    required_by: &str,
    symbols: &[String],
    rebuild: &str,
) {
    let shown: Vec<String> = symbols
        .iter()
        .take(SHOWN_SYMBOLS)
        .map(|s| demangle(s.split('@').next().unwrap_or(s)).unwrap_or_else(|| s.clone()))
        .collect();
    let from_torch = shown.iter().any(|s| {
        ["c10::", "at::", "torch::", "caffe2::"]
            .iter()
            .any(|ns| s.contains(ns))
    });
    let abi = match (v.cxx_abi.flag(), target.torch_abi.flag()) {
        (Some(a), Some(b)) if a != b => format!(
            "; built with _GLIBCXX_USE_CXX11_ABI={a}, torch {} uses _GLIBCXX_USE_CXX11_ABI={b}",
            torch_name(target)
        ),
        _ => String::new(),
    };
    let reason = format!(
        "undefined symbol: {} ({} of {} in {required_by}){abi}",
        shown.first().cloned().unwrap_or_default(),
        symbols.len().min(SHOWN_SYMBOLS),
        symbols.len(),
    );
    let fix = if from_torch {
        let built = v
            .built_for
            .as_ref()
            .map(|b| format!(" (its metadata requires {b})"))
            .unwrap_or_default();
        let pkg = package_fix(target, &v.path);
        format!("it was built against another torch{built}: {pkg}{rebuild}")
    } else {
        format!("a library it needs is older than the one it was built against; {rebuild}")
    };
    v.fail("undefined-symbol", reason, fix);
    v.undefined = shown;
}

/// For the companions the knowledge base pairs with torch: the release built for this torch.
fn package_fix(target: &Target, path: &str) -> String {
    let row = target.torch.as_ref().and_then(|t| kb().torch_row(t));
    let pick = |name: &str, releases: Option<&Vec<crate::version::Version>>| -> Option<String> {
        let last = releases?.iter().max()?;
        let shown = path.replace('\\', "/");
        (shown.contains(&format!("/{name}/")) || shown.contains(&format!("{name}-")))
            .then(|| format!("install {name}=={last}, the release built for it, "))
    };
    pick("torchvision", row.map(|r| &r.torchvision))
        .or_else(|| pick("torchaudio", row.map(|r| &r.torchaudio)))
        .unwrap_or_else(|| "install the package's release built for this torch, ".into())
}

/// The CUDA major a CUDA runtime library's soname carries.
pub fn cuda_major(needed: &[String]) -> Option<u32> {
    needed.iter().find_map(|n| {
        let (stem, major) = n.split_once(".so.")?;
        ["libcudart", "libcublas", "libcublasLt", "libnvrtc"]
            .contains(&stem)
            .then(|| major.split('.').next()?.parse().ok())
            .flatten()
    })
}

/// The newest needed version with `prefix` (`GLIBC_2.34`), compared numerically.
fn newest(needs: &[(String, Vec<(String, bool)>)], prefix: &str) -> Option<String> {
    needs
        .iter()
        .flat_map(|(_, v)| v.iter().map(|(name, _)| name))
        .filter_map(|n| {
            let rest = n.strip_prefix(prefix)?;
            let key: Vec<u64> = rest
                .split('.')
                .map(|p| p.parse().ok())
                .collect::<Option<_>>()?;
            Some((key, n))
        })
        .max()
        .map(|(_, n)| n.clone())
}

/// The torch requirement in the metadata of the distribution that installed `file`.
fn torch_pin(site: &Path, file: &Path) -> Option<String> {
    let top = file
        .strip_prefix(site)
        .ok()?
        .components()
        .next()?
        .as_os_str()
        .to_string_lossy()
        .to_string();
    let want = top.to_ascii_lowercase().replace('-', "_");
    for e in std::fs::read_dir(site).ok()?.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(stem) = name.strip_suffix(".dist-info") else {
            continue;
        };
        let dist = stem
            .split('-')
            .next()
            .unwrap_or("")
            .to_ascii_lowercase()
            .replace('-', "_");
        let record = std::fs::read_to_string(e.path().join("RECORD")).unwrap_or_default();
        if dist != want && !record.lines().any(|l| l.starts_with(&format!("{top}/"))) {
            continue;
        }
        let metadata = std::fs::read_to_string(e.path().join("METADATA")).ok()?;
        return metadata.lines().find_map(|l| {
            let req = l.strip_prefix("Requires-Dist:")?.trim();
            let name: String = req
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .collect();
            (name.eq_ignore_ascii_case("torch") && !req.contains("extra ==")).then(|| {
                req.split(';')
                    .next()
                    .unwrap_or(req)
                    .replace([' ', '(', ')'], "")
            })
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpython_tags_and_cuda_majors_are_read_from_names() {
        assert_eq!(
            cpython_tag("_C.cpython-311-x86_64-linux-gnu.so"),
            Some((3, 11))
        );
        assert_eq!(
            cpython_tag("_C.cpython-39-x86_64-linux-gnu.so"),
            Some((3, 9))
        );
        assert_eq!(
            cpython_tag("_C.cpython-313t-x86_64-linux-gnu.so"),
            Some((3, 13))
        );
        assert_eq!(cpython_tag("_C.abi3.so"), None);
        assert_eq!(cpython_tag("libx.so"), None);
        let n = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(cuda_major(&n(&["libc10.so", "libcudart.so.12"])), Some(12));
        assert_eq!(cuda_major(&n(&["libcublasLt.so.13"])), Some(13));
        assert_eq!(cuda_major(&n(&["libcusolver.so.11", "libc.so.6"])), None);
        let needs = vec![(
            "libstdc++.so.6".to_string(),
            vec![
                ("GLIBCXX_3.4.9".to_string(), false),
                ("GLIBCXX_3.4.30".to_string(), false),
                ("CXXABI_1.3.13".to_string(), false),
            ],
        )];
        assert_eq!(
            newest(&needs, "GLIBCXX_").as_deref(),
            Some("GLIBCXX_3.4.30")
        );
        assert_eq!(newest(&needs, "GLIBC_"), None);
    }
}
