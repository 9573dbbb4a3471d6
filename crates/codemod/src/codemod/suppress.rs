//! Inline suppression, as linters spell it: a comment `// archsmith: ignore[rule-a, rule-b]` (or
//! `# …` in Python) on a line keeps those rules off that line: the codemod does not rewrite there
//! and neither it nor `audit upgrade` reports there. `archsmith: ignore` without a list keeps
//! every rule off the line. Only comments count (the lexer's), never text inside strings.

use super::lexer::{Kind, Token};
use std::collections::BTreeMap;

const MARKER: &str = "archsmith:";

#[derive(Debug, Clone, Default)]
pub struct Suppressions {
    /// Line → the rules kept off it (`None`: all).
    lines: BTreeMap<usize, Option<Vec<String>>>,
}

impl Suppressions {
    /// Whether `text` holds the marker at all (in a comment or not): the cheap test before
    /// lexing for suppressions.
    pub fn any_in(text: &[u8]) -> bool {
        text.windows(MARKER.len()).any(|w| w == MARKER.as_bytes())
    }

    /// The suppression comments among `toks`, the tokens of `text`.
    pub fn read(text: &[u8], toks: &[Token]) -> Suppressions {
        let mut lines = BTreeMap::new();
        if !Suppressions::any_in(text) {
            return Suppressions { lines };
        }
        let index = crate::lint::LineIndex::new(text);
        for t in toks.iter().filter(|t| t.kind == Kind::Comment) {
            let comment = String::from_utf8_lossy(t.text(text));
            if let Some(rules) = parse(&comment) {
                lines.insert(index.line(t.start), rules);
            }
        }
        Suppressions { lines }
    }

    /// Reads `text` with the lexer of `lang`.
    pub fn of(lang: super::Lang, text: &[u8]) -> Suppressions {
        Suppressions::read(text, &(lang.lexer())(text))
    }

    /// Whether `rule` is kept off `line` (1-based).
    pub fn covers(&self, line: usize, rule: &str) -> bool {
        match self.lines.get(&line) {
            None => false,
            Some(None) => true,
            Some(Some(rules)) => rules.iter().any(|r| r == rule),
        }
    }
}

/// `Some(None)`: every rule; `Some(Some(ids))`: those; `None`: not a suppression comment.
fn parse(comment: &str) -> Option<Option<Vec<String>>> {
    let at = comment.find(MARKER)?;
    let rest = comment[at + MARKER.len()..].trim_start();
    let rest = rest.strip_prefix("ignore")?;
    let Some(list) = rest.strip_prefix('[') else {
        // `ignore` alone (or followed by words or the comment's end), not `ignored`/`ignore-x`.
        let next = rest.chars().next();
        return next
            .is_none_or(|c| c.is_whitespace() || c == '*')
            .then_some(None);
    };
    let list = &list[..list.find(']')?];
    Some(Some(
        list.split(',')
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty())
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codemod::Lang;

    #[test]
    fn comments_name_rules_or_all_and_strings_do_not_count() {
        let src = b"a(); // archsmith: ignore[at-check, thc-state]\n\
                    b(); /* archsmith: ignore */\n\
                    c(\"// archsmith: ignore\");\n\
                    d(); // archsmith: ignored here\n";
        let s = Suppressions::of(Lang::Cpp, src);
        assert!(s.covers(1, "at-check") && s.covers(1, "thc-state"));
        assert!(!s.covers(1, "data-ptr"));
        assert!(s.covers(2, "anything"));
        assert!(!s.covers(3, "anything"), "inside a string");
        assert!(!s.covers(4, "anything"));
    }

    #[test]
    fn python_comments() {
        let src = b"x = torch.cuda.amp.autocast()  # archsmith: ignore[torch.cuda.amp.autocast]\n";
        let s = Suppressions::of(Lang::PythonModule, src);
        assert!(s.covers(1, "torch.cuda.amp.autocast"));
        assert!(!s.covers(2, "torch.cuda.amp.autocast"));
    }
}
