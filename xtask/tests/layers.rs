//! The library's shape, checked: `src/lib.rs` groups the top-level modules into layers (a `// Layer:`
//! comment, then its `pub mod` lines), lowest first. A module may use `crate::` paths of lower
//! layers, never a higher one, and of its own layer only along the edges the layer's
//! `// Same-layer uses: a → b, …` line lists (an edge listed and not used is reported too, so the
//! list stays the map); no cycles, between top-level modules or between the files of one folder.
//! docs/architecture.md's layer table names the same modules as lib.rs; no two modules share a
//! name; no function in a workflow passes 80 lines, and outside the workflows only the functions
//! the allowance lists do, none longer than listed (the allowance only shrinks). Test code
//! (`tests.rs` files, each `#[cfg(test)]` item wherever it sits, the `synth` fixtures) is
//! exempt: a test may drive a layer from above.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// One layer of lib.rs: its name, its modules, and the same-layer imports it allows.
struct Layer {
    name: String,
    modules: Vec<String>,
    allowed: BTreeSet<(String, String)>,
}

/// The layers, in lib.rs order (lowest layer first).
fn layers(lib_rs: &str) -> Vec<Layer> {
    let mut out: Vec<Layer> = Vec::new();
    let mut in_edges = false;
    for line in lib_rs.lines() {
        let line = line.trim();
        let comment = line.strip_prefix("// ");
        if let Some(list) = comment.and_then(|c| c.strip_prefix("Same-layer uses:")) {
            in_edges = true;
            add_edges(list, &mut out);
            continue;
        }
        if in_edges {
            match comment {
                Some(list) => {
                    add_edges(list, &mut out);
                    continue;
                }
                None => in_edges = false,
            }
        }
        if let Some(rest) = comment {
            if let Some((name, _)) = rest.split_once(':') {
                // The same name again (the next crate's lib.rs: Readers in binary, then in
                // codemod) goes on with that layer.
                let goes_on = out.last().is_some_and(|l| l.name == name);
                if !name.is_empty() && !name.contains(' ') && !goes_on {
                    out.push(Layer {
                        name: name.to_string(),
                        modules: Vec::new(),
                        allowed: BTreeSet::new(),
                    });
                }
            }
        } else if let Some(m) = line
            .strip_prefix("pub mod ")
            .and_then(|m| m.strip_suffix(';'))
        {
            match out.last_mut() {
                Some(layer) => layer.modules.push(m.to_string()),
                None => panic!("`pub mod {m};` in lib.rs comes before any `// Layer:` comment"),
            }
        }
    }
    out
}

/// `a → b, c → d.` into the last layer's allowed edges.
fn add_edges(list: &str, out: &mut [Layer]) {
    let layer = out
        .last_mut()
        .expect("a `// Same-layer uses:` line in lib.rs before any layer");
    for edge in list.trim().trim_end_matches('.').split(',') {
        if edge.trim().is_empty() {
            continue;
        }
        let (from, to) = edge
            .split_once('→')
            .unwrap_or_else(|| panic!("lib.rs: `{edge}` is not `a → b`"));
        layer
            .allowed
            .insert((from.trim().to_string(), to.trim().to_string()));
    }
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
    refs_after(text, "crate::", modules)
}

/// The `names` a source file names right after `prefix` (`crate::`, `super::`,
/// `crate::build_ext::`), alone or in a `{a, b}` list (over several lines too, nested lists
/// included), outside comments, literals and test code. A prefix that continues a longer path
/// (`super::super::x` for the prefix `super::`) does not count.
fn refs_after(text: &str, prefix: &str, names: &BTreeSet<&str>) -> BTreeSet<String> {
    let code = code_only(&non_test_code(text));
    let mut refs = BTreeSet::new();
    let mut at = 0;
    while let Some(i) = code[at..].find(prefix) {
        let start = at + i;
        at = start + prefix.len();
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c == ':' || c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let after = &code[at..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if names.contains(name.as_str()) {
            refs.insert(name);
        }
        // `prefix{a, b::{X, Y}}` names several: the first name of each top-level part.
        if let Some(list) = after.strip_prefix('{') {
            for part in top_level_parts(list) {
                let n = part.trim().split("::").next().unwrap_or("").trim();
                if names.contains(n) {
                    refs.insert(n.to_string());
                }
            }
        }
    }
    refs
}

/// The comma-separated parts of a `{…}` list up to its closing brace (`list` starts after the
/// opening one); a nested list stays inside its part.
fn top_level_parts(list: &str) -> Vec<&str> {
    let (mut depth, mut from, mut parts) = (0usize, 0usize, Vec::new());
    for (i, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                parts.push(&list[from..i]);
                return parts;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts
}

/// What a byte of Rust source is part of.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Region {
    Code,
    Comment,
    /// A string or char literal.
    Literal,
}

/// Where each byte of `text` is: code, a comment, or a literal. Raw strings (`r#"…"#`), escapes
/// and lifetimes (`'a`, not a char) are told apart.
fn regions(text: &str) -> Vec<Region> {
    let b = text.as_bytes();
    let mut code = vec![Region::Code; b.len()];
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let kind = match rest.starts_with(b"//") || rest.starts_with(b"/*") {
            true => Region::Comment,
            false => Region::Literal,
        };
        let end = if rest.starts_with(b"//") {
            i + rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            // Block comments nest in Rust.
            let (mut depth, mut j) = (0usize, i);
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            j
        } else if (rest.starts_with(b"r\"") || rest.starts_with(b"r#"))
            && !i
                .checked_sub(1)
                .is_some_and(|p| b[p].is_ascii_alphanumeric() || b[p] == b'_')
        {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = i + 2 + hashes;
            body + b[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len() - body, |p| p + close.len())
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'); otherwise a lifetime.
            if rest.get(1) == Some(&b'\\') {
                i + 2
                    + rest[2..]
                        .iter()
                        .position(|&c| c == b'\'')
                        .map_or(0, |p| p + 1)
            } else if rest.get(2) == Some(&b'\'') {
                i + 3
            } else {
                i += 1;
                continue;
            }
        } else {
            i += 1;
            continue;
        };
        let end = end.min(b.len());
        for m in &mut code[i..end] {
            *m = kind;
        }
        i = end.max(i + 1);
    }
    code
}

/// `text` with each `#[cfg(test)]` item (a test module inline or `mod tests;`, a test-only
/// function or import) blanked out, newlines kept so line numbers hold. What follows such an
/// item is code: `kb/mod.rs` declares `mod tests;` near its top.
fn non_test_code(text: &str) -> String {
    let mask = regions(text);
    let b = text.as_bytes();
    let mut blank = vec![false; b.len()];
    let mut from = 0;
    while let Some(i) = text[from..].find("#[cfg(test)]").map(|i| i + from) {
        from = i + 1;
        if mask[i] != Region::Code {
            continue;
        }
        // The item ends at its first `;` before any brace, or where its first brace closes.
        let mut depth = 0usize;
        let mut end = b.len();
        for j in i + "#[cfg(test)]".len()..b.len() {
            if mask[j] != Region::Code {
                continue;
            }
            match b[j] {
                b';' if depth == 0 => {
                    end = j + 1;
                    break;
                }
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = j + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        for m in &mut blank[i..end] {
            *m = true;
        }
        from = end.max(from);
    }
    text.char_indices()
        .map(|(i, c)| if blank[i] && c != '\n' { ' ' } else { c })
        .collect()
}

/// `text` with its comments and literals blanked out, newlines kept: the code alone.
fn code_only(text: &str) -> String {
    let mask = regions(text);
    text.char_indices()
        .map(|(i, c)| match mask[i] != Region::Code && c != '\n' {
            true => ' ',
            false => c,
        })
        .collect()
}

/// Each cycle of `edges`, once, from its smallest member: `a → b → a`.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut out = Vec::new();
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<Vec<String>> = vec![vec![start.clone()]];
        while let Some(path) = stack.pop() {
            let last = path.last().cloned().unwrap_or_default();
            for next in edges.get(&last).into_iter().flatten() {
                if next == start {
                    let mut cycle = path.clone();
                    cycle.push(next.clone());
                    if cycle.iter().min() == Some(start) {
                        out.push(cycle.join(" → "));
                    }
                } else if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push(p);
                }
            }
        }
    }
    out
}

/// Every violation in the source tree under `src`: "a (layer) imports b (higher layer)" and cycles.
fn violations(src: &Path) -> Vec<String> {
    let lib = fs::read_to_string(src.join("lib.rs")).expect("reading lib.rs");
    let layers = layers(&lib);
    assert!(layers.len() >= 3, "lib.rs names no layers");
    let rank: BTreeMap<&str, (usize, &str)> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, l)| {
            l.modules
                .iter()
                .map(move |m| (m.as_str(), (i, l.name.as_str())))
        })
        .collect();
    let allowed: BTreeSet<(String, String)> = layers
        .iter()
        .flat_map(|l| l.allowed.iter().cloned())
        .collect();
    let mut used_same_layer = BTreeSet::new();
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
                let rel = file
                    .strip_prefix(src)
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                if to_rank > from_rank {
                    problems.push(format!(
                        "{rel}: `{module}` ({from_layer}) uses `crate::{target}` ({to_layer}), a higher layer"
                    ));
                } else if to_rank == from_rank {
                    let edge = (module.to_string(), target.clone());
                    if !allowed.contains(&edge) {
                        problems.push(format!(
                            "{rel}: `{module}` uses `crate::{target}`, both {from_layer}: lib.rs's `// Same-layer uses:` line does not list `{module} → {target}`"
                        ));
                    }
                    used_same_layer.insert(edge);
                }
                edges.entry(module.to_string()).or_default().insert(target);
            }
        }
    }
    for (from, to) in allowed.difference(&used_same_layer) {
        problems.push(format!(
            "lib.rs lists `{from} → {to}`, which no code uses: remove it from `// Same-layer uses:`"
        ));
    }
    // Cycles: a module that reaches itself through imports.
    for cycle in cycles(&edges) {
        problems.push(format!("import cycle: {cycle}"));
    }
    problems
}

/// The files of one folder form no cycle either: `a.rs` (or `a/`) using `super::b` (or
/// `crate::folder::b`) while `b` uses `a` makes two files that change together and cannot be
/// read apart. A folder's `mod.rs` is its root, not a sibling: what it declares, its files use.
fn folder_cycles(src: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<PathBuf> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        let mut siblings: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for e in &entries {
            let stem = e
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("")
                .to_string();
            if e.is_dir() {
                dirs.push(e.clone());
                let mut files = Vec::new();
                rust_files(e, &mut files);
                if e.join("mod.rs").is_file() {
                    siblings.insert(stem, files);
                }
            } else if e.extension().is_some_and(|x| x == "rs")
                && !["mod", "lib", "main", "tests", "synth"].contains(&stem.as_str())
            {
                siblings.insert(stem, vec![e.clone()]);
            }
        }
        // The crate's own top level is `violations`' to check.
        if dir == src || siblings.len() < 2 {
            continue;
        }
        let folder = dir.strip_prefix(src).unwrap();
        let crate_path = format!(
            "crate::{}::",
            folder
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("::")
        );
        let names: BTreeSet<&str> = siblings.keys().map(String::as_str).collect();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (module, files) in &siblings {
            for file in files {
                let text = fs::read_to_string(file).unwrap();
                // `super::` from `a.rs` or `a/mod.rs` is the folder; from `a/x.rs`, `a`.
                let depth = file.strip_prefix(&dir).unwrap().components().count()
                    - usize::from(file.file_stem().is_some_and(|s| s == "mod"));
                let mut refs = refs_after(&text, &"super::".repeat(depth), &names);
                refs.extend(refs_after(&text, &crate_path, &names));
                refs.remove(module);
                edges.entry(module.clone()).or_default().extend(refs);
            }
        }
        for cycle in cycles(&edges) {
            problems.push(format!("import cycle in {}/: {cycle}", folder.display()));
        }
    }
    problems.sort();
    problems
}

#[test]
fn no_two_files_of_one_folder_import_each_other() {
    let problems = folder_cycles(&src_dir());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // A circle planted between two files of a folder is caught, through either path form.
    let copy = tempfile::tempdir().unwrap();
    copy_tree(&src_dir(), copy.path());
    plant(
        copy.path(),
        "build_ext/source.rs",
        "use super::jit::applies;\n",
    );
    // fatbin.rs already uses `super::elf`: elf using it back closes the circle.
    plant(
        copy.path(),
        "binary/elf.rs",
        "use crate::binary::fatbin::Fatbin;\n",
    );
    // A list over several lines, nested: before, only its first line was read.
    plant(
        copy.path(),
        "port_extension/certain_failures.rs",
        "use super::{\n    recipe::{Recipe, SourceKind},\n    steps::port_dir,\n};\n",
    );
    let problems = folder_cycles(copy.path());
    assert!(
        problems
            .iter()
            .any(|p| p == "import cycle in build_ext/: jit → source → jit"),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p == "import cycle in binary/: elf → fatbin → elf"),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p
                == "import cycle in port_extension/: certain_failures → steps → certain_failures"),
        "{problems:?}"
    );
}

/// The workspace's crates, lowest first: the order their lib.rs layers stack in.
const CRATES: &[&str] = &[
    "crates/core",
    "crates/model",
    "crates/binary",
    "crates/codemod",
    "crates/env",
    "crates/verify",
    "crates/workflows",
    "crates/maintainer",
    "xtask",
];

/// The workspace read as one source tree, which every check here takes: each crate's `src/` laid
/// side by side (`binary/elf.rs`, `commands/verify.rs`), and their lib.rs files one after another
/// in [`CRATES`] order, which [`layers`] reads as one (a layer that goes on in the next crate,
/// Readers in binary and then codemod, stays one layer). The compiler already refuses an import
/// of a crate above; what this adds is what crates cannot say: the layers inside a crate, the
/// edges within one layer, cycles between a folder's files, lengths, printing and rendering.
/// Built once per test process.
fn src_dir() -> PathBuf {
    static VIEW: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    VIEW.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        // Under the target directory, one view per test process; those of processes that ended
        // are removed.
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        for e in fs::read_dir(tmp).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("layers-view-") {
                if !Path::new("/proc").join(pid).exists() {
                    let _ = fs::remove_dir_all(e.path());
                }
            }
        }
        let view = tmp.join(format!("layers-view-{}", std::process::id()));
        let _ = fs::remove_dir_all(&view);
        fs::create_dir_all(&view).unwrap();
        let in_workspace: BTreeSet<String> = fs::read_dir(root.join("crates"))
            .unwrap()
            .flatten()
            .map(|e| format!("crates/{}", e.file_name().to_string_lossy()))
            .collect();
        let listed: BTreeSet<String> = CRATES.iter().map(|c| c.to_string()).collect();
        assert!(
            in_workspace.is_subset(&listed),
            "a crate under crates/ is missing from CRATES: {:?}",
            in_workspace.difference(&listed).collect::<Vec<_>>()
        );
        let mut lib = String::new();
        for krate in CRATES {
            let src = root.join(krate).join("src");
            copy_tree(&src, &view);
            lib.push_str(&fs::read_to_string(src.join("lib.rs")).unwrap());
            lib.push('\n');
        }
        fs::write(view.join("lib.rs"), lib).unwrap();
        view
    })
    .clone()
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
    plant(copy.path(), "kb/mod.rs", "use crate::arch::spec::Plan;\n");
    let problems = violations(copy.path());
    assert!(
        problems
            .iter()
            .any(|p| p == "import cycle: arch → kb → arch"),
        "{problems:?}"
    );
}

/// A same-layer import lib.rs does not list is caught, and so is a listed edge no code uses.
#[test]
fn an_unlisted_same_layer_import_and_a_stale_listed_edge_are_caught() {
    let copy = tempfile::tempdir().unwrap();
    copy_tree(&src_dir(), copy.path());
    plant(copy.path(), "doctor.rs", "use crate::kernels::Selection;\n");
    let lib = copy.path().join("lib.rs");
    let text = fs::read_to_string(&lib).unwrap();
    let text = text.replace(
        "// Same-layer uses: port_extension → build_ext.",
        "// Same-layer uses: kernels → audit_upgrade, port_extension → build_ext.",
    );
    fs::write(&lib, text).unwrap();
    let problems = violations(copy.path());
    assert!(
        problems.iter().any(|p| p
            == "doctor.rs: `doctor` uses `crate::kernels`, both Workflows: lib.rs's `// Same-layer uses:` line does not list `doctor → kernels`"),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p
            == "lib.rs lists `kernels → audit_upgrade`, which no code uses: remove it from `// Same-layer uses:`"),
        "{problems:?}"
    );
    assert_eq!(problems.len(), 2, "{problems:?}");
}

/// The layer table of docs/architecture.md: after its `| layer | modules |` header, one
/// `| Layer | `a`, `b` | … |` row per layer, up to the first line that is not a row.
fn documented_layers(md: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    let rows = md
        .lines()
        .skip_while(|l| !l.starts_with("| layer | modules |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'));
    for line in rows {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 {
            continue;
        }
        let mods: BTreeSet<String> = cells[2]
            .split(',')
            .map(|m| m.trim().trim_matches('`').to_string())
            .filter(|m| !m.is_empty())
            .collect();
        out.insert(cells[1].to_string(), mods);
    }
    out
}

/// What docs/architecture.md's layer table should say, and what it says, per layer.
fn architecture_doc_problems(lib_rs: &str, md: &str) -> Vec<String> {
    let code: BTreeMap<String, BTreeSet<String>> = layers(lib_rs)
        .into_iter()
        .map(|l| (l.name, l.modules.into_iter().collect()))
        .collect();
    let doc = documented_layers(md);
    let mut problems = Vec::new();
    for name in code.keys().chain(doc.keys()).collect::<BTreeSet<_>>() {
        let (c, d) = (code.get(name), doc.get(name));
        if c != d {
            problems.push(format!(
                "layer {name}: lib.rs has {:?}, docs/architecture.md has {:?}",
                c.cloned().unwrap_or_default(),
                d.cloned().unwrap_or_default()
            ));
        }
    }
    problems
}

#[test]
fn the_architecture_doc_names_the_layers_lib_rs_has() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let lib = fs::read_to_string(src_dir().join("lib.rs")).unwrap();
    let md = fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let problems = architecture_doc_problems(&lib, &md);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // A module moved in lib.rs but not in the doc is caught.
    let moved = lib.replace("pub mod toolchain;\n", "").replace(
        "pub mod port_extension;\n",
        "pub mod port_extension;\npub mod toolchain;\n",
    );
    let problems = architecture_doc_problems(&moved, &md);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("layer Environments"), "{problems:?}");
}

/// Names every workflow gives the same kind of module: its `steps` (as every folder has a
/// `mod.rs`).
const ONE_NAME_PER_WORKFLOW: &[&str] = &["steps"];

/// Every module's name: file stems and folders under `src`, outside `commands/` (whose modules
/// are named for the workflows they call) and the `mod.rs`/`tests.rs`/`lib.rs`/`main.rs` files.
fn module_names(src: &Path) -> BTreeMap<String, Vec<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        if rel.starts_with("commands") {
            continue;
        }
        let stem = rel.file_stem().unwrap().to_string_lossy().into_owned();
        let module = if matches!(stem.as_str(), "mod" | "tests" | "lib" | "main") {
            None
        } else {
            Some((stem, rel.with_extension("").display().to_string()))
        };
        let dirs = rel
            .ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty());
        for (name, path) in module.into_iter().chain(dirs.map(|d| {
            (
                d.file_name().unwrap().to_string_lossy().into_owned(),
                d.display().to_string(),
            )
        })) {
            names.entry(name).or_default().insert(path);
        }
    }
    names
        .into_iter()
        .filter(|(n, paths)| paths.len() > 1 && !ONE_NAME_PER_WORKFLOW.contains(&n.as_str()))
        .map(|(n, p)| (n, p.into_iter().collect()))
        .collect()
}

#[test]
fn no_two_modules_share_a_name() {
    let dups = module_names(&src_dir());
    assert!(dups.is_empty(), "modules sharing a name: {dups:?}");
    let copy = tempfile::tempdir().unwrap();
    copy_tree(&src_dir(), copy.path());
    fs::write(copy.path().join("build_ext/cache.rs"), "").unwrap();
    let dups = module_names(copy.path());
    assert_eq!(
        dups.get("cache"),
        Some(&vec!["build_ext/cache".to_string(), "cache".to_string()]),
        "{dups:?}"
    );
}

/// Workflow functions longer than this are split into named steps.
const MAX_WORKFLOW_FN_LINES: usize = 80;

/// `(file, function, lines)` for every function in `files` longer than `max`, outside test code.
/// A function runs from its `fn` line to the first line that closes it at the same indentation.
fn long_functions(src: &Path, files: &[PathBuf], max: usize) -> Vec<(String, String, usize)> {
    let mut out = Vec::new();
    for file in files {
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if stem == "tests" || stem == "synth" {
            continue;
        }
        let text = fs::read_to_string(file).expect("reading a source file");
        let code = non_test_code(&text);
        let lines: Vec<&str> = code.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let body = line.trim_start();
            let indent = &line[..line.len() - body.len()];
            let decl = ["pub fn ", "fn ", "pub(crate) fn ", "pub(super) fn "]
                .iter()
                .find_map(|p| body.strip_prefix(p));
            let Some(decl) = decl else { continue };
            let name: String = decl
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let close = format!("{indent}}}");
            if let Some(end) = lines[i + 1..].iter().position(|l| *l == close) {
                let n = end + 2;
                if n > max {
                    let rel = file.strip_prefix(src).unwrap_or(file).display().to_string();
                    out.push((rel, name, n));
                }
            }
        }
    }
    out
}

/// The layers whose functions stay under [`MAX_WORKFLOW_FN_LINES`]: what the commands do.
const WORKFLOW_LAYERS: &[&str] = &["Checks", "Workflows", "Maintainer"];

fn workflow_files(src: &Path) -> Vec<PathBuf> {
    let lib = fs::read_to_string(src.join("lib.rs")).expect("reading lib.rs");
    let modules: Vec<String> = layers(&lib)
        .into_iter()
        .filter(|l| WORKFLOW_LAYERS.contains(&l.name.as_str()))
        .flat_map(|l| l.modules)
        .collect();
    assert!(!modules.is_empty(), "lib.rs has no Workflows layer");
    let mut files = Vec::new();
    for m in &modules {
        rust_files(&src.join(format!("{m}.rs")), &mut files);
        rust_files(&src.join(m), &mut files);
    }
    files
}

fn long_function_problems(src: &Path) -> Vec<String> {
    long_functions(src, &workflow_files(src), MAX_WORKFLOW_FN_LINES)
        .into_iter()
        .map(|(file, name, n)| {
            format!("{file}: fn {name} has {n} lines, over {MAX_WORKFLOW_FN_LINES}; split it into named steps")
        })
        .collect()
}

/// Functions over [`MAX_WORKFLOW_FN_LINES`] outside the Workflows layer (a lexer's or a parser's
/// one state machine, a long render): each at most as long as listed. The list can only shrink: a
/// new long function fails, one that grew fails, and one that shrank or was split fails until its
/// line here says so.
const LONG_FUNCTION_ALLOWANCE: &[(&str, &str, usize)] = &[
    ("arch/advice.rs", "torch_options", 105),
    ("arch/spec.rs", "validate", 82),
    ("arch/torch_flags.rs", "cmake_flags", 89),
    ("binary/dynamic.rs", "read_as", 99),
    ("binary/elf.rs", "parse", 100),
    ("codemod/catalogue.rs", "from_spec", 126),
    ("codemod/engine.rs", "change_edits", 87),
    ("codemod/engine.rs", "ensure_include_as", 82),
    ("codemod/engine.rs", "review_items", 82),
    ("codemod/lexer.rs", "lex_c", 153),
    ("codemod/python_source/jit_calls.rs", "scan", 94),
    ("codemod/python_source/reader.rs", "collect", 99),
    ("codemod/python_source/rewrite.rs", "code_edits", 97),
    ("codemod/python_source/rewrite.rs", "plan", 162),
    ("compiler_cache/dist.rs", "start", 84),
    ("lint.rs", "sarif", 91),
];

fn allowance_problems(src: &Path) -> Vec<String> {
    let workflows: BTreeSet<PathBuf> = workflow_files(src).into_iter().collect();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|f| !workflows.contains(f));
    let found = long_functions(src, &files, MAX_WORKFLOW_FN_LINES);
    let mut problems = Vec::new();
    for (file, name, n) in &found {
        match LONG_FUNCTION_ALLOWANCE
            .iter()
            .find(|(f, fun, _)| f == file && fun == name)
        {
            None => problems.push(format!(
                "{file}: fn {name} has {n} lines, over {MAX_WORKFLOW_FN_LINES}, and the allowance in tests/layers.rs does not list it: split it"
            )),
            Some((_, _, max)) if n > max => problems.push(format!(
                "{file}: fn {name} grew from {max} to {n} lines; the allowance only shrinks: split it"
            )),
            Some((_, _, max)) if n < max => problems.push(format!(
                "{file}: fn {name} shrank from {max} to {n} lines: lower its allowance in tests/layers.rs to {n}"
            )),
            Some(_) => {}
        }
    }
    for (file, name, max) in LONG_FUNCTION_ALLOWANCE {
        if !found.iter().any(|(f, fun, _)| f == file && fun == name) {
            problems.push(format!(
                "{file}: fn {name} (allowed {max} lines) is no longer over {MAX_WORKFLOW_FN_LINES} lines: remove it from the allowance"
            ));
        }
    }
    problems
}

#[test]
fn long_functions_outside_workflows_only_shrink() {
    let problems = allowance_problems(&src_dir());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // A new long reader function is caught, and so is a listed one that grew.
    let copy = tempfile::tempdir().unwrap();
    copy_tree(&src_dir(), copy.path());
    let body = "    let _ = 1;\n".repeat(MAX_WORKFLOW_FN_LINES);
    plant(
        copy.path(),
        "binary/fatbin.rs",
        &format!("pub fn planted() {{\n{body}}}\n"),
    );
    let lexer = copy.path().join("codemod/lexer.rs");
    let text = fs::read_to_string(&lexer).unwrap();
    let grown = text.replacen("pub fn lex_c(", "pub fn lex_c(\n", 1);
    assert_ne!(grown, text, "lex_c moved");
    fs::write(&lexer, grown).unwrap();
    let problems = allowance_problems(copy.path());
    assert!(
        problems.iter().any(|p| p
            .starts_with("binary/fatbin.rs: fn planted has 82 lines, over 80, and the allowance")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p == "codemod/lexer.rs: fn lex_c grew from 153 to 154 lines; the allowance only shrinks: split it"),
        "{problems:?}"
    );
}

#[test]
fn workflow_functions_stay_short() {
    let problems = long_function_problems(&src_dir());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // A long function planted in a workflow is caught.
    let copy = tempfile::tempdir().unwrap();
    copy_tree(&src_dir(), copy.path());
    let body = "    let _ = 1;\n".repeat(MAX_WORKFLOW_FN_LINES);
    // Before the file's `#[cfg(test)]` module, where the code is.
    plant(
        copy.path(),
        "doctor.rs",
        &format!("pub fn planted() {{\n{body}}}\n"),
    );
    // After a test-only item in the middle of a file, code is judged again.
    let tail = format!("#[cfg(test)]\nfn helper() {{}}\npub fn planted_after() {{\n{body}}}\n");
    let file = copy.path().join("doctor.rs");
    let text = fs::read_to_string(&file).unwrap();
    let at = text
        .find("\n#[cfg(test)]")
        .expect("doctor.rs's test module");
    fs::write(&file, format!("{}\n{tail}{}", &text[..at], &text[at..])).unwrap();
    let problems = long_function_problems(copy.path());
    for name in ["planted", "planted_after"] {
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with(&format!("doctor.rs: fn {name} has 82 lines"))),
            "{name}: {problems:?}"
        );
    }
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

/// Puts `text` before the first line of `rel` in the copied tree `root`: a planted violation.
fn plant(root: &Path, rel: &str, text: &str) {
    let file = root.join(rel);
    let old = fs::read_to_string(&file).unwrap();
    fs::write(&file, format!("{text}{old}")).unwrap();
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

/// std's print macros panic when stdout or stderr is a closed pipe (`archsmith … | head`); every
/// line archsmith prints goes through `output`'s `out!`/`outln!`/`errout!`/`errln!`, which end
/// quietly. Code under `#[cfg(test)]` may print as it likes.
fn std_print_sites(src: &Path) -> Vec<String> {
    let re = regex::Regex::new(r"(^|[^\w:!])(e?print(ln)?)!\s*\(").unwrap();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out = Vec::new();
    for f in files {
        let text = fs::read_to_string(&f).unwrap();
        let code = code_only(&non_test_code(&text));
        for (i, (code_part, line)) in code.lines().zip(text.lines()).enumerate() {
            if re.is_match(code_part) {
                let rel = f.strip_prefix(src).unwrap_or(&f).display().to_string();
                out.push(format!("{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    out
}

#[test]
fn printing_goes_through_the_output_macros() {
    let sites = std_print_sites(&src_dir());
    assert!(
        sites.is_empty(),
        "std print macros (use crate::out!/outln!/errout!/errln!):\n{}",
        sites.join("\n")
    );
    let tmp = tempfile::tempdir().unwrap();
    fs::write(
        tmp.path().join("planted.rs"),
        "fn f() {\n    println!(\"x\");\n}\n",
    )
    .unwrap();
    assert_eq!(std_print_sites(tmp.path()).len(), 1);
    // Code after a `#[cfg(test)] mod tests;` near a file's top (kb/mod.rs's layout) is code:
    // before, everything after the first `#[cfg(test)]` was taken for test code. A test module's
    // own print, and a print in a string or comment, are not sites.
    fs::write(
        tmp.path().join("planted.rs"),
        "#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod inline {\n    fn t() { println!(\"{}\", '}'); }\n}\n// println!(\"no\");\nconst S: &str = \"println!(\";\nfn f() {\n    eprintln!(\"x\");\n}\n",
    )
    .unwrap();
    assert_eq!(
        std_print_sites(tmp.path()),
        ["planted.rs:10: eprintln!(\"x\");"]
    );
}

/// Each line of code (what precedes a `//`) of the files under `src` that `keep` accepts (by their
/// path relative to `src`) for which `hit` holds, as `FILE:LINE: text`.
fn code_lines(src: &Path, keep: impl Fn(&str) -> bool, hit: impl Fn(&str) -> bool) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out = Vec::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap_or(&f).display().to_string();
        if !keep(&rel) {
            continue;
        }
        let text = fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            if hit(line.split("//").next().unwrap_or("")) {
                out.push(format!("{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    out
}

/// A rule's finder holds on the tree (`why` says what to do otherwise) and catches the one
/// violation planted at the top of `rel` in a copy of it.
fn holds_and_catches(find: fn(&Path) -> Vec<String>, why: &str, rel: &str, planted: &str) {
    let sites = find(&src_dir());
    assert!(sites.is_empty(), "{why}:\n{}", sites.join("\n"));
    let copy = tempfile::tempdir().unwrap();
    copy_tree(&src_dir(), copy.path());
    plant(copy.path(), rel, planted);
    let sites = find(copy.path());
    assert!(
        sites.len() == 1 && sites[0].starts_with(&format!("{rel}:1:")),
        "{sites:?}"
    );
}

/// The knowledge base is reached one way: its queries through `kb::kb()`, the base compiled into
/// the binary. A `&KnowledgeBase` travels only inside `kb/` and in `kb_check/`, where a knowledge
/// base is itself the subject (`kb check` reads a planted copy back against the real artifacts).
fn knowledge_base_parameters(src: &Path) -> Vec<String> {
    let re = regex::Regex::new(r"(?:&'\w+\s*|&)(?:crate::kb::)?KnowledgeBase\b").unwrap();
    code_lines(
        src,
        |rel| !rel.starts_with("kb/") && !rel.starts_with("kb_check/"),
        |code| re.is_match(code),
    )
}

#[test]
fn the_knowledge_base_is_reached_one_way() {
    holds_and_catches(
        knowledge_base_parameters,
        "a &KnowledgeBase outside kb/ and kb_check/ (ask crate::kb::kb() instead)",
        "arch/advice.rs",
        "pub fn planted(kb: &crate::kb::KnowledgeBase) -> usize { kb.gpus.len() }\n",
    );
}

/// Rendering lives in one place: every table people read is a method or function of the library
/// beside the report it shows (`DoctorReport::table`, `toolchain::listing_table`), so tests and
/// other callers render exactly what the CLI prints. A command builds no `Table` of its own.
fn tables_in_commands(src: &Path) -> Vec<String> {
    code_lines(
        src,
        |rel| rel.starts_with("commands/") && !rel.ends_with("tests.rs"),
        |code| code.contains("Table::") || code.contains("Table,") || code.contains("Table}"),
    )
}

#[test]
fn commands_render_through_the_library() {
    holds_and_catches(
        tables_in_commands,
        "a command renders its own table (give the report a table() in the library)",
        "commands/doctor.rs",
        "fn planted() -> String { crate::output::Table::headerless().render() }\n",
    );
}

/// Issue 60: rule catalogues, the knowledge base and the code cited `shared/research/…`, a folder
/// a clone does not have. Every citation resolves inside the repository (docs/research/).
#[test]
fn nothing_cites_a_path_outside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut found = Vec::new();
    let mut stack: Vec<PathBuf> = [
        "crates",
        "xtask/src",
        "xtask/tests",
        "xtask/data",
        "patches",
        "docs",
        "verify",
        "ci",
        "README.md",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            if p.ends_with("docs/research") || p.ends_with("tests/fixtures") {
                continue;
            }
            stack.extend(fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
            continue;
        }
        let Ok(text) = fs::read_to_string(&p) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            // This test names the pattern it looks for.
            if line.contains("shared/research") && !p.ends_with("tests/layers.rs") {
                found.push(format!(
                    "{}:{}",
                    p.strip_prefix(root).unwrap().display(),
                    i + 1
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cites shared/research (not in a clone): {found:?}"
    );
    assert!(root.join("docs/research/arch.md").is_file());
}
