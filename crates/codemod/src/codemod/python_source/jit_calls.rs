//! Where a source tree builds C++/CUDA extensions just in time: every call of torch's
//! `torch.utils.cpp_extension.load`/`load_inline` (through whatever import binds it, read by
//! [`super::reader`]), and every call of a function of the tree's own that wraps one (a function
//! that passes its own parameters to `load`). Each call site becomes a *trigger*, the code that
//! runs it: the module itself (a call at module level runs on import) or a top-level function that
//! takes no arguments (a lazy `_init()`); a call anywhere else needs arguments only the program
//! has, and is reported as not reached.
//!
//! Reading never resolves a call's arguments: the prebuild runs the trigger, so names, sources and
//! flags resolve exactly as they do at run time.

use super::reader;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use tree_sitter::{Node, Parser};

const JIT_APIS: [&str; 2] = [
    "torch.utils.cpp_extension.load",
    "torch.utils.cpp_extension.load_inline",
];

/// True when `text` calls torch's `load`/`load_inline`: a module that builds extensions.
pub fn builds_extensions(text: &str) -> bool {
    text.contains("cpp_extension")
        && reader::uses(text).is_some_and(|uses| {
            uses.iter()
                .any(|u| u.call_args.is_some() && JIT_APIS.contains(&u.path.as_str()))
        })
}

/// One Python file of the tree.
pub struct SourceFile {
    /// Relative to the tree's root, `/`-separated.
    pub rel: PathBuf,
    pub text: String,
}

/// A place that calls `load`/`load_inline`, directly or through a wrapper.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CallSite {
    pub file: String,
    pub line: usize,
    /// `load`, `load_inline`, or the wrapper's name.
    pub calls: String,
    /// The enclosing function (`Class.method` for a method), or None at module level.
    pub within: Option<String>,
    /// How the prebuild reaches it, or None with [`Self::unreached`] saying why.
    pub trigger: Option<Trigger>,
    pub unreached: Option<String>,
}

/// The code the prebuild runs: import `module` (with `root` first on `sys.path`), then call
/// `call` when set.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Trigger {
    pub root: String,
    pub module: String,
    pub call: Option<String>,
}

/// What [`scan`] finds in a tree.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Scan {
    pub sites: Vec<CallSite>,
    /// Functions of the tree that pass their parameters on to `load`/`load_inline`.
    pub wrappers: Vec<String>,
}

impl Scan {
    /// The distinct triggers, in order.
    pub fn triggers(&self) -> Vec<Trigger> {
        let set: BTreeSet<Trigger> = self
            .sites
            .iter()
            .filter_map(|s| s.trigger.clone())
            .collect();
        set.into_iter().collect()
    }
}

/// A call found in one file, before it is turned into a site.
struct Found {
    line: usize,
    calls: String,
    /// The enclosing function definition's byte range, if any.
    function: Option<std::ops::Range<usize>>,
}

/// Scans `files` (the tree's `.py` files; `root` is the tree on disk, for the triggers).
pub fn scan(root: &Path, files: &[SourceFile]) -> Scan {
    let mut parser = Parser::new();
    if parser
        .set_language(&tree_sitter_python::LANGUAGE.into())
        .is_err()
    {
        return Scan::default();
    }
    let trees: Vec<_> = files.iter().map(|f| parser.parse(&f.text, None)).collect();
    let mut scan = Scan::default();
    // Direct calls, and the wrappers they reveal.
    let mut direct: Vec<(usize, Found)> = Vec::new();
    let mut wrappers: BTreeSet<String> = BTreeSet::new();
    for (i, f) in files.iter().enumerate() {
        let (Some(tree), Some(uses)) = (&trees[i], reader::uses(&f.text)) else {
            continue;
        };
        for u in uses
            .iter()
            .filter(|u| u.call_args.is_some() && JIT_APIS.contains(&u.path.as_str()))
        {
            let Some(call) = enclosing(tree.root_node(), u.span.start, &["call"]) else {
                continue;
            };
            let function = enclosing(call, call.start_byte(), &["function_definition"]);
            let calls = u.path.rsplit('.').next().unwrap_or_default().to_string();
            if let Some(def) = function.filter(|d| passes_parameters(*d, call, f.text.as_bytes())) {
                wrappers.insert(name_of(def, f.text.as_bytes()));
            }
            direct.push((
                i,
                Found {
                    line: u.line,
                    calls,
                    function: function.map(|d| d.byte_range()),
                },
            ));
        }
    }
    // Calls of the wrappers (a wrapper of a wrapper too, to a fixed point).
    let mut through: Vec<(usize, Found)> = Vec::new();
    let mut seen_wrappers: BTreeSet<String> = BTreeSet::new();
    while let Some(w) = wrappers
        .iter()
        .find(|w| !seen_wrappers.contains(*w))
        .cloned()
    {
        seen_wrappers.insert(w.clone());
        for (i, f) in files.iter().enumerate() {
            let Some(tree) = &trees[i] else { continue };
            let src = f.text.as_bytes();
            for call in calls_named(tree.root_node(), src, &w) {
                let function = enclosing(call, call.start_byte(), &["function_definition"]);
                if function.is_some_and(|d| name_of(d, src) == w) {
                    continue; // recursion inside the wrapper itself
                }
                if let Some(def) = function.filter(|d| passes_parameters(*d, call, src)) {
                    wrappers.insert(name_of(def, src));
                }
                through.push((
                    i,
                    Found {
                        line: call.start_position().row + 1,
                        calls: w.clone(),
                        function: function.map(|d| d.byte_range()),
                    },
                ));
            }
        }
    }
    for (i, found) in direct.into_iter().chain(through) {
        let f = &files[i];
        let tree = trees[i].as_ref().expect("a file with calls parsed");
        let def = found.function.as_ref().and_then(|r| {
            tree.root_node()
                .descendant_for_byte_range(r.start, r.end)
                .and_then(|n| enclosing(n, r.start, &["function_definition"]))
        });
        let site = site(root, f, found, def);
        // A wrapper's own body is not a place to run: its callers are.
        if site
            .within
            .as_deref()
            .is_some_and(|w| wrappers.contains(w.rsplit('.').next().unwrap_or(w)))
        {
            continue;
        }
        scan.sites.push(site);
    }
    scan.wrappers = wrappers.into_iter().collect();
    scan.sites
        .sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    scan
}

fn site(root: &Path, f: &SourceFile, found: Found, def: Option<Node>) -> CallSite {
    let src = f.text.as_bytes();
    let file = f.rel.display().to_string();
    let (module_root, module) = module_of(root, &f.rel);
    let mut site = CallSite {
        file,
        line: found.line,
        calls: found.calls,
        within: None,
        trigger: None,
        unreached: None,
    };
    let Some(def) = def else {
        site.trigger = Some(Trigger {
            root: module_root,
            module,
            call: None,
        });
        return site;
    };
    let name = name_of(def, src);
    let class = enclosing_outside(def, &["class_definition"]).map(|c| name_of(c, src));
    site.within = Some(match &class {
        Some(c) => format!("{c}.{name}"),
        None => name.clone(),
    });
    let top_level = def
        .parent()
        .map(|p| {
            if p.kind() == "decorated_definition" {
                p.parent()
            } else {
                Some(p)
            }
        })
        .is_some_and(|p| p.is_some_and(|p| p.kind() == "module"));
    let required = required_parameters(def, src);
    if top_level && required.is_empty() {
        site.trigger = Some(Trigger {
            root: module_root,
            module,
            call: Some(name),
        });
    } else if !top_level {
        site.unreached = Some(format!(
            "inside {}, which only the program calls",
            site.within.as_deref().unwrap_or_default()
        ));
    } else {
        site.unreached = Some(format!(
            "inside {name}({}), which needs arguments only the program has",
            required.join(", ")
        ));
    }
    site
}

/// The directory to put first on `sys.path` and the dotted module name of `rel`: the file's
/// package is every directory above it with an `__init__.py`.
fn module_of(root: &Path, rel: &Path) -> (String, String) {
    let mut parts: Vec<String> = vec![rel
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()];
    let mut dir = rel.parent().map(Path::to_path_buf).unwrap_or_default();
    while !dir.as_os_str().is_empty() && root.join(&dir).join("__init__.py").is_file() {
        if let Some(n) = dir.file_name() {
            parts.insert(0, n.to_string_lossy().into_owned());
        }
        dir = dir.parent().map(Path::to_path_buf).unwrap_or_default();
    }
    if parts.last().is_some_and(|p| p == "__init__") && parts.len() > 1 {
        parts.pop();
    }
    let first_on_path = if dir.as_os_str().is_empty() {
        root.to_path_buf()
    } else {
        root.join(dir)
    };
    (first_on_path.display().to_string(), parts.join("."))
}

/// The nearest node at or above the smallest node at `at` whose kind is one of `kinds`.
fn enclosing<'t>(from: Node<'t>, at: usize, kinds: &[&str]) -> Option<Node<'t>> {
    let mut n = from.descendant_for_byte_range(at, at)?;
    loop {
        if kinds.contains(&n.kind()) && n.start_byte() <= at {
            return Some(n);
        }
        n = n.parent()?;
    }
}

/// The nearest ancestor of `n` (not `n`) whose kind is one of `kinds`, stopping at a function.
fn enclosing_outside<'t>(n: Node<'t>, kinds: &[&str]) -> Option<Node<'t>> {
    let mut p = n.parent()?;
    loop {
        if kinds.contains(&p.kind()) {
            return Some(p);
        }
        if p.kind() == "function_definition" {
            return None;
        }
        p = p.parent()?;
    }
}

fn name_of(def: Node, src: &[u8]) -> String {
    def.child_by_field_name("name")
        .and_then(|n| n.utf8_text(src).ok())
        .unwrap_or_default()
        .to_string()
}

/// The names of `def`'s parameters that have no default (`self`/`cls` included).
fn parameter_names(def: Node, src: &[u8], required_only: bool) -> Vec<String> {
    let Some(params) = def.child_by_field_name("parameters") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut c = params.walk();
    for p in params.named_children(&mut c) {
        let (ident, required) = match p.kind() {
            "identifier" => (Some(p), true),
            "typed_parameter" => (p.named_child(0), true),
            "default_parameter" | "typed_default_parameter" => {
                (p.child_by_field_name("name"), false)
            }
            "list_splat_pattern" | "dictionary_splat_pattern" => (p.named_child(0), false),
            _ => (None, false),
        };
        if let Some(id) = ident.filter(|_| required || !required_only) {
            if id.kind() == "identifier" {
                out.push(id.utf8_text(src).unwrap_or_default().to_string());
            }
        }
    }
    out
}

fn required_parameters(def: Node, src: &[u8]) -> Vec<String> {
    parameter_names(def, src, true)
}

/// `call` (inside `def`) passes one of `def`'s parameters in its arguments: `def` is a wrapper.
fn passes_parameters(def: Node, call: Node, src: &[u8]) -> bool {
    let params: BTreeSet<String> = parameter_names(def, src, false)
        .into_iter()
        .filter(|p| p != "self" && p != "cls")
        .collect();
    let Some(args) = call.child_by_field_name("arguments") else {
        return false;
    };
    let mut idents = Vec::new();
    identifiers(args, &mut idents);
    idents
        .iter()
        .any(|id| params.contains(id.utf8_text(src).unwrap_or_default()))
}

fn identifiers<'t>(n: Node<'t>, out: &mut Vec<Node<'t>>) {
    if n.kind() == "identifier" {
        // A keyword argument's name is not a use of a variable.
        let is_keyword_name = n.parent().is_some_and(|p| {
            p.kind() == "keyword_argument"
                && p.child_by_field_name("name")
                    .is_some_and(|k| k.id() == n.id())
        });
        if !is_keyword_name {
            out.push(n);
        }
        return;
    }
    let mut c = n.walk();
    for child in n.named_children(&mut c) {
        identifiers(child, out);
    }
}

/// Every call whose callee is `name` or `anything.name`.
fn calls_named<'t>(n: Node<'t>, src: &[u8], name: &str) -> Vec<Node<'t>> {
    let mut out = Vec::new();
    let mut stack = vec![n];
    while let Some(n) = stack.pop() {
        if n.kind() == "call" {
            let callee = n.child_by_field_name("function");
            let last = callee.and_then(|f| match f.kind() {
                "identifier" => Some(f),
                "attribute" => f.child_by_field_name("attribute"),
                _ => None,
            });
            if last.is_some_and(|l| l.utf8_text(src).ok() == Some(name)) {
                out.push(n);
            }
        }
        let mut c = n.walk();
        stack.extend(n.named_children(&mut c));
    }
    out.sort_by_key(|n| n.start_byte());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(rel: &str, text: &str) -> SourceFile {
        SourceFile {
            rel: PathBuf::from(rel),
            text: text.to_string(),
        }
    }

    /// A module that calls load() gets setup.py's compiler-flag rules on its string literals; any
    /// other module keeps a lookalike list as it is.
    #[test]
    fn a_jit_build_modules_old_std_flag_is_dropped_and_nothing_else_is() {
        use crate::codemod::{catalogue, engine, Lang};
        let jit = "import os\nfrom torch.utils.cpp_extension import load\n\
                   # '-std=c++17' in a comment stays\n\
                   _b = load(name='b', extra_cflags=['-O3', '-std=c++17'], sources=['b.cpp'])\n";
        let cat = catalogue::builtin();
        let out = engine::apply(cat, Lang::PythonModule, jit.as_bytes()).unwrap();
        assert_eq!(
            String::from_utf8(out.output).unwrap(),
            jit.replace("['-O3', '-std=c++17']", "['-O3']")
        );
        assert_eq!(out.counts.get("setup-std-cxx17"), Some(&1));
        let plain = "FLAGS = ['-O3', '-std=c++17']\n";
        let out = engine::apply(cat, Lang::PythonModule, plain.as_bytes()).unwrap();
        assert_eq!(out.output, plain.as_bytes());
        assert!(builds_extensions(jit) && !builds_extensions(plain));
    }

    #[test]
    fn direct_calls_wrappers_and_what_cannot_be_reached() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("pkg/ops")).unwrap();
        std::fs::write(dir.path().join("pkg/__init__.py"), "").unwrap();
        std::fs::write(dir.path().join("pkg/ops/__init__.py"), "").unwrap();
        let files = [
            file(
                "pkg/ops/backend.py",
                "from torch.utils.cpp_extension import load\n\
                 # load(name='in_a_comment')\n\
                 _backend = load(name='_backend', sources=['a.cpp', 'b.cu'])\n",
            ),
            file(
                "pkg/custom_ops.py",
                "import torch.utils.cpp_extension\n\
                 def get_plugin(module_name, sources, **kw):\n\
                 \x20   return torch.utils.cpp_extension.load(name=module_name, sources=sources, **kw)\n",
            ),
            file(
                "pkg/ops/upfirdn.py",
                "from .. import custom_ops\n\
                 _plugin = None\n\
                 def _init():\n\
                 \x20   global _plugin\n\
                 \x20   _plugin = custom_ops.get_plugin(module_name='upfirdn', sources=['u.cpp'])\n\
                 def later(x, name):\n\
                 \x20   return custom_ops.get_plugin(module_name=name, sources=[x])\n\
                 class Op:\n\
                 \x20   def build(self):\n\
                 \x20       from torch.utils import cpp_extension as ce\n\
                 \x20       return ce.load_inline('inline', cpp_sources='')\n",
            ),
            file(
                "tools/inline.py",
                "import torch.utils.cpp_extension as ce\n\
                 def build(name='x'):\n\
                 \x20   return ce.load_inline(name='inline_tool', cpp_sources='int f(){return 1;}')\n",
            ),
        ];
        let s = scan(dir.path(), &files);
        assert_eq!(s.wrappers, ["get_plugin", "later"]);
        let got: Vec<String> = s
            .sites
            .iter()
            .map(|c| {
                let how = match (&c.trigger, &c.unreached) {
                    (Some(t), _) => format!("{}:{}", t.module, t.call.as_deref().unwrap_or("-")),
                    (None, Some(why)) => why.clone(),
                    (None, None) => "?".into(),
                };
                format!("{}:{} {} {how}", c.file, c.line, c.calls)
            })
            .collect();
        let root = dir.path().display().to_string();
        assert_eq!(
            got,
            [
                "pkg/ops/backend.py:3 load pkg.ops.backend:-",
                "pkg/ops/upfirdn.py:5 get_plugin pkg.ops.upfirdn:_init",
                "pkg/ops/upfirdn.py:11 load_inline inside Op.build, which only the program calls",
                "tools/inline.py:3 load_inline inline:build",
            ]
        );
        // `later` passes its parameters on: a wrapper with no caller, so nothing to reach.
        assert_eq!(s.triggers()[0].root, root);
        assert!(s.triggers().iter().any(|t| t.root.ends_with("tools")));
    }
}
