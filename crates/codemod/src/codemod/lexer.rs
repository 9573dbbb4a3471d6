//! Byte-level lexers for C/C++/CUDA and for Python (`setup.py`).
//!
//! Both work on `&[u8]` (sources need not be UTF-8) and never fail: a byte they do not understand
//! becomes a one-byte [`Kind::Other`] token, an unterminated comment or literal runs to the end of
//! the input. Whitespace is not a token; everything between two tokens is whitespace (or, inside a
//! preprocessor directive, a `\`-newline continuation).
//!
//! The C lexer knows line and block comments, string and char literals with escapes and the
//! prefixes `u8 u U L`, raw strings `R"delim(...)delim"`, preprocessor directives (bracketed by
//! [`Kind::PpStart`] / [`Kind::PpEnd`] so that rules can see inside `#define` bodies but never
//! match across a directive's end), `#include` header names, and the CUDA launch brackets
//! `<<<` / `>>>`.

use std::ops::Range;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Ident,
    Number,
    /// Punctuation: one byte, or `::`, `->`, `<<<`, `>>>`.
    Punct,
    /// String or char literal, including any prefix and the quotes.
    Str,
    Comment,
    /// `#` (and the directive name) starting a preprocessor directive; `directive` names it.
    PpStart,
    /// Zero-width marker at the newline (or end of input) that ends a directive.
    PpEnd,
    /// `<...>` or `"..."` after `#include`.
    HeaderName,
    /// A byte that fits nothing else (stray, non-ASCII outside literals, NUL, ...).
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
}

impl Token {
    pub fn range(&self) -> Range<usize> {
        self.start..self.end
    }
    pub fn text<'a>(&self, src: &'a [u8]) -> &'a [u8] {
        &src[self.start..self.end]
    }
    /// Comments and literals: the bytes no rule may touch.
    pub fn is_opaque(&self) -> bool {
        matches!(self.kind, Kind::Comment | Kind::Str)
    }
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b'$'
}

fn is_ident_continue(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$'
}

/// Lexes C, C++ or CUDA source.
pub fn lex_c(src: &[u8]) -> Vec<Token> {
    let mut out = Vec::new();
    let mut i = 0;
    let n = src.len();
    // Inside a directive: Some(name of directive).
    let mut in_pp = false;
    let mut pp_is_include = false;
    // True while only whitespace/comments have been seen since the last newline.
    let mut line_start = true;
    while i < n {
        let b = src[i];
        // Line continuation: part of the surrounding whitespace.
        if b == b'\\' && continuation_len(src, i) > 0 {
            i += continuation_len(src, i);
            continue;
        }
        if b == b'\n' {
            if in_pp {
                out.push(Token {
                    kind: Kind::PpEnd,
                    start: i,
                    end: i,
                });
                in_pp = false;
                pp_is_include = false;
            }
            line_start = true;
            i += 1;
            continue;
        }
        if b.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let kind;
        if b == b'/' && src.get(i + 1) == Some(&b'/') {
            // A line comment; a `\`-newline continues it (as in C).
            i += 2;
            while i < n && src[i] != b'\n' {
                if src[i] == b'\\' && continuation_len(src, i) > 0 {
                    i += continuation_len(src, i);
                } else {
                    i += 1;
                }
            }
            out.push(Token {
                kind: Kind::Comment,
                start,
                end: i,
            });
            continue;
        } else if b == b'/' && src.get(i + 1) == Some(&b'*') {
            i += 2;
            loop {
                if i >= n {
                    break;
                }
                if src[i] == b'*' && src.get(i + 1) == Some(&b'/') {
                    i += 2;
                    break;
                }
                i += 1;
            }
            out.push(Token {
                kind: Kind::Comment,
                start,
                end: i,
            });
            continue;
        } else if b == b'#' && line_start && !in_pp {
            // `#` + optional spaces + directive name.
            i += 1;
            while i < n && (src[i] == b' ' || src[i] == b'\t') {
                i += 1;
            }
            let name_start = i;
            while i < n && is_ident_continue(src[i]) {
                i += 1;
            }
            pp_is_include = matches!(
                &src[name_start..i],
                b"include" | b"include_next" | b"import"
            );
            in_pp = true;
            kind = Kind::PpStart;
        } else if pp_is_include && (b == b'<' || b == b'"') {
            let close = if b == b'<' { b'>' } else { b'"' };
            i += 1;
            while i < n && src[i] != close && src[i] != b'\n' {
                i += 1;
            }
            if i < n && src[i] == close {
                i += 1;
            }
            pp_is_include = false;
            kind = Kind::HeaderName;
        } else if let Some(len) = literal_len(src, i) {
            i += len;
            kind = Kind::Str;
        } else if is_ident_start(b) {
            while i < n && is_ident_continue(src[i]) {
                i += 1;
            }
            kind = Kind::Ident;
        } else if b.is_ascii_digit()
            || (b == b'.' && src.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            // pp-number: digits, letters, `.`, `'` separators and exponent signs.
            i += 1;
            while i < n {
                let c = src[i];
                let part = c.is_ascii_alphanumeric()
                    || c == b'.'
                    || c == b'_'
                    || (c == b'\'' && src.get(i + 1).is_some_and(u8::is_ascii_alphanumeric))
                    || ((c == b'+' || c == b'-')
                        && matches!(src[i - 1], b'e' | b'E' | b'p' | b'P'));
                if !part {
                    break;
                }
                i += 1;
            }
            kind = Kind::Number;
        } else if src[i..].starts_with(b"<<<") || src[i..].starts_with(b">>>") {
            i += 3;
            kind = Kind::Punct;
        } else if src[i..].starts_with(b"::") || src[i..].starts_with(b"->") {
            i += 2;
            kind = Kind::Punct;
        } else if b.is_ascii_punctuation() {
            i += 1;
            kind = Kind::Punct;
        } else {
            i += 1;
            kind = Kind::Other;
        }
        line_start = false;
        out.push(Token {
            kind,
            start,
            end: i,
        });
    }
    if in_pp {
        out.push(Token {
            kind: Kind::PpEnd,
            start: n,
            end: n,
        });
    }
    out
}

/// Length of a `\` + optional spaces + newline sequence at `i`, or 0.
fn continuation_len(src: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    while j < src.len() && (src[j] == b' ' || src[j] == b'\t' || src[j] == b'\r') {
        j += 1;
    }
    if j < src.len() && src[j] == b'\n' {
        j + 1 - i
    } else {
        0
    }
}

/// If a string/char literal (with optional prefix, possibly raw) starts at `i`, its length.
fn literal_len(src: &[u8], i: usize) -> Option<usize> {
    // Prefixes: u8, u, U, L, each optionally followed by R.
    let mut j = i;
    for p in [&b"u8"[..], b"u", b"U", b"L"] {
        if src[j..].starts_with(p) {
            j += p.len();
            break;
        }
    }
    let raw = src.get(j) == Some(&b'R');
    if raw {
        j += 1;
    }
    let q = *src.get(j)?;
    if q != b'"' && q != b'\'' {
        return None;
    }
    // A prefix must not be the tail of a longer identifier (checked by the caller's position: we
    // are only called at token starts) and a bare identifier like `LR` is not a prefix.
    if raw && q == b'"' {
        return Some(raw_string_len(src, i, j));
    }
    if raw {
        // `R'` is not a raw literal: `R` is an identifier.
        return None;
    }
    let mut k = j + 1;
    while k < src.len() {
        match src[k] {
            b'\\' => k += 2,
            b'\n' => return Some(k - i), // unterminated: stop at the line end
            c if c == q => return Some(k + 1 - i),
            _ => k += 1,
        }
    }
    Some(src.len() - i)
}

/// `R"delim( ... )delim"` starting at `i` with the opening quote at `q`.
fn raw_string_len(src: &[u8], i: usize, q: usize) -> usize {
    let mut k = q + 1;
    // The delimiter: up to 16 chars, no spaces, parens or backslashes.
    while k < src.len() && k - q <= 17 && !matches!(src[k], b'(' | b')' | b'\\' | b' ' | b'\n') {
        k += 1;
    }
    if src.get(k) != Some(&b'(') {
        // Malformed: treat as an ordinary string up to the line end.
        let end = src[q + 1..]
            .iter()
            .position(|&c| c == b'"' || c == b'\n')
            .map_or(src.len(), |p| q + 1 + p + 1);
        return end.min(src.len()) - i;
    }
    let delim = &src[q + 1..k];
    let mut close = Vec::with_capacity(delim.len() + 2);
    close.push(b')');
    close.extend_from_slice(delim);
    close.push(b'"');
    let body = k + 1;
    match src[body..].windows(close.len()).position(|w| w == close) {
        Some(p) => body + p + close.len() - i,
        None => src.len() - i,
    }
}

/// Lexes Python source (enough for `setup.py`): comments, all string forms, identifiers, numbers,
/// punctuation. Preprocessor kinds never occur.
pub fn lex_python(src: &[u8]) -> Vec<Token> {
    let mut out = Vec::new();
    let mut i = 0;
    let n = src.len();
    while i < n {
        let b = src[i];
        if b.is_ascii_whitespace() || (b == b'\\' && continuation_len(src, i) > 0) {
            i += if b == b'\\' {
                continuation_len(src, i)
            } else {
                1
            };
            continue;
        }
        let start = i;
        let kind;
        if b == b'#' {
            while i < n && src[i] != b'\n' {
                i += 1;
            }
            kind = Kind::Comment;
        } else if let Some(len) = py_string_len(src, i) {
            i += len;
            kind = Kind::Str;
        } else if is_ident_start(b) {
            while i < n && is_ident_continue(src[i]) {
                i += 1;
            }
            kind = Kind::Ident;
        } else if b.is_ascii_digit() {
            while i < n && (src[i].is_ascii_alphanumeric() || src[i] == b'.' || src[i] == b'_') {
                i += 1;
            }
            kind = Kind::Number;
        } else if b.is_ascii_punctuation() {
            i += 1;
            kind = Kind::Punct;
        } else {
            i += 1;
            kind = Kind::Other;
        }
        out.push(Token {
            kind,
            start,
            end: i,
        });
    }
    out
}

fn py_string_len(src: &[u8], i: usize) -> Option<usize> {
    let mut j = i;
    while j < src.len()
        && j - i < 2
        && matches!(src[j].to_ascii_lowercase(), b'r' | b'b' | b'u' | b'f')
    {
        j += 1;
    }
    let q = *src.get(j)?;
    if q != b'"' && q != b'\'' {
        return None;
    }
    let triple = src[j..].starts_with(&[q, q, q]);
    let mut k = j + if triple { 3 } else { 1 };
    while k < src.len() {
        let c = src[k];
        if c == b'\\' {
            // Even in raw strings a backslash keeps the next quote from ending the string.
            k += 2;
            continue;
        }
        if triple {
            if src[k..].starts_with(&[q, q, q]) {
                return Some(k + 3 - i);
            }
        } else if c == q {
            return Some(k + 1 - i);
        } else if c == b'\n' {
            return Some(k - i);
        }
        k += 1;
    }
    Some(src.len() - i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(Kind, String)> {
        lex_c(src.as_bytes())
            .iter()
            .map(|t| {
                (
                    t.kind,
                    String::from_utf8_lossy(t.text(src.as_bytes())).into_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn comments_and_literals_are_single_tokens() {
        let toks = kinds(
            "a // AT_CHECK(x)\n/* AT_CHECK( */ \"AT_CHECK(\\\"\" 'x' u8\"s\" L'\\'' U\"q\" b",
        );
        let texts: Vec<_> = toks.iter().map(|(k, t)| (*k, t.as_str())).collect();
        assert_eq!(
            texts,
            vec![
                (Kind::Ident, "a"),
                (Kind::Comment, "// AT_CHECK(x)"),
                (Kind::Comment, "/* AT_CHECK( */"),
                (Kind::Str, "\"AT_CHECK(\\\"\""),
                (Kind::Str, "'x'"),
                (Kind::Str, "u8\"s\""),
                (Kind::Str, "L'\\''"),
                (Kind::Str, "U\"q\""),
                (Kind::Ident, "b"),
            ]
        );
    }

    #[test]
    fn raw_strings_end_only_at_their_delimiter() {
        let src = "x = R\"py(a )\" AT_CHECK( )py\"; y";
        let toks = kinds(src);
        assert_eq!(toks[2], (Kind::Str, "R\"py(a )\" AT_CHECK( )py\"".into()));
        assert_eq!(toks[4], (Kind::Ident, "y".into()));
        // `R` alone and `LR`-like identifiers stay identifiers.
        assert_eq!(kinds("R + LR")[0], (Kind::Ident, "R".into()));
    }

    #[test]
    fn directives_are_bracketed_and_continue_over_backslash_newlines() {
        let src = "#define CHECK(x) \\\n  AT_CHECK(x, \"m\")\nint y;\n#include <THC/THC.h>\n# include \"a.h\"";
        let toks = kinds(src);
        assert_eq!(toks[0], (Kind::PpStart, "#define".into()));
        let end = toks.iter().position(|t| t.0 == Kind::PpEnd).unwrap();
        assert!(toks[..end].iter().any(|t| t.1 == "AT_CHECK"));
        assert_eq!(toks[end + 1], (Kind::Ident, "int".into()));
        assert!(toks.contains(&(Kind::HeaderName, "<THC/THC.h>".into())));
        assert!(toks.contains(&(Kind::HeaderName, "\"a.h\"".into())));
        assert_eq!(toks.last().unwrap().0, Kind::PpEnd);
    }

    #[test]
    fn launch_brackets_and_scope_are_tokens() {
        let toks = kinds("k<<<g, b>>>(at::x->y); a < b >> c");
        let texts: Vec<_> = toks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(
            texts,
            vec![
                "k", "<<<", "g", ",", "b", ">>>", "(", "at", "::", "x", "->", "y", ")", ";", "a",
                "<", "b", ">", ">", "c"
            ]
        );
    }

    #[test]
    fn hash_mid_line_is_not_a_directive() {
        let toks = kinds("#define S(x) #x\n");
        assert_eq!(toks[0].0, Kind::PpStart);
        assert_eq!(toks.iter().filter(|t| t.0 == Kind::PpStart).count(), 1);
    }

    #[test]
    fn unterminated_things_end_at_input_end() {
        for src in [
            "/* open",
            "\"open",
            "R\"d(open",
            "'",
            "#include <x",
            "u8",
            "\\",
        ] {
            let toks = lex_c(src.as_bytes());
            assert!(toks.iter().all(|t| t.end <= src.len()));
        }
    }

    #[test]
    fn python_strings() {
        let src = b"x = ['-std=c++14', r'a\\'b', \"\"\"tri\n'ple\"\"\", f\"{x}\"]  # c";
        let toks = lex_python(src);
        let strs: Vec<_> = toks
            .iter()
            .filter(|t| t.kind == Kind::Str)
            .map(|t| String::from_utf8_lossy(t.text(src)).into_owned())
            .collect();
        assert_eq!(
            strs,
            vec![
                "'-std=c++14'",
                "r'a\\'b'",
                "\"\"\"tri\n'ple\"\"\"",
                "f\"{x}\""
            ]
        );
        assert_eq!(toks.last().unwrap().kind, Kind::Comment);
    }
}
