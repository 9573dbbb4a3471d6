//! The review items a compiler will certainly reject, found before anything compiles: an
//! `#include` of a header that neither the target torch nor the source tree has, a TH/THC name
//! nothing declares, or an ATen call the target's schemas do not bind
//! ([`super::signature_changes`]), in a file the build compiles and outside any `#if`. A port that
//! holds one can no longer succeed; it stops with the list instead of ending minutes of
//! compiling in an error it already knew.

use super::ReviewRow;
use crate::build_ext::source;
use anyhow::Result;
use fs_err as fs;
use regex::Regex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// Rules whose items name a TH/THC identifier no rule could replace.
const NAME_RULES: [&str; 2] = ["thc-leftover", "th-leftover"];
/// The top folders of torch's own headers, present and removed (TH, THC and their NN and sparse
/// siblings went in 1.11): an `#include` under one that neither the target nor the source has
/// is found nowhere else the build looks.
const TORCH_ROOTS: [&str; 10] = [
    "ATen", "c10", "torch", "caffe2", "TH", "THC", "THNN", "THCUNN", "THS", "THCS",
];

/// One item that will stop the compiler, with what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certain {
    pub file: String,
    pub line: usize,
    pub what: String,
}

impl std::fmt::Display for Certain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.what)
    }
}

/// What a port's `#include`s are checked against.
pub struct Headers<'a> {
    /// The target's include directories.
    pub include_dirs: &'a [PathBuf],
    /// A stable-ABI build: `TORCH_TARGET_VERSION` is defined, and a target header that `#error`s
    /// under it (every ATen and c10 header of torch ≥ 2.10 does) is a certain failure too.
    pub stable_abi: bool,
    /// What became of a header the target lacks ([`super::header_history`]).
    pub gone: &'a mut dyn FnMut(&str) -> Option<String>,
}

/// The items the compiler will reject in `root` (the ported tree): each `#include` of a torch
/// header that neither the target nor the tree has, or that the target's copy refuses in a
/// stable-ABI build ([`Headers`]), and the review items of `review` that name a TH/THC name
/// nothing declares or an ATen call the target does not bind.
pub fn find(root: &Path, review: &[ReviewRow], headers: &mut Headers) -> Result<Vec<Certain>> {
    let files = source::tree_files(root)?;
    let compiled = compiled_files(root, &files);
    let mut out = header_failures(root, &files, &compiled, review, headers);
    let rules: Vec<&str> = [super::signature_changes::RULE]
        .into_iter()
        .chain(NAME_RULES)
        .collect();
    let candidates = review
        .iter()
        .filter(|i| !i.explained && rules.contains(&i.rule.as_str()));
    // Every C/C++/CUDA file's text, read once for all the names looked up in it.
    let mut sources: Option<String> = None;
    for item in candidates {
        if !compiled.contains(&item.file) || conditional(&root.join(&item.file), item.line) {
            continue;
        }
        if item.rule == super::signature_changes::RULE {
            out.push(Certain {
                file: item.file.clone(),
                line: item.line,
                what: item.suggestion.clone(),
            });
            continue;
        }
        let text =
            sources.get_or_insert_with(|| read_all(root, files.iter().filter(|f| is_source(f))));
        for name in undeclared_names(text, &item.code)? {
            out.push(Certain {
                file: item.file.clone(),
                line: item.line,
                what: format!(
                    "{name}: torch removed it (TH/THC, gone in 1.11) and nothing in the source declares it; {}",
                    item.suggestion
                ),
            });
        }
    }
    if headers.stable_abi {
        out.extend(stable_blockers(root, &compiled, review, &out));
    }
    out.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    out.dedup();
    Ok(out)
}

/// In a stable-ABI build, each review item the stable rules left (what the stable ABI cannot
/// express, or not by rule) in a compiled file outside `#if` is a blocker: the build has no
/// unstable API to fall back on. A line `found` already names is not named twice.
fn stable_blockers(
    root: &Path,
    compiled: &BTreeSet<String>,
    review: &[ReviewRow],
    found: &[Certain],
) -> Vec<Certain> {
    review
        .iter()
        .filter(|i| !i.explained && i.rule.starts_with("stable-"))
        .filter(|i| compiled.contains(&i.file) && !conditional(&root.join(&i.file), i.line))
        .filter(|i| !found.iter().any(|c| c.file == i.file && c.line == i.line))
        .map(|i| Certain {
            file: i.file.clone(),
            line: i.line,
            what: format!(
                "[{}] `{}` blocks a stable-ABI build (no stable form, or none by rule); {}",
                i.rule, i.code, i.suggestion
            ),
        })
        .collect()
}

/// The `#include`s of torch headers in the compiled files, outside any `#if`, that will stop the
/// compiler ([`header_failure`]); a review item on the same line adds its suggestion.
fn header_failures(
    root: &Path,
    files: &[PathBuf],
    compiled: &BTreeSet<String>,
    review: &[ReviewRow],
    headers: &mut Headers,
) -> Vec<Certain> {
    static INCLUDE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r#"^\s*#\s*include\s*[<"]([^>"]+)[>"]"#).expect("include"));
    let mut said: std::collections::HashMap<String, Option<String>> = Default::default();
    let mut out = Vec::new();
    for file in compiled {
        let Ok(bytes) = fs::read(root.join(file)) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        let inside = conditional_lines(&text);
        for (i, l) in text.lines().enumerate() {
            let Some(header) = INCLUDE.captures(l).map(|c| c[1].to_string()) else {
                continue;
            };
            let top = header.split('/').next().unwrap_or_default();
            if !TORCH_ROOTS.contains(&top)
                || files.iter().any(|f| f.ends_with(&header))
                || inside[i]
            {
                continue;
            }
            let what = said
                .entry(header.clone())
                .or_insert_with(|| header_failure(&header, headers));
            let Some(what) = what else { continue };
            let suggestion = review
                .iter()
                .find(|r| r.file == *file && r.line == i + 1 && !r.explained)
                .map(|r| format!("; {}", r.suggestion))
                .unwrap_or_else(|| match headers.stable_abi {
                    true => "; include the torch/csrc/stable or torch/headeronly header that declares what the file uses, or drop it".into(),
                    false => String::new(),
                });
            out.push(Certain {
                file: file.clone(),
                line: i + 1,
                what: format!("{what}{suggestion}"),
            });
        }
    }
    out
}

/// Why `#include <header>` (a torch header the tree does not supply) stops the compiler: the
/// target has no such header, or its copy `#error`s in a stable-ABI build; None when it compiles.
fn header_failure(header: &str, headers: &mut Headers) -> Option<String> {
    let Some(path) = headers
        .include_dirs
        .iter()
        .map(|d| d.join(header))
        .find(|p| p.is_file())
    else {
        return Some((headers.gone)(header).unwrap_or_else(|| format!(
            "#include <{header}>: the target torch has no such header (its include directory does not), nor does the source"
        )));
    };
    if !headers.stable_abi {
        return None;
    }
    let text = fs::read_to_string(&path).ok()?;
    let refusal = stable_abi_refusal(&text)?;
    Some(format!(
        "#include <{header}>: the target's copy refuses a stable-ABI build, which defines TORCH_TARGET_VERSION (`{refusal}`)"
    ))
}

/// The `#error` a header raises when `TORCH_TARGET_VERSION` (or `TORCH_STABLE_ONLY`) is
/// defined: torch ≥ 2.10 wraps each header of its unstable API in
/// `#if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)` … `#else #error …`.
fn stable_abi_refusal(text: &str) -> Option<String> {
    let guarded = text.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with('#') && l.contains("if") && l.contains("!defined(TORCH_TARGET_VERSION)")
    });
    if !guarded {
        return None;
    }
    text.lines()
        .map(str::trim)
        .find(|l| l.starts_with("#error") || l.starts_with("# error"))
        .map(str::to_string)
}

/// The TH/THC names on `code` that nothing in `sources` (the tree's C/C++/CUDA text) declares
/// (`#define`, `struct`, `class`, `typedef`, `using`).
fn undeclared_names(sources: &str, code: &str) -> Result<Vec<String>> {
    static NAME: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\bTH(C|Cuda|Float|Double|Half|Byte|Char|Short|Int|Long|Bool)?[A-Z_]\w*")
            .expect("TH name")
    });
    let names: BTreeSet<&str> = NAME.find_iter(code).map(|m| m.as_str()).collect();
    let mut undeclared = Vec::new();
    for name in names {
        let declared = Regex::new(&format!(
            r"(#\s*define|\bstruct|\bclass|\btypedef\b[^;]*|\busing)\s+{}\b",
            regex::escape(name)
        ))?;
        if !declared.is_match(sources) {
            undeclared.push(name.to_string());
        }
    }
    Ok(undeclared)
}

/// The texts of `files` under `root`, one after another (a file that cannot be read is left out).
fn read_all<'a>(root: &Path, files: impl Iterator<Item = &'a PathBuf>) -> String {
    files
        .filter_map(|f| fs::read(root.join(f)).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// C, C++ or CUDA, as the codemod reads it (headers too).
fn is_source(rel: &Path) -> bool {
    crate::codemod::catalogue::Lang::of_path(rel) == Some(crate::codemod::catalogue::Lang::Cpp)
}

/// The C/C++/CUDA files the build compiles: each source whose file name a build file of the tree
/// names (a `setup.py`, a module calling `load()`, CMake's lists), every source when a build file
/// globs, and the headers those include by name.
fn compiled_files(root: &Path, files: &[PathBuf]) -> BTreeSet<String> {
    static GLOB: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\bglob\b|os\.listdir|file\s*\(\s*GLOB|\.rglob|\.iterdir|os\.walk")
            .expect("glob")
    });
    let build_text = read_all(
        root,
        files.iter().filter(|f| {
            let name = f.to_string_lossy();
            name.ends_with(".py") || name.ends_with("CMakeLists.txt") || name.ends_with(".cmake")
        }),
    );
    let globs = GLOB.is_match(&build_text);
    let name = |f: &Path| f.file_name().map(|n| n.to_string_lossy().into_owned());
    // A name two sources share must be named with its folder (`src/op.cu`, not a
    // `tensorflow/op.cu` no build here compiles): the files of each name, counted once.
    let mut per_name: std::collections::HashMap<String, usize> = Default::default();
    for f in files {
        *per_name.entry(name(f).unwrap_or_default()).or_default() += 1;
    }
    let shared = |f: &Path| {
        per_name
            .get(&name(f).unwrap_or_default())
            .is_some_and(|&n| n > 1)
    };
    let named = |f: &Path| match (shared(f), f.parent().and_then(Path::file_name)) {
        (true, Some(dir)) => build_text.contains(&format!(
            "{}/{}",
            dir.to_string_lossy(),
            name(f).unwrap_or_default()
        )),
        _ => name(f).is_some_and(|n| build_text.contains(&n)),
    };
    let sources: Vec<&PathBuf> = files
        .iter()
        .filter(|f| is_source(f) && !is_header(f))
        .filter(|f| globs || named(f))
        .collect();
    let mut compiled: BTreeSet<String> = sources.iter().map(|f| f.display().to_string()).collect();
    let included = read_all(root, sources.iter().copied());
    for h in files.iter().filter(|f| is_header(f)) {
        if h.file_name()
            .is_some_and(|n| included.contains(n.to_string_lossy().as_ref()))
        {
            compiled.insert(h.display().to_string());
        }
    }
    compiled
}

fn is_header(rel: &Path) -> bool {
    rel.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "h" | "hh" | "hpp" | "cuh"))
}

/// Whether line `line` (1-based) of `file` sits inside an `#if`/`#ifdef`/`#ifndef` block other
/// than the file's include guard: there the compiler may never see it.
fn conditional(file: &Path, line: usize) -> bool {
    let Ok(bytes) = fs::read(file) else {
        return false;
    };
    let inside = conditional_lines(&String::from_utf8_lossy(&bytes));
    inside.get(line.saturating_sub(1)).copied().unwrap_or(false)
}

/// For each line of `text`, [`conditional`]'s answer, in one pass.
fn conditional_lines(text: &str) -> Vec<bool> {
    static OPEN: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^\s*#\s*(if|ifdef|ifndef)\b").expect("if"));
    static CLOSE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^\s*#\s*endif\b").expect("endif"));
    static GUARD: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^\s*#\s*ifndef\s+(\w+)\s*\n\s*#\s*define\s+(\w+)").expect("guard")
    });
    // The first directive of a header guard opens a block around the whole file.
    let first_directive = text.lines().map(str::trim).find(|l| l.starts_with('#'));
    let guarded = first_directive.is_some_and(|l| l.starts_with("#ifndef"))
        && GUARD
            .captures(text.trim_start_matches(|c: char| c != '#'))
            .is_some_and(|c| c[1] == c[2]);
    let mut depth: i32 = if guarded { -1 } else { 0 };
    let mut inside = Vec::new();
    for l in text.lines() {
        inside.push(depth > 0);
        if OPEN.is_match(l) {
            depth += 1;
        } else if CLOSE.is_match(l) {
            depth -= 1;
        }
    }
    inside
}

#[cfg(test)]
mod tests {
    use super::*;

    /// torch ≥ 2.10's guard around its unstable headers, as 2.15.0's `c10/util/Exception.h`
    /// has it; a header that only reads the macro (`torch/csrc/stable/version.h`) is no refusal.
    #[test]
    fn a_header_guarded_against_the_stable_abi_is_a_refusal() {
        let guarded = "#if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)\n#pragma once\nnamespace c10 {}\n#else\n#error \"This file should not be included when either TORCH_STABLE_ONLY or TORCH_TARGET_VERSION is defined.\"\n#endif\n";
        assert_eq!(
            stable_abi_refusal(guarded).as_deref(),
            Some("#error \"This file should not be included when either TORCH_STABLE_ONLY or TORCH_TARGET_VERSION is defined.\"")
        );
        let reads =
            "#pragma once\n#ifdef TORCH_TARGET_VERSION\n#define X TORCH_TARGET_VERSION\n#endif\n";
        assert_eq!(stable_abi_refusal(reads), None);
        assert_eq!(stable_abi_refusal("#pragma once\n#error \"other\"\n"), None);
    }

    fn item(file: &str, line: usize, rule: &str, code: &str) -> ReviewRow {
        ReviewRow {
            file: file.into(),
            line,
            rule: rule.into(),
            code: code.into(),
            resolution: "to review".into(),
            suggestion: "use ATen".into(),
            explained: false,
        }
    }

    /// Issue 62: what the compiler would reject, named before anything compiles; what it may
    /// never see (a file no build compiles, an `#if` branch, a header or name the tree supplies
    /// itself) is left to the build.
    #[test]
    fn only_items_the_compiler_will_reject_are_certain() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let write = |rel: &str, text: &str| {
            let p = root.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        };
        write(
            "setup.py",
            "CUDAExtension('x', ['src/op.cu', 'src/compat.cpp'])\n",
        );
        write(
            "src/op.cu",
            "#include <THC/THCNumerics.cuh>\n#include \"util.h\"\n#ifdef OLD_TORCH\n#include <THC/THCGeneral.h>\n#endif\nTHCNumerics<float>::exp(x); THCLocal y;\n",
        );
        write(
            "src/util.h",
            "#ifndef UTIL_H\n#define UTIL_H\n#include <THC/THCTensorMath.h>\n#endif\n",
        );
        write(
            "src/compat.cpp",
            "#include <THC/THCLocal.h>\nstruct THCLocal {};\n",
        );
        write("src/THC/THCLocal.h", "#pragma once\n");
        write("tensorflow/op.cu", "#include <THC/THCNumerics.cuh>\n");
        let include = root.join("torch-include");
        fs::create_dir_all(&include).unwrap();
        let review = vec![
            item(
                "src/op.cu",
                1,
                "thc-other-header",
                "#include <THC/THCNumerics.cuh>",
            ),
            item(
                "src/op.cu",
                4,
                "thc-other-header",
                "#include <THC/THCGeneral.h>",
            ),
            item(
                "src/op.cu",
                6,
                "thc-leftover",
                "THCNumerics<float>::exp(x); THCLocal y;",
            ),
            item(
                "src/util.h",
                3,
                "thc-other-header",
                "#include <THC/THCTensorMath.h>",
            ),
            item(
                "src/compat.cpp",
                1,
                "thc-other-header",
                "#include <THC/THCLocal.h>",
            ),
            item(
                "tensorflow/op.cu",
                1,
                "thc-other-header",
                "#include <THC/THCNumerics.cuh>",
            ),
        ];
        let mut asked = Vec::new();
        let mut gone = |h: &str| {
            asked.push(h.to_string());
            (h == "THC/THCTensorMath.h").then(|| format!("#include <{h}>: went in 1.11"))
        };
        let dirs = [include];
        let mut headers = Headers {
            include_dirs: &dirs,
            stable_abi: false,
            gone: &mut gone,
        };
        let found = find(root, &review, &mut headers).unwrap();
        // Each missing header is looked up once; the item's suggestion follows what it says.
        assert_eq!(asked, ["THC/THCNumerics.cuh", "THC/THCTensorMath.h"]);
        assert_eq!(
            found[2].what,
            "#include <THC/THCTensorMath.h>: went in 1.11; use ATen"
        );
        let got: Vec<String> = found
            .iter()
            .map(|c| {
                format!(
                    "{}:{} {}",
                    c.file,
                    c.line,
                    c.what.split(':').next().unwrap()
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                "src/op.cu:1 #include <THC/THCNumerics.cuh>",
                "src/op.cu:6 THCNumerics",
                "src/util.h:3 #include <THC/THCTensorMath.h>",
            ]
        );
    }
}
