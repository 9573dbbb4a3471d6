//! `codemod --stable-abi`: a `PYBIND11_MODULE` block of `m.def("name", &function)` lines becomes
//! the stable ABI's operator registration — `STABLE_TORCH_LIBRARY(ns, m)` with a schema per
//! function, derived from its C++ signature, and `STABLE_TORCH_LIBRARY_IMPL(ns,
//! CompositeExplicitAutograd, m)` boxing each one with `TORCH_BOX` — so the module binds neither
//! pybind11 nor libtorch_python. The functions are `torch.ops.ns.name` once the library is
//! loaded; and the Python module the block defined stays, under its name, as a module written
//! against CPython's limited API that forwards the same names to `torch.ops.ns` (importing it
//! loads the library), so the package's `from . import _C; _C.nms(…)` keeps working.
//!
//! Only what maps exactly is rewritten: every parameter a type the stable boxing converts
//! (`Tensor`, `double`, `int64_t`, `bool`; a `float` or `int` parameter through a generated
//! adapter that converts it as pybind11 did), a return of `Tensor`, a tuple of them or `void`,
//! each function found in the file or a header it includes by a relative path, nothing else in
//! the block. Anything else leaves the block as it is, with a review item that says which
//! function, parameter or statement stops it and why; a docstring is kept as a comment, and the
//! block's own comments are carried into the registration.

use super::lexer::{lex_c, Kind, Token};
use std::path::Path;

pub use super::catalogue::{STABLE_BINDINGS as RULE, STABLE_BINDINGS_WHY as WHY};

/// The namespace of the module `path` defines, when a package has several: `ns` and the file's
/// stem (`roialign_pytorch_crop_and_resize_gpu`).
pub fn module_namespace(ns: &str, path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{ns}_{}", identifier(&stem))
}

/// `name` as a C++ identifier's characters (`legacy-demo` → `legacy_demo`).
fn identifier(name: &str) -> String {
    (name.chars())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The default operator namespace: the directory (or file stem) `path` names, as an identifier
/// (`legacy-demo/` → `legacy_demo`).
pub fn namespace_of(path: Option<&std::path::PathBuf>) -> String {
    let name = path
        .and_then(|p| std::fs::canonicalize(p).ok())
        .and_then(|p| {
            let p = if p.is_dir() {
                p
            } else {
                p.parent()?.to_path_buf()
            };
            p.file_name().map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    namespace_named(&name)
}

/// `name` as an operator namespace: an identifier, `ext_` before one that is empty or starts
/// with a digit (`neural-renderer-pytorch` → `neural_renderer_pytorch`).
pub fn namespace_named(name: &str) -> String {
    let mut ns = identifier(name);
    if ns.is_empty() || ns.starts_with(|c: char| c.is_ascii_digit()) {
        ns.insert_str(0, "ext_");
    }
    ns
}

/// One C++ function as declared: its return type and parameters (type, name), as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub name: String,
    pub ret: String,
    pub params: Vec<(String, String)>,
}

/// What the port of one file's bindings did.
#[derive(Debug, Default)]
pub struct Ported {
    /// The new text (None: nothing rewritten).
    pub text: Option<Vec<u8>>,
    /// Why a block stayed: (byte offset in the input, message, suggestion).
    pub review: Vec<(usize, String, String)>,
    /// How many of the schemas have a list ([`needs_lists`]).
    pub lists: usize,
    /// Where the next block is looked for (after this one, in the new text if any); None when
    /// no block was found.
    pub resume: Option<usize>,
}

/// Ports the `PYBIND11_MODULE` block of `text` (the file at `path`, whose relative includes are
/// read for signatures) into operators of namespace `ns`.
pub fn port(text: &[u8], path: &Path, ns: &str) -> Ported {
    port_from(text, path, ns, 0)
}

/// [`port`] of the first block at or after byte `from`.
fn port_from(text: &[u8], path: &Path, ns: &str, from: usize) -> Ported {
    let toks = lex_c(text);
    let mut out = Ported::default();
    let Some(block) = find_block(text, &toks, from) else {
        return out;
    };
    out.resume = Some(block.end);
    let sigs = visible_signatures(text, &toks, path);
    let mut defs = Vec::new();
    let mut impls = Vec::new();
    let mut docs = Vec::new();
    let mut adapters = Vec::new();
    let mut names = Vec::new();
    // Comments are never lost: each goes into the registration before the definition it stood
    // before (a `// dcn-v2` heading a group of bindings), the rest after the last.
    let mut comments = block.comments.iter().peekable();
    for def in &block.defs {
        while let Some((_, c)) = comments.next_if(|(at, _)| *at < def.at) {
            defs.push(format!("  {c}"));
        }
        let stop = |msg: String, fix: &str| (def.at, msg, fix.to_string());
        let Some(sig) = sigs.iter().find(|s| s.name == def.function) else {
            out.review.push(stop(
                format!("`{}` is bound, but its declaration is not in this file or a header it includes by a relative path", def.function),
                "register it by hand: m.def(\"name(Tensor x, …) -> Tensor\") and m.impl(\"name\", TORCH_BOX(&function))",
            ));
            continue;
        };
        match schema(&def.name, sig, &def.args) {
            Ok(s) => {
                if let Some(d) = &def.doc {
                    docs.push(format!("// {}: {}", def.name, d));
                }
                let boxed = match adapter(sig, &def.args, &def.path) {
                    Some(code) => {
                        adapters.push(code);
                        format!("{}_boxed", sig.name)
                    }
                    None => def.path.clone(),
                };
                out.lists += usize::from(needs_lists(&s));
                defs.push(format!("  m.def(\"{s}\");"));
                impls.push(format!("  m.impl(\"{}\", TORCH_BOX(&{boxed}));", def.name));
                names.push(def.name.clone());
            }
            Err(why) => out.review.push(stop(
                format!("`{}` cannot be boxed by the stable ABI: {why}", def.function),
                "change the parameter or return type to one the stable ABI converts (torch::stable::Tensor, double, int64_t, bool), then run the port again",
            )),
        }
    }
    out.review.extend(block.other.iter().map(|(at, what)| {
        let why =
            format!("the binding block also has `{what}`, which has no stable-ABI registration");
        (
            *at,
            why,
            "move it out of the module (a Python-side definition) or register it by hand".into(),
        )
    }));
    defs.extend(comments.map(|(_, c)| format!("  {c}")));
    if !out.review.is_empty() || names.is_empty() {
        return out;
    }
    let new = Registration {
        adapters,
        docs,
        defs,
        impls,
        names,
    }
    .text(ns, &block.module);
    let mut text_out = text[..block.start].to_vec();
    text_out.extend_from_slice(new.as_bytes());
    out.resume = Some(text_out.len());
    text_out.extend_from_slice(&text[block.end..]);
    out.text = Some(text_out);
    out
}

/// What replaces a ported block: the adapters, the docstrings as comments, the operators'
/// definitions and implementations, and the Python module forwarding to them.
struct Registration {
    adapters: Vec<String>,
    docs: Vec<String>,
    defs: Vec<String>,
    impls: Vec<String>,
    names: Vec<String>,
}

impl Registration {
    fn text(&self, ns: &str, module: &str) -> String {
        let Registration {
            adapters,
            docs,
            defs,
            impls,
            names,
        } = self;
        let mut new = String::new();
        for a in adapters {
            new.push_str(a);
            new.push('\n');
        }
        for d in docs {
            new.push_str(d);
            new.push('\n');
        }
        new.push_str(&format!(
                "STABLE_TORCH_LIBRARY({ns}, m) {{\n{}\n}}\n\nSTABLE_TORCH_LIBRARY_IMPL({ns}, CompositeExplicitAutograd, m) {{\n{}\n}}\n\n",
                defs.join("\n"),
                impls.join("\n")
        ));
        new.push_str(&python_module(module, ns, names));
        new
    }
}

/// The functions declared in the file and in the headers it includes by quoted name: beside the
/// file, or in the `include/` directories a build's `-I` usually names (the package's `include/`
/// next to `src/`).
fn visible_signatures(text: &[u8], toks: &[Token], path: &Path) -> Vec<Signature> {
    let mut sigs = signatures(text, toks);
    let dir = path.parent().unwrap_or(Path::new("."));
    let places = [
        dir.to_path_buf(),
        dir.join("include"),
        dir.join("../include"),
    ];
    for header in relative_includes(text, toks) {
        if let Some(h) = places
            .iter()
            .find_map(|d| std::fs::read(d.join(&header)).ok())
        {
            sigs.extend(signatures(&h, &lex_c(&h)));
        }
    }
    sigs
}

/// The bindings step of a `--stable-abi` run on one C++ file's outcome: the block rewritten (one
/// `stable-bindings` rewrite, a trace step) or its review items added.
/// Every block of the file, one after another: a file may define its module once per branch
/// of an `#ifdef` (one with CUDA, one without), and a second run must find nothing left.
pub fn apply(out: &mut super::engine::Outcome, path: &Path, ns: &str) {
    let mut from = 0;
    while let Some(resume) = apply_block(out, path, ns, from) {
        from = resume;
    }
}

/// The block at or after `from`; where to look for the next, None when there is none.
fn apply_block(
    out: &mut super::engine::Outcome,
    path: &Path,
    ns: &str,
    from: usize,
) -> Option<usize> {
    let p = port_from(&out.output, path, ns, from);
    let index = crate::lint::LineIndex::new(&out.output);
    for (at, message, suggestion) in p.review {
        let mut item =
            super::engine::review_item(&index, &out.output, at, RULE, message, suggestion);
        item.at.1 = out.trace.len();
        out.review.push(item);
    }
    if let Some(new) = p.text {
        out.trace.changed(&out.output, &new);
        out.output = new;
        *out.counts.entry(RULE.to_string()).or_default() += 1;
        if p.lists > 0 {
            let lists = super::catalogue::STABLE_BINDINGS_LISTS.to_string();
            *out.counts.entry(lists).or_default() += p.lists;
        }
    }
    p.resume
}

/// One `m.def("name", &function[, "doc"])`.
struct Def {
    at: usize,
    name: String,
    function: String,
    /// The function as the binding names it (`torch::crop_and_resize_forward`).
    path: String,
    doc: Option<String>,
    /// Keyword names given with `"x"_a` or `py::arg("x")`, each with its default as written in
    /// C++ (`-1`, `false`): the schema's argument names and defaults.
    args: Vec<(String, Option<String>)>,
}

struct Block {
    /// The module name as `PYBIND11_MODULE` gave it (`TORCH_EXTENSION_NAME`, usually).
    module: String,
    start: usize,
    end: usize,
    defs: Vec<Def>,
    /// Statements of the block that are not a plain `m.def` (byte offset, first words).
    other: Vec<(usize, String)>,
    /// The block's comments (byte offset, text): carried into the registration, each before the
    /// definition it stood before.
    comments: Vec<(usize, String)>,
}

/// The `PYBIND11_MODULE(NAME, m) { … }` block: its span and its statements.
fn find_block(text: &[u8], toks: &[Token], from: usize) -> Option<Block> {
    let code: Vec<&Token> = toks.iter().filter(|t| t.kind != Kind::Comment).collect();
    let i = code.iter().position(|t| {
        t.start >= from && t.kind == Kind::Ident && t.text(text) == b"PYBIND11_MODULE"
    })?;
    let var = code.get(i + 4).map(|t| t.text(text))?; // PYBIND11_MODULE ( NAME , m )
    let module = String::from_utf8_lossy(code.get(i + 2)?.text(text)).into_owned();
    let open = (i..code.len()).find(|&k| code[k].text(text) == b"{")?;
    let mut depth = 0usize;
    let mut close = None;
    for (k, t) in code.iter().enumerate().skip(open) {
        match t.text(text) {
            b"{" => depth += 1,
            b"}" => {
                depth -= 1;
                if depth == 0 {
                    close = Some(k);
                    break;
                }
            }
            _ => {}
        }
    }
    let close = close?;
    let (start, end) = (code[i].start, code[close].end);
    let comments = toks
        .iter()
        .filter(|t| t.kind == Kind::Comment && t.start > start && t.end < end)
        .map(|t| (t.start, String::from_utf8_lossy(t.text(text)).into_owned()))
        .collect();
    let mut other = Vec::new();
    let mut defs = Vec::new();
    let mut k = open + 1;
    while k < close {
        let stmt_end = (k..close)
            .find(|&j| code[j].text(text) == b";")
            .unwrap_or(close);
        let stmt: Vec<&Token> = code[k..stmt_end].to_vec();
        match parse_def(text, &stmt, var) {
            Some(d) => defs.push(d),
            None => {
                let words: Vec<String> = stmt
                    .iter()
                    .take(6)
                    .map(|t| String::from_utf8_lossy(t.text(text)).into_owned())
                    .collect();
                other.push((stmt.first().map_or(start, |t| t.start), words.join("")));
            }
        }
        k = stmt_end + 1;
    }
    Some(Block {
        module,
        start,
        end,
        defs,
        other,
        comments,
    })
}

/// `m . def ( "name" , & function [, "doc"] [, "x"_a | py::arg("x")]… )`.
fn parse_def(text: &[u8], stmt: &[&Token], var: &[u8]) -> Option<Def> {
    let t = |k: usize| stmt.get(k).map(|t| t.text(text));
    if t(0)? != var || t(1)? != b"." || t(2)? != b"def" || t(3)? != b"(" {
        return None;
    }
    let name = string_literal(stmt.get(4)?.text(text))?;
    if t(5)? != b"," {
        return None;
    }
    // `&f`, `f`, or a qualified `&ns::f` (found by its last name, called by its whole one).
    let start = if t(6)? == b"&" { 7 } else { 6 };
    let mut last = start;
    while t(last + 1) == Some(b"::") && stmt.get(last + 2).is_some_and(|n| n.kind == Kind::Ident) {
        last += 2;
    }
    let (function, next) = (stmt.get(last)?, last + 1);
    if function.kind != Kind::Ident || stmt.len() < next + 1 || t(stmt.len() - 1)? != b")" {
        return None;
    }
    let path: String = (start..=last)
        .filter_map(t)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    // The rest, to the call's `)`, split at its commas: a docstring first, then keyword names.
    let mut doc = None;
    let mut args = Vec::new();
    let rest: Vec<&[u8]> = stmt[next..stmt.len() - 1]
        .iter()
        .map(|t| t.text(text))
        .collect();
    for (k, piece) in rest.split(|w| *w == b",").enumerate().skip(1) {
        let (arg, default) = match piece.iter().position(|w| *w == b"=") {
            Some(i) => (&piece[..i], Some(default_literal(&piece[i + 1..])?)),
            None => (piece, None),
        };
        match arg {
            // Adjacent literals are one docstring.
            [_, ..] if k == 1 && default.is_none() && arg.iter().all(|w| w.starts_with(b"\"")) => {
                let parts: Option<Vec<String>> = arg.iter().map(|w| string_literal(w)).collect();
                doc = Some(parts?.concat());
            }
            [s, b"_a"] => args.push((string_literal(s)?, default)),
            [b"py", b"::", b"arg", b"(", s, b")"] => args.push((string_literal(s)?, default)),
            // A return-value policy, a default that is not a plain literal: left to a person.
            _ => return None,
        }
    }
    if rest.first().is_some_and(|w| *w != b",") {
        return None;
    }
    Some(Def {
        at: stmt[0].start,
        name,
        function: String::from_utf8_lossy(function.text(text)).into_owned(),
        path,
        doc: doc.filter(|d| !d.is_empty()),
        args,
    })
}

/// A default written as a plain literal, in the schema's spelling (`-1`, `0.5`, `False`).
fn default_literal(toks: &[&[u8]]) -> Option<String> {
    let text: String = toks.iter().map(|t| String::from_utf8_lossy(t)).collect();
    match text.as_str() {
        "true" => Some("True".into()),
        "false" => Some("False".into()),
        // `"out"_a = nullptr`, `py::none()`, `c10::nullopt`: an optional left out.
        "nullptr" | "py::none()" | "std::nullopt" | "c10::nullopt" => Some("None".into()),
        t if t.trim_start_matches('-').parse::<f64>().is_ok() => Some(t.to_string()),
        _ => None,
    }
}

/// The content of a plain `"..."` literal without escapes; None otherwise.
fn string_literal(tok: &[u8]) -> Option<String> {
    let inner = tok.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    if inner.contains(&b'\\') {
        return None;
    }
    String::from_utf8(inner.to_vec()).ok()
}

/// `#include "x.h"` names.
fn relative_includes(text: &[u8], toks: &[Token]) -> Vec<String> {
    toks.iter()
        .filter(|t| t.kind == Kind::HeaderName)
        .filter_map(|t| {
            let n = t.text(text);
            n.strip_prefix(b"\"")
                .and_then(|n| n.strip_suffix(b"\""))
                .map(|n| String::from_utf8_lossy(n).into_owned())
        })
        .collect()
}

/// Every `RET NAME(PARAMS)` followed by `{` or `;` at the top level of a file.
pub fn signatures(text: &[u8], toks: &[Token]) -> Vec<Signature> {
    let code: Vec<&Token> = toks
        .iter()
        .filter(|t| !matches!(t.kind, Kind::Comment))
        .collect();
    let word = |t: &Token| String::from_utf8_lossy(t.text(text)).into_owned();
    let mut out = Vec::new();
    let mut depth = 0i32;
    // Each open brace, whether it opens a namespace (whose functions are at file level).
    let mut braces: Vec<bool> = Vec::new();
    let mut stmt_start = 0usize;
    let mut k = 0;
    while k < code.len() {
        let t = code[k];
        match (t.kind, t.text(text)) {
            (Kind::Punct, b"{") => {
                let namespace = code[stmt_start.min(k)..k]
                    .first()
                    .is_some_and(|f| f.text(text) == b"namespace");
                braces.push(namespace);
                depth += i32::from(!namespace);
            }
            (Kind::Punct, b"}") => depth -= i32::from(!braces.pop().unwrap_or(false)),
            (Kind::PpEnd, _) => stmt_start = k + 1,
            _ => {}
        }
        if matches!(t.text(text), b";" | b"{" | b"}") && t.kind == Kind::Punct {
            stmt_start = k + 1;
        }
        let is_call = depth == 0
            && t.kind == Kind::Ident
            && k > stmt_start
            && code.get(k + 1).is_some_and(|n| n.text(text) == b"(");
        if !is_call {
            k += 1;
            continue;
        }
        // The parameter list, to its matching `)`.
        let mut paren = 0;
        let mut close = None;
        for (j, p) in code.iter().enumerate().skip(k + 1) {
            match p.text(text) {
                b"(" => paren += 1,
                b")" => {
                    paren -= 1;
                    if paren == 0 {
                        close = Some(j);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else { break };
        let after = code.get(close + 1).map(|t| t.text(text));
        if matches!(after, Some(b"{") | Some(b";")) {
            let ret: Vec<String> = code[stmt_start..k]
                .iter()
                .filter(|t| t.kind != Kind::PpStart && t.kind != Kind::PpEnd)
                .map(|t| word(t))
                .filter(|w| w != "inline" && w != "static")
                .collect();
            let params = split_params(&code[k + 2..close], text);
            if !ret.is_empty() && ret.iter().all(|w| w != "=" && w != "return") {
                out.push(Signature {
                    name: word(t),
                    ret: ret.join(" "),
                    params,
                });
            }
        }
        k = close + 1;
    }
    out
}

/// `const at::Tensor& dets, double x` → [("const at::Tensor&", "dets"), ("double", "x")].
fn split_params(toks: &[&Token], text: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut cur: Vec<String> = Vec::new();
    let mut depth = 0;
    let flush = |cur: &mut Vec<String>, out: &mut Vec<(String, String)>| {
        if let Some(name) = cur.pop() {
            out.push((cur.join(" "), name));
        }
        cur.clear();
    };
    // A C++ default (`bool random = false`) is not part of the type: skipped to the next `,`.
    let mut in_default = false;
    for t in toks {
        let w = String::from_utf8_lossy(t.text(text)).into_owned();
        match w.as_str() {
            "<" | "(" => depth += 1,
            ">" | ")" => depth -= 1,
            "," if depth == 0 => {
                flush(&mut cur, &mut out);
                in_default = false;
                continue;
            }
            "=" if depth == 0 => in_default = true,
            _ => {}
        }
        if !in_default {
            cur.push(w);
        }
    }
    flush(&mut cur, &mut out);
    out
}

/// The schema type of a C++ parameter type and, where the boxing hands the function another
/// C++ type than it declares, that type (`float` comes boxed as `double`, `int` as `int64_t`,
/// converted by a generated adapter as pybind11 converted them); or why there is none.
fn schema_type(cxx: &str) -> Result<(&'static str, Option<&'static str>), String> {
    let t: String = cxx
        .split_whitespace()
        .filter(|w| *w != "const")
        .collect::<Vec<_>>()
        .join(" ");
    let bare = t.trim_end_matches('&').trim();
    // Lists and optionals of what the boxing converts (`std :: vector < at :: Tensor >`): the
    // list conversions need torch 2.10 ([`needs_lists`]).
    for (wrapper, suffix) in [
        ("std :: vector <", "[]"),
        ("std :: optional <", "?"),
        ("c10 :: optional <", "?"),
    ] {
        if let Some(inner) = bare.strip_prefix(wrapper).and_then(|x| x.strip_suffix('>')) {
            return match (schema_type(inner.trim()), suffix) {
                (Ok(("Tensor", None)), "[]") => Ok(("Tensor[]", None)),
                (Ok(("Tensor", None)), _) => Ok(("Tensor?", None)),
                (Ok(("int", None)), "[]") => Ok(("int[]", None)),
                (Ok(("int", None)), _) => Ok(("int?", None)),
                (Ok(("float", None)), "[]") => Ok(("float[]", None)),
                (Ok(("float", None)), _) => Ok(("float?", None)),
                (Ok(("bool", None)), "?") => Ok(("bool?", None)),
                _ => Err(format!("`{bare}` has no stable-ABI schema type here")),
            };
        }
    }
    Ok(match bare {
        "at :: Tensor" | "torch :: Tensor" | "torch :: stable :: Tensor" | "Tensor" => {
            ("Tensor", None)
        }
        "double" => ("float", None),
        "int64_t" => ("int", None),
        "bool" => ("bool", None),
        "float" if t == bare => ("float", Some("double")),
        "int" if t == bare => ("int", Some("int64_t")),
        "float" | "int" => return Err(format!("`{cxx}` (a reference the boxing cannot bind)")),
        "long" => ("int", None),
        other => return Err(format!("`{other}` has no stable-ABI schema type here")),
    })
}

/// The stable C++ type a schema type is boxed as (an adapter's parameter).
fn stable_cxx(schema: &str) -> Option<&'static str> {
    Some(match schema {
        "Tensor" => "torch::stable::Tensor",
        "Tensor[]" => "std::vector<torch::stable::Tensor>",
        "Tensor?" => "std::optional<torch::stable::Tensor>",
        "int[]" => "std::vector<int64_t>",
        "int?" => "std::optional<int64_t>",
        "float[]" => "std::vector<double>",
        "float?" => "std::optional<double>",
        "bool?" => "std::optional<bool>",
        _ => return None,
    })
}

/// Whether a schema names a list (`Tensor[]`, `int[]`): the stable boxing converts lists from
/// torch 2.10 on (stableivalue_conversions.h), which the stated target must say.
pub fn needs_lists(schema: &str) -> bool {
    schema.contains("[]")
}

/// A non-const lvalue reference (`at::Tensor& out`).
fn mutable_ref(cxx: &str) -> bool {
    cxx.trim_end().ends_with('&') && !cxx.split_whitespace().any(|w| w == "const")
}

/// For a function with a `float` or `int` parameter, a tensor it may write or an `int` return,
/// an adapter the boxing can call: it takes `double`/`int64_t` and converts them as pybind11 did
/// (`static_cast<float>`; an `int` out of range is an error, not a wrapped value), tensors by
/// value (the same tensor: a handle), and returns `int64_t` for an `int`.
/// A tensor parameter whose pybind11 keyword default is `nullptr`/`None` arrives as `Tensor?`
/// and is passed on as an undefined tensor where it is left out.
fn adapter(sig: &Signature, keywords: &[(String, Option<String>)], callee: &str) -> Option<String> {
    let mut params = Vec::new();
    let mut args = Vec::new();
    let mut checks = Vec::new();
    let int_return = sig.ret.trim() == "int";
    // A pair of tensors comes back as the tuple the boxing converts.
    let pair_return = sig.ret.replace(' ', "").starts_with("std::pair<");
    let mut any = int_return || pair_return || sig.params.iter().any(|(ty, _)| mutable_ref(ty));
    for (k, (ty, name)) in sig.params.iter().enumerate() {
        if omitted_tensor(ty, keywords.get(k)) {
            any = true;
            params.push(format!("std::optional<torch::stable::Tensor> {name}"));
            args.push(format!("{name}.value_or(torch::stable::Tensor())"));
            continue;
        }
        match schema_type(ty).ok()?.1 {
            Some(boxed) => {
                any = true;
                params.push(format!("{boxed} {name}"));
                let target = if boxed == "double" { "float" } else { "int" };
                if target == "int" {
                    checks.push(format!(
                        "  STD_TORCH_CHECK({name} >= -2147483648LL && {name} <= 2147483647LL, \"{}: {name} is out of int's range\");\n",
                        sig.name
                    ));
                }
                args.push(format!("static_cast<{target}>({name})"));
            }
            // Tensors by value: the declaration read may be the unported one (`at::Tensor&`),
            // and a copy binds to any reference the function takes.
            None => {
                let (st, _) = schema_type(ty).ok()?;
                let cxx = stable_cxx(st).map_or_else(|| tidy(ty), String::from);
                params.push(format!("{cxx} {name}"));
                args.push(name.clone());
            }
        }
    }
    if !any {
        return None;
    }
    let void = sig.ret.trim() == "void";
    let ret = match (void, int_return) {
        (true, _) => "void",
        (_, true) => "int64_t",
        _ => "auto",
    };
    let call = format!("{callee}({})", args.join(", "));
    let body = if void {
        format!("{}  {call};\n", checks.concat())
    } else if pair_return {
        format!(
            "{}  auto r = {call};\n  return std::make_tuple(r.first, r.second);\n",
            checks.concat()
        )
    } else {
        format!("{}  return {call};\n", checks.concat())
    };
    let include = if checks.is_empty() {
        ""
    } else {
        "#include <torch/headeronly/util/Exception.h>\n"
    };
    Some(format!(
        "{include}// `{}` as the stable ABI boxes it: double for float, int64_t for int, tensors by value, a pair as a tuple.\nstatic {ret} {}_boxed({}) {{\n{body}}}\n",
        sig.name,
        sig.name,
        params.join(", ")
    ))
}

/// A type as the lexer split it (`const torch :: stable :: Tensor &`), written back as code.
fn tidy(ty: &str) -> String {
    ty.replace(" :: ", "::")
        .replace(" &", "&")
        .replace(" < ", "<")
        .replace(" >", ">")
        .replace(" ,", ",")
}

/// The Python module `PYBIND11_MODULE(NAME, m)` defined, kept under its name: a module of
/// CPython's limited API whose names forward to `torch.ops.NS` (the library registered them as
/// it loaded, before this runs).
fn python_module(module: &str, ns: &str, names: &[String]) -> String {
    let mut source = String::from("import torch\\n");
    for n in names {
        source.push_str(&format!("{n} = torch.ops.{ns}.{n}\\n"));
    }
    format!(
        r#"// The Python module this file defined, kept: importing it loads this library (which
// registers the operators above) and gives the same names, forwarding to torch.ops.{ns}.
#include <Python.h>
#define ARCHSMITH_PYINIT_CAT(a, b) a##b
#define ARCHSMITH_PYINIT(name) ARCHSMITH_PYINIT_CAT(PyInit_, name)
#define ARCHSMITH_STR_(x) #x
#define ARCHSMITH_STR(x) ARCHSMITH_STR_(x)
extern "C" PyObject* ARCHSMITH_PYINIT({module})(void) {{
  static PyModuleDef def = {{PyModuleDef_HEAD_INIT, ARCHSMITH_STR({module}), nullptr, -1, nullptr}};
  PyObject* module = PyModule_Create(&def);
  if (module == nullptr) return nullptr;
  PyObject* code = Py_CompileString("{source}", ARCHSMITH_STR({module}), Py_file_input);
  PyObject* globals = PyModule_GetDict(module);
  PyObject* done = nullptr;
  if (code != nullptr && PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins()) == 0)
    done = PyEval_EvalCode(code, globals, globals);
  Py_XDECREF(code);
  if (done == nullptr) {{
    Py_DECREF(module);
    return nullptr;
  }}
  Py_DECREF(done);
  return module;
}}"#
    )
}

/// A plain tensor parameter bound with a `None` default (`"out"_a = nullptr`).
fn omitted_tensor(ty: &str, keyword: Option<&(String, Option<String>)>) -> bool {
    keyword.is_some_and(|(_, d)| d.as_deref() == Some("None"))
        && schema_type(ty).is_ok_and(|(st, _)| st == "Tensor")
}

/// `name(Tensor dets, float threshold) -> Tensor`, or why the signature does not map.
fn schema(
    name: &str,
    sig: &Signature,
    keywords: &[(String, Option<String>)],
) -> Result<String, String> {
    if !keywords.is_empty() && keywords.len() != sig.params.len() {
        return Err(format!(
            "{} keyword name(s) for {} parameter(s)",
            keywords.len(),
            sig.params.len()
        ));
    }
    let mut args = Vec::new();
    let mut aliases = b'a'..=b'z';
    for (k, (ty, param)) in sig.params.iter().enumerate() {
        // Python's keyword names and defaults, where the binding gave them, are the schema's.
        let param = match keywords.get(k) {
            Some((kw, Some(default))) => format!("{kw}={default}"),
            Some((kw, None)) => kw.clone(),
            None => param.clone(),
        };
        let (st, _) = schema_type(ty).map_err(|e| format!("parameter `{param}` is {e}"))?;
        let st = match (omitted_tensor(ty, keywords.get(k)), st.ends_with('?')) {
            (true, _) => "Tensor?",
            (false, false) if param.ends_with("=None") => {
                return Err(format!("parameter `{param}`: a None default for a `{st}`"))
            }
            _ => st,
        };
        // A tensor the function may write (a non-const reference): an alias set of its own,
        // as torch's schemas mark an argument an op mutates.
        match (st, mutable_ref(ty), aliases.next()) {
            ("Tensor", true, Some(set)) => args.push(format!("Tensor({}!) {param}", set as char)),
            _ => args.push(format!("{st} {param}")),
        }
    }
    let ret = sig.ret.replace(' ', "");
    let ret = match ret.as_str() {
        "void" => "()".to_string(),
        "int" | "int64_t" | "long" => "int".to_string(),
        r if schema_type(&sig.ret).is_ok_and(|t| t.0 == "Tensor") && !r.contains("tuple") => {
            "Tensor".into()
        }
        _ if schema_type(&sig.ret).is_ok_and(|t| t.0 == "Tensor[]") => "Tensor[]".into(),
        r if r.starts_with("std::tuple<") || r.starts_with("std::pair<") => {
            let inner =
                &sig.ret[sig.ret.find('<').unwrap_or(0) + 1..sig.ret.rfind('>').unwrap_or(0)];
            let parts: Result<Vec<&str>, String> = inner
                .split(',')
                .map(|p| match schema_type(p) {
                    Ok(("Tensor", _)) => Ok("Tensor"),
                    _ => Err(format!("returns `{}`", sig.ret)),
                })
                .collect();
            format!("({})", parts?.join(", "))
        }
        _ => return Err(format!("returns `{}`", sig.ret)),
    };
    Ok(format!("{name}({}) -> {ret}", args.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(src: &str, name: &str) -> Signature {
        signatures(src.as_bytes(), &lex_c(src.as_bytes()))
            .into_iter()
            .find(|s| s.name == name)
            .unwrap()
    }

    #[test]
    fn schemas_follow_the_cxx_signatures() {
        for (decl, name, want) in [
            (
                "at::Tensor scale(const at::Tensor& x, double factor, int64_t n, bool f) { return x; }",
                "scale",
                Ok("scale(Tensor x, float factor, int n, bool f) -> Tensor"),
            ),
            (
                "std::tuple<torch::stable::Tensor, torch::stable::Tensor> two(const torch::stable::Tensor& a);",
                "two",
                Ok("two(Tensor a) -> (Tensor, Tensor)"),
            ),
            // float and int are schema float and int (boxed as double and int64_t, converted
            // by an adapter); a reference to one cannot be bound.
            (
                "at::Tensor nms(const at::Tensor& d, const float threshold);",
                "nms",
                Ok("nms(Tensor d, float threshold) -> Tensor"),
            ),
            (
                "void f(at::Tensor& d, float& t);",
                "f",
                Err("parameter `t` is `float &` (a reference the boxing cannot bind)"),
            ),
            // torch-points-kernels' style: a C++ default, a pair of tensors returned.
            (
                "std::pair<at::Tensor, at::Tensor> fps(at::Tensor points, const int64_t n, bool random = false);",
                "fps",
                Ok("fps(Tensor points, int n, bool random) -> (Tensor, Tensor)"),
            ),
            // flownet2's style: tensors written in place, an int status returned.
            (
                "int norm_forward(at::Tensor& input1, at::Tensor& output, int norm_deg);",
                "norm_forward",
                Ok("norm_forward(Tensor(a!) input1, Tensor(b!) output, int norm_deg) -> int"),
            ),
            (
                "at::Tensor g(const at::Tensor& d, const std::vector<std::string>& names);",
                "g",
                Err("parameter `names` is `std :: vector < std :: string >` has no stable-ABI schema type here"),
            ),
        ] {
            let got = schema(name, &sig(decl, name), &[]);
            assert_eq!(got.as_deref(), want.map_err(str::to_string).as_deref(), "{decl}");
        }
    }

    #[test]
    fn a_plain_binding_block_becomes_operators_and_anything_else_stays() {
        let dir = tempfile::tempdir().unwrap();
        let src = "#include <torch/csrc/stable/library.h>\n\
                   torch::stable::Tensor scale(const torch::stable::Tensor& x, double f) { return x; }\n\
                   PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n  m.def(\"scale\", &scale, \"x times f\");\n}\n";
        let p = port(src.as_bytes(), &dir.path().join("a.cpp"), "demo");
        assert!(p.review.is_empty(), "{:?}", p.review);
        let out = String::from_utf8(p.text.unwrap()).unwrap();
        assert!(out.contains("// scale: x times f\nSTABLE_TORCH_LIBRARY(demo, m) {\n  m.def(\"scale(Tensor x, float f) -> Tensor\");\n}"), "{out}");
        assert!(out.contains("STABLE_TORCH_LIBRARY_IMPL(demo, CompositeExplicitAutograd, m) {\n  m.impl(\"scale\", TORCH_BOX(&scale));\n}"), "{out}");
        assert!(!out.contains("PYBIND11"), "{out}");
        // Idempotent: nothing left to port.
        let again = port(out.as_bytes(), &dir.path().join("a.cpp"), "demo");
        assert!(again.text.is_none() && again.review.is_empty());
        // The Python module stays under its name, forwarding to the operators.
        assert!(
            out.contains("extern \"C\" PyObject* ARCHSMITH_PYINIT(TORCH_EXTENSION_NAME)(void)"),
            "{out}"
        );
        assert!(
            out.contains("\"import torch\\nscale = torch.ops.demo.scale\\n\""),
            "{out}"
        );
        // A reference to a float, a class binding: the block stays, each named.
        let src = "at::Tensor nms(const at::Tensor& d, float& t);\n\
                   PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n  m.def(\"nms\", &nms);\n  py::class_<Box>(m, \"Box\");\n}\n";
        let p = port(src.as_bytes(), &dir.path().join("b.cpp"), "demo");
        assert!(p.text.is_none());
        assert_eq!(p.review.len(), 2, "{:?}", p.review);
        assert!(p.review[0].1.contains("`t`"), "{:?}", p.review);
        assert!(p.review[1].1.contains("py"), "{:?}", p.review);
    }

    /// maskrcnn-benchmark's block heads a group with `// dcn-v2`: before, any comment left the
    /// whole block to a person (it would have been lost); now each goes into the registration
    /// before the definition it stood before (one inside a definition, after it), and nothing of
    /// it is lost.
    #[test]
    fn comments_in_the_block_are_carried_into_the_registration() {
        let dir = tempfile::tempdir().unwrap();
        let src = "torch::stable::Tensor a(const torch::stable::Tensor& x);\n\
                   torch::stable::Tensor b(const torch::stable::Tensor& x);\n\
                   PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n  m.def(\"a\", &a);\n  // dcn-v2\n  m.def(\"b\", &b /* same */);\n  /* last */\n}\n";
        let p = port(src.as_bytes(), &dir.path().join("c.cpp"), "demo");
        assert!(p.review.is_empty(), "{:?}", p.review);
        let out = String::from_utf8(p.text.unwrap()).unwrap();
        assert!(
            out.contains("STABLE_TORCH_LIBRARY(demo, m) {\n  m.def(\"a(Tensor x) -> Tensor\");\n  // dcn-v2\n  m.def(\"b(Tensor x) -> Tensor\");\n  /* same */\n  /* last */\n}"),
            "{out}"
        );
        let again = port(out.as_bytes(), &dir.path().join("c.cpp"), "demo");
        assert!(again.text.is_none() && again.review.is_empty());
    }

    #[test]
    fn keyword_names_become_the_schemas_argument_names() {
        let dir = tempfile::tempdir().unwrap();
        let src = "torch::stable::Tensor knn(const torch::stable::Tensor& a, const torch::stable::Tensor& b, int64_t k) { return a; }\n\
                   PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n  m.def(\"dense_knn\", &knn, \"\", \"support\"_a, py::arg(\"querry\"), \"k\"_a);\n}\n";
        let p = port(src.as_bytes(), &dir.path().join("k.cpp"), "tpk");
        assert!(p.review.is_empty(), "{:?}", p.review);
        let out = String::from_utf8(p.text.unwrap()).unwrap();
        assert!(
            out.contains("m.def(\"dense_knn(Tensor support, Tensor querry, int k) -> Tensor\");"),
            "{out}"
        );
        // Literal defaults become the schema's; a docstring may be adjacent literals.
        let src = "torch::stable::Tensor knn(const torch::stable::Tensor& a, const torch::stable::Tensor& b, int64_t k, bool s);\n\
                   PYBIND11_MODULE(N, m) { m.def(\"f\", &knn, \"one \" \"doc\", \"a\"_a, \"b\"_a, \"k\"_a = -1, \"s\"_a = false); }\n";
        let out = String::from_utf8(
            port(src.as_bytes(), &dir.path().join("e.cpp"), "tpk")
                .text
                .unwrap(),
        )
        .unwrap();
        assert!(
            out.contains("m.def(\"f(Tensor a, Tensor b, int k=-1, bool s=False) -> Tensor\");"),
            "{out}"
        );
        assert!(out.contains("// f: one doc\n"), "{out}");
        // A default that is not a literal, or names that do not match the parameters: left to a
        // person.
        for def in [
            "m.def(\"f\", &knn, \"a\"_a, \"b\"_a, \"k\"_a = K);",
            "m.def(\"f\", &knn, \"a\"_a);",
        ] {
            let src = format!("torch::stable::Tensor knn(const torch::stable::Tensor& a, const torch::stable::Tensor& b, int64_t k);\nPYBIND11_MODULE(N, m) {{ {def} }}\n");
            let p = port(src.as_bytes(), &dir.path().join("d.cpp"), "tpk");
            assert!(
                p.text.is_none() && p.review.len() == 1,
                "{def}: {:?}",
                p.review
            );
        }
    }

    #[test]
    fn a_pair_of_tensors_is_returned_as_a_tuple() {
        let a = adapter(&sig(
            "std::pair<at::Tensor, at::Tensor> fps(at::Tensor points, int64_t n, bool random = false);",
            "fps",
        ), &[], "fps")
        .unwrap();
        assert!(a.contains("static auto fps_boxed(torch::stable::Tensor points, int64_t n, bool random) {\n  auto r = fps(points, n, random);\n  return std::make_tuple(r.first, r.second);\n}"), "{a}");
    }

    #[test]
    fn each_block_of_an_ifdef_is_ported_in_one_run() {
        // spatial-correlation-sampler 0.3.0's layout: one module with CUDA, one without.
        let src = "torch::stable::Tensor f(torch::stable::Tensor x) { return x; }\n\
#ifdef USE_CUDA\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n  m.def(\"f\", &f, \"gpu\");\n}\n\
#else\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n  m.def(\"f\", &f, \"cpu\");\n}\n#endif\n";
        let mut out = super::super::engine::Outcome {
            output: src.as_bytes().to_vec(),
            ..Default::default()
        };
        apply(&mut out, Path::new("ops.cpp"), "ns");
        let text = String::from_utf8(out.output.clone()).unwrap();
        assert_eq!(out.counts.get(RULE), Some(&2), "{text}");
        assert!(!text.contains("PYBIND11_MODULE"), "{text}");
        assert_eq!(
            text.matches("STABLE_TORCH_LIBRARY(ns, m)").count(),
            2,
            "{text}"
        );
        let before = out.output.clone();
        apply(&mut out, Path::new("ops.cpp"), "ns");
        assert_eq!(out.output, before, "a second run changes nothing");
    }

    #[test]
    fn tensor_lists_optionals_and_none_defaults_map_to_the_schemas() {
        let s = sig(
            "std::vector<at::Tensor> gather(const std::vector<at::Tensor>& xs, c10::optional<at::Tensor> w, at::Tensor out, std::vector<int64_t> dims);",
            "gather",
        );
        let kw: Vec<(String, Option<String>)> = [
            ("xs", None),
            ("w", None),
            ("out", Some("None")),
            ("dims", None),
        ]
        .iter()
        .map(|(k, d)| (k.to_string(), d.map(String::from)))
        .collect();
        assert_eq!(
            schema("gather", &s, &kw).unwrap(),
            "gather(Tensor[] xs, Tensor? w, Tensor? out=None, int[] dims) -> Tensor[]"
        );
        assert!(needs_lists(&schema("gather", &s, &kw).unwrap()));
        let a = adapter(&s, &kw, "gather").unwrap();
        assert!(a.contains("gather_boxed(std::vector<torch::stable::Tensor> xs, std::optional<torch::stable::Tensor> w, std::optional<torch::stable::Tensor> out, std::vector<int64_t> dims)"), "{a}");
        assert!(
            a.contains("return gather(xs, w, out.value_or(torch::stable::Tensor()), dims);"),
            "{a}"
        );
        // A None default for what cannot be None is named.
        let f = sig("at::Tensor f(int64_t n);", "f");
        let none = [("n".to_string(), Some("None".to_string()))];
        assert_eq!(
            schema("f", &f, &none).unwrap_err(),
            "parameter `n=None`: a None default for a `int`"
        );
    }

    #[test]
    fn a_float_or_int_parameter_is_boxed_through_an_adapter() {
        let dir = tempfile::tempdir().unwrap();
        let src = "torch::stable::Tensor nms(const torch::stable::Tensor& d, const float t, int k) { return d; }\n\
                   PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n  m.def(\"nms\", &nms);\n}\n";
        let p = port(src.as_bytes(), &dir.path().join("c.cpp"), "demo");
        assert!(p.review.is_empty(), "{:?}", p.review);
        let out = String::from_utf8(p.text.unwrap()).unwrap();
        assert!(
            out.contains("m.def(\"nms(Tensor d, float t, int k) -> Tensor\");"),
            "{out}"
        );
        assert!(
            out.contains("m.impl(\"nms\", TORCH_BOX(&nms_boxed));"),
            "{out}"
        );
        assert!(
            out.contains("static auto nms_boxed(torch::stable::Tensor d, double t, int64_t k) {\n"),
            "{out}"
        );
        assert!(out.contains("  STD_TORCH_CHECK(k >= -2147483648LL && k <= 2147483647LL, \"nms: k is out of int's range\");\n  return nms(d, static_cast<float>(t), static_cast<int>(k));\n}"), "{out}");
    }

    #[test]
    fn a_function_bound_by_its_qualified_name_is_called_by_it() {
        // RoIAlign.pytorch's layout: the functions in `namespace torch`, bound as `&torch::f`.
        let dir = tempfile::tempdir().unwrap();
        let src = "namespace torch {\ntorch::stable::Tensor fwd(torch::stable::Tensor x, int k) { return x; }\n\
                   torch::stable::Tensor bwd(torch::stable::Tensor g) { return g; }\n}\n\
                   PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n  m.def(\n      \"forward\",\n      &torch::fwd,\n      \"f\");\n  m.def(\"backward\", &torch::bwd);\n}\n";
        let p = port(src.as_bytes(), &dir.path().join("c.cpp"), "demo");
        assert!(p.review.is_empty(), "{:?}", p.review);
        let out = String::from_utf8(p.text.unwrap()).unwrap();
        assert!(
            out.contains("m.def(\"forward(Tensor x, int k) -> Tensor\");"),
            "{out}"
        );
        assert!(
            out.contains("  return torch::fwd(x, static_cast<int>(k));\n}"),
            "{out}"
        );
        assert!(
            out.contains("m.impl(\"backward\", TORCH_BOX(&torch::bwd));"),
            "{out}"
        );
    }

    #[test]
    fn signatures_are_found_in_headers_included_by_relative_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("ops.h"),
            "#pragma once\n#include <torch/csrc/stable/tensor.h>\ntorch::stable::Tensor twice(const torch::stable::Tensor& x) { return x; }\n",
        )
        .unwrap();
        let src = "#include \"ops.h\"\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"twice\", &twice); }\n";
        let p = port(src.as_bytes(), &dir.path().join("bind.cpp"), "ns");
        let out = String::from_utf8(p.text.expect("ported")).unwrap();
        assert!(
            out.contains("m.def(\"twice(Tensor x) -> Tensor\");"),
            "{out}"
        );
    }
}
