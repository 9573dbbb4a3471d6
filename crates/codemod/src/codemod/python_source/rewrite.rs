//! Applies the Python rule catalogue to one file: each use of an API a row names is rewritten when
//! the row has a safe rewrite, else listed for review with the row's fix.
//!
//! Rewrites work on the syntax tree's byte spans, so comments, strings and formatting elsewhere
//! stay byte for byte. An import of a rewritten name is renamed or dropped with it; an import of a
//! removed module is dropped once nothing uses it; a module a rewrite needs (`math`) is imported
//! after the file's imports. Code in a `try:` that handles `ImportError` is the package's own
//! fallback and is left alone. Rounds repeat until nothing changes (a rewrite can expose another),
//! and review items are read from the final text so their lines are the file's.

use super::reader::{analyze, Analysis, Import, Use};
use super::{row_for, Change};
use crate::codemod::suppress::Suppressions;
use crate::codemod::{Lang, Outcome, ReviewItem};
use crate::version::Version;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

/// Counter key for imports renamed, dropped or added on behalf of the rows (the codemod's
/// `add-include` for Python).
pub const IMPORTS: &str = "python-imports";

/// A replacement of `range` by `text` (an insertion when the range is empty).
type Edit = (Range<usize>, String);

/// Runs `changes` that hold at torch `torch` over `src`. Bytes that are not UTF-8 are not Python
/// the parser can read: they come back unchanged.
pub fn apply(changes: &[Change], torch: &Version, src: &[u8]) -> Outcome {
    let mut out = Outcome {
        output: src.to_vec(),
        ..Outcome::default()
    };
    for _round in 0..4 {
        let Ok(text) = std::str::from_utf8(&out.output) else {
            return out;
        };
        let Some(a) = analyze(text) else {
            return out;
        };
        let kept_off = Suppressions::of(Lang::PythonModule, text.as_bytes());
        let plan = plan(changes, torch, text, &a, &kept_off);
        if plan.edits.is_empty() {
            out.review = plan.review;
            for r in &mut out.review {
                r.at.1 = out.trace.len();
            }
            out.review.retain(|r| !kept_off.covers(r.line, &r.rule));
            out.review.sort_by_key(|r| r.line);
            return out;
        }
        for (rule, n) in plan.counts {
            *out.counts.entry(rule).or_default() += n;
        }
        let spans = plan
            .edits
            .iter()
            .map(|(r, t)| (r.start, r.end, t.len()))
            .collect();
        out.trace.step(spans, plan.marks);
        out.output = splice(text, plan.edits).into_bytes();
    }
    out
}

#[derive(Default)]
struct Plan {
    edits: Vec<Edit>,
    /// The uses rewritten: row, and the use's bytes.
    marks: Vec<(String, usize, usize)>,
    counts: BTreeMap<String, usize>,
    review: Vec<ReviewItem>,
}

fn last(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

fn parent(path: &str) -> &str {
    path.rsplit_once('.').map_or("", |(p, _)| p)
}

fn review_item(row: &Change, u: &Use, text: &str, torch: &Version) -> ReviewItem {
    let code = text
        .lines()
        .nth(u.line - 1)
        .unwrap_or_default()
        .trim()
        .to_string();
    ReviewItem {
        line: u.line,
        column: u.column,
        rule: row.api.clone(),
        code,
        message: format!(
            "{} {}: {}",
            row.api,
            row.event(torch).unwrap_or_default(),
            row.reason
        ),
        suggestion: row.fix.clone(),
        at: (u.span.start, 0),
    }
}

/// The edits that rewrite one use in code, or None when the row has no safe rewrite for it.
fn code_edits(row: &Change, u: &Use, text: &str) -> Option<Vec<Edit>> {
    match (row.matching.as_str(), &u.shape) {
        // `float(X.__version__[:3]) < 1.4` → `torch.torch_version.TorchVersion(X.__version__) < "1.4"`.
        (
            "version-slice",
            Some(super::reader::Shape::VersionSlice {
                compare: Some((span, version, op, number)),
            }),
        ) => {
            let class = row.rewrite.as_ref()?;
            return Some(vec![(
                span.clone(),
                format!("{class}({version}) {op} \"{number}\""),
            )]);
        }
        ("version-slice" | "index-0", _) => return None,
        _ => {}
    }
    if row.matching == "call-without" {
        let kw = row.add_keyword.as_ref()?;
        let args = u.call_args.as_ref()?;
        let text = if args.empty {
            kw.clone()
        } else if args.trailing_comma {
            format!(" {kw}")
        } else {
            format!(", {kw}")
        };
        return Some(vec![(args.close..args.close, text)]);
    }
    if row.unwrap {
        if u.path != row.api {
            return None;
        }
        return match (&u.call_args, u.decorator) {
            // `wrap(f)` → `f`: the call's bytes become its argument's.
            (Some(args), _) => {
                let arg = args.only_positional.clone()?;
                Some(vec![(
                    u.span.start..args.close + 1,
                    text.get(arg)?.to_string(),
                )])
            }
            // `@wrap` on a line of its own goes with its line.
            (None, true) => {
                let start = text.get(..u.span.start)?.rfind('\n').map_or(0, |i| i + 1);
                let end = text
                    .get(u.span.end..)?
                    .find('\n')
                    .map_or(text.len(), |i| u.span.end + i + 1);
                let line = text.get(start..end)?;
                (line.trim() == format!("@{}", u.text)).then(|| vec![(start..end, String::new())])
            }
            (None, false) => None,
        };
    }
    // A rewrite replaces the part of the use that names the row's API: all of `np.float`, the
    // `container_abcs` of `container_abcs.Mapping`.
    let rw = row.rewrite.as_ref()?;
    let rest = &u.path[row.api.len()..];
    let head = u.text.strip_suffix(rest)?;
    let head_span = u.span.start..u.span.end - rest.len();
    let expr = if parent(rw) == parent(&row.api) && !parent(rw).is_empty() {
        // A name of the same module: keep the file's way of reaching it (`F.` or a bare name).
        match head.rsplit_once('.') {
            Some((module, _)) => format!("{module}.{}", last(rw)),
            None if head == last(&row.api) => last(rw).to_string(),
            None => head.to_string(), // an alias: the import is renamed underneath it
        }
    } else {
        rw.clone()
    };
    let mut edits = Vec::new();
    if expr != head {
        edits.push((head_span, expr));
    }
    if let Some(first) = &row.call_args {
        if !rest.is_empty() {
            return None;
        }
        match (&u.call_args, u.decorator) {
            (Some(args), _) => {
                let ins = if args.empty {
                    first.clone()
                } else {
                    format!("{first}, ")
                };
                edits.push((args.open..args.open, ins));
            }
            (None, true) => {
                edits.push((u.span.end..u.span.end, format!("({first})")));
            }
            (None, false) => return None,
        }
    }
    Some(edits)
}

/// An imported name, the row about it, where it sits, and what happens to it.
type ImportedName<'a> = (&'a Use, Option<&'a Change>, &'a Import, NameFate);

/// What happens to one imported name.
enum NameFate {
    Keep,
    Rename(String),
    Drop,
}

fn plan(
    changes: &[Change],
    torch: &Version,
    text: &str,
    a: &Analysis,
    kept_off: &Suppressions,
) -> Plan {
    let mut p = Plan::default();
    let mut left: Vec<&str> = Vec::new();
    let mut needed: BTreeSet<&str> = BTreeSet::new();
    fn count(p: &mut Plan, rule: &str) {
        *p.counts.entry(rule.to_string()).or_default() += 1;
    }
    // Each use with the row about it, looked up once.
    let matched: Vec<(&Use, Option<&Change>)> = a
        .uses
        .iter()
        .map(|u| (u, row_for(changes, u, torch)))
        .collect();
    // Code first: whether an import can go depends on what is left using it.
    // A guarding `try` with a branch that uses nothing the rows retire is the package's own
    // working fallback: left alone, with the names it binds. One whose every branch is retired
    // (a fallback to another removed name) is ported like any other code.
    let fallbacks: BTreeSet<usize> = a
        .guards
        .iter()
        .filter(|(try_at, branches)| {
            (0..**branches).any(|b| {
                !matched.iter().any(|(u, row)| {
                    u.guard
                        .is_some_and(|g| g.try_at == **try_at && g.branch == Some(b))
                        && row.is_some()
                })
            })
        })
        .map(|(try_at, _)| *try_at)
        .collect();
    let left_alone = |u: &Use| u.guard.is_some_and(|g| fallbacks.contains(&g.try_at));
    for (u, row) in matched
        .iter()
        .filter(|(u, _)| u.import.is_none() && !left_alone(u))
    {
        let Some(row) = *row else {
            continue;
        };
        // Kept off its line by a comment: left as written, with the import it needs.
        if kept_off.covers(u.line, &row.api) {
            left.push(&u.path);
            continue;
        }
        match code_edits(row, u, text) {
            Some(edits) => {
                if !edits.is_empty() {
                    p.edits.extend(edits);
                    p.marks.push((row.api.clone(), u.span.start, u.span.end));
                    count(&mut p, &row.api);
                }
                if let Some(m) = &row.import {
                    needed.insert(m);
                }
            }
            None => {
                p.review.push(review_item(row, u, text, torch));
                left.push(&u.path);
            }
        }
    }
    // Imports, statement by statement.
    let mut statements: BTreeMap<(usize, usize), Vec<ImportedName>> = BTreeMap::new();
    for &(u, row) in matched.iter().filter(|(u, _)| !left_alone(u)) {
        let Some(imp) = &u.import else { continue };
        let fate = match row.filter(|r| r.matching == "use") {
            None => NameFate::Keep,
            Some(row) if kept_off.covers(u.line, &row.api) => NameFate::Keep,
            Some(row) => {
                let still_used = left
                    .iter()
                    .any(|l| *l == u.path || l.starts_with(&format!("{}.", u.path)));
                match &row.rewrite {
                    Some(rw) if u.path == row.api && imp.from && !still_used => {
                        // Its uses were rewritten above; the name goes, or follows a rename.
                        if parent(rw) == parent(&row.api) {
                            NameFate::Rename(last(rw).to_string())
                        } else {
                            NameFate::Drop
                        }
                    }
                    _ if still_used => {
                        p.review.push(review_item(row, u, text, torch));
                        NameFate::Keep
                    }
                    // A module (or a name in it) the rows retire, that nothing uses any more.
                    _ if imp.from || imp.alias.is_some() => NameFate::Drop,
                    // `import torch._six` also binds `torch`, which the file may use: it stays
                    // `import torch` unless another import binds `torch` already.
                    _ => {
                        let root = u.path.split('.').next().unwrap_or_default();
                        let bound_elsewhere = matched.iter().any(|(o, o_row)| {
                            o.span != u.span
                                && o.import
                                    .as_ref()
                                    .is_some_and(|i| !i.from && i.alias.is_none())
                                && (o.path == root || o.path.starts_with(&format!("{root}.")))
                                && o_row.is_none()
                        });
                        if bound_elsewhere {
                            NameFate::Drop
                        } else {
                            NameFate::Rename(root.to_string())
                        }
                    }
                }
            }
        };
        if !matches!(fate, NameFate::Keep) {
            count(&mut p, IMPORTS);
        }
        statements
            .entry((imp.statement.start, imp.statement.end))
            .or_default()
            .push((u, row, imp, fate));
    }
    for names in statements.values() {
        match statement_edits(text, names) {
            Some(edits) => {
                p.edits.extend(edits);
                for (u, row, _, fate) in names {
                    if let (Some(row), false) = (row, matches!(fate, NameFate::Keep)) {
                        p.marks.push((row.api.clone(), u.span.start, u.span.end));
                    }
                }
            }
            // Comments among the names: the names go by hand, with the comments kept.
            None => {
                for (u, row, _, fate) in names {
                    if let (Some(row), false) = (row, matches!(fate, NameFate::Keep)) {
                        p.review.push(review_item(row, u, text, torch));
                    }
                }
            }
        }
    }
    // Modules the rewrites need, unless imported already (`import math`, `import torch.nn`).
    for m in needed {
        let have = a.uses.iter().any(|u| {
            u.import
                .as_ref()
                .is_some_and(|i| !i.from && i.alias.is_none())
                && (u.path == m || u.path.starts_with(&format!("{m}.")))
        });
        if !have {
            p.edits
                .push((insert_at(text, a.import_insert_at), format!("import {m}\n")));
            count(&mut p, IMPORTS);
        }
    }
    // The review items of a round that still rewrites are recomputed on its output.
    if !p.edits.is_empty() {
        p.review.clear();
    }
    p
}

/// An empty range at `at`, moved past a leading shebang or encoding comment when `at` is the start.
fn insert_at(text: &str, at: usize) -> Range<usize> {
    let mut pos = at;
    if pos == 0 {
        while text[pos..].starts_with('#') {
            match text[pos..].find('\n') {
                Some(n) => pos += n + 1,
                None => {
                    pos = text.len();
                    break;
                }
            }
        }
    }
    pos..pos
}

/// The edits for one import statement; None when names must go from a list that holds comments.
fn statement_edits(text: &str, names: &[ImportedName]) -> Option<Vec<Edit>> {
    let drops = names
        .iter()
        .filter(|(_, _, _, f)| matches!(f, NameFate::Drop))
        .count();
    if drops == 0 {
        return Some(
            names
                .iter()
                .filter_map(|(_, _, imp, f)| match f {
                    NameFate::Rename(new) => Some((imp.name.clone(), new.clone())),
                    _ => None,
                })
                .collect(),
        );
    }
    let imp = names[0].2;
    if drops == imp.names.len() && !text.get(imp.statement.clone())?.contains('#') {
        return Some(vec![remove_statement(text, imp)]);
    }
    // Rebuild the name list from the kept names, each as written (renamed where it must be).
    let mut kept = Vec::new();
    for (i, full) in imp.names.iter().enumerate() {
        let Some((_, _, own, fate)) = names.iter().find(|(_, _, x, _)| x.index == i) else {
            kept.push(text[full.clone()].to_string());
            continue;
        };
        match fate {
            NameFate::Drop => {}
            NameFate::Keep => kept.push(text[full.clone()].to_string()),
            NameFate::Rename(new) => kept.push(format!(
                "{}{new}{}",
                &text[full.start..own.name.start],
                &text[own.name.end..full.end]
            )),
        }
    }
    let first = imp.names.first().map_or(0, |r| r.start);
    let end = imp.names.last().map_or(0, |r| r.end);
    if text.get(first..end)?.contains('#') || kept.is_empty() {
        return None;
    }
    Some(vec![(first..end, kept.join(", "))])
}

/// Deletes a whole import statement with its line when it stands alone on it; a statement that is
/// its block's only one becomes `pass`.
fn remove_statement(text: &str, imp: &Import) -> Edit {
    let s = imp.statement.clone();
    if imp.alone_in_block {
        return (s, "pass".into());
    }
    let line_start = text[..s.start].rfind('\n').map_or(0, |i| i + 1);
    let only_indent = text[line_start..s.start].trim().is_empty();
    let rest = &text[s.end..];
    let line_end = rest.find('\n').map(|i| s.end + i + 1);
    match line_end {
        Some(e) if only_indent && text[s.end..e].trim().is_empty() => {
            (line_start..e, String::new())
        }
        _ if only_indent && rest.trim().is_empty() => (line_start..text.len(), String::new()),
        _ => (s, "pass".into()),
    }
}

/// Applies non-overlapping edits (insertions before replacements at the same offset).
fn splice(text: &str, mut edits: Vec<Edit>) -> String {
    edits.sort_by_key(|(r, _)| (r.start, r.end != r.start, r.end));
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    for (r, new) in edits {
        if r.start < pos {
            continue; // overlaps an edit already made; the next round sees it again
        }
        out.push_str(&text[pos..r.start]);
        out.push_str(&new);
        pos = r.end;
    }
    out.push_str(&text[pos..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(src: &str, torch: &str) -> (String, Outcome) {
        let out = apply(
            &super::super::builtin_changes(),
            &torch.parse().unwrap(),
            src.as_bytes(),
        );
        (String::from_utf8(out.output.clone()).unwrap(), out)
    }

    #[test]
    fn the_target_torch_decides_which_rows_apply() {
        let src = "import torch\nwith torch.cuda.amp.autocast():\n    pass\n";
        // torch.amp.autocast("cuda") exists from 2.3, and the old form warns from 2.4.
        assert_eq!(port(src, "2.3").0, src);
        assert_eq!(
            port(src, "2.4").0,
            "import torch\nwith torch.amp.autocast(\"cuda\"):\n    pass\n"
        );
    }

    #[test]
    fn an_import_alone_in_its_block_becomes_pass() {
        let src =
            "import torch\nif torch.cuda.is_available():\n    from torch._six import inf\nx = 1\n";
        let (out, o) = port(src, "2.6");
        assert_eq!(
            out,
            "import torch\nif torch.cuda.is_available():\n    pass\nx = 1\n"
        );
        assert_eq!(o.counts.get(IMPORTS), Some(&1));
    }

    #[test]
    fn a_call_that_cannot_be_unwrapped_is_reviewed_with_its_line() {
        let src = "from torch.autograd import Variable\n\nv = Variable(x, volatile=True)\n";
        let (out, o) = port(src, "2.6");
        assert_eq!(out, src);
        let lines: Vec<usize> = o.review.iter().map(|r| r.line).collect();
        assert_eq!(lines, [1, 3]);
        assert!(o.review[1].suggestion.contains("torch.no_grad()"));
    }

    #[test]
    fn names_among_comments_are_left_to_a_person() {
        let src = "from torch._six import (\n    inf,  # bounds\n    string_classes,\n)\nx = inf\n";
        let (out, o) = port(src, "2.6");
        assert!(
            out.starts_with(
                "from torch._six import (\n    inf,  # bounds\n    string_classes,\n)\n"
            ),
            "{out}"
        );
        assert!(out.ends_with("x = math.inf\n"), "{out}");
        let rules: Vec<&str> = o.review.iter().map(|r| r.rule.as_str()).collect();
        assert_eq!(rules, ["torch._six.inf", "torch._six.string_classes"]);
    }

    /// A name the import bound, used as a parameter's default value (of a function, a coroutine,
    /// a lambda, an annotated parameter): rewritten there too, or the file fails with NameError.
    #[test]
    fn parameter_defaults_are_uses() {
        let src = "from torch._six import inf\n\ndef f(a=inf, *, b: float = inf):\n    return a\n\nasync def a(y=inf):\n    pass\n\ng = lambda t=inf: t\n\ndef h(x: inf = 2):\n    return x\n";
        let (out, o) = port(src, "2.6");
        assert_eq!(
            out,
            "import math\n\ndef f(a=math.inf, *, b: float = math.inf):\n    return a\n\nasync def a(y=math.inf):\n    pass\n\ng = lambda t=math.inf: t\n\ndef h(x: math.inf = 2):\n    return x\n",
            "{o:?}"
        );
        // Idempotent.
        assert_eq!(port(&out, "2.6").0, out);
    }

    /// A package's own shim assigns the removed alias (`np.float = float`): that is no use of
    /// it, and is left as written; a use after it is rewritten.
    #[test]
    fn an_assignment_target_is_not_a_use() {
        let src = "import numpy as np\nnp.float = float\nx = np.float(1)\n";
        let (out, _) = port(src, "2.6");
        assert_eq!(out, "import numpy as np\nnp.float = float\nx = float(1)\n");
    }

    #[test]
    fn new_imports_go_after_a_shebang_when_the_file_has_none() {
        let (out, _) = port(
            "#!/usr/bin/env python\nimport numpy\nx = numpy.Inf\n",
            "2.6",
        );
        assert_eq!(out, "#!/usr/bin/env python\nimport numpy\nx = numpy.inf\n");
        let (out, _) = port("#!/usr/bin/env python\nfrom torch._six import inf\n", "2.6");
        assert_eq!(out, "#!/usr/bin/env python\n");
        let (out, _) = port(
            "#!/usr/bin/env python\nfrom torch._six import inf\ny = inf\n",
            "2.6",
        );
        assert_eq!(out, "#!/usr/bin/env python\nimport math\ny = math.inf\n");
    }
}

/// Every row of the built-in catalogue on a use of its own: a rewrite row rewrites it (and a second
/// run changes nothing), any other row reports it for review with its fix.
#[cfg(test)]
mod every_row {
    use super::*;

    #[test]
    fn each_row_rewrites_or_reviews_its_api() {
        let rows = super::super::builtin_changes();
        let torch: Version = crate::kb::kb().releases.newest_torch.clone();
        let mut failures = Vec::new();
        for row in &rows {
            let root = row.api.split('.').next().unwrap();
            let call = match row.matching.as_str() {
                "version-slice" => format!("float({}[:3]) < 1.4", row.api),
                "index-0" => "a.data[0]".to_string(),
                "call-with" => format!(
                    "{}.functional.l1_loss(a, b, {}=False)",
                    row.api,
                    row.keyword.as_deref().unwrap()
                ),
                _ => format!("{}(a)", row.api),
            };
            let src = format!("import {root}\n\n\ndef f(a, b):\n    return {call}\n");
            let out = apply(&rows, &torch, src.as_bytes());
            let text = String::from_utf8(out.output.clone()).unwrap();
            let rewritable = row.rewrite.is_some() || row.add_keyword.is_some() || row.unwrap;
            if rewritable {
                let again = apply(&rows, &torch, text.as_bytes());
                if !out.counts.contains_key(&row.api) || again.output != text.as_bytes() {
                    failures.push(format!(
                        "{}: not rewritten once and for all:\n{text}",
                        row.api
                    ));
                }
            } else if !out
                .review
                .iter()
                .any(|r| r.rule == row.api && r.suggestion == row.fix)
            {
                failures.push(format!("{}: no review item: {:?}", row.api, out.review));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        assert!(rows.len() >= 80, "{} rows", rows.len());
    }
}
