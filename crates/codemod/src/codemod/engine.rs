//! Applies a [`Catalogue`] to the bytes of one file.
//!
//! Phase 1 runs the rules that change code, in catalogue order, each on the output of the one
//! before, and then adds the includes that the rules which fired need. Phase 2 runs on the final
//! text and collects review items: review rules, plus any match that a change rule had to leave
//! alone (a `remove` whose variable is still used, a setup.py flag that is not a list element), so
//! every line number refers to the rewritten file.

use super::catalogue::{Action, Catalogue, Lang, Rule, ADD_INCLUDE};
use super::lexer::{Kind, Token};
use super::pattern::{expand, expand_with, Captures, Matcher, Pattern};
use super::suppress::Suppressions;
use anyhow::Result;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ReviewItem {
    pub line: usize,
    /// 1-based, in Unicode code points: where the flagged code starts (0 where unknown).
    pub column: usize,
    pub rule: String,
    /// The code on that line, trimmed.
    pub code: String,
    pub message: String,
    pub suggestion: String,
    /// Its byte offset in the text it was read from, and how many of the outcome's trace steps
    /// made that text: what maps it back to the file as read.
    #[serde(skip)]
    pub at: (usize, usize),
}

#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub output: Vec<u8>,
    pub counts: BTreeMap<String, usize>,
    pub review: Vec<ReviewItem>,
    /// Bundled headers the output includes and needs beside it.
    pub bundles: Vec<String>,
    /// ATen operators (C++ names) the output calls through the generated dispatcher header.
    pub aten_ops: std::collections::BTreeSet<String>,
    /// Where each rewrite was, mapped back to the input.
    pub trace: super::trace::Trace,
}

impl Outcome {
    pub fn rewrites(&self) -> usize {
        self.counts.values().sum()
    }

    /// Takes in the outcome of a later phase that ran on this one's output: its text, counts,
    /// trace steps, bundles, and review items (their trace step counted after this one's).
    fn absorb(&mut self, later: Outcome) {
        let before = self.trace.len();
        self.output = later.output;
        self.trace.extend(later.trace);
        for (k, v) in later.counts {
            *self.counts.entry(k).or_default() += v;
        }
        self.review.extend(later.review.into_iter().map(|mut r| {
            r.at.1 += before;
            r
        }));
        self.bundles.extend(later.bundles);
        self.aten_ops.extend(later.aten_ops);
    }
}

/// A change rule's edits on one text: byte range → replacement.
type Edit = (usize, usize, Vec<u8>);

/// Runs every rule of `cat` that applies to `lang`.
pub fn apply(cat: &Catalogue, lang: Lang, src: &[u8]) -> Result<Outcome> {
    let mut out = apply_rules(cat.rules.iter().filter(|r| r.lang == lang), lang, src)?;
    // A module that builds extensions just in time passes its compiler flags to load() as
    // setup.py passes them to an Extension: the same flag rules apply to its string literals.
    if lang == Lang::PythonModule
        && std::str::from_utf8(src).is_ok_and(super::python_source::jit_calls::builds_extensions)
    {
        let flags = cat
            .rules
            .iter()
            .filter(|r| r.lang == Lang::Python && r.kind == super::catalogue::RuleKind::PyString);
        out.absorb(apply_rules(flags, Lang::Python, &out.output)?);
    }
    if lang != Lang::Cpp && cat.build_script {
        out.absorb(super::python_source::build_script::apply(&out.output));
    }
    if lang != Lang::Cpp && !cat.python.is_empty() {
        let torch = cat.target_torch();
        out.absorb(super::python_source::rewrite::apply(
            &cat.python,
            &torch,
            &out.output,
        ));
        out.review.sort_by_key(|r| r.line);
    }
    Ok(out)
}

pub fn apply_rules<'r>(
    rules: impl Iterator<Item = &'r Rule> + Clone,
    lang: Lang,
    src: &[u8],
) -> Result<Outcome> {
    let lex = lang.lexer();
    // Comments are never rewritten: a file without a suppression comment never gains one.
    let suppressing = Suppressions::any_in(src);
    let mut p = Changes {
        text: src.to_vec(),
        counts: BTreeMap::new(),
        includes: Vec::new(),
        bundles: Vec::new(),
        trace: super::trace::Trace::default(),
        lex,
        suppressing,
    };
    for rule in rules.clone().filter(|r| r.applies_to(src)) {
        p.run(rule, lang)?;
    }
    if lang == Lang::Cpp {
        p.add_includes();
    }
    let Changes {
        text,
        counts,
        bundles,
        trace,
        ..
    } = p;
    let toks = lex(&text);
    let mut review = Vec::new();
    for rule in rules
        .clone()
        .filter(|r| r.may_match(&text) && r.applies_to(&text))
    {
        review_items(rule, &text, &toks, &mut review)?;
    }
    // A catch-all rule stays quiet on a line that a specific rule already reports.
    let secondary: Vec<&str> = rules
        .clone()
        .filter(|r| r.secondary)
        .map(|r| r.id.as_str())
        .collect();
    let primary_lines: Vec<usize> = review
        .iter()
        .filter(|r| !secondary.contains(&r.rule.as_str()))
        .map(|r| r.line)
        .collect();
    review.retain(|r| !secondary.contains(&r.rule.as_str()) || !primary_lines.contains(&r.line));
    if suppressing {
        let kept_off = Suppressions::read(&text, &toks);
        review.retain(|r| !kept_off.covers(r.line, &r.rule));
    }
    review.sort_by_key(|r| r.line);
    for r in &mut review {
        r.at.1 = trace.len();
    }
    Ok(Outcome {
        output: text,
        counts,
        review,
        bundles,
        trace,
        aten_ops: Default::default(),
    })
}

/// Phase 1's text as the rules change it, and what it has done so far.
struct Changes {
    text: Vec<u8>,
    counts: BTreeMap<String, usize>,
    /// Headers the rewrites that fired need (added once, at the end).
    includes: Vec<String>,
    bundles: Vec<String>,
    trace: super::trace::Trace,
    lex: fn(&[u8]) -> Vec<Token>,
    suppressing: bool,
}

impl Changes {
    /// One rule's phase 1 on the text.
    fn run(&mut self, rule: &Rule, lang: Lang) -> Result<()> {
        match &rule.action {
            Action::NeedsHeader { pat, header } if lang == Lang::Cpp => {
                self.add_needed_header(rule, pat, header)
            }
            Action::NeedsHeader { .. } => Ok(()),
            Action::Include {
                header,
                glob: false,
                to,
                review: false,
                drop_unless_uses: None,
                ..
            } => {
                self.rewrite(rule)?;
                // A header an earlier rule's rewrite needs, which this later rule swaps or drops
                // (the stable catalogue after the legacy one): added as this rule says.
                self.includes.retain(|h| h != header || to.is_some());
                for h in self.includes.iter_mut().filter(|h| *h == header) {
                    h.clone_from(to.as_ref().expect("kept only with a `to`"));
                }
                Ok(())
            }
            _ => self.rewrite(rule),
        }
    }

    /// One rewrite/remove/include rule to its fixed point: a rule's output may expose another
    /// match of the same rule (nested calls); a few rounds reach it. Rules are tested to be
    /// idempotent, so this never loops.
    fn rewrite(&mut self, rule: &Rule) -> Result<()> {
        for _round in 0..8 {
            if !rule.may_match(&self.text) {
                break;
            }
            let toks = (self.lex)(&self.text);
            let mut edits = change_edits(rule, &self.text, &toks)?;
            edits.retain(|(s, e, rep)| keeps_boundaries(&self.text, *s, *e, rep));
            if self.suppressing {
                let kept_off = Suppressions::read(&self.text, &toks);
                let lines = crate::lint::LineIndex::new(&self.text);
                edits.retain(|(s, _, _)| !kept_off.covers(lines.line(*s), &rule.id));
            }
            if edits.is_empty() {
                break;
            }
            self.trace.rewrites(&rule.id, &self.text, &edits);
            *self.counts.entry(rule.id.clone()).or_default() += edits.len();
            if let Action::Rewrite {
                include: Some(h), ..
            } = &rule.action
            {
                if !self.includes.contains(h) {
                    self.includes.push(h.clone());
                }
            }
            if let Some(b) = &rule.bundle {
                if !self.bundles.contains(b) {
                    self.bundles.push(b.clone());
                }
            }
            self.text = splice(&self.text, edits);
        }
        Ok(())
    }

    /// A `needs-header` rule: the header added when the name is used in code and the file does
    /// not include it itself.
    fn add_needed_header(&mut self, rule: &Rule, pat: &Pattern, header: &str) -> Result<()> {
        if uses_name(rule, pat, &self.text, self.lex, self.suppressing)? {
            if let Some(t) = ensure_include(&self.text, header) {
                self.trace.changed(&self.text, &t);
                self.text = t;
                *self.counts.entry(rule.id.clone()).or_default() += 1;
            }
        }
        Ok(())
    }

    /// The headers the rewrites that fired need, each once (a bundled one as `"NAME"`).
    fn add_includes(&mut self) {
        for h in &self.includes {
            if let Some(t) = ensure_include_as(&self.text, h, self.bundles.contains(h)) {
                self.trace.changed(&self.text, &t);
                self.text = t;
                *self.counts.entry(ADD_INCLUDE.to_string()).or_default() += 1;
            }
        }
    }
}

/// Whether replacing `[s, e)` by `rep` keeps every token boundary it touches: an edit must not
/// glue two identifiers together, start a comment (`/` + `*`), turn an identifier into a literal
/// prefix (`L` + `"`) or move a `#` to where it would start a directive. Edits that would are
/// skipped (and their matches reported where the rule has a phase-2 report).
fn keeps_boundaries(text: &[u8], s: usize, e: usize, rep: &[u8]) -> bool {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$';
    let joins = |a: u8, b: u8| {
        (ident(a) && (ident(b) || b == b'"' || b == b'\''))
            || (a == b'/' && (b == b'/' || b == b'*'))
            || (a == b'*' && b == b'/')
            || (a == b'\\')
            || (a == b'<' && b == b'<')
            || (a == b'>' && b == b'>')
            || (a == b':' && b == b':')
            || (a == b'-' && b == b'>')
    };
    let left = s.checked_sub(1).map(|i| text[i]);
    let right = text.get(e).copied();
    match (rep.first(), rep.last()) {
        (Some(&first), Some(&last)) => {
            // New neighbours only: a pair that was already adjacent in the original is fine.
            if left.is_some_and(|l| joins(l, first) && text.get(s) != Some(&first)) {
                return false;
            }
            if right.is_some_and(|r| joins(last, r) && (e == s || text[e - 1] != last)) {
                return false;
            }
        }
        _ => {
            if let (Some(l), Some(r)) = (left, right) {
                if joins(l, r) {
                    return false;
                }
            }
        }
    }
    // A `#` that would become the first non-blank byte of its line.
    if rep.is_empty() && right == Some(b'#') {
        let blank_before = |at: usize| {
            let ls = text[..at]
                .iter()
                .rposition(|&c| c == b'\n')
                .map_or(0, |p| p + 1);
            text[ls..at]
                .iter()
                .all(|c| matches!(c, b' ' | b'\t' | b'\r'))
        };
        if blank_before(s) && !blank_before(e) {
            return false;
        }
    }
    true
}

fn splice(text: &[u8], mut edits: Vec<Edit>) -> Vec<u8> {
    edits.sort_by_key(|e| e.0);
    let mut out = Vec::with_capacity(text.len());
    let mut at = 0;
    for (s, e, rep) in edits {
        if s < at {
            continue; // overlapping edits cannot be produced; never corrupt if they were
        }
        out.extend_from_slice(&text[at..s]);
        out.extend_from_slice(&rep);
        at = e;
    }
    out.extend_from_slice(&text[at..]);
    out
}

/// Matches of a pattern rule, left to right, non-overlapping, that pass `where` and the
/// definition guard: `(first token, end token, captures)`.
fn pattern_matches(rule: &Rule, pat: &Pattern, m: &Matcher) -> Vec<(usize, usize, Captures)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < m.toks.len() {
        if let Some((end, caps)) = m.match_at_where(pat, i, &|caps| wheres_hold(rule, m, caps)) {
            if end > i
                && !is_macro_name_position(m, i)
                && !is_qualified_macro_like(m, i)
                && in_define_holds(rule, m, i)
            {
                out.push((i, end, caps));
                i = end;
                continue;
            }
        }
        i += 1;
    }
    out
}

fn wheres_hold(rule: &Rule, m: &Matcher, caps: &Captures) -> bool {
    let text = |hole: &str| {
        caps.get(hole).map(|&(a, b)| {
            let (s, e) = m.span(a, b);
            &m.src[s..e]
        })
    };
    rule.wheres
        .iter()
        .all(|(hole, re)| text(hole).is_some_and(|t| re.is_match(t)))
        && (rule.unlesses.iter()).all(|(hole, re)| !text(hole).is_some_and(|t| re.is_match(t)))
}

/// Whether token `i` lies in the body of a `#define` whose macro name the rule's `in_define`
/// matches (always, for a rule without one).
fn in_define_holds(rule: &Rule, m: &Matcher, i: usize) -> bool {
    let Some(re) = &rule.in_define else {
        return true;
    };
    for j in (0..i).rev() {
        match m.toks[j].kind {
            Kind::PpEnd => return false,
            Kind::PpStart => {
                let directive: Vec<u8> = m.toks[j]
                    .text(m.src)
                    .iter()
                    .copied()
                    .filter(u8::is_ascii_alphabetic)
                    .collect();
                return directive == b"define" && j + 1 < i && re.is_match(m.text(j + 1));
            }
            _ => {}
        }
    }
    false
}

/// `#define NAME`, `#ifdef NAME`, `defined(NAME)`: a compatibility shim that defines or tests the
/// legacy name itself must not be renamed (it would become `#define TORCH_CHECK TORCH_CHECK`).
fn is_macro_name_position(m: &Matcher, i: usize) -> bool {
    if i == 0 {
        return false;
    }
    let prev = &m.toks[i - 1];
    if prev.kind == Kind::PpStart {
        let d: Vec<u8> = prev
            .text(m.src)
            .iter()
            .copied()
            .filter(|c| c.is_ascii_alphabetic())
            .collect();
        return matches!(d.as_slice(), b"define" | b"undef" | b"ifdef" | b"ifndef");
    }
    m.text(i - 1) == b"defined" || (m.text(i - 1) == b"(" && i >= 2 && m.text(i - 2) == b"defined")
}

/// A macro-like name (`AT_CHECK`: capitals, digits, underscores) that another scope qualifies
/// (`my::AT_CHECK`): a macro is never qualified, so this is some namespace's own name.
fn is_qualified_macro_like(m: &Matcher, i: usize) -> bool {
    let name = m.text(i);
    let macro_like = m.toks[i].kind == Kind::Ident
        && name.iter().any(u8::is_ascii_uppercase)
        && name
            .iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_');
    macro_like && i >= 2 && m.text(i - 1) == b"::" && m.toks[i - 2].kind == Kind::Ident
}

/// True when tokens `[a, b)` contain a comment or literal.
fn has_opaque(toks: &[Token], a: usize, b: usize) -> bool {
    toks[a..b].iter().any(Token::is_opaque)
}

fn change_edits(rule: &Rule, text: &[u8], toks: &[Token]) -> Result<Vec<Edit>> {
    let m = Matcher::new(text, toks);
    let mut edits = Vec::new();
    match &rule.action {
        Action::Rewrite {
            pat,
            replace,
            transforms,
            ..
        } => {
            'matches: for (a, b, caps) in pattern_matches(rule, pat, &m) {
                // A comment or literal that the replacement would drop blocks the rewrite:
                // comments and literals are never changed or lost.
                let kept: Vec<&str> = holes_in(replace);
                let (s, e) = m.span(a, b);
                let inside_holes: usize = caps
                    .iter()
                    .filter(|(n, _)| kept.contains(&n.as_str()))
                    .map(|(_, &(x, y))| toks[x..y].iter().filter(|t| t.is_opaque()).count())
                    .sum();
                if toks[a..b].iter().filter(|t| t.is_opaque()).count() != inside_holes {
                    continue;
                }
                let mut replaced = BTreeMap::new();
                for (hole, t) in transforms {
                    let Some(&(x, y)) = caps.get(hole.as_str()) else {
                        continue 'matches;
                    };
                    let (hs, he) = m.span(x, y);
                    match t.apply(&text[hs..he]) {
                        Some(new) => replaced.insert(hole.as_str(), new),
                        None => continue 'matches,
                    };
                }
                let rep = expand_with(replace, &m, &caps, &replaced)?;
                edits.push(minimal_edit(
                    rule.lang.lexer(),
                    text,
                    &toks[a..b],
                    &rep,
                    s,
                    e,
                ));
            }
        }
        Action::Remove { pat, unless_used } => {
            let matches = pattern_matches(rule, pat, &m);
            let spans: Vec<(usize, usize)> = matches.iter().map(|(a, b, _)| (*a, *b)).collect();
            for (a, b, caps) in matches {
                if has_opaque(toks, a, b)
                    || !uses(&m, unless_used.as_deref(), &caps, &spans).is_empty()
                {
                    continue; // reported in phase 2
                }
                let (s, e) = m.span(a, b);
                let (s, e) = widen_to_line(text, s, e);
                edits.push((s, e, Vec::new()));
            }
        }
        Action::Include {
            header,
            glob,
            drop_unless_uses: Some(uses),
            ..
        } => edits.extend(unused_include_edits(header, *glob, uses, text, toks)),
        Action::Include {
            header,
            glob: false,
            to,
            review: false,
            ..
        } => edits.extend(include_swap_edits(header, to.as_deref(), text, toks)),
        Action::PyString {
            regex, drop: true, ..
        } => {
            for (i, t) in toks.iter().enumerate() {
                if t.kind == Kind::Str && regex.is_match(py_content(t.text(text))) {
                    if let Some((s, e)) = list_element_span(text, toks, i) {
                        edits.push((s, e, Vec::new()));
                    }
                }
            }
        }
        _ => {}
    }
    Ok(edits)
}

/// An include rule with `action = "drop-unused"`: the header's directives dropped from a file
/// whose code names nothing `uses` matches.
fn unused_include_edits(
    header: &str,
    glob: bool,
    uses: &regex::bytes::Regex,
    text: &[u8],
    toks: &[Token],
) -> Vec<Edit> {
    let used = toks
        .iter()
        .any(|t| t.kind == Kind::Ident && uses.is_match(t.text(text)));
    let mut edits = Vec::new();
    for (ti, name, _) in include_sites(text, toks) {
        let hit = if glob {
            name.starts_with(header.as_bytes())
        } else {
            name == header.as_bytes()
        };
        let start = directive_start(toks, ti);
        if used || !hit || has_opaque(toks, start, ti) {
            continue;
        }
        let (s, e) = widen_to_line(text, toks[start].start, toks[ti].end);
        edits.push((s, e, Vec::new()));
    }
    edits
}

/// An include rule: the header swapped for `to` (dropped when `to` is absent or already
/// included).
fn include_swap_edits(header: &str, to: Option<&str>, text: &[u8], toks: &[Token]) -> Vec<Edit> {
    let present = |h: &str| {
        include_sites(text, toks)
            .iter()
            .any(|(_, name, _)| name == h.as_bytes())
    };
    let to_present = to.is_some_and(present);
    let mut edits = Vec::new();
    for (ti, name, delims) in include_sites(text, toks) {
        if name != header.as_bytes() {
            continue;
        }
        let t = &toks[ti];
        let start = directive_start(toks, ti);
        if has_opaque(toks, start, ti) {
            continue; // `#include /* why */ <...>`: never lose the comment
        }
        match to {
            Some(to) if !to_present => {
                let mut rep = vec![delims.0];
                rep.extend_from_slice(to.as_bytes());
                rep.push(delims.1);
                edits.push((t.start, t.end, rep));
            }
            _ => {
                // Drop the whole directive (`#` .. header name) and its line if empty.
                let (s, e) = widen_to_line(text, toks[start].start, t.end);
                edits.push((s, e, Vec::new()));
            }
        }
    }
    edits
}

/// Whether a `needs-header` rule's name is used in code (never in a comment or literal, nor on a
/// line that suppresses the rule).
fn uses_name(
    rule: &Rule,
    pat: &Pattern,
    text: &[u8],
    lex: fn(&[u8]) -> Vec<Token>,
    suppressing: bool,
) -> Result<bool> {
    let toks = lex(text);
    let m = Matcher::new(text, &toks);
    let mut at: Vec<usize> = pattern_matches(rule, pat, &m)
        .iter()
        .map(|(a, _, _)| toks[*a].start)
        .collect();
    if suppressing {
        let kept_off = Suppressions::read(text, &toks);
        let lines = crate::lint::LineIndex::new(text);
        at.retain(|s| !kept_off.covers(lines.line(*s), &rule.id));
    }
    Ok(!at.is_empty())
}

/// Narrows the replacement of `span` (tokens `orig`) by `rep` to the tokens that differ, so
/// the original layout around and inside unchanged tokens survives: `AT_DISPATCH_X(\n  x.type(),`
/// becomes `AT_DISPATCH_X(\n  x.scalar_type(),`, not a re-joined line.
fn minimal_edit(
    lex: fn(&[u8]) -> Vec<Token>,
    text: &[u8],
    orig: &[Token],
    rep: &[u8],
    s: usize,
    e: usize,
) -> Edit {
    let rtoks = lex(rep);
    let same = |o: &Token, r: &Token| o.kind == r.kind && o.text(text) == r.text(rep);
    let (lo, lr) = (orig.len(), rtoks.len());
    let mut p = 0;
    while p < lo && p < lr && same(&orig[p], &rtoks[p]) {
        p += 1;
    }
    let mut q = 0;
    while q < lo - p && q < lr - p && same(&orig[lo - 1 - q], &rtoks[lr - 1 - q]) {
        q += 1;
    }
    if p == lo && p == lr {
        return (s, e, text[s..e].to_vec()); // identical tokens (only layout differs): keep
    }
    if p < lo - q && p < lr - q {
        // Both sides keep at least one differing token: replace token run by token run. The
        // blanks next to the run come from the replacement where they differ (a dropped `state,`
        // must not leave its trailing space behind).
        let (mut os, mut oe) = (orig[p].start, orig[lo - 1 - q].end);
        let (mut rs, mut re) = (rtoks[p].start, rtoks[lr - 1 - q].end);
        if p > 0 && text[orig[p - 1].end..os] != rep[rtoks[p - 1].end..rs] {
            os = orig[p - 1].end;
            rs = rtoks[p - 1].end;
        }
        if q > 0 && text[oe..orig[lo - q].start] != rep[re..rtoks[lr - q].start] {
            oe = orig[lo - q].start;
            re = rtoks[lr - q].start;
        }
        // Blanks at the template's ends belong to it (`AT_X(` → `AT_Y(at::kHalf, `).
        if p == 0 {
            rs = 0;
        }
        if q == 0 {
            re = rep.len();
        }
        return (os, oe, rep[rs..re].to_vec());
    }
    // One side is empty: replace the gap between the common prefix and suffix.
    let os = if p > 0 { orig[p - 1].end } else { s };
    let oe = if q > 0 { orig[lo - q].start } else { e };
    let rs = if p > 0 { rtoks[p - 1].end } else { 0 };
    let re = if q > 0 {
        rtoks[lr - q].start
    } else {
        rep.len()
    };
    (os, oe, rep[rs..re].to_vec())
}

fn holes_in(template: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let b = template.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' {
            while i < b.len() && b[i] == b'$' {
                i += 1;
            }
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(&template[s..i]);
        } else {
            i += 1;
        }
    }
    out
}

/// Offsets of the identifier captured as `var`, outside every match of the rule (several
/// declarations of the same `state` do not keep each other alive).
fn uses(m: &Matcher, var: Option<&str>, caps: &Captures, spans: &[(usize, usize)]) -> Vec<usize> {
    let Some(&(x, y)) = var.and_then(|v| caps.get(v)) else {
        return Vec::new();
    };
    let (s, e) = m.span(x, y);
    let name = &m.src[s..e];
    m.toks
        .iter()
        .enumerate()
        .filter(|(i, t)| {
            t.kind == Kind::Ident
                && t.text(m.src) == name
                && !spans.iter().any(|&(a, b)| (a..b).contains(i))
        })
        .map(|(_, t)| t.start)
        .collect()
}

/// Extends `[s, e)` to whole lines when nothing but whitespace shares them; otherwise also eats
/// the blanks after `e` on the same line.
fn widen_to_line(text: &[u8], s: usize, e: usize) -> (usize, usize) {
    let line_start = text[..s]
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |p| p + 1);
    let line_end = text[e..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(text.len(), |p| e + p);
    let blank = |r: &[u8]| r.iter().all(|c| matches!(c, b' ' | b'\t' | b'\r'));
    if blank(&text[line_start..s]) && blank(&text[e..line_end]) {
        return (line_start, (line_end + 1).min(text.len()));
    }
    let mut e2 = e;
    while e2 < line_end && matches!(text[e2], b' ' | b'\t') {
        e2 += 1;
    }
    (s, e2)
}

/// `(header token index, name, (open, close))` of every `#include`.
fn include_sites(text: &[u8], toks: &[Token]) -> Vec<(usize, Vec<u8>, (u8, u8))> {
    toks.iter()
        .enumerate()
        .filter(|(_, t)| t.kind == Kind::HeaderName)
        .filter_map(|(i, t)| {
            let s = t.text(text);
            if s.len() < 2 {
                return None;
            }
            let (open, close) = (s[0], s[s.len() - 1]);
            if !matches!((open, close), (b'<', b'>') | (b'"', b'"')) {
                return None;
            }
            Some((i, s[1..s.len() - 1].to_vec(), (open, close)))
        })
        .collect()
}

fn directive_start(toks: &[Token], mut i: usize) -> usize {
    while i > 0 && toks[i].kind != Kind::PpStart {
        i -= 1;
    }
    i
}

/// Adds `#include <header>` after the last include at the outermost conditional level, unless it
/// is already there. Returns None when nothing changes.
pub fn ensure_include(text: &[u8], header: &str) -> Option<Vec<u8>> {
    ensure_include_as(text, header, false)
}

/// [`ensure_include`], as `#include "HEADER"` when `quoted` (a header beside the file).
pub fn ensure_include_as(text: &[u8], header: &str, quoted: bool) -> Option<Vec<u8>> {
    let toks = super::lexer::lex_c(text);
    let sites = include_sites(text, &toks);
    if sites.iter().any(|(_, n, _)| n == header.as_bytes()) {
        return None;
    }
    // Conditional depth of each directive.
    let mut depth = 0i32;
    let mut best: Option<(i32, usize)> = None; // (depth, byte offset after the directive's line)
    let mut pragma_once_end = None;
    for (i, t) in toks.iter().enumerate() {
        if t.kind != Kind::PpStart {
            continue;
        }
        let name: Vec<u8> = t
            .text(text)
            .iter()
            .copied()
            .filter(u8::is_ascii_alphabetic)
            .collect();
        let end_tok = toks[i..]
            .iter()
            .find(|t| t.kind == Kind::PpEnd)
            .map_or(text.len(), |t| t.start);
        match name.as_slice() {
            b"if" | b"ifdef" | b"ifndef" => depth += 1,
            b"endif" => depth = (depth - 1).max(0),
            b"include" if best.is_none_or(|(d, _)| depth <= d) => {
                best = Some((depth, end_tok));
            }
            b"pragma" if toks.get(i + 1).is_some_and(|n| n.text(text) == b"once") => {
                pragma_once_end = Some(end_tok);
            }
            _ => {}
        }
    }
    // Match the file's line endings (CRLF files stay CRLF).
    let crlf = text
        .iter()
        .position(|&c| c == b'\n')
        .is_some_and(|p| p > 0 && text[p - 1] == b'\r');
    let eol: &[u8] = if crlf { b"\r\n" } else { b"\n" };
    let directive = if quoted {
        format!("#include \"{header}\"")
    } else {
        format!("#include <{header}>")
    };
    let mut out = Vec::with_capacity(text.len() + directive.len() + 2);
    let mut place = best.map(|b| b.1).or(pragma_once_end);
    // Never insert into a comment or literal (an unterminated one may run to the end of the
    // file): fall back to the top of the file.
    if let Some(at) = place {
        let ins = if at < text.len() { at + 1 } else { at };
        if toks
            .iter()
            .any(|t| t.is_opaque() && t.start < ins && t.end >= ins)
        {
            place = None;
        }
    }
    match place {
        Some(at) if at < text.len() => {
            // `at` is the directive's own newline: ours goes right after it.
            out.extend_from_slice(&text[..=at]);
            out.extend_from_slice(directive.as_bytes());
            out.extend_from_slice(if crlf { b"\r" } else { b"" });
            out.extend_from_slice(&text[at..]);
        }
        Some(_) => {
            out.extend_from_slice(text);
            out.extend_from_slice(eol);
            out.extend_from_slice(directive.as_bytes());
            out.extend_from_slice(eol);
        }
        None => {
            out.extend_from_slice(directive.as_bytes());
            out.extend_from_slice(eol);
            out.extend_from_slice(text);
        }
    }
    Some(out)
}

/// The content of a Python string token (prefix and quotes removed).
fn py_content(tok: &[u8]) -> &[u8] {
    let q = tok
        .iter()
        .position(|&c| c == b'"' || c == b'\'')
        .unwrap_or(0);
    let body = &tok[q..];
    let ql = if body.len() >= 6 && (body.starts_with(b"\"\"\"") || body.starts_with(b"'''")) {
        3
    } else {
        1
    };
    if body.len() >= 2 * ql {
        &body[ql..body.len() - ql]
    } else {
        &body[body.len().min(ql)..]
    }
}

/// The bytes to delete to remove string token `i` from a Python list/tuple, or None when it is
/// not a plain element (then it is reported instead).
fn list_element_span(text: &[u8], toks: &[Token], i: usize) -> Option<(usize, usize)> {
    let p = |j: usize| toks.get(j).map(|t| t.text(text));
    let prev = i.checked_sub(1).and_then(p)?;
    let next = p(i + 1)?;
    let t = &toks[i];
    let opens = |s: &[u8]| s == b"[" || s == b"(";
    let closes = |s: &[u8]| s == b"]" || s == b")";
    if !(opens(prev) || prev == b",") {
        return None;
    }
    if next == b"," {
        // `x, "flag", y` or `["flag", y]`: the element, its comma and the blanks after it.
        let comma = &toks[i + 1];
        let mut e = comma.end;
        while e < text.len() && matches!(text[e], b' ' | b'\t') {
            e += 1;
        }
        let (s, e2) = widen_to_line(text, t.start, comma.end);
        if e2 > comma.end && text.get(e2 - 1) == Some(&b'\n') {
            return Some((s, e2));
        }
        return Some((t.start, e));
    }
    if closes(next) {
        if prev == b"," {
            let comma = &toks[i - 1];
            return Some((comma.start, t.end));
        }
        return Some((t.start, t.end));
    }
    None
}

/// A review item at byte `at` of `text`: its line, column and the code on that line.
pub(crate) fn review_item(
    index: &crate::lint::LineIndex,
    text: &[u8],
    at: usize,
    rule: &str,
    message: String,
    suggestion: String,
) -> ReviewItem {
    let at_pos = index.position(at);
    let line = at_pos.line;
    let ls = index.line_start(line);
    let le = text[at.min(text.len())..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(text.len(), |p| at + p);
    ReviewItem {
        line,
        column: at_pos.column,
        rule: rule.to_string(),
        code: String::from_utf8_lossy(&text[ls..le]).trim().to_string(),
        message,
        suggestion,
        at: (at, 0),
    }
}

fn review_items(rule: &Rule, text: &[u8], toks: &[Token], out: &mut Vec<ReviewItem>) -> Result<()> {
    let m = Matcher::new(text, toks);
    let index = crate::lint::LineIndex::new(text);
    let mut push = |at: usize, message: String, suggestion: String| {
        out.push(review_item(&index, text, at, &rule.id, message, suggestion));
    };
    match &rule.action {
        Action::Review { pat, suggest } => {
            for (a, _, caps) in pattern_matches(rule, pat, &m) {
                let sug = String::from_utf8_lossy(&expand(suggest, &m, &caps)?).into_owned();
                push(toks[a].start, rule.why.clone(), sug);
            }
        }
        Action::Remove { pat, unless_used } => {
            let matches = pattern_matches(rule, pat, &m);
            let spans: Vec<(usize, usize)> = matches.iter().map(|(a, b, _)| (*a, *b)).collect();
            for (a, b, caps) in matches {
                let var = unless_used
                    .as_deref()
                    .and_then(|v| caps.get(v))
                    .map(|&(x, y)| {
                        let (s, e) = m.span(x, y);
                        String::from_utf8_lossy(&text[s..e]).into_owned()
                    })
                    .unwrap_or_default();
                let mut lines: Vec<String> = uses(&m, unless_used.as_deref(), &caps, &spans)
                    .into_iter()
                    .map(|at| index.line(at).to_string())
                    .collect();
                lines.dedup();
                let why = if has_opaque(toks, a, b) {
                    "it contains a comment or literal".to_string()
                } else if lines.is_empty() {
                    "deleting it would join the tokens around it".to_string()
                } else {
                    format!("`{var}` is still used on line(s) {}", lines.join(", "))
                };
                push(
                    toks[a].start,
                    format!("{} Not removed: {why}.", rule.why),
                    format!("rewrite the uses of `{var}` (see the THC rules), then delete this statement"),
                );
            }
        }
        Action::Include {
            header,
            glob,
            review: true,
            suggest,
            ..
        } => {
            for (ti, name, _) in include_sites(text, toks) {
                let hit = if *glob {
                    name.starts_with(header.as_bytes())
                } else {
                    name == header.as_bytes()
                };
                if hit {
                    push(toks[ti].start, rule.why.clone(), suggest.clone());
                }
            }
        }
        Action::PyString {
            regex,
            drop,
            suggest,
        } => {
            for t in toks {
                if t.kind == Kind::Str && regex.is_match(py_content(t.text(text))) {
                    let why = if *drop {
                        format!("{} Not removed: it is not a plain list element.", rule.why)
                    } else {
                        rule.why.clone()
                    };
                    push(t.start, why, suggest.clone());
                }
            }
        }
        Action::Rewrite { .. } | Action::Include { .. } | Action::NeedsHeader { .. } => {}
    }
    Ok(())
}
