//! Uses of torch APIs in Python source, read from its syntax tree (tree-sitter's Python grammar):
//! imports bind names (`import torch.cuda.amp as amp`, `from torch.cuda import amp`,
//! `from torch.cuda.amp import autocast as ac`), and every name or attribute chain in code resolves
//! through them to a dotted path (`amp.autocast` → `torch.cuda.amp.autocast`). Comments and strings
//! are not code and never match.

use std::collections::HashMap;
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
    /// For a call: the keyword arguments it passes (`weights_only`, `map_location`).
    pub call_keywords: Option<Vec<String>>,
    /// An import statement (not a use in code).
    pub import: bool,
}

/// Parses `source` and lists every import and every use in code of a name bound to a module path.
/// Returns None when the parser cannot be set up (never for valid UTF-8).
pub fn uses(source: &str) -> Option<Vec<Use>> {
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_python::LANGUAGE.into())
        .ok()?;
    let tree = parser.parse(source, None)?;
    let bytes = source.as_bytes();
    let mut bindings: HashMap<String, String> = HashMap::new();
    let mut out = Vec::new();
    collect(tree.root_node(), bytes, &mut bindings, &mut out);
    Some(out)
}

fn text<'a>(n: Node, src: &'a [u8]) -> &'a str {
    n.utf8_text(src).unwrap_or("")
}

fn at(n: Node, src: &[u8], path: String, import: bool) -> Use {
    let p = n.start_position();
    Use {
        path,
        line: p.row + 1,
        column: p.column + 1,
        text: text(n, src).to_string(),
        call_keywords: None,
        import,
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

/// An imported name and its `as` alias: `a.b as c` → (`a.b`, `c`), `a.b` → (`a.b`, none).
fn imported_name(name: Node, src: &[u8]) -> Option<(String, Option<String>)> {
    match name.kind() {
        "aliased_import" => Some((
            text(name.child_by_field_name("name")?, src).to_string(),
            name.child_by_field_name("alias")
                .map(|a| text(a, src).to_string()),
        )),
        _ => Some((text(name, src).to_string(), None)),
    }
}

fn collect(n: Node, src: &[u8], bindings: &mut HashMap<String, String>, out: &mut Vec<Use>) {
    match n.kind() {
        "import_statement" => {
            let mut c = n.walk();
            for name in n.children_by_field_name("name", &mut c) {
                let Some((module, alias)) = imported_name(name, src) else {
                    continue;
                };
                out.push(at(name, src, module.clone(), true));
                match alias {
                    Some(a) => {
                        bindings.insert(a, module);
                    }
                    // `import torch.cuda.amp` binds `torch`.
                    None => {
                        let head = module.split('.').next().unwrap_or(&module).to_string();
                        bindings.insert(head.clone(), head);
                    }
                }
            }
            return;
        }
        "import_from_statement" => {
            let Some(module) = n.child_by_field_name("module_name") else {
                return;
            };
            if module.kind() != "dotted_name" {
                return; // relative imports name this package, not torch
            }
            let module = text(module, src).to_string();
            let mut c = n.walk();
            for name in n.children_by_field_name("name", &mut c) {
                let Some((orig, alias)) = imported_name(name, src) else {
                    continue;
                };
                let path = format!("{module}.{orig}");
                out.push(at(name, src, path.clone(), true));
                bindings.insert(alias.unwrap_or(orig), path);
            }
            return;
        }
        "call" => {
            if let Some(f) = n.child_by_field_name("function") {
                if let Some(path) = dotted(f, src).and_then(|d| resolve(&d, bindings)) {
                    let mut u = at(f, src, path, false);
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
                    }
                    u.call_keywords = Some(kws);
                    out.push(u);
                    // The arguments may hold uses of their own; the callee chain is done.
                    if let Some(args) = n.child_by_field_name("arguments") {
                        collect(args, src, bindings, out);
                    }
                    return;
                }
            }
        }
        "attribute" | "identifier" => {
            if let Some(path) = dotted(n, src).and_then(|d| resolve(&d, bindings)) {
                if path.contains('.') || n.kind() == "attribute" {
                    out.push(at(n, src, path, false));
                }
                return;
            }
        }
        // Not code: nothing inside can be a use.
        "comment" | "string" => return,
        _ => {}
    }
    let mut c = n.walk();
    for child in n.children(&mut c) {
        collect(child, src, bindings, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(src: &str) -> Vec<(usize, String, bool)> {
        uses(src)
            .unwrap()
            .into_iter()
            .map(|u| (u.line, u.path, u.import))
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
}
