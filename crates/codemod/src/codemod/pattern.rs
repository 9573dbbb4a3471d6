//! Token patterns with balanced holes (comby-style), matched against [`lexer`] tokens.
//!
//! A pattern is written as source text and lexed by the same lexer as the file it applies to.
//! `$NAME` is a hole that captures one balanced expression (no top-level `,` or `;`); `$$$NAME`
//! captures a balanced run that may contain commas. A hole never crosses a `;`, an unbalanced
//! closing bracket, a directive boundary or a CUDA launch bracket, and captures at least one token.
//! A hole that starts a pattern captures exactly one token (it names the token, e.g. a macro
//! whose name a `where` regex constrains). Literal tokens match byte for byte; whitespace between
//! tokens is free, but a comment or literal in the file never matches a literal pattern token.

use super::lexer::{Kind, Token};
use anyhow::{bail, Result};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Elem {
    Lit(Vec<u8>),
    /// `(name, multi)`: `$name` (multi = false) or `$$$name` (multi = true).
    Hole(String, bool),
}

#[derive(Debug, Clone)]
pub struct Pattern {
    pub elems: Vec<Elem>,
}

/// Token index range `[first, last)` captured by each hole.
pub type Captures = BTreeMap<String, (usize, usize)>;

impl Pattern {
    /// Compiles `text`, lexed with `lex`; holes are identifiers that start with `$`.
    pub fn compile(text: &str, lex: fn(&[u8]) -> Vec<Token>) -> Result<Pattern> {
        let src = text.as_bytes();
        let mut elems = Vec::new();
        for t in lex(src) {
            let s = t.text(src);
            match t.kind {
                Kind::Ident if s.starts_with(b"$") => {
                    let multi = s.starts_with(b"$$$");
                    let name = &s[if multi { 3 } else { 1 }..];
                    if name.is_empty() || name.contains(&b'$') {
                        bail!(
                            "pattern `{text}`: bad hole `{}`",
                            String::from_utf8_lossy(s)
                        );
                    }
                    elems.push(Elem::Hole(
                        String::from_utf8_lossy(name).into_owned(),
                        multi,
                    ));
                }
                Kind::PpStart | Kind::PpEnd | Kind::Comment => {
                    bail!("pattern `{text}`: directives and comments are not allowed in patterns")
                }
                _ => elems.push(Elem::Lit(s.to_vec())),
            }
        }
        if elems.is_empty() {
            bail!("empty pattern");
        }
        for w in elems.windows(2) {
            if matches!((&w[0], &w[1]), (Elem::Hole(..), Elem::Hole(..))) {
                bail!("pattern `{text}`: two holes in a row are ambiguous");
            }
        }
        Ok(Pattern { elems })
    }

    pub fn holes(&self) -> impl Iterator<Item = &str> {
        self.elems.iter().filter_map(|e| match e {
            Elem::Hole(n, _) => Some(n.as_str()),
            Elem::Lit(_) => None,
        })
    }
}

/// A lexed file prepared for matching: tokens plus the partner index of every bracket.
pub struct Matcher<'a> {
    pub src: &'a [u8],
    pub toks: &'a [Token],
    partner: Vec<Option<usize>>,
}

fn opener(b: &[u8]) -> Option<u8> {
    match b {
        b"(" => Some(b')'),
        b"[" => Some(b']'),
        b"{" => Some(b'}'),
        _ => None,
    }
}

fn is_closer(b: &[u8]) -> bool {
    matches!(b, b")" | b"]" | b"}")
}

impl<'a> Matcher<'a> {
    pub fn new(src: &'a [u8], toks: &'a [Token]) -> Matcher<'a> {
        let mut partner = vec![None; toks.len()];
        let mut stack: Vec<(usize, u8)> = Vec::new();
        for (i, t) in toks.iter().enumerate() {
            if t.kind != Kind::Punct {
                continue;
            }
            let s = t.text(src);
            if let Some(close) = opener(s) {
                stack.push((i, close));
            } else if is_closer(s) {
                match stack.last() {
                    Some(&(j, close)) if close == s[0] => {
                        partner[j] = Some(i);
                        partner[i] = Some(j);
                        stack.pop();
                    }
                    // Mismatched: leave both unpaired (holes will refuse to span them).
                    _ => {}
                }
            }
        }
        // A pair must not contain a directive boundary unless both ends are inside the same
        // directive; unpair those (brackets split across #if branches, macros, ...).
        let mut pp_id = vec![0usize; toks.len()];
        let mut id = 0;
        for (i, t) in toks.iter().enumerate() {
            if t.kind == Kind::PpStart {
                id += 1;
            }
            pp_id[i] = id;
            if t.kind == Kind::PpEnd {
                id += 1;
            }
        }
        for i in 0..toks.len() {
            if let Some(j) = partner[i] {
                if pp_id[i] != pp_id[j] {
                    partner[i] = None;
                    partner[j] = None;
                }
            }
        }
        Matcher { src, toks, partner }
    }

    pub fn text(&self, i: usize) -> &'a [u8] {
        self.toks[i].text(self.src)
    }

    /// Byte range covered by tokens `[first, last)`.
    pub fn span(&self, first: usize, last: usize) -> (usize, usize) {
        (self.toks[first].start, self.toks[last - 1].end)
    }

    /// Tries to match `pat` starting at token `ti`; returns the end token index and captures.
    pub fn match_at(&self, pat: &Pattern, ti: usize) -> Option<(usize, Captures)> {
        self.match_at_where(pat, ti, &|_| true)
    }

    /// [`match_at`](Self::match_at), taking only captures `accept` holds for: the holes'
    /// other splits are tried before the match fails (`$X.$M(…)` with `M` constrained finds
    /// the call of an `M` inside a longer chain).
    pub fn match_at_where(
        &self,
        pat: &Pattern,
        ti: usize,
        accept: &dyn Fn(&Captures) -> bool,
    ) -> Option<(usize, Captures)> {
        let mut caps = Captures::new();
        let end = self.go(&pat.elems, 0, ti, &mut caps, accept)?;
        Some((end, caps))
    }

    fn go(
        &self,
        elems: &[Elem],
        pi: usize,
        ti: usize,
        caps: &mut Captures,
        accept: &dyn Fn(&Captures) -> bool,
    ) -> Option<usize> {
        let Some(e) = elems.get(pi) else {
            return accept(caps).then_some(ti);
        };
        match e {
            Elem::Lit(bytes) => {
                let t = self.toks.get(ti)?;
                if matches!(
                    t.kind,
                    Kind::Comment | Kind::Str | Kind::PpStart | Kind::PpEnd | Kind::HeaderName
                ) || t.text(self.src) != bytes.as_slice()
                {
                    return None;
                }
                self.go(elems, pi + 1, ti + 1, caps, accept)
            }
            Elem::Hole(name, multi) => {
                if pi == 0 {
                    // A leading hole names one token, or, before a member access, the whole
                    // receiver: `a`, `in[i]`, `f(x).g` in `….contiguous()`, longest first.
                    let t = self.toks.get(ti)?;
                    let member =
                        matches!(elems.get(1), Some(Elem::Lit(l)) if l == b"." || l == b"->");
                    // `(a > b).f()`: a parenthesized receiver, unless the parentheses are a
                    // call's arguments (`g(x).f()` matches from `g`).
                    let parenthesized = member
                        && t.kind == Kind::Punct
                        && t.text(self.src) == b"("
                        && (ti == 0 || self.opens_an_expression(ti - 1));
                    let named = t.kind == Kind::Ident && !NOT_OPERANDS.contains(&t.text(self.src));
                    if !(named || parenthesized) {
                        return None;
                    }
                    let ends = if member {
                        if ti > 0 && matches!(self.text(ti - 1), b"." | b"->" | b"::") {
                            return None; // the middle of a chain: its start matches instead
                        }
                        self.postfix_ends(ti)
                    } else if ti > 1
                        && self.text(ti - 1) == b"::"
                        && self.toks[ti - 2].kind == Kind::Ident
                    {
                        // A later part of a qualified name (`x::TensorAccessor`): the name
                        // matches from its first part, or not at all. (`::at::Tensor`, from
                        // the global scope, still starts at `at`.)
                        return None;
                    } else {
                        vec![ti + 1]
                    };
                    for end in ends.into_iter().rev() {
                        caps.insert(name.clone(), (ti, end));
                        if let Some(r) = self.go(elems, 1, end, caps, accept) {
                            return Some(r);
                        }
                    }
                    return None;
                }
                let mut end = ti;
                loop {
                    if end > ti && self.starts_next_statement(end) {
                        return None;
                    }
                    let next = self.unit_end(end, *multi)?;
                    end = next;
                    caps.insert(name.clone(), (ti, end));
                    if let Some(r) = self.go(elems, pi + 1, end, caps, accept) {
                        return Some(r);
                    }
                }
            }
        }
    }

    /// Whether token `k` leaves the next one the start of an operand: punctuation other than a
    /// call's or subscript's closing, or a keyword that no operand is (`return (a).f()`).
    fn opens_an_expression(&self, k: usize) -> bool {
        let Some(t) = self.toks.get(k) else {
            return true;
        };
        match t.kind {
            Kind::Ident => NOT_OPERANDS.contains(&t.text(self.src)),
            Kind::Punct => !matches!(t.text(self.src), b")" | b"]" | b">"),
            Kind::Comment => k == 0 || self.opens_an_expression(k - 1),
            _ => false,
        }
    }

    /// The ends (exclusive, shortest first) of the postfix expressions that start at identifier
    /// `i`: `a`, `a::b`, `a.b`, `a->b`, each followed by any `(…)` and `[…]`, a call with
    /// explicit template arguments among them (`std::get<1>(t)`, `x.data_ptr<float>()`).
    fn postfix_ends(&self, i: usize) -> Vec<usize> {
        // A parenthesized start ends at its partner.
        let first = match self.text(i) {
            b"(" => match self.partner[i] {
                Some(j) => j + 1,
                None => return Vec::new(),
            },
            _ => i + 1,
        };
        let mut ends = vec![first];
        let mut k = first;
        while let Some(t) = self.toks.get(k) {
            let s = t.text(self.src);
            if let Some(call) = (s == b"<").then(|| self.template_call(k)).flatten() {
                k = call; // at the call's `(`, which the next turn takes
                continue;
            }
            if t.kind == Kind::Punct && (s == b"(" || s == b"[") {
                match self.partner[k] {
                    Some(j) => k = j + 1,
                    None => break,
                }
            } else if t.kind == Kind::Punct
                && matches!(s, b"." | b"->" | b"::")
                && self.toks.get(k + 1).is_some_and(|n| n.kind == Kind::Ident)
            {
                k += 2;
            } else {
                break;
            }
            ends.push(k);
        }
        ends
    }

    /// Where the `(` is when the `<` at `open` starts template arguments that a call follows:
    /// types and constants only (`1`, `float`, `std::pair<int, int>`), closed, then `(`. A
    /// comparison (`a < b`) has other tokens or no `(` after its `>`.
    fn template_call(&self, open: usize) -> Option<usize> {
        let mut depth = 0usize;
        for k in open..self.toks.len().min(open + 64) {
            let t = &self.toks[k];
            match t.text(self.src) {
                b"<" => depth += 1,
                b">" | b">>" => {
                    depth = depth.checked_sub(if t.text(self.src) == b">>" { 2 } else { 1 })?;
                    if depth == 0 {
                        let next = self.toks.get(k + 1)?;
                        return (next.text(self.src) == b"(").then_some(k + 1);
                    }
                }
                b"::" | b"," | b"*" | b"&" => {}
                _ if matches!(t.kind, Kind::Ident | Kind::Number) => {}
                _ => return None,
            }
        }
        None
    }

    /// End (exclusive) of the balanced unit starting at `i`, or None where a hole must stop.
    /// Whether token `i` follows a `{…}` block and is a word or literal: `f() { … } g` is two
    /// statements, and no expression continues past a block that way (a lambda's or braced
    /// list's block is followed by `(`, `,`, `)` or an operator). A hole stops there; otherwise a
    /// trailing hole whose `where` never holds (`$NS::$K`) would try every longer span to the end
    /// of a file of function definitions, once per start: quadratic in the file's size.
    fn starts_next_statement(&self, i: usize) -> bool {
        let Some(t) = self.toks.get(i) else {
            return false;
        };
        if matches!(
            t.kind,
            Kind::Punct | Kind::Comment | Kind::PpStart | Kind::PpEnd
        ) {
            return false;
        }
        let before = (0..i).rev().find(|&j| self.toks[j].kind != Kind::Comment);
        before.is_some_and(|j| self.text(j) == b"}" && self.partner[j].is_some())
    }

    fn unit_end(&self, i: usize, multi: bool) -> Option<usize> {
        let t = self.toks.get(i)?;
        match t.kind {
            Kind::PpStart | Kind::PpEnd => return None,
            Kind::Punct => {
                let s = t.text(self.src);
                if s == b";" || s == b"<<<" || s == b">>>" || (!multi && s == b",") {
                    return None;
                }
                if is_closer(s) {
                    return None;
                }
                if opener(s).is_some() {
                    return self.partner[i].map(|j| j + 1);
                }
            }
            _ => {}
        }
        Some(i + 1)
    }
}

/// One `$NAME` / `$$$NAME` reference in a template: the byte range it covers and the hole name.
pub struct HoleRef<'a> {
    pub start: usize,
    pub end: usize,
    pub name: &'a str,
}

/// Every hole reference in `template`, in order. Shared by expansion and by the catalogue's check
/// that a rule's template only names holes its pattern captures.
pub fn hole_refs(template: &str) -> Vec<HoleRef<'_>> {
    let t = template.as_bytes();
    let mut refs = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if t[i] != b'$' {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < t.len() && t[j] == b'$' {
            j += 1;
        }
        let name_start = j;
        while j < t.len() && (t[j].is_ascii_alphanumeric() || t[j] == b'_') {
            j += 1;
        }
        // `$`, digits and letters are ASCII, so these are char boundaries.
        refs.push(HoleRef {
            start: i,
            end: j,
            name: &template[name_start..j],
        });
        i = j;
    }
    refs
}

/// Expands `$NAME` / `$$$NAME` in `template` with the captured source text.
pub fn expand(template: &str, m: &Matcher, caps: &Captures) -> Result<Vec<u8>> {
    expand_with(template, m, caps, &std::collections::BTreeMap::new())
}

/// [`expand`], with some holes' text given (a transform's output) instead of copied.
pub fn expand_with(
    template: &str,
    m: &Matcher,
    caps: &Captures,
    given: &std::collections::BTreeMap<&str, Vec<u8>>,
) -> Result<Vec<u8>> {
    let t = template.as_bytes();
    let mut out = Vec::with_capacity(t.len());
    let mut copied = 0;
    for r in hole_refs(template) {
        out.extend_from_slice(&t[copied..r.start]);
        let name = r.name;
        let Some(&(a, b)) = caps.get(name) else {
            bail!("template `{template}` uses `${name}`, which the pattern does not capture");
        };
        if let Some(text) = given.get(name) {
            out.extend_from_slice(text);
            copied = r.end;
            continue;
        }
        let (s, mut e) = m.span(a, b);
        // A capture followed by a line break keeps it: after a line comment or an
        // unterminated literal, the template's next token would otherwise be swallowed.
        let next = m.toks.get(b).map_or(m.src.len(), |t| t.start).max(e);
        if m.src[e..next].contains(&b'\n') {
            e = next;
        }
        out.extend_from_slice(&m.src[s..e]);
        copied = r.end;
    }
    out.extend_from_slice(&t[copied..]);
    Ok(out)
}

/// Keywords the C lexer gives as identifiers that never name an operand: a leading hole does
/// not start at one (`return (z > 0).type_as(z)`'s receiver is `(z > 0)`, not `return (z > 0)`).
const NOT_OPERANDS: [&[u8]; 12] = [
    b"return",
    b"co_return",
    b"co_yield",
    b"co_await",
    b"throw",
    b"case",
    b"else",
    b"do",
    b"goto",
    b"new",
    b"delete",
    b"sizeof",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codemod::lexer::lex_c;

    fn find(pat: &str, src: &str) -> Vec<String> {
        let p = Pattern::compile(pat, lex_c).unwrap();
        let toks = lex_c(src.as_bytes());
        let m = Matcher::new(src.as_bytes(), &toks);
        let mut out = Vec::new();
        let mut i = 0;
        while i < toks.len() {
            if let Some((end, caps)) = m.match_at(&p, i) {
                let mut s = String::new();
                for (k, (a, b)) in &caps {
                    let (x, y) = m.span(*a, *b);
                    s.push_str(&format!("{k}={} ", &src[x..y]));
                }
                out.push(s.trim_end().to_string());
                i = end;
            } else {
                i += 1;
            }
        }
        out
    }

    #[test]
    fn holes_capture_balanced_arguments() {
        assert_eq!(
            find(
                "THCudaMalloc($S, $$$N)",
                "p = THCudaMalloc(state, n * sizeof(f(a, b)));"
            ),
            vec!["N=n * sizeof(f(a, b)) S=state"]
        );
        assert_eq!(
            find(
                "$M($X.type(),",
                "AT_DISPATCH_FLOATING_TYPES(in[i].contiguous().type(), \"n\", [&] { f(); });"
            ),
            vec!["M=AT_DISPATCH_FLOATING_TYPES X=in[i].contiguous()"]
        );
    }

    /// A one-token leading hole names a whole qualified name's first part, never a later one:
    /// `archsmith_aten::TensorAccessor` is no bare `TensorAccessor`, `::at::kLong` starts at `at`.
    #[test]
    fn a_leading_hole_starts_a_qualified_name() {
        assert_eq!(
            find(
                "$A<",
                "TensorAccessor<float, 1> a; archsmith_aten::TensorAccessor<float, 1> b;"
            ),
            vec!["A=TensorAccessor"]
        );
        assert_eq!(
            find("$NS::$K", "auto t = ::at::kLong; auto u = c10::at::kInt;"),
            vec!["K=kLong NS=at", "K=at NS=c10"]
        );
    }

    #[test]
    fn a_leading_hole_before_a_member_access_takes_the_whole_receiver() {
        assert_eq!(
            find(
                "$X.contiguous()",
                "auto a = torch::stable::select(d, 1, 0).contiguous(); auto b = in[i].x->y.contiguous();"
            ),
            vec!["X=torch::stable::select(d, 1, 0)", "X=in[i].x->y"]
        );
        // Not a member access: one token, as before.
        assert_eq!(find("$NS::Tensor", "at::Tensor t;"), vec!["NS=at"]);
        // A chain's middle is never a start of its own.
        assert_eq!(
            find("$X.cpu()", "a.b().cpu(); c.cpu()"),
            vec!["X=a.b()", "X=c"]
        );
        // A keyword is no receiver; a parenthesized expression is, unless it is a call's
        // arguments.
        assert_eq!(
            find(
                "$X.type_as($T)",
                "return (z > 0).type_as(z) + m.type_as(z); g(a).type_as(b); else x.type_as(y);"
            ),
            vec!["T=z X=(z > 0)", "T=z X=m", "T=b X=g(a)", "T=y X=x"]
        );
        // A call with explicit template arguments is part of the receiver; a comparison is not.
        assert_eq!(
            find(
                "$X.to($T)",
                "std::get<1>(top).to(k); x.data_ptr<std::pair<int, int>>().to(k); if (a < b.to(k)) {}"
            ),
            vec!["T=k X=std::get<1>(top)", "T=k X=x.data_ptr<std::pair<int, int>>()", "T=k X=b"]
        );
    }

    #[test]
    fn holes_stop_at_statement_and_launch_boundaries() {
        assert_eq!(
            find(
                "<<<$G, $B>>>",
                "k<<<dim3(a, b), t>>>(x); k<<<g, b, 0, s>>>(x);"
            ),
            vec!["B=t G=dim3(a, b)"]
        );
        assert!(find("f($X)", "f(a; b)").is_empty());
        assert!(find("f($X)", "f()").is_empty());
        // A block followed by a word ends a statement: the hole does not run on into the next
        // definition (it did, to the end of the file, once per start: quadratic).
        assert!(find("a::$K;", "a::f() { return 1; } g;").is_empty());
        assert!(find("a::$K;", "a::f() { return 1; } /* c */ g;").is_empty());
        // A lambda's or braced list's block goes on with punctuation, which the hole takes.
        assert_eq!(
            find("g($$$A);", "g([&] { f(); }(), IntList{0, 0}.size());"),
            vec!["A=[&] { f(); }(), IntList{0, 0}.size()"]
        );
    }

    #[test]
    fn literals_and_comments_never_match() {
        assert!(find("AT_CHECK", "// AT_CHECK\n\"AT_CHECK\" /*AT_CHECK*/").is_empty());
        // A comment between pattern tokens defeats the match (it would be lost otherwise).
        assert!(find(".type().is_cuda()", "x.type() /*c*/ .is_cuda()").is_empty());
    }
}
