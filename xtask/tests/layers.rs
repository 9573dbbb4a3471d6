//! The library's shape, checked: `src/lib.rs` groups the top-level modules into layers (a `// Layer:`
//! comment, then its `pub mod` lines), lowest first. A module may use `crate::` paths of its own
//! layer or lower ones, never a higher one, and modules of one layer may not import each other in a
//! cycle. Test code (`tests.rs` files, `#[cfg(test)]` modules, the `synth` fixtures) is exempt: a
//! test may drive a layer from above.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Layer name and its modules, in lib.rs order (lowest layer first).
fn layers(lib_rs: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in lib_rs.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("// ") {
            if let Some((name, _)) = rest.split_once(':') {
                if !name.is_empty() && !name.contains(' ') {
                    out.push((name.to_string(), Vec::new()));
                }
            }
        } else if let Some(m) = line
            .strip_prefix("pub mod ")
            .and_then(|m| m.strip_suffix(';'))
        {
            match out.last_mut() {
                Some((_, mods)) => mods.push(m.to_string()),
                None => panic!("`pub mod {m};` in lib.rs comes before any `// Layer:` comment"),
            }
        }
    }
    out
}

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = fs::read_dir(path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
            .map(|e| e.expect("directory entry").path())
            .collect();
        entries.sort();
        for e in entries {
            rust_files(&e, out);
        }
    } else if path.is_file() && path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// The top-level modules a source file names through `crate::NAME`, outside test code.
fn crate_refs(text: &str, modules: &BTreeSet<&str>) -> BTreeSet<String> {
    // Test modules sit at the end of a file by convention; everything after the first
    // `#[cfg(test)]` is test code.
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut refs = BTreeSet::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(name.as_str()) {
                refs.insert(name);
            }
            // `crate::{a, b}` names several.
            if let Some(list) = after.strip_prefix('{') {
                let inner = list.split('}').next().unwrap_or("");
                for part in inner.split(',') {
                    let n = part.trim().split("::").next().unwrap_or("").trim();
                    if modules.contains(n) {
                        refs.insert(n.to_string());
                    }
                }
            }
            rest = after;
        }
    }
    refs
}

/// Every violation in the source tree under `src`: "a (layer) imports b (higher layer)" and cycles.
fn violations(src: &Path) -> Vec<String> {
    let lib = fs::read_to_string(src.join("lib.rs")).expect("reading lib.rs");
    let layers = layers(&lib);
    assert!(layers.len() >= 3, "lib.rs names no layers: {layers:?}");
    let rank: BTreeMap<&str, (usize, &str)> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, (layer, mods))| mods.iter().map(move |m| (m.as_str(), (i, layer.as_str()))))
        .collect();
    let names: BTreeSet<&str> = rank.keys().copied().collect();
    let mut problems = Vec::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for module in &names {
        let mut files = Vec::new();
        rust_files(&src.join(format!("{module}.rs")), &mut files);
        rust_files(&src.join(module), &mut files);
        assert!(!files.is_empty(), "module `{module}` has no source file");
        for file in files {
            let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            if stem == "tests" || stem == "synth" {
                continue;
            }
            let text = fs::read_to_string(&file).expect("reading a source file");
            for target in crate_refs(&text, &names) {
                if target == *module {
                    continue;
                }
                let (from_rank, from_layer) = rank[module];
                let (to_rank, to_layer) = rank[target.as_str()];
                if to_rank > from_rank {
                    problems.push(format!(
                        "{}: `{module}` ({from_layer}) uses `crate::{target}` ({to_layer}), a higher layer",
                        file.strip_prefix(src).unwrap_or(&file).display()
                    ));
                }
                edges.entry(module.to_string()).or_default().insert(target);
            }
        }
    }
    // Cycles: a module that reaches itself through imports.
    for start in &names {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<Vec<String>> = vec![vec![start.to_string()]];
        while let Some(path) = stack.pop() {
            let last = path.last().cloned().unwrap_or_default();
            for next in edges.get(&last).into_iter().flatten() {
                if next == start {
                    let mut cycle = path.clone();
                    cycle.push(next.clone());
                    // Report each cycle once, from its smallest member.
                    if cycle.iter().min().map(String::as_str) == Some(*start) {
                        problems.push(format!("import cycle: {}", cycle.join(" → ")));
                    }
                } else if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push(p);
                }
            }
        }
    }
    problems
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_imports_a_higher_layer_or_a_cycle() {
    let problems = violations(&src_dir());
    assert!(
        problems.is_empty(),
        "layer violations:\n{}",
        problems.join("\n")
    );
}

/// The check itself can fail: a copy of the tree with one wrong import added is caught, as is a
/// cycle inside one layer.
#[test]
fn a_wrong_import_is_caught() {
    let copy = tempfile::tempdir().unwrap();
    copy_tree(&src_dir(), copy.path());
    let paths = copy.path().join("paths.rs");
    let mut text = fs::read_to_string(&paths).unwrap();
    text = format!("use crate::port_extension::Request;\n{text}");
    fs::write(&paths, text).unwrap();
    let problems = violations(copy.path());
    assert!(
        problems.iter().any(
            |p| p.contains("`paths` (Infrastructure) uses `crate::port_extension` (Workflows)")
        ),
        "{problems:?}"
    );

    let copy = tempfile::tempdir().unwrap();
    copy_tree(&src_dir(), copy.path());
    let kb = copy.path().join("kb/mod.rs");
    let text = fs::read_to_string(&kb).unwrap();
    fs::write(&kb, format!("use crate::arch::spec::Plan;\n{text}")).unwrap();
    let problems = violations(copy.path());
    assert!(
        problems
            .iter()
            .any(|p| p == "import cycle: arch → kb → arch"),
        "{problems:?}"
    );
}

#[test]
fn commands_are_thin_and_never_import_each_other() {
    let mut files = Vec::new();
    rust_files(&src_dir().join("commands"), &mut files);
    let mut problems = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        let lines = text.lines().count();
        let name = file.strip_prefix(src_dir()).unwrap().display().to_string();
        // About 150 lines: arguments, one library call, rendering. 200 leaves room for a long table.
        if lines > 200 {
            problems.push(format!(
                "{name}: {lines} lines; move its logic into the library"
            ));
        }
        for line in text.lines().filter(|l| l.contains("commands::")) {
            if !line.trim_start().starts_with("//") && !name.ends_with("mod.rs") {
                problems.push(format!("{name}: imports another command: {}", line.trim()));
            }
        }
        if text.contains("super::") && !name.ends_with("mod.rs") {
            for line in text
                .lines()
                .filter(|l| l.contains("super::") && !l.contains("super::*"))
            {
                problems.push(format!(
                    "{name}: reaches a sibling command: {}",
                    line.trim()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn copy_tree(from: &Path, to: &Path) {
    let mut files = Vec::new();
    rust_files(from, &mut files);
    for f in files {
        let dest = to.join(f.strip_prefix(from).unwrap());
        fs::create_dir_all(dest.parent().unwrap()).unwrap();
        fs::copy(&f, dest).unwrap();
    }
}
