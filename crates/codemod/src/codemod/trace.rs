//! Where each rewrite happened in the file as it was read. The rules run one after another, each
//! on the output of the one before, so a rule's match is found in a text that earlier rules
//! already changed; a linter's `file:line:col` and a SARIF fix must point into the file on disk.
//! [`Trace`] keeps every step's edits and maps a step's offsets back through the steps before it.

/// One replacement of a step: `[start, end)` of the step's input became `new_len` bytes.
type Span = (usize, usize, usize);

/// A rewrite by one rule, in the coordinates of its step's input.
#[derive(Debug, Clone)]
struct Mark {
    rule: String,
    start: usize,
    end: usize,
    /// The bytes it replaced and their replacement, when the rewrite is one replacement.
    fix: Option<(Vec<u8>, Vec<u8>)>,
}

#[derive(Debug, Clone, Default)]
struct Step {
    /// Sorted by start, non-overlapping.
    edits: Vec<Span>,
    /// Per edit: where it starts in the step's output, and output offset − input offset just
    /// after it. [`Step::back`] binary-searches these: a file with one rewrite per line has as
    /// many edits as lines, and a linear walk per mapped offset made `--check` quadratic.
    out_starts: Vec<usize>,
    delta_after: Vec<isize>,
    marks: Vec<Mark>,
}

impl Step {
    fn new(edits: Vec<Span>, marks: Vec<Mark>) -> Step {
        let mut out_starts = Vec::with_capacity(edits.len());
        let mut delta_after = Vec::with_capacity(edits.len());
        let mut delta: isize = 0;
        for &(s, e, new_len) in &edits {
            out_starts.push((s as isize + delta) as usize);
            delta += new_len as isize - (e - s) as isize;
            delta_after.push(delta);
        }
        Step {
            edits,
            out_starts,
            delta_after,
            marks,
        }
    }

    /// The offset in this step's input of offset `p` of its output; a byte inside a replacement
    /// maps to the replaced range's start.
    fn back(&self, p: usize) -> usize {
        // The last edit starting (in the output) at or before `p`; out_starts never decreases
        // (each edit's output starts at or after the previous one's output ends).
        let Some(i) = self.out_starts.partition_point(|&o| o <= p).checked_sub(1) else {
            return p;
        };
        let (s, _, new_len) = self.edits[i];
        if p < self.out_starts[i] + new_len {
            return s;
        }
        (p as isize - self.delta_after[i]).max(0) as usize
    }
}

/// A rewrite in the file as read: `[start, end)` and, when the rewrite is exactly one
/// replacement of those bytes, what replaces them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub rule: String,
    pub start: usize,
    pub end: usize,
    pub replacement: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Default)]
pub struct Trace {
    steps: Vec<Step>,
}

impl Trace {
    /// One rule's edits on `text` (`[s, e)` → bytes), each a rewrite of that rule.
    pub fn rewrites(&mut self, rule: &str, text: &[u8], edits: &[(usize, usize, Vec<u8>)]) {
        let mut sorted: Vec<&(usize, usize, Vec<u8>)> = edits.iter().collect();
        sorted.sort_by_key(|e| e.0);
        self.steps.push(Step::new(
            sorted.iter().map(|(s, e, r)| (*s, *e, r.len())).collect(),
            sorted
                .iter()
                .map(|(s, e, r)| Mark {
                    rule: rule.to_string(),
                    start: *s,
                    end: *e,
                    fix: text.get(*s..*e).map(|old| (old.to_vec(), r.clone())),
                })
                .collect(),
        ));
    }

    /// A step whose edits are given as ranges with their new lengths, and whose rewrites are
    /// named separately (`marks`: rule and the input range it rewrote, no exact fix).
    pub fn step(&mut self, mut edits: Vec<Span>, marks: Vec<(String, usize, usize)>) {
        edits.sort_by_key(|e| e.0);
        self.steps.push(Step::new(
            edits,
            marks
                .into_iter()
                .map(|(rule, start, end)| Mark {
                    rule,
                    start,
                    end,
                    fix: None,
                })
                .collect(),
        ));
    }

    /// A change no rule is reported for (an include the rules need): kept so later offsets map.
    pub fn changed(&mut self, old: &[u8], new: &[u8]) {
        let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
        let max_suffix = old.len().min(new.len()) - prefix;
        let suffix = old
            .iter()
            .rev()
            .zip(new.iter().rev())
            .take(max_suffix)
            .take_while(|(a, b)| a == b)
            .count();
        if prefix == old.len() && prefix == new.len() {
            return;
        }
        self.step(
            vec![(prefix, old.len() - suffix, new.len() - suffix - prefix)],
            vec![],
        );
    }

    /// The steps of a later phase, which ran on this trace's output.
    pub fn extend(&mut self, later: Trace) {
        self.steps.extend(later.steps);
    }

    /// How many steps it holds.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The offset in the first step's input of offset `p` of the text the first `steps` steps
    /// made (all of them: the last step's output).
    pub fn origin(&self, steps: usize, p: usize) -> usize {
        let steps = steps.min(self.steps.len());
        self.steps[..steps].iter().rev().fold(p, |p, s| s.back(p))
    }

    /// Every rewrite in the coordinates of `src`, the text the first step read; a fix is kept
    /// only where the bytes it replaces are those of `src` (no earlier rule changed them).
    pub fn sites(&self, src: &[u8]) -> Vec<Site> {
        let mut out = Vec::new();
        for (k, step) in self.steps.iter().enumerate() {
            let back = |p: usize| self.steps[..k].iter().rev().fold(p, |p, s| s.back(p));
            for m in &step.marks {
                let (start, end) = (back(m.start), back(m.end).max(back(m.start)));
                let replacement = m.fix.as_ref().and_then(|(old, new)| {
                    (src.get(start..end) == Some(old.as_slice())).then(|| new.clone())
                });
                out.push(Site {
                    rule: m.rule.clone(),
                    start,
                    end,
                    replacement,
                });
            }
        }
        out.sort_by(|a, b| (a.start, &a.rule).cmp(&(b.start, &b.rule)));
        out.dedup_by(|a, b| a.start == b.start && a.rule == b.rule);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn splice(text: &[u8], edits: &[(usize, usize, Vec<u8>)]) -> Vec<u8> {
        let mut out = text.to_vec();
        let mut sorted = edits.to_vec();
        sorted.sort_by_key(|e| std::cmp::Reverse(e.0));
        for (s, e, r) in sorted {
            out.splice(s..e, r);
        }
        out
    }

    /// The binary search in [`Step::back`] against the plain walk it replaced, on edits that grow,
    /// shrink, delete and insert, at every output offset.
    #[test]
    fn back_agrees_with_a_walk_over_every_edit() {
        fn walk(edits: &[Span], p: usize) -> usize {
            let mut delta: isize = 0;
            for &(s, e, new_len) in edits {
                let out_start = (s as isize + delta) as usize;
                if p < out_start {
                    break;
                }
                if p < out_start + new_len {
                    return s;
                }
                delta += new_len as isize - (e - s) as isize;
            }
            (p as isize - delta).max(0) as usize
        }
        let mut seed = 7u64;
        let mut next = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) % m) as usize
        };
        for _ in 0..200 {
            let mut edits = Vec::new();
            let mut at = 0;
            for _ in 0..next(12) {
                let s = at + next(4);
                let e = s + next(4);
                edits.push((s, e, next(6)));
                at = e;
            }
            let step = Step::new(edits.clone(), Vec::new());
            for p in 0..at + 30 {
                assert_eq!(step.back(p), walk(&edits, p), "{edits:?} at {p}");
            }
        }
    }

    #[test]
    fn a_later_rules_match_maps_to_the_file_as_read() {
        let src = b"AT_CHECK(a); x.data<float>(); AT_CHECK(b);";
        let mut t = Trace::default();
        // Rule 1 lengthens both AT_CHECKs; rule 2 then rewrites `data` between them.
        let e1 = vec![
            (0, 8, b"TORCH_CHECK".to_vec()),
            (30, 38, b"TORCH_CHECK".to_vec()),
        ];
        t.rewrites("at-check", src, &e1);
        let t1 = splice(src, &e1);
        let at = t1.windows(4).position(|w| w == b"data").unwrap();
        let e2 = vec![(at, at + 4, b"data_ptr".to_vec())];
        t.rewrites("data-ptr", &t1, &e2);
        let sites = t.sites(src);
        let data = src.windows(4).position(|w| w == b"data").unwrap();
        assert_eq!(
            sites
                .iter()
                .map(|s| (s.rule.as_str(), s.start, s.end))
                .collect::<Vec<_>>(),
            vec![
                ("at-check", 0, 8),
                ("data-ptr", data, data + 4),
                ("at-check", 30, 38)
            ]
        );
        // Each fix replaces exactly the bytes of the file as read.
        assert!(sites.iter().all(|s| s.replacement.is_some()));
    }

    #[test]
    fn a_rewrite_of_text_an_earlier_rule_wrote_has_no_exact_fix() {
        let src = b"f(OLD);";
        let mut t = Trace::default();
        t.rewrites("one", src, &[(2, 5, b"MID".to_vec())]);
        t.rewrites("two", b"f(MID);", &[(2, 5, b"NEW".to_vec())]);
        let sites = t.sites(src);
        assert_eq!(sites.len(), 2);
        assert_eq!(sites[0].replacement.as_deref(), Some(&b"MID"[..]));
        assert_eq!(sites[1].replacement, None);
        assert_eq!((sites[1].start, sites[1].end), (2, 5));
    }

    #[test]
    fn an_unreported_insertion_shifts_later_offsets_back() {
        let src = b"int f();\nAT_CHECK(x);\n";
        let with_include = b"#include <c10/util/Exception.h>\nint f();\nAT_CHECK(x);\n";
        let mut t = Trace::default();
        t.changed(src, with_include);
        let at = with_include
            .windows(8)
            .position(|w| w == b"AT_CHECK")
            .unwrap();
        t.rewrites(
            "at-check",
            with_include,
            &[(at, at + 8, b"TORCH_CHECK".to_vec())],
        );
        let sites = t.sites(src);
        assert_eq!((sites[0].start, sites[0].end), (9, 17));
        assert_eq!(sites[0].replacement.as_deref(), Some(&b"TORCH_CHECK"[..]));
    }
}
