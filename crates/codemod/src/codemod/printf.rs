//! printf-style check messages turned into the argument list `TORCH_CHECK` concatenates.
//!
//! `AT_ASSERTM(c, "batch(%d) must divide im2col_step(%d)", b, s)` printed its numbers through
//! printf in the THC era; `TORCH_CHECK` (and `AT_ASSERTM` today) streams every argument after the
//! condition, so the same call prints `batch(%d) must divide im2col_step(%d)32 4`. The rewrite
//! splits the format string at its placeholders and puts each value in its place:
//! `"batch(", b, ") must divide im2col_step(", s, ")"` — the text printed is the printf text.
//!
//! Only conversions whose stream output equals printf's are taken (`%d %i %u %s` with the `h`,
//! `l`, `ll`, `z`, `j`, `t` lengths, and `%%`); a width, a precision, a flag or `%f`/`%x`/`%c`/`%p`
//! would print differently, and a count of placeholders that differs from the values left is a
//! bug for a human: those calls are left alone (the `printf-in-check` review item reports them).
//! The literal's other bytes, escapes included, are kept as written.

use super::lexer::{lex_c, Kind};

/// The argument list `"fmt", a, b` rewritten as `"pre", a, "mid", b, "post"`; None when it is not
/// a format string whose every conversion streams the same, with one value per placeholder.
pub fn printf_to_args(args: &[u8]) -> Option<Vec<u8>> {
    let toks: Vec<_> = lex_c(args)
        .into_iter()
        .filter(|t| !matches!(t.kind, Kind::PpEnd))
        .collect();
    if toks.iter().any(|t| t.kind == Kind::Comment) {
        return None;
    }
    // Top-level commas split the values.
    let mut depth = 0i32;
    let mut parts: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    for t in &toks {
        match (t.kind, t.text(args)) {
            (Kind::Punct, b"(" | b"[" | b"{") => depth += 1,
            (Kind::Punct, b")" | b"]" | b"}") => depth -= 1,
            (Kind::Punct, b",") if depth == 0 => {
                parts.push((start, t.start));
                start = t.end;
            }
            _ => {}
        }
    }
    parts.push((start, args.len()));
    // The format: exactly one plain string literal (no prefix, no adjacent pieces, no macro).
    let (fs, fe) = parts[0];
    let fmt_toks: Vec<_> = toks
        .iter()
        .filter(|t| t.start >= fs && t.end <= fe)
        .collect();
    let [lit] = fmt_toks.as_slice() else {
        return None;
    };
    let raw = lit.text(args);
    if lit.kind != Kind::Str || raw.len() < 2 || raw[0] != b'"' || raw[raw.len() - 1] != b'"' {
        return None;
    }
    let body = &raw[1..raw.len() - 1];
    let pieces = split_format(body)?;
    // Each value with the separator written before it (`,` and any line break and indent), so
    // the call keeps its line breaks where they were.
    let mut values: Vec<(&[u8], &[u8])> = Vec::new();
    let mut prev_end = fe;
    for &(s, e) in &parts[1..] {
        let v = trim(&args[s..e]);
        let v_start = s + (args[s..e].len() - args[s..e].trim_ascii_start().len());
        values.push((&args[prev_end..v_start], v));
        prev_end = v_start + v.len();
    }
    if pieces.len() != values.len() + 1
        || values.is_empty()
        || values.iter().any(|v| v.1.is_empty())
    {
        return None;
    }
    let quoted = |p: &[u8]| [&b"\""[..], p, b"\""].concat();
    // The leading whitespace of the capture stays where it was.
    let mut out = args[..fs].to_vec();
    out.extend_from_slice(&args[fs..lit.start]);
    let mut wrote = false;
    for (i, piece) in pieces.iter().enumerate() {
        if !piece.is_empty() {
            if wrote {
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(&quoted(piece));
            wrote = true;
        }
        if let Some((sep, v)) = values.get(i) {
            if wrote {
                out.extend_from_slice(sep);
            }
            out.extend_from_slice(v);
            wrote = true;
        }
    }
    out.extend_from_slice(&args[prev_end..]);
    Some(out)
}

/// The literal's body split at its conversions (`%%` kept as one `%`, since the pieces are no
/// longer formats); None at a conversion that does not stream as printf prints it.
fn split_format(body: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut pieces = vec![Vec::new()];
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'\\' => {
                // An escape is copied whole: `\%` is not a conversion, `\"` not the end.
                let end = (i + 2).min(body.len());
                pieces.last_mut()?.extend_from_slice(&body[i..end]);
                i = end;
            }
            b'%' if body.get(i + 1) == Some(&b'%') => {
                pieces.last_mut()?.push(b'%');
                i += 2;
            }
            b'%' => {
                let mut j = i + 1;
                while j < body.len() && matches!(body[j], b'h' | b'l' | b'z' | b'j' | b't') {
                    j += 1;
                }
                if j - i > 3 || !matches!(body.get(j), Some(b'd' | b'i' | b'u' | b's')) {
                    return None;
                }
                pieces.push(Vec::new());
                i = j + 1;
            }
            c => {
                pieces.last_mut()?.push(c);
                i += 1;
            }
        }
    }
    Some(pieces)
}

fn trim(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

#[cfg(test)]
mod tests {
    use super::printf_to_args;

    fn t(s: &str) -> Option<String> {
        printf_to_args(s.as_bytes()).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn placeholders_become_values_in_place() {
        assert_eq!(
            t(r#""batch(%d) must divide im2col_step(%d)", batch, im2col_step"#).as_deref(),
            Some(r#""batch(", batch, ") must divide im2col_step(", im2col_step, ")""#)
        );
        assert_eq!(
            t(r#" "%ldD input expected, got %s", x.dim(), name.c_str()"#).as_deref(),
            Some(r#" x.dim(), "D input expected, got ", name.c_str()"#)
        );
        // `%%` prints one `%`; escapes stay as written.
        assert_eq!(
            t(r#""100%% of \"%s\"\n", f(a, b)"#).as_deref(),
            Some(r#""100% of \"", f(a, b), "\"\n""#)
        );
    }

    #[test]
    fn anything_that_would_print_differently_is_left_alone() {
        for s in [
            r#""%5d", n"#,         // width
            r#""%.3f", x"#,        // precision, float
            r#""%x", n"#,          // hex
            r#""%d %d", n"#,       // a value missing
            r#""%d", n, m"#,       // one too many
            r#""no placeholder""#, // nothing to do
            r#"MSG, n"#,           // not a literal
            r#""a" "%d", n"#,      // adjacent pieces
            r#"L"%d", n"#,         // a prefix
            r#""%d", /* n */ n"#,  // a comment would be moved
        ] {
            assert_eq!(t(s), None, "{s}");
        }
    }
}
