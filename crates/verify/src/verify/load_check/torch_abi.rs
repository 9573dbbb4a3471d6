//! Why a compiled extension is tied to one torch, or is not: every symbol it needs from torch,
//! classified against the real exports of the target env's torch libraries.
//!
//! torch's stable ABI (torch ≥ 2.10: `torch/csrc/stable`, `torch/headeronly`) reaches libtorch only
//! through C shims (`aoti_torch_*`, `torch_*` in `torch/csrc/inductor/aoti_torch/c/shim.h` and
//! `torch/csrc/stable/c/shim.h`) that later releases keep exporting; header-only code needs no
//! symbol at all. Anything else an extension binds in torch's libraries — mangled `c10::`, `at::`,
//! `torch::` functions, or `libtorch_python`'s bindings — is renamed or dropped by some later
//! release, which is the `undefined symbol: _ZN3c10…` users meet after an upgrade. Which library
//! exports a symbol is read, not guessed from its name: a name no torch library exports in this
//! env is classified by its form and listed as missing.

use super::linker::{Object, Objects};
use crate::binary::dynamic::demangle;
use serde::Serialize;
use std::path::Path;

/// How many unstable symbols a verdict names.
const SHOWN: usize = 5;

/// What one needed symbol is, as far as torch's ABI promises go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SymbolClass {
    /// A C shim of the stable ABI (`aoti_torch_get_numel`): kept by later releases.
    StableShim,
    /// torch's C++ API (`c10::`, `at::`, `torch::`) or another non-shim symbol of its libraries.
    UnstableCxx,
    /// Exported by `libtorch_python`: torch's own Python bindings, tied to the release.
    TorchPython,
}

/// The torch side of one extension's needs, read against one env's torch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TorchAbi {
    /// The torch of the env the symbols were read against.
    pub torch: String,
    #[serde(flatten)]
    pub tally: Tally,
    /// Stable shims this torch does not export (a newer release's), by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_shims: Vec<String>,
    /// The first unstable symbols, demangled, each with `(not in this torch)` when it is missing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unstable: Vec<String>,
    /// One sentence: which torches it can load on, and why.
    pub verdict: String,
}

/// Whether a binary needs only what later torch releases keep (C shims, header-only code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AbiKind {
    Stable,
    /// Unstable C++ or torch's Python bindings: tied to the releases that export them.
    Tied,
}

impl AbiKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AbiKind::Stable => "stable",
            AbiKind::Tied => "tied",
        }
    }
}

impl std::fmt::Display for AbiKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one binary needs from torch, counted by class: the one classification both verdicts
/// (against an env's torch, [`read`]; over a range of releases, [`over_releases`]) rest on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub kind: AbiKind,
    pub stable_shims: usize,
    pub unstable_cxx: usize,
    pub torch_python: usize,
}

impl Tally {
    fn of(needs: &[Need]) -> Tally {
        let count = |c: SymbolClass| needs.iter().filter(|n| n.class == c).count();
        let (unstable_cxx, torch_python) = (
            count(SymbolClass::UnstableCxx),
            count(SymbolClass::TorchPython),
        );
        Tally {
            kind: match unstable_cxx + torch_python {
                0 => AbiKind::Stable,
                _ => AbiKind::Tied,
            },
            stable_shims: count(SymbolClass::StableShim),
            unstable_cxx,
            torch_python,
        }
    }

    fn unstable(&self) -> usize {
        self.unstable_cxx + self.torch_python
    }
}

/// One torch symbol a binary needs.
struct Need<'o> {
    name: &'o str,
    class: SymbolClass,
    /// Whether the torch (or some release of the range) exports it.
    exported: bool,
}

/// The torch symbols `object` needs (weak ones aside), each classified by the library
/// `exporter` names for it (or by its form where none does), in the object's order.
fn torch_needs<'o, 'l>(
    object: &'o Object,
    exporter: &dyn Fn(&str) -> Option<&'l str>,
) -> Vec<Need<'o>> {
    object
        .undefined
        .iter()
        .filter(|n| !n.weak)
        .filter_map(|n| {
            let by = exporter(&n.name);
            let class = classify(&n.name, by)?;
            Some(Need {
                name: &n.name,
                class,
                exported: by.is_some(),
            })
        })
        .collect()
}

/// The class of `name` given the file name of the torch library that exports it (None: no torch
/// library here does); None when the symbol is not torch's. A C++ name counts as torch's only in
/// torch's namespaces: torch's libraries also export instantiations of `std::` templates (bound
/// from libstdc++ just as well), and torch's `lib/` ships other libraries (libgomp, CUDA's).
pub fn classify(name: &str, exporter: Option<&str>) -> Option<SymbolClass> {
    let mangled = name.starts_with("_Z");
    if !mangled && is_shim_name(name) {
        return Some(SymbolClass::StableShim);
    }
    let torch_lib = exporter.filter(|lib| lib.starts_with("libtorch") || lib.starts_with("libc10"));
    let torch_symbol = if mangled {
        // In torch's namespaces, or any C++ symbol only torch's libraries define: pybind11's
        // `type_caster<at::Tensor>::load` lives in libtorch_python (a module built against one
        // release failed to load on another for it, while the namespace test called it not
        // torch's). Not the `std::` instantiations torch's libraries happen to export, which
        // libstdc++ binds as well.
        torch_namespace(name) || (torch_lib.is_some() && !std_instantiation(name))
    } else {
        // A C function of torch's own libraries that is not a shim (`THPVariable_Wrap`).
        torch_lib.is_some()
    };
    if !torch_symbol {
        return None;
    }
    Some(match torch_lib {
        Some(lib) if lib.starts_with("libtorch_python") => SymbolClass::TorchPython,
        _ => SymbolClass::UnstableCxx,
    })
}

/// The C shims' names: `aoti_torch_*` (the AOTInductor shim the stable ABI builds on) and
/// `torch_*` (the stable ABI's own, `torch_call_dispatcher`).
fn is_shim_name(name: &str) -> bool {
    name.starts_with("aoti_torch_") || name.starts_with("torch_")
}

/// A mangled name of the C++ standard library's (`std::`, `__gnu_cxx::`), including the vtables
/// and type infos of its templates.
fn std_instantiation(name: &str) -> bool {
    demangle(name).is_some_and(|d| {
        let d = d
            .trim_start_matches("typeinfo for ")
            .trim_start_matches("typeinfo name for ")
            .trim_start_matches("vtable for ");
        d.starts_with("std::") || d.starts_with("__gnu_cxx::")
    })
}

/// A mangled name in one of torch's C++ namespaces (`c10`, `at`, `torch`, `caffe2`).
fn torch_namespace(name: &str) -> bool {
    demangle(name).is_some_and(|d| {
        let d = d
            .trim_start_matches("typeinfo for ")
            .trim_start_matches("vtable for ");
        ["c10::", "at::", "torch::", "caffe2::"]
            .iter()
            .any(|ns| d.starts_with(ns))
    })
}

/// The shared libraries of the torch in `torch_dir` (`torch/lib/*.so*`), read once through
/// `objects`.
pub fn torch_libraries(torch_dir: &Path, objects: &mut Objects) -> Vec<std::sync::Arc<Object>> {
    let Ok(entries) = std::fs::read_dir(torch_dir.join("lib")) else {
        return Vec::new();
    };
    let mut paths: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("lib") && n.contains(".so"))
        })
        .collect();
    paths.sort();
    paths.iter().filter_map(|p| objects.get(p).ok()).collect()
}

/// The verdict for `object` against the torch whose libraries are `libs`; None when it needs
/// nothing from torch (a plain C++ or CUDA library, or header-only code alone).
pub fn read(object: &Object, libs: &[std::sync::Arc<Object>], torch: &str) -> Option<TorchAbi> {
    let exporter = |name: &str| libs.iter().find(|l| l.exports(name)).map(|l| l.name());
    read_with(object, &exporter, torch)
}

/// [`read`] with the exports of one torch given as a lookup (an env's libraries, or a release's
/// kept list: [`super::release_exports`]).
fn read_with<'l>(
    object: &Object,
    exporter: &dyn Fn(&str) -> Option<&'l str>,
    torch: &str,
) -> Option<TorchAbi> {
    let needs = torch_needs(object, exporter);
    if needs.is_empty() {
        return None;
    }
    let unstable = needs.iter().filter(|n| n.class != SymbolClass::StableShim);
    let mut abi = TorchAbi {
        torch: torch.to_string(),
        tally: Tally::of(&needs),
        missing_shims: needs
            .iter()
            .filter(|n| n.class == SymbolClass::StableShim && !n.exported)
            .map(|n| n.name.to_string())
            .collect(),
        unstable: unstable
            .take(SHOWN)
            .map(|n| {
                let shown = demangle(n.name).unwrap_or_else(|| n.name.to_string());
                let note = if n.exported {
                    ""
                } else {
                    " (not in this torch)"
                };
                format!("{shown}{note}")
            })
            .collect(),
        verdict: String::new(),
    };
    abi.verdict = verdict(&abi);
    Some(abi)
}

fn verdict(a: &TorchAbi) -> String {
    let unstable = a.tally.unstable();
    if unstable == 0 {
        let here = match a.missing_shims.len() {
            0 => format!("torch {} exports all of them", a.torch),
            n => format!(
                "torch {} lacks {n} of them (a newer release's: {})",
                a.torch,
                a.missing_shims.join(", ")
            ),
        };
        return format!(
            "stable ABI: {} C shim(s) and header-only code, no unstable C++ symbol: loads on every torch that exports those shims; {here}",
            a.tally.stable_shims
        );
    }
    let python = if a.tally.torch_python > 0 {
        format!(
            " ({} of them torch's Python bindings)",
            a.tally.torch_python
        )
    } else {
        String::new()
    };
    format!(
        "tied to torch {}: {unstable} unstable symbol(s) of torch's libraries{python}, which other releases rename or drop; first: {}",
        a.torch,
        a.unstable.join("; ")
    )
}

/// One release of a range, as far as `object` goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReleaseFit {
    pub torch: String,
    /// CUDA of the release's PyPI wheel.
    pub cuda: Option<String>,
    pub loads: bool,
    /// torch symbols this release does not export, how many and the first few (demangled).
    pub missing: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub first_missing: Vec<String>,
    /// Why the CUDA runtime it was built against is not this release's, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_mismatch: Option<String>,
}

/// Which releases of a range one binary loads on, by their real exports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TorchRange {
    /// The releases checked, oldest first.
    pub checked: Vec<String>,
    #[serde(flatten)]
    pub tally: Tally,
    /// The first unstable symbols, demangled.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unstable: Vec<String>,
    /// The newest of the releases in which a shim it uses first appears (within the range):
    /// it needs shims up to this release.
    pub shims_up_to: Option<String>,
    pub loads_on: Vec<String>,
    pub releases: Vec<ReleaseFit>,
    /// One sentence.
    pub verdict: String,
}

/// The verdict for `object` over `releases` (oldest first); `cuda_major` is the CUDA runtime it
/// links (`libcudart.so.N`), which a release's wheel must bring. None when it needs nothing from
/// torch.
pub fn over_releases(
    object: &Object,
    releases: &[super::release_exports::ReleaseExports],
    cuda_major: Option<u32>,
) -> Option<TorchRange> {
    // Each torch symbol, classified by the newest release that exports it (or by its form).
    let newest = |name: &str| releases.iter().rev().find_map(|r| r.exporter(name));
    let needs = torch_needs(object, &newest);
    if needs.is_empty() {
        return None;
    }
    let shown = |name: &str| demangle(name).unwrap_or_else(|| name.to_string());
    let mut range = TorchRange {
        checked: releases.iter().map(|r| r.torch.to_string()).collect(),
        tally: Tally::of(&needs),
        unstable: needs
            .iter()
            .filter(|n| n.class != SymbolClass::StableShim)
            .take(SHOWN)
            .map(|n| shown(n.name))
            .collect(),
        shims_up_to: None,
        loads_on: Vec::new(),
        releases: Vec::new(),
        verdict: String::new(),
    };
    // The release each shim first appears in, within the range.
    range.shims_up_to = needs
        .iter()
        .filter(|n| n.class == SymbolClass::StableShim)
        .filter_map(|n| releases.iter().position(|r| r.exporter(n.name).is_some()))
        .max()
        .map(|i| releases[i].torch.to_string());
    for r in releases {
        let missing: Vec<&str> = needs
            .iter()
            .filter(|n| r.exporter(n.name).is_none())
            .map(|n| n.name)
            .collect();
        let cuda_mismatch = match (cuda_major, &r.cuda) {
            (Some(want), Some(has)) if want != has.major() => Some(format!(
                "built against CUDA {want}'s runtime (libcudart.so.{want}); torch {}'s PyPI wheel brings CUDA {has}",
                r.torch
            )),
            (Some(want), None) => Some(format!(
                "built against CUDA {want}'s runtime; torch {}'s PyPI wheel is CPU-only",
                r.torch
            )),
            _ => None,
        };
        let loads = missing.is_empty() && cuda_mismatch.is_none();
        if loads {
            range.loads_on.push(r.torch.to_string());
        }
        range.releases.push(ReleaseFit {
            torch: r.torch.to_string(),
            cuda: r.cuda.as_ref().map(ToString::to_string),
            loads,
            missing: missing.len(),
            first_missing: missing.iter().take(SHOWN).map(|n| shown(n)).collect(),
            cuda_mismatch,
        });
    }
    range.verdict = range_verdict(&range, releases);
    Some(range)
}

/// `2.11.0–2.15.0` when `some` are a run of `all`, else a list.
fn span(some: &[String], all: &[String]) -> String {
    let (Some(first), Some(last)) = (some.first(), some.last()) else {
        return "none".into();
    };
    let start = all.iter().position(|v| v == first);
    let run = start.is_some_and(|s| all.get(s..s + some.len()) == Some(some));
    match (some.len(), run) {
        (1, _) => first.clone(),
        (_, true) => format!("{first}–{last}"),
        _ => some.join(", "),
    }
}

fn range_verdict(r: &TorchRange, releases: &[super::release_exports::ReleaseExports]) -> String {
    let mut cudas: Vec<&crate::version::Version> = releases
        .iter()
        .filter(|x| r.loads_on.contains(&x.torch.to_string()))
        .filter_map(|x| x.cuda.as_ref())
        .collect();
    cudas.sort();
    cudas.dedup();
    let cuda = match (cudas.first(), cudas.last()) {
        (Some(a), Some(b)) if a == b => format!(" (PyPI's CUDA {a} wheel)"),
        (Some(a), Some(b)) => format!(" (PyPI's CUDA {a}–{b} wheels)"),
        _ => String::new(),
    };
    let not: Vec<String> = r
        .releases
        .iter()
        .filter(|f| !f.loads)
        .map(|f| match (&f.cuda_mismatch, f.missing) {
            (Some(m), _) => format!("not on {}: {m}", f.torch),
            (None, n) => format!(
                "not on {}: {n} symbol(s) it needs are not exported there (first: {})",
                f.torch,
                f.first_missing.join(", ")
            ),
        })
        .collect();
    let checked = span(&r.checked, &r.checked);
    let loads = span(&r.loads_on, &r.checked);
    if r.tally.kind == AbiKind::Stable {
        let shims = match &r.shims_up_to {
            Some(v) => format!("; needs shims up to {v}"),
            None => String::new(),
        };
        let mut s = format!(
            "stable: loads on torch {loads}{cuda} of {checked} checked{shims} ({} C shim(s), header-only code otherwise)",
            r.tally.stable_shims
        );
        for n in &not {
            s.push_str("; ");
            s.push_str(n);
        }
        return s;
    }
    let python = if r.tally.torch_python > 0 {
        format!(", {} of them torch's Python bindings", r.tally.torch_python)
    } else {
        String::new()
    };
    let resolve = match r.loads_on.len() {
        0 => format!("no release of {checked} exports them all"),
        _ => format!(
            "they resolve on torch {loads}{cuda} of {checked} checked, and only the release it was built with keeps their meaning"
        ),
    };
    format!(
        "tied to torch's C++ ABI: {} unstable symbol(s){python} (first: {}); {resolve}",
        r.tally.unstable(),
        r.unstable.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_are_classified_by_who_exports_them_and_by_their_form() {
        // `c10::Error::Error(c10::SourceLocation, std::string)`, as torch 2.x mangles it.
        let c10 = "_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE";
        assert_eq!(
            classify(c10, Some("libc10.so")),
            Some(SymbolClass::UnstableCxx)
        );
        // Gone from the env's torch: still torch's, by its namespace.
        assert_eq!(classify(c10, None), Some(SymbolClass::UnstableCxx));
        assert_eq!(
            classify("aoti_torch_get_numel", Some("libtorch_cpu.so")),
            Some(SymbolClass::StableShim)
        );
        // A shim this torch does not export yet is still a shim (and is listed as missing).
        assert_eq!(
            classify("torch_call_dispatcher", None),
            Some(SymbolClass::StableShim)
        );
        assert_eq!(
            classify("THPVariable_Wrap", Some("libtorch_python.so")),
            Some(SymbolClass::TorchPython)
        );
        // A C function of torch's that is not a shim binds an unstable interface too.
        assert_eq!(
            classify("c10_cuda_check_implementation", Some("libc10_cuda.so")),
            Some(SymbolClass::UnstableCxx)
        );
        // pybind11's caster for torch's tensors: only libtorch_python defines it.
        assert_eq!(
            classify(
                "_ZN8pybind116detail11type_casterIN2at6TensorEvE4loadENS_6handleEb",
                Some("libtorch_python.so")
            ),
            Some(SymbolClass::TorchPython)
        );
        // Not torch's: libc, libstdc++, CPython, the libgomp torch ships, and a `std::`
        // instantiation torch's libraries happen to export too.
        for (other, from) in [
            ("memcpy", None),
            ("_ZNSt6thread6_StateD2Ev", None),
            ("PyLong_FromLong", None),
            ("GOMP_parallel", Some("libgomp-a34b3233.so.1")),
            (
                "_ZNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEEC1Ev",
                Some("libtorch_cpu.so"),
            ),
        ] {
            assert_eq!(classify(other, from), None, "{other}");
        }
    }
}
