//! Uses of module APIs in Python source, read from its syntax tree (tree-sitter's Python grammar):
//! imports bind names (`import torch.cuda.amp as amp`, `from torch.cuda import amp`,
//! `from torch.cuda.amp import autocast as ac`), and every name or attribute chain in code resolves
//! through them to a dotted path (`amp.autocast` → `torch.cuda.amp.autocast`). Comments and strings
//! are not code and never match.
//!
//! Each use carries the byte offsets a rewrite needs (its own span, the call's argument list, the
//! import statement it sits in), and whether it sits in a `try:` whose handler catches an
//! import failure: a package's own fallback, which a port leaves alone.

use std::collections::HashMap;
use std::ops::Range;
use tree_sitter::{Node, Parser};

/// One use of a dotted name in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Use {
    /// The fully qualified path it resolves to (`torch.cuda.amp.autocast`).
    pub path: String,
    /// 1-based line and column.
    pub line: usize,
    pub column: usize,
    /// The source text of the use (`amp.autocast`).
    pub text: String,
    /// Its bytes in the source.
    pub span: Range<usize>,
    /// For a call: the keyword arguments it passes (`weights_only`, `map_location`).
    pub call_keywords: Option<Vec<String>>,
    /// For a call: its argument list.
    pub call_args: Option<Args>,
    /// The use is a decorator on its own (`@torch.cuda.amp.custom_fwd`, not called).
    pub decorator: bool,
    /// An import statement (not a use in code).
    pub import: Option<Import>,
    /// A pattern around the use that a row can name: `version-slice` (`X.__version__[...]`) or
    /// `index-0` (`x.data[0]`, where `x` is taken for a tensor).
    pub shape: Option<Shape>,
    /// Inside a `try:` statement that handles `ImportError`, `ModuleNotFoundError` or
    /// `AttributeError` (the package's own compatibility fallback), or a use of a name such a
    /// statement binds.
    pub guard: Option<Guard>,
}

/// A pattern a row matches beyond a name (`match = "version-slice"` or `"index-0"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// `X.__version__[...]`. With `float(X.__version__[:N]) OP NUMBER` around it, the whole
    /// comparison's span, the version expression as written, the operator and the number.
    VersionSlice {
        compare: Option<(Range<usize>, String, String, String)>,
    },
    /// `x.data[0]`.
    IndexZero,
}

/// Where a use sits in a `try:` that handles a failed import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guard {
    /// The `try` statement's first byte.
    pub try_at: usize,
    /// 0 for the `try:` body (with its `else:`/`finally:`), 1.. for each handler; None for a
    /// use elsewhere of a name one of its branches binds.
    pub branch: Option<usize>,
}

/// A call's argument list: `(` at `open - 1`, `)` at `close`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub open: usize,
    pub close: usize,
    pub empty: bool,
    /// The last argument is followed by a comma.
    pub trailing_comma: bool,
    /// The span of the only argument, when there is exactly one and it is positional.
    pub only_positional: Option<Range<usize>>,
}

/// Where an imported name sits: its statement and its siblings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    /// `from M import …` (true) or `import M` (false).
    pub from: bool,
    /// The whole statement.
    pub statement: Range<usize>,
    /// Every name of the statement (with its `as` alias), in order.
    pub names: Vec<Range<usize>>,
    /// Which of `names` this is.
    pub index: usize,
    /// The imported name's own span, without its alias (`b` in `from a import b as c`;
    /// `a.b` in `import a.b`).
    pub name: Range<usize>,
    pub alias: Option<String>,
    /// The statement is the only one in its block (removing it needs a `pass`).
    pub alone_in_block: bool,
}

/// What [`analyze`] reads from one file.
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    pub uses: Vec<Use>,
    /// Each name bound by an import at the end of the file, and the path it names.
    pub bindings: HashMap<String, String>,
    /// Where a new top-level import goes: after the last top-level import, else after the
    /// module docstring, else at the start.
    pub import_insert_at: usize,
    /// Each guarding `try` statement and its number of branches (the body and each handler).
    pub guards: HashMap<usize, usize>,
}

/// What the walk carries.
struct Walk<'s> {
    src: &'s [u8],
    bindings: HashMap<String, String>,
    /// Names bound inside a guarding `try`, and which.
    guarded_names: HashMap<String, Guard>,
    uses: Vec<Use>,
    guards: HashMap<usize, usize>,
}

/// Parses `source` and lists every import and every use in code of a name bound to a module path.
/// Returns None when the parser cannot be set up.
pub fn uses(source: &str) -> Option<Vec<Use>> {
    analyze(source).map(|a| a.uses)
}

/// [`uses`], with the bindings and the place for a new import.
pub fn analyze(source: &str) -> Option<Analysis> {
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_python::LANGUAGE.into())
        .ok()?;
    let tree = parser.parse(source, None)?;
    let root = tree.root_node();
    let bytes = source.as_bytes();
    let mut w = Walk {
        src: bytes,
        bindings: HashMap::new(),
        guarded_names: HashMap::new(),
        uses: Vec::new(),
        guards: HashMap::new(),
    };
    collect(root, &mut w, None);
    Some(Analysis {
        uses: w.uses,
        bindings: w.bindings,
        import_insert_at: insert_point(root, bytes),
        guards: w.guards,
    })
}

/// After the last top-level import (or `from __future__`), else after a module docstring, else 0:
/// the offset just past that statement's line.
fn insert_point(root: Node, src: &[u8]) -> usize {
    let mut c = root.walk();
    let mut after = None;
    let mut first = true;
    for n in root.named_children(&mut c) {
        if n.kind() == "comment" {
            continue;
        }
        let is_import = matches!(
            n.kind(),
            "import_statement" | "import_from_statement" | "future_import_statement"
        );
        let is_docstring = first
            && n.kind() == "expression_statement"
            && n.named_child(0).is_some_and(|s| s.kind() == "string");
        first = false;
        if is_import || is_docstring {
            after = Some(n.end_byte());
        } else {
            break;
        }
    }
    match after {
        Some(end) => src[end..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(src.len(), |p| end + p + 1),
        None => 0,
    }
}

fn text<'a>(n: Node, src: &'a [u8]) -> &'a str {
    n.utf8_text(src).unwrap_or("")
}

fn at(n: Node, src: &[u8], path: String, guard: Option<Guard>) -> Use {
    let p = n.start_position();
    Use {
        path,
        line: p.row + 1,
        column: p.column + 1,
        text: text(n, src).to_string(),
        span: n.byte_range(),
        call_keywords: None,
        call_args: None,
        decorator: n.parent().is_some_and(|p| p.kind() == "decorator"),
        import: None,
        guard,
        shape: None,
    }
}

/// `a.b.c` as written, when `n` is a plain chain of identifiers.
fn dotted(n: Node, src: &[u8]) -> Option<String> {
    match n.kind() {
        "identifier" => Some(text(n, src).to_string()),
        "attribute" => {
            let obj = n.child_by_field_name("object")?;
            let attr = n.child_by_field_name("attribute")?;
            Some(format!("{}.{}", dotted(obj, src)?, text(attr, src)))
        }
        _ => None,
    }
}

/// The chain of `n` when its source text is exactly that chain (blanks and line continuations
/// aside): a span that holds a comment, which error recovery can produce, is never a use.
fn plain_chain(n: Node, src: &[u8]) -> Option<String> {
    let chain = dotted(n, src)?;
    let written: String = text(n, src)
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '\\')
        .collect();
    (written == chain).then_some(chain)
}

fn resolve(chain: &str, bindings: &HashMap<String, String>) -> Option<String> {
    let (head, rest) = match chain.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (chain, None),
    };
    let base = bindings.get(head)?;
    Some(match rest {
        Some(r) => format!("{base}.{r}"),
        None => base.clone(),
    })
}

/// An imported name, its own node and its `as` alias.
fn imported_name<'t>(name: Node<'t>, src: &[u8]) -> Option<(Node<'t>, Option<String>)> {
    match name.kind() {
        "aliased_import" => Some((
            name.child_by_field_name("name")?,
            name.child_by_field_name("alias")
                .map(|a| text(a, src).to_string()),
        )),
        _ => Some((name, None)),
    }
}

/// Whether a `try:` statement handles a failed import (`except ImportError`, `ModuleNotFoundError`,
/// `AttributeError`, or a bare `except:`).
fn handles_import_failure(n: Node, src: &[u8]) -> bool {
    let mut c = n.walk();
    // Bound first: the iterator borrows `c`, which a tail expression would outlive.
    let handles = n.named_children(&mut c).any(|h| {
        if h.kind() != "except_clause" {
            return false;
        }
        // The handler's types: what stands between `except` and `:`.
        let mut hc = h.walk();
        let types: Vec<Node> = h
            .named_children(&mut hc)
            .filter(|x| x.kind() != "block")
            .collect();
        types.is_empty()
            || types.iter().any(|t| {
                let t = text(*t, src);
                ["ImportError", "ModuleNotFoundError", "AttributeError"]
                    .iter()
                    .any(|e| t.contains(e))
            })
    });
    handles
}

fn import_uses(n: Node, w: &mut Walk, module: Option<&str>, guard: Option<Guard>) {
    let src = w.src;
    let mut c = n.walk();
    let names: Vec<Node> = n.children_by_field_name("name", &mut c).collect();
    let ranges: Vec<Range<usize>> = names.iter().map(|x| x.byte_range()).collect();
    let alone_in_block = n.parent().is_some_and(|p| {
        p.kind() == "block" && p.named_child_count() == 1
            || p.kind() == "module" && p.named_child_count() == 1
    });
    for (index, name) in names.iter().enumerate() {
        let Some((own, alias)) = imported_name(*name, src) else {
            continue;
        };
        let orig = text(own, src).to_string();
        let path = match module {
            Some(m) => format!("{m}.{orig}"),
            None => orig.clone(),
        };
        let mut u = at(own, src, path.clone(), guard);
        u.import = Some(Import {
            from: module.is_some(),
            statement: n.byte_range(),
            names: ranges.clone(),
            index,
            name: own.byte_range(),
            alias: alias.clone(),
            alone_in_block,
        });
        w.uses.push(u);
        let (bound, to) = match (module, alias) {
            (_, Some(a)) => (a, path),
            (Some(_), None) => (orig, path),
            // `import torch.cuda.amp` binds `torch`.
            (None, None) => {
                let head = orig.split('.').next().unwrap_or(&orig).to_string();
                (head.clone(), head)
            }
        };
        match guard {
            Some(g) => w.guarded_names.insert(bound.clone(), g),
            None => w.guarded_names.remove(&bound),
        };
        w.bindings.insert(bound, to);
    }
}

fn call_args(args: Node, src: &[u8]) -> Option<Args> {
    if args.kind() != "argument_list" {
        return None;
    }
    let open = args.start_byte() + 1;
    let close = args.end_byte().checked_sub(1)?;
    if src.get(close) != Some(&b')') {
        return None;
    }
    let empty = args.named_child_count() == 0;
    // The last non-extra child before `)` is a `,` when the list ends with a comma.
    let mut c = args.walk();
    let kids: Vec<Node> = args.children(&mut c).filter(|k| !k.is_extra()).collect();
    let trailing_comma = kids.len() >= 2 && kids[kids.len() - 2].kind() == ",";
    let mut c = args.walk();
    let named: Vec<Node> = args
        .named_children(&mut c)
        .filter(|k| !k.is_extra())
        .collect();
    let only_positional = match named.as_slice() {
        [one]
            if !matches!(
                one.kind(),
                "keyword_argument" | "list_splat" | "dictionary_splat" | "parenthesized_list_splat"
            ) =>
        {
            Some(one.byte_range())
        }
        _ => None,
    };
    Some(Args {
        open,
        close,
        empty,
        trailing_comma,
        only_positional,
    })
}

/// The guard of a use in code: its own, or that of the guarding `try` that bound its first name.
fn guard_of(chain: &str, w: &Walk, guard: Option<Guard>) -> Option<Guard> {
    guard.or_else(|| {
        let head = chain.split('.').next().unwrap_or(chain);
        w.guarded_names.get(head).map(|g| Guard {
            try_at: g.try_at,
            branch: None,
        })
    })
}

fn collect(n: Node, w: &mut Walk, guard: Option<Guard>) {
    let src = w.src;
    match n.kind() {
        "import_statement" => {
            import_uses(n, w, None, guard);
            return;
        }
        "import_from_statement" => {
            let Some(module) = n.child_by_field_name("module_name") else {
                return;
            };
            if module.kind() != "dotted_name" {
                return; // relative imports name this package, not a library
            }
            let module = text(module, src).to_string();
            import_uses(n, w, Some(&module), guard);
            return;
        }
        "try_statement" if guard.is_none() && handles_import_failure(n, src) => {
            let try_at = n.start_byte();
            let mut branch = 0;
            let mut c = n.walk();
            for child in n.children(&mut c) {
                if child.kind() == "except_clause" {
                    branch += 1;
                }
                let g = Guard {
                    try_at,
                    branch: Some(if child.kind() == "except_clause" {
                        branch
                    } else {
                        0
                    }),
                };
                collect(child, w, Some(g));
            }
            w.guards.insert(try_at, branch + 1);
            return;
        }
        "call" => {
            if let Some(f) = n.child_by_field_name("function") {
                if let Some((chain, path)) =
                    plain_chain(f, src).and_then(|d| resolve(&d, &w.bindings).map(|p| (d, p)))
                {
                    let mut u = at(f, src, path, guard_of(&chain, w, guard));
                    let mut kws = Vec::new();
                    if let Some(args) = n.child_by_field_name("arguments") {
                        let mut c = args.walk();
                        for a in args.named_children(&mut c) {
                            if a.kind() == "keyword_argument" {
                                if let Some(k) = a.child_by_field_name("name") {
                                    kws.push(text(k, src).to_string());
                                }
                            }
                        }
                        u.call_args = call_args(args, src);
                    }
                    u.call_keywords = Some(kws);
                    w.uses.push(u);
                    // The arguments may hold uses of their own; the callee chain is done.
                    if let Some(args) = n.child_by_field_name("arguments") {
                        collect(args, w, guard);
                    }
                    return;
                }
            }
        }
        "attribute" | "identifier" => {
            if let Some((chain, path)) =
                plain_chain(n, src).and_then(|d| resolve(&d, &w.bindings).map(|p| (d, p)))
            {
                // A bare name counts when it names something inside a module (`from m import f`
                // then `f`), or an attribute chain; `import torch` then `torch` alone is no API.
                let own_binding = n.kind() == "identifier" && !path.contains('.');
                if !own_binding && !is_definition(n) {
                    let g = guard_of(&chain, w, guard);
                    w.uses.push(at(n, src, path, g));
                }
                return;
            }
        }
        "subscript" => {
            if let Some(u) = subscript_use(n, w, guard) {
                let version = matches!(u.shape, Some(Shape::VersionSlice { .. }));
                w.uses.push(u);
                if version {
                    return; // `X.__version__` inside is this use, not another
                }
            }
        }
        // Not code: nothing inside can be a use.
        "comment" | "string" => return,
        _ => {}
    }
    let mut c = n.walk();
    for child in n.children(&mut c) {
        collect(child, w, guard);
    }
}

/// `X.__version__[...]` (X a module the file imports) or `x.data[0]`, as a use of its own.
fn subscript_use(n: Node, w: &Walk, guard: Option<Guard>) -> Option<Use> {
    let src = w.src;
    let value = n.child_by_field_name("value")?;
    if value.kind() != "attribute" {
        return None;
    }
    let attr = text(value.child_by_field_name("attribute")?, src);
    let index = n.child_by_field_name("subscript")?;
    if attr == "__version__" {
        let chain = plain_chain(value, src)?;
        let path = resolve(&chain, &w.bindings)?;
        let compare = version_comparison(n, src);
        let mut u = at(value, src, path, guard_of(&chain, w, guard));
        u.shape = Some(Shape::VersionSlice { compare });
        return Some(u);
    }
    if attr == "data" && index.kind() == "integer" && text(index, src) == "0" {
        let mut u = at(n, src, "torch.Tensor.data".into(), guard);
        u.shape = Some(Shape::IndexZero);
        return Some(u);
    }
    None
}

/// `float(X.__version__[:N]) OP NUMBER` around the subscript `n`: the comparison's span, `X.__version__`
/// as written, the operator and the number.
fn version_comparison(n: Node, src: &[u8]) -> Option<(Range<usize>, String, String, String)> {
    let args = n.parent().filter(|p| p.kind() == "argument_list")?;
    let call = args.parent().filter(|p| p.kind() == "call")?;
    if args.named_child_count() != 1
        || call.child_by_field_name("function").map(|f| text(f, src)) != Some("float")
    {
        return None;
    }
    let cmp = call
        .parent()
        .filter(|p| p.kind() == "comparison_operator")?;
    if cmp.named_child_count() != 2 || cmp.named_child(0)?.id() != call.id() {
        return None;
    }
    let number = cmp.named_child(1).filter(|x| x.kind() == "float")?;
    let mut c = cmp.walk();
    let op = cmp
        .children(&mut c)
        .find(|x| !x.is_named())
        .map(|x| text(x, src).to_string())?;
    let version = text(n.child_by_field_name("value")?, src).to_string();
    Some((cmp.byte_range(), version, op, text(number, src).to_string()))
}

/// `n` is the name being defined (a keyword argument's name, a parameter, a function or class
/// name), not a use of it.
fn is_definition(n: Node) -> bool {
    let Some(p) = n.parent() else {
        return false;
    };
    let field = |f: &str| p.child_by_field_name(f).is_some_and(|c| c.id() == n.id());
    match p.kind() {
        // A parameter's default value and its annotation are code (`def f(a=inf)`,
        // `lambda t=inf: …`, `def g(x: Tensor = inf)`): only the parameter's name is defined.
        "keyword_argument"
        | "function_definition"
        | "class_definition"
        | "default_parameter"
        | "typed_default_parameter" => field("name"),
        "typed_parameter" => !field("type"),
        // `np.float = float` (a package's own shim for a removed alias) assigns the name: no use.
        "assignment" => field("left"),
        "parameters" | "lambda_parameters" => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(src: &str) -> Vec<(usize, String, bool)> {
        uses(src)
            .unwrap()
            .into_iter()
            .map(|u| (u.line, u.path, u.import.is_some()))
            .collect()
    }

    #[test]
    fn aliases_resolve_and_comments_and_strings_do_not_match() {
        let src = r#"import torch
from torch.cuda import amp
import torch.cuda.amp as A
from torch.cuda.amp import autocast as ac, GradScaler
# torch.cuda.amp.autocast() in a comment
doc = "torch.cuda.amp.autocast in a string"
with amp.autocast():
    pass
s = A.GradScaler()
with ac(): pass
g = GradScaler()
x = torch.load("ckpt.pt", map_location="cpu")
y = torch.load(f, weights_only=True)
"#;
        let got = paths(src);
        let code: Vec<(usize, &str)> = got
            .iter()
            .filter(|(_, _, imp)| !imp)
            .map(|(l, p, _)| (*l, p.as_str()))
            .collect();
        assert_eq!(
            code,
            [
                (7, "torch.cuda.amp.autocast"),
                (9, "torch.cuda.amp.GradScaler"),
                (10, "torch.cuda.amp.autocast"),
                (11, "torch.cuda.amp.GradScaler"),
                (12, "torch.load"),
                (13, "torch.load")
            ]
        );
        assert!(got.iter().all(|(l, _, _)| *l != 5 && *l != 6));
        let u = uses(src).unwrap();
        let loads: Vec<&Vec<String>> = u
            .iter()
            .filter(|u| u.path == "torch.load")
            .map(|u| u.call_keywords.as_ref().unwrap())
            .collect();
        assert_eq!(
            loads,
            [
                &vec!["map_location".to_string()],
                &vec!["weights_only".to_string()]
            ]
        );
    }

    #[test]
    fn a_local_name_that_shadows_nothing_is_not_torch() {
        let got =
            paths("def load(f):\n    return f\nload('x')\nimport numpy as np\nnp.load('y')\n");
        assert!(
            got.iter().all(|(_, p, _)| !p.starts_with("torch")),
            "{got:?}"
        );
    }

    #[test]
    fn spans_arguments_imports_and_fallbacks() {
        let src =
            "\"\"\"Doc.\"\"\"\nimport torch\nfrom torch._six import inf, string_classes as sc\n\
                   try:\n    from torch._six import PY3\nexcept ImportError:\n    PY3 = True\n\
                   x = torch.meshgrid(a, b,)\ny = f(x)\n";
        let a = analyze(src).unwrap();
        assert_eq!(
            &src[..a.import_insert_at],
            "\"\"\"Doc.\"\"\"\nimport torch\nfrom torch._six import inf, string_classes as sc\n"
        );
        let inf = a.uses.iter().find(|u| u.path == "torch._six.inf").unwrap();
        let imp = inf.import.as_ref().unwrap();
        assert!(imp.from && imp.index == 0 && imp.names.len() == 2);
        assert_eq!(&src[imp.name.clone()], "inf");
        let sc = a
            .uses
            .iter()
            .find(|u| u.path == "torch._six.string_classes")
            .unwrap();
        assert_eq!(sc.import.as_ref().unwrap().alias.as_deref(), Some("sc"));
        let py3 = a.uses.iter().find(|u| u.path == "torch._six.PY3").unwrap();
        assert_eq!(py3.guard.map(|g| g.branch), Some(Some(0)));
        assert!(inf.guard.is_none());
        assert_eq!(a.guards.values().copied().collect::<Vec<_>>(), [2]);
        let mesh = a.uses.iter().find(|u| u.path == "torch.meshgrid").unwrap();
        let args = mesh.call_args.as_ref().unwrap();
        assert_eq!(&src[args.open..args.close], "a, b,");
        assert!(args.trailing_comma && !args.empty);
        assert_eq!(&src[mesh.span.clone()], "torch.meshgrid");
        assert_eq!(
            a.bindings.get("sc").map(String::as_str),
            Some("torch._six.string_classes")
        );
    }
}
