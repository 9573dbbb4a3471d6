//! Build-script edits that need the syntax tree (the token rules of the catalogue cannot tell where
//! a Python statement ends): an assignment that overrides the user's arch list,
//! `os.environ["TORCH_CUDA_ARCH_LIST"] = "3.5;5.0;…"`, becomes
//! `os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "3.5;5.0;…")`. The extension keeps its list as
//! the default of a bare `pip install`, and a list the user (or archsmith) chose wins, which is
//! what torch's own documentation of the variable promises.

use super::reader::analyze;
use crate::codemod::Outcome;
use tree_sitter::{Node, Parser};

/// The counter and rule id of the rewrite.
pub const ARCH_LIST_OVERRIDE: &str = "setup-arch-list-override";
/// Why, for reports.
pub const ARCH_LIST_OVERRIDE_WHY: &str = "the build script overwrote TORCH_CUDA_ARCH_LIST, so the archs the user asked for were never built; setdefault keeps the script's list only as the default";

const VAR: &str = "TORCH_CUDA_ARCH_LIST";

/// Applies the edits to `src`; text that is not UTF-8 or does not parse comes back unchanged.
pub fn apply(src: &[u8]) -> Outcome {
    let mut out = Outcome {
        output: src.to_vec(),
        ..Outcome::default()
    };
    let Ok(text) = std::str::from_utf8(src) else {
        return out;
    };
    if !text.contains(VAR) {
        return out;
    }
    let Some(analysis) = analyze(text) else {
        return out;
    };
    // Names that stand for `os.environ` in this file: `os.environ` itself (through any alias of
    // `os`) and a name imported from it (`from os import environ`).
    let environ = |expr: &str| -> bool {
        match expr.split_once('.') {
            Some((head, "environ")) => {
                analysis.bindings.get(head).map(String::as_str) == Some("os")
            }
            None => analysis.bindings.get(expr).map(String::as_str) == Some("os.environ"),
            _ => false,
        }
    };
    let mut parser = Parser::new();
    if parser
        .set_language(&tree_sitter_python::LANGUAGE.into())
        .is_err()
    {
        return out;
    }
    let Some(tree) = parser.parse(text, None) else {
        return out;
    };
    let mut edits = Vec::new();
    find(tree.root_node(), text.as_bytes(), &environ, &mut edits);
    let kept_off = crate::codemod::suppress::Suppressions::of(crate::codemod::Lang::Python, src);
    let lines = crate::lint::LineIndex::new(src);
    edits.retain(|(r, _)| !kept_off.covers(lines.line(r.start), ARCH_LIST_OVERRIDE));
    if edits.is_empty() {
        return out;
    }
    let as_bytes: Vec<(usize, usize, Vec<u8>)> = edits
        .iter()
        .map(|(r, t)| (r.start, r.end, t.as_bytes().to_vec()))
        .collect();
    out.trace.rewrites(ARCH_LIST_OVERRIDE, src, &as_bytes);
    let mut bytes = src.to_vec();
    // Back to front, so earlier offsets hold.
    for (range, replacement) in edits.iter().rev() {
        bytes.splice(range.clone(), replacement.bytes());
    }
    out.counts
        .insert(ARCH_LIST_OVERRIDE.to_string(), edits.len());
    out.output = bytes;
    out
}

fn find(
    n: Node,
    src: &[u8],
    environ: &dyn Fn(&str) -> bool,
    edits: &mut Vec<(std::ops::Range<usize>, String)>,
) {
    if n.kind() == "assignment"
        && n.parent()
            .is_some_and(|p| p.kind() == "expression_statement")
    {
        if let Some(e) = override_edit(n, src, environ) {
            edits.push(e);
            return;
        }
    }
    let mut c = n.walk();
    for child in n.named_children(&mut c) {
        find(child, src, environ, edits);
    }
}

/// `ENV["TORCH_CUDA_ARCH_LIST"] = VALUE` (one target, no annotation) → the setdefault call.
fn override_edit(
    n: Node,
    src: &[u8],
    environ: &dyn Fn(&str) -> bool,
) -> Option<(std::ops::Range<usize>, String)> {
    let left = n.child_by_field_name("left")?;
    let right = n.child_by_field_name("right")?;
    if left.kind() != "subscript" || n.child_by_field_name("type").is_some() {
        return None;
    }
    // `a = os.environ[…] = v` nests assignments: leave chains alone.
    if right.kind() == "assignment" {
        return None;
    }
    let value = left.child_by_field_name("value")?;
    let key = left.child_by_field_name("subscript")?;
    let text = |n: Node| n.utf8_text(src).ok();
    if !environ(text(value)?) || key.kind() != "string" {
        return None;
    }
    let k = text(key)?;
    let unquoted = k.trim_matches(|c| c == '"' || c == '\'');
    if unquoted != VAR || k.len() != VAR.len() + 2 {
        return None;
    }
    Some((
        n.byte_range(),
        format!("{}.setdefault({k}, {})", text(value)?, text(right)?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(src: &str) -> (String, usize) {
        let o = apply(src.as_bytes());
        (
            String::from_utf8(o.output).unwrap(),
            o.counts.get(ARCH_LIST_OVERRIDE).copied().unwrap_or(0),
        )
    }

    #[test]
    fn an_override_becomes_a_default() {
        let (out, n) = run(
            "import os\nos.environ[\"TORCH_CUDA_ARCH_LIST\"] = \"3.5;5.0\"  # the lab's GPUs\nx = 1\n",
        );
        assert_eq!(
            out,
            "import os\nos.environ.setdefault(\"TORCH_CUDA_ARCH_LIST\", \"3.5;5.0\")  # the lab's GPUs\nx = 1\n"
        );
        assert_eq!(n, 1);
        // Idempotent.
        assert_eq!(run(&out), (out.clone(), 0));
    }

    #[test]
    fn aliases_quotes_and_multi_line_values() {
        let (out, n) = run(
            "import os as _os\nif True:\n    _os.environ['TORCH_CUDA_ARCH_LIST'] = ';'.join(\n        ['6.0', '7.0'])\n",
        );
        assert_eq!(
            out,
            "import os as _os\nif True:\n    _os.environ.setdefault('TORCH_CUDA_ARCH_LIST', ';'.join(\n        ['6.0', '7.0']))\n"
        );
        assert_eq!(n, 1);
        let (out, n) = run("from os import environ\nenviron[\"TORCH_CUDA_ARCH_LIST\"] = a\n");
        assert_eq!(
            out,
            "from os import environ\nenviron.setdefault(\"TORCH_CUDA_ARCH_LIST\", a)\n"
        );
        assert_eq!(n, 1);
    }

    #[test]
    fn other_keys_reads_comments_and_strings_are_left_alone() {
        for src in [
            "import os\nos.environ[\"CUDA_HOME\"] = \"/usr\"\n",
            "import os\nx = os.environ[\"TORCH_CUDA_ARCH_LIST\"]\n",
            "import os\n# os.environ[\"TORCH_CUDA_ARCH_LIST\"] = \"3.5\"\n",
            "import os\ns = 'os.environ[\"TORCH_CUDA_ARCH_LIST\"] = \"3.5\"'\n",
            "env = {}\nenv[\"TORCH_CUDA_ARCH_LIST\"] = \"3.5\"\n",
            "import os\na = os.environ[\"TORCH_CUDA_ARCH_LIST\"] = \"3.5\"\n",
            "import os\nos.environ[f\"TORCH_CUDA_ARCH_LIST\"] = \"3.5\"\n",
        ] {
            assert_eq!(run(src), (src.to_string(), 0), "{src}");
        }
    }
}
