//! `--stable-abi`, after the dispatcher step: subscripts of a stable tensor. `at::Tensor` has
//! `operator[]` (a `select` along the first dimension) and assignment into the view it returns;
//! `torch::stable::Tensor` has neither, and a text rule cannot tell a tensor's `x[i]` from an
//! array's. This step can where the file says so: a name declared `torch::stable::Tensor`
//! (a parameter, for the function's body; a local, for the rest of its block) followed by `[`.
//!
//! `x[i][j]` becomes `torch::stable::select(torch::stable::select(x, 0, i), 0, j)`, and an
//! assignment `x[i] = e` becomes `archsmith_aten::assign(torch::stable::select(x, 0, i), e)`
//! (ATen's assignment to a view copies into it; to the temporary a select returns, it would
//! change nothing); so does an assignment into what a stable call returns (`c.slice() = e`, by
//! then `archsmith_aten::slice(c) = e`). A compound assignment `x[i] += e` stays one on the
//! select: the header's compound operators take a temporary and write through the view. Every
//! edit is an insertion or a bracket or `=` replaced: the index and right-hand expressions are
//! left as they are.

use super::lexer::{lex_c, Kind, Token};
use std::collections::HashMap;

/// What the select of one subscript is written as.
const SELECT: &[u8] = b"torch::stable::select(";
/// The header's assignment into a view ([`super::stable_dispatch`]'s helpers).
const ASSIGN: &[u8] = b"archsmith_aten::assign(";

/// One edit: a byte range of the text and what replaces it.
pub type Edit = (usize, usize, Vec<u8>);

/// The edits for every subscript of a stable tensor in `src`, and where each starts (for review
/// items that point there).
pub fn edits(src: &[u8]) -> (Vec<Edit>, Vec<usize>) {
    let toks: Vec<Token> = lex_c(src)
        .into_iter()
        .filter(|t| t.kind != Kind::Comment)
        .collect();
    let text = |k: usize| toks.get(k).map_or(&b""[..], |t| t.text(src));
    let brackets = Brackets::of(src, &toks);
    // Where each declared name comes into scope (+1) and leaves it (-1), in token order: one
    // sweep beside the pass below keeps how many of its scopes hold the current token (a file of
    // many small functions declares as many tensors, often of one name, as it has lines).
    let mut events: Vec<(usize, i32, &[u8])> = Vec::new();
    for (name, from, to) in tensor_names(src, &toks, &brackets) {
        events.push((from + 1, 1, name));
        events.push((to, -1, name));
    }
    events.sort_by_key(|e| (e.0, e.1));
    let mut active: HashMap<&[u8], i32> = HashMap::new();
    let mut next_event = 0;
    let mut out = Vec::new();
    let mut sites = Vec::new();
    let mut k = 0;
    while k < toks.len() {
        while let Some(&(_, delta, name)) = events.get(next_event).filter(|e| e.0 <= k) {
            *active.entry(name).or_default() += delta;
            next_event += 1;
        }
        let starts = toks[k].kind == Kind::Ident
            && text(k + 1) == b"["
            && !matches!(
                text(k.wrapping_sub(1)),
                b"." | b"->" | b"::" | b"Tensor" | b"*"
            )
            && active.get(text(k)).is_some_and(|&n| n > 0);
        if !starts {
            k += 1;
            continue;
        }
        // The run of subscripts `[…][…]`.
        let mut closes = Vec::new();
        let mut e = k + 1;
        while text(e) == b"[" {
            let Some(c) = brackets.partner[e] else { break };
            closes.push((e, c));
            e = c + 1;
        }
        if closes.is_empty() {
            k += 1;
            continue;
        }
        // An assignment wherever it stands (`if (c) x[i] = e;` too): assigning to the
        // temporary a select returns would compile and change nothing.
        let assigned = text(e) == b"=" && text(e + 1) != b"=";
        let end_of_statement = assigned.then(|| assignment_end(&toks, src, e)).flatten();
        let start = toks[k].start;
        let mut open = SELECT.repeat(closes.len());
        if end_of_statement.is_some() {
            open.splice(0..0, ASSIGN.iter().copied());
        }
        out.push((start, start, open));
        for (o, c) in &closes {
            out.push((toks[*o].start, toks[*o].end, b", 0, ".to_vec()));
            out.push((toks[*c].start, toks[*c].end, b")".to_vec()));
        }
        if let Some(semi) = end_of_statement {
            // From the last `]` to the `=`: `x[i] = e` reads `assign(select(x, 0, i), e)`.
            out.push((toks[e - 1].end, toks[e].end, b",".to_vec()));
            out.push((toks[semi].start, toks[semi].start, b")".to_vec()));
        }
        sites.push(start);
        k = e;
    }
    for (start, close, semi) in assignments_into_calls(src, &toks, &brackets) {
        out.extend(assign_edits(&toks, start, close, semi));
        sites.push(toks[start].start);
    }
    // The right-hand side's own subscripts come after its closing insertion: in text order.
    out.sort_by_key(|x| (x.0, x.1));
    (out, sites)
}

/// `slice(x) = e;` (tokens `start`, its `)` at `close`, the `;` at `semi`) as `assign(slice(x),
/// e);`, as `x[i] = e` reads.
fn assign_edits(toks: &[Token], start: usize, close: usize, semi: usize) -> [Edit; 3] {
    [
        (toks[start].start, toks[start].start, ASSIGN.to_vec()),
        (toks[close].end, toks[close + 1].end, b",".to_vec()),
        (toks[semi].start, toks[semi].start, b")".to_vec()),
    ]
}

/// Statements that assign into the tensor a stable call returns (`archsmith_aten::slice(c) =
/// e;`, from `c.slice() = e;`): ATen's assignment to a temporary tensor copies into it (a view
/// writes through); the stable tensor's replaces a handle nobody keeps, and the write is lost.
/// Each as (the call's first token, its `)`, the statement's end).
fn assignments_into_calls(
    src: &[u8],
    toks: &[Token],
    brackets: &Brackets,
) -> Vec<(usize, usize, usize)> {
    let text = |k: usize| toks.get(k).map_or(&b""[..], |t| t.text(src));
    let mut out = Vec::new();
    for k in 0..toks.len() {
        let open = match (text(k), text(k + 1), text(k + 2), text(k + 3)) {
            (b"archsmith_aten", b"::", _, b"(") => k + 3,
            (b"torch", b"::", b"stable", b"::") if text(k + 5) == b"(" => k + 5,
            _ => continue,
        };
        if toks[open - 1].kind != Kind::Ident {
            continue;
        }
        // At the start of a statement: not an argument, an operand or a declaration's value.
        let statement = k == 0 || matches!(text(k - 1), b";" | b"{" | b"}" | b"else");
        let Some(close) = brackets.partner[open].filter(|_| statement) else {
            continue;
        };
        if text(close + 1) != b"=" || text(close + 2) == b"=" {
            continue;
        }
        if let Some(semi) = assignment_end(toks, src, close + 1).filter(|&e| text(e) == b";") {
            out.push((k, close, semi));
        }
    }
    out
}

/// Each bracket's partner and each token's innermost open bracket, from one pass.
struct Brackets {
    /// The matching bracket of each `(`, `[`, `{` and of each closing one (None where
    /// unbalanced).
    partner: Vec<Option<usize>>,
    /// The innermost `(`, `[` or `{` open at each token (None at the top level).
    inside: Vec<Option<usize>>,
}

impl Brackets {
    fn of(src: &[u8], toks: &[Token]) -> Brackets {
        let mut partner = vec![None; toks.len()];
        let mut inside = vec![None; toks.len()];
        let mut open: Vec<usize> = Vec::new();
        for (k, t) in toks.iter().enumerate() {
            let punct = t.kind == Kind::Punct;
            match t.text(src) {
                b")" | b"]" | b"}" if punct => {
                    if let Some(o) = open.pop() {
                        partner[o] = Some(k);
                        partner[k] = Some(o);
                    }
                    inside[k] = open.last().copied();
                }
                b"(" | b"[" | b"{" if punct => {
                    inside[k] = open.last().copied();
                    open.push(k);
                }
                _ => inside[k] = open.last().copied(),
            }
        }
        Brackets { partner, inside }
    }

    /// The innermost `(` or `{` whose pair holds token `i`.
    fn enclosing(&self, src: &[u8], toks: &[Token], i: usize) -> Option<usize> {
        let mut at = self.inside[i];
        while let Some(k) = at {
            if matches!(toks[k].text(src), b"(" | b"{") && self.partner[k].is_some() {
                return Some(k);
            }
            at = self.inside[k];
        }
        None
    }
}

/// Each name declared `torch::stable::Tensor NAME` (with `const`, `&`, `&&` between), and the
/// tokens between which (both excluded) it is in scope: a parameter's, the body after its list; a
/// local's, the rest of its block. A declaration outside any block (a global, a prototype) has
/// no scope here.
fn tensor_names<'a>(
    src: &'a [u8],
    toks: &[Token],
    brackets: &Brackets,
) -> Vec<(&'a [u8], usize, usize)> {
    let text = |k: usize| toks.get(k).map_or(&b""[..], |t| t.text(src));
    let mut out = Vec::new();
    for i in 0..toks.len() {
        if [text(i), text(i + 1), text(i + 2), text(i + 3), text(i + 4)]
            != [&b"torch"[..], b"::", b"stable", b"::", b"Tensor"]
        {
            continue;
        }
        let mut j = i + 5;
        while matches!(text(j), b"&" | b"const") {
            j += 1;
        }
        if toks.get(j).is_none_or(|t| t.kind != Kind::Ident)
            || !matches!(text(j + 1), b"," | b")" | b"=" | b";" | b"(" | b"{")
        {
            continue;
        }
        let Some(around) = brackets.enclosing(src, toks, i) else {
            continue;
        };
        let partner = &brackets.partner;
        let scope = match text(around) {
            b"(" => partner[around]
                .map(|close| close + 1)
                .filter(|&b| text(b) == b"{")
                .and_then(|b| partner[b].map(|e| (b, e))),
            b"{" => partner[around].map(|e| (j, e)),
            _ => None,
        };
        if let Some((from, to)) = scope {
            out.push((toks[j].text(src), from, to));
        }
    }
    out
}

/// The token that ends the right-hand side of the `=` at token `eq`: the `;` or `,` at its
/// bracket depth, or the bracket that closes around it (`f(x[i] = e)`).
fn assignment_end(toks: &[Token], src: &[u8], eq: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (k, t) in toks.iter().enumerate().skip(eq + 1) {
        match t.text(src) {
            b"(" | b"[" | b"{" => depth += 1,
            b")" | b"]" | b"}" if depth == 0 => return Some(k),
            b")" | b"]" | b"}" => depth -= 1,
            b";" | b"," if depth == 0 => return Some(k),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(src: &str) -> String {
        let (edits, _) = edits(src.as_bytes());
        let mut out = Vec::new();
        let mut done = 0;
        for (s, e, new) in edits {
            out.extend_from_slice(&src.as_bytes()[done..s]);
            out.extend_from_slice(&new);
            done = e;
        }
        out.extend_from_slice(&src.as_bytes()[done..]);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn subscripts_of_declared_stable_tensors_become_selects_and_assignments_copies() {
        let src = "void f(torch::stable::Tensor out, const torch::stable::Tensor& w, float* p) {\n  g(w[i], p[i]);\n  out[e][k] = h(out[e][k], w[k]);\n  torch::stable::Tensor c = w;\n  c[0] = 1;\n  if (out[0] == 2) c[1] = w[0];\n}\nvoid k(float* out) { out[1] = 0; }\n";
        assert_eq!(
            rewritten(src),
            "void f(torch::stable::Tensor out, const torch::stable::Tensor& w, float* p) {\n  g(torch::stable::select(w, 0, i), p[i]);\n  archsmith_aten::assign(torch::stable::select(torch::stable::select(out, 0, e), 0, k), h(torch::stable::select(torch::stable::select(out, 0, e), 0, k), torch::stable::select(w, 0, k)));\n  torch::stable::Tensor c = w;\n  archsmith_aten::assign(torch::stable::select(c, 0, 0), 1);\n  if (torch::stable::select(out, 0, 0) == 2) archsmith_aten::assign(torch::stable::select(c, 0, 1), torch::stable::select(w, 0, 0));\n}\nvoid k(float* out) { out[1] = 0; }\n"
        );
        // Nothing to do where no stable tensor is declared; a second run finds nothing more.
        let once = rewritten(src);
        assert_eq!(rewritten(&once), once);
        // An assignment into what a stable call returns copies into it (a view writes through);
        // a call's value assigned elsewhere, or compared, is left alone.
        let src = "void i(const torch::stable::Tensor h, torch::stable::Tensor c) {\n  archsmith_aten::slice(c) = archsmith_aten::narrow(h, 2, 0, c.size(2));\n  torch::stable::narrow(c, 0, 0, 1) = 0;\n  auto d = archsmith_aten::slice(c);\n  if (g(archsmith_aten::slice(c)) == 1) {}\n}\n";
        assert_eq!(
            rewritten(src),
            "void i(const torch::stable::Tensor h, torch::stable::Tensor c) {\n  archsmith_aten::assign(archsmith_aten::slice(c), archsmith_aten::narrow(h, 2, 0, c.size(2)));\n  archsmith_aten::assign(torch::stable::narrow(c, 0, 0, 1), 0);\n  auto d = archsmith_aten::slice(c);\n  if (g(archsmith_aten::slice(c)) == 1) {}\n}\n"
        );
        let once = rewritten(src);
        assert_eq!(rewritten(&once), once);
        assert!(edits(b"int a[3]; a[1] = 2;").0.is_empty());
        for hostile in [
            "torch::stable::Tensor",
            "void f(torch::stable::Tensor x) { x[",
            "{ torch::stable::Tensor x; x[0] = ;",
        ] {
            let _ = edits(hostile.as_bytes());
        }
    }
}
