//! ATen operator schemas as torch's own `native_functions.yaml` states them (every torch wheel
//! from 1.12 carries it as `torchgen/packaged/ATen/native/native_functions.yaml`), and the calls
//! of `at::NAME(…)`/`torch::NAME(…)` in C++/CUDA source, so a port reads what changed between two
//! releases from the releases themselves instead of from rules written by hand.
//!
//! Only what a call's arity needs is read: each overload's signature, how many arguments the
//! C++ function takes, and how many of them have no default. The YAML is read line by line (each
//! entry's `- func:` line holds the whole schema); nothing else of the file is interpreted.

use super::lexer::{lex_c, Kind};
use std::collections::BTreeMap;

/// One overload of an operator: `leaky_relu_backward(Tensor grad_output, …) -> Tensor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overload {
    /// The schema as the YAML writes it.
    pub signature: String,
    /// The operator's name and overload name as the dispatcher knows them (`baddbmm`, `out`).
    pub op: String,
    pub overload: String,
    /// What it returns as the schema writes it: `Tensor(a!)`, `(Tensor values, Tensor indices)`.
    pub returns: String,
    /// Arguments the C++ function takes. An overload with `out=` tensors is `NAME_out`'s, whose
    /// C++ form takes them first.
    pub total: usize,
    /// Those without a default.
    pub required: usize,
    /// The C++ function's arguments in its order (`NAME_out`'s out= tensors first).
    pub args: Vec<Arg>,
}

/// One argument of an overload: `bool self_is_result`, `int[2] stride=[]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg {
    pub ty: String,
    pub name: String,
    /// The schema's default (`False`, `[]`, `None`), None when the caller must pass it.
    pub default: Option<String>,
    /// Its place in the schema's order: the dispatcher's stack order.
    pub position: usize,
}

impl Arg {
    /// `Tensor(a!) out`, `int[2] size=[1, 1]` → its type, name and default.
    fn parse(text: &str, position: usize) -> Arg {
        let (decl, default) = match text.split_once('=') {
            Some((d, v)) => (d.trim(), Some(v.trim().to_string())),
            None => (text.trim(), None),
        };
        let (ty, name) = decl.rsplit_once(' ').unwrap_or(("", decl));
        Arg {
            ty: ty.trim().to_string(),
            name: name.to_string(),
            default,
            position,
        }
    }
}

impl Overload {
    /// What the dispatcher's boxed stack holds for this overload: each argument's type in the
    /// schema's order, then what it returns. Two releases whose overloads agree on this take the
    /// same stack from a caller (names and defaults may differ: a wrapper passes every argument).
    fn stack_shape(&self) -> (Vec<&str>, &str) {
        let mut args: Vec<&Arg> = self.args.iter().collect();
        args.sort_by_key(|a| a.position);
        (args.iter().map(|a| a.ty.as_str()).collect(), &self.returns)
    }

    /// Whether a C++ call with `n` arguments can bind to this overload.
    pub fn accepts(&self, n: usize) -> bool {
        self.required <= n && n <= self.total
    }
}

/// One release's schemas and which release they are.
#[derive(Debug, Clone)]
pub struct Release {
    pub torch: String,
    pub schemas: Schemas,
    /// The oldest release the wrappers must also run on, whose overloads `schemas` were checked
    /// against ([`Schemas::reachable_from`]); None when `torch` is that release.
    pub floor: Option<String>,
}

/// The operators of one release, by name (less the overload name).
#[derive(Debug, Clone, Default)]
pub struct Schemas {
    ops: BTreeMap<String, Vec<Overload>>,
    /// Overloads (`op`, `overload`) that an older release a stable wheel must also run on does
    /// not have with the same dispatcher stack, and why ([`Self::reachable_from`]).
    not_in_floor: BTreeMap<(String, String), String>,
}

impl Schemas {
    /// Reads `native_functions.yaml`'s text. Lines that are not a well-formed `- func:` schema
    /// are skipped: the file is torch's, and a line this reader cannot split is no call's
    /// verdict.
    pub fn parse(yaml: &str) -> Schemas {
        let mut ops: BTreeMap<String, Vec<Overload>> = BTreeMap::new();
        for line in yaml.lines() {
            let Some(sig) = line.strip_prefix("- func:").map(str::trim) else {
                continue;
            };
            let (Some(open), Some(close)) = (sig.find('('), sig.rfind(") ->")) else {
                continue;
            };
            if close < open {
                continue;
            }
            let (name, overload) = sig[..open].split_once('.').unwrap_or((&sig[..open], ""));
            let (op, returns) = (name.to_string(), sig[close + 4..].trim().to_string());
            let (mut args, mut outs) = (Vec::new(), Vec::new());
            let mut kwarg_only = false;
            for arg in split_top(&sig[open + 1..close]) {
                if arg == "*" {
                    kwarg_only = true;
                    continue;
                }
                let position = args.len() + outs.len();
                // `Tensor(a!) out` after `*`: an out= tensor, which the C++ API takes first in
                // `NAME_out(out, …)`, not in `NAME(…)`.
                match kwarg_only && arg.contains("!)") {
                    true => outs.push(Arg::parse(arg, position)),
                    false => args.push(Arg::parse(arg, position)),
                }
            }
            let name = match outs.len() {
                0 => name.to_string(),
                _ => format!("{name}_out"),
            };
            outs.extend(args);
            let args = outs;
            ops.entry(name).or_default().push(Overload {
                signature: sig.to_string(),
                op,
                overload: overload.to_string(),
                returns,
                total: args.len(),
                required: args.iter().filter(|a| a.default.is_none()).count(),
                args,
            });
        }
        Schemas {
            ops,
            not_in_floor: BTreeMap::new(),
        }
    }

    /// Marks each overload that `floor` (torch `floor_torch`, the oldest release a stable wheel
    /// targets) lacks, or has with another stack: a wrapper typed from these schemas would
    /// compile and then fail, or pass a stack of the wrong shape, on that release
    /// (`torch_call_dispatcher` looks the overload up by name at run time).
    pub fn reachable_from(&mut self, floor: &Schemas, floor_torch: &str) {
        for (name, overloads) in &self.ops {
            for o in overloads {
                let theirs = (floor.overloads(name).unwrap_or_default().iter())
                    .find(|f| f.op == o.op && f.overload == o.overload);
                let why = match theirs {
                    None => format!("not in torch {floor_torch}, the oldest release the stable wheel targets"),
                    Some(f) if f.stack_shape() != o.stack_shape() => format!(
                        "torch {floor_torch}, the oldest release the stable wheel targets, has another schema (`{}`)",
                        f.signature
                    ),
                    Some(_) => continue,
                };
                self.not_in_floor
                    .insert((o.op.clone(), o.overload.clone()), why);
            }
        }
    }

    /// Why `o` must not be called through the dispatcher by a wheel for the older release
    /// [`Self::reachable_from`] was given; None when that release has it as this one does.
    pub fn floor_refusal(&self, o: &Overload) -> Option<&str> {
        self.not_in_floor
            .get(&(o.op.clone(), o.overload.clone()))
            .map(String::as_str)
    }

    /// How many overloads [`Self::reachable_from`] marked.
    pub fn not_in_floor(&self) -> usize {
        self.not_in_floor.len()
    }

    /// The overloads of `name`; None when the release has no such operator.
    pub fn overloads(&self, name: &str) -> Option<&[Overload]> {
        self.ops.get(name).map(Vec::as_slice)
    }

    /// Whether a call of `name` with `n` arguments binds in this release: None when the
    /// release has no such operator.
    pub fn accepts(&self, name: &str, n: usize) -> Option<bool> {
        self.overloads(name)
            .map(|ovs| ovs.iter().any(|o| o.accepts(n)))
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// `Tensor self, int[2] size=[1, 1], *, Tensor(a!) out` → its arguments (commas inside `[]`,
/// `()` and quotes do not split).
fn split_top(args: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start, mut quote) = (0i32, 0, None);
    for (i, c) in args.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[' | '(') => depth += 1,
            (None, ']' | ')') => depth -= 1,
            (None, ',') if depth == 0 => {
                out.push(args[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(args[start..].trim());
    out.retain(|a| !a.is_empty());
    out
}

/// A call `at::NAME(a, b)` or `torch::NAME(a, b)` in C++/CUDA source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub name: String,
    /// 1-based.
    pub line: usize,
    pub args: usize,
    /// Each argument's bytes in the source (from its first token to its last).
    pub arg_spans: Vec<std::ops::Range<usize>>,
    /// The bytes of its `at::`, `::at::` or `torch::`.
    pub qualifier: std::ops::Range<usize>,
}

/// The `at::`/`torch::` function calls of `src` (never in comments or literals): a name right
/// after the namespace, so `at::cuda::x()` and `at::Tensor(…)` types are not calls of an op
/// (a name no release's schemas list is no operator, and the caller skips it).
pub fn calls(src: &[u8]) -> Vec<Call> {
    let toks: Vec<_> = lex_c(src)
        .into_iter()
        .filter(|t| t.kind != Kind::Comment)
        .collect();
    let text = |i: usize| toks.get(i).map_or(&b""[..], |t| t.text(src));
    let mut out = Vec::new();
    // Lines counted as the scan moves on, not from the file's start for each call.
    let (mut line, mut counted) = (1usize, 0usize);
    for i in 0..toks.len() {
        let ns = text(i);
        if !(ns == b"at" || ns == b"torch") || text(i + 1) != b"::" {
            continue;
        }
        // `c10::at::x` or `x.at::y` are not ours; `::at::x` is.
        let qualified = i > 1 && text(i - 1) == b"::" && toks[i - 2].kind == Kind::Ident;
        if qualified || (i > 0 && text(i - 1) == b".") {
            continue;
        }
        let Some(name_tok) = toks.get(i + 2).filter(|t| t.kind == Kind::Ident) else {
            continue;
        };
        if text(i + 3) != b"(" {
            continue;
        }
        // Arguments: the tokens between the commas at the call's own depth.
        let mut depth = 0i32;
        let mut arg_spans: Vec<std::ops::Range<usize>> = Vec::new();
        let mut current: Option<std::ops::Range<usize>> = None;
        for t in &toks[i + 3..] {
            let text = t.text(src);
            match text {
                b"(" | b"[" | b"{" => depth += 1,
                b")" | b"]" | b"}" => depth -= 1,
                _ => {}
            }
            let end = t.start + text.len();
            match (depth, text) {
                (0, _) | (1, b",") => arg_spans.extend(current.take()),
                (1, b"(") if t.start == toks[i + 3].start => {}
                _ => current = Some(current.map_or(t.start..end, |c| c.start..end)),
            }
            if depth == 0 {
                break;
            }
        }
        line += src[counted..name_tok.start]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        counted = name_tok.start;
        let from = match i > 0 && text(i - 1) == b"::" {
            true => toks[i - 1].start,
            false => toks[i].start,
        };
        out.push(Call {
            name: String::from_utf8_lossy(name_tok.text(src)).into_owned(),
            line,
            args: arg_spans.len(),
            arg_spans,
            qualifier: from..name_tok.start,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of torch 1.12.0's and 2.15.0's native_functions.yaml (from their PyPI wheels).
    const YAML: &str = r#"
- func: leaky_relu_backward.grad_input(Tensor grad_output, Tensor self, Scalar negative_slope, bool self_is_result, *, Tensor(a!) grad_input) -> Tensor(a!)
  structured: True
- func: leaky_relu_backward(Tensor grad_output, Tensor self, Scalar negative_slope, bool self_is_result) -> Tensor
  structured_delegate: leaky_relu_backward.grad_input
- func: zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
- func: avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor
- func: linalg_eigh(Tensor self, str UPLO="L") -> (Tensor eigenvalues, Tensor eigenvectors)
"#;

    #[test]
    fn schemas_count_the_arguments_a_cpp_call_binds() {
        let s = Schemas::parse(YAML);
        assert_eq!(s.len(), 5);
        let leaky = s.overloads("leaky_relu_backward").unwrap();
        assert_eq!(
            (leaky[0].required, leaky[0].total),
            (4, 4),
            "the out= form is not at::NAME's"
        );
        assert_eq!(s.accepts("leaky_relu_backward_out", 5), Some(true));
        assert_eq!(s.accepts("leaky_relu_backward_out", 4), Some(false));
        assert_eq!(s.accepts("leaky_relu_backward", 3), Some(false));
        assert_eq!(s.accepts("leaky_relu_backward", 4), Some(true));
        assert_eq!(s.accepts("avg_pool2d", 2), Some(true));
        assert_eq!(s.accepts("avg_pool2d", 7), Some(true));
        assert_eq!(s.accepts("avg_pool2d", 8), Some(false));
        assert_eq!(s.accepts("linalg_eigh", 2), Some(true), "a quoted default");
        assert_eq!(s.accepts("symeig", 1), None);
        assert!(Schemas::parse("- func: broken(\n- func:\n").is_empty());
    }

    #[test]
    fn calls_are_found_in_code_only_with_their_arity() {
        let src = br#"
// at::leaky_relu_backward(a, b) in a comment
auto g = at::leaky_relu_backward(grad, at::sigmoid(x), negval);
auto z = ::at::zeros({n, 4}, x.options());
const char* s = "at::zeros(1)";
auto e = torch::symeig(m, /*eigenvectors=*/true);
at::cuda::getCurrentCUDAStream();
at::Tensor t = at::empty_like(x);
auto n = at::ones();
"#;
        let got: Vec<(String, usize, usize)> = calls(src)
            .into_iter()
            .map(|c| (c.name, c.line, c.args))
            .collect();
        assert_eq!(
            got,
            [
                ("leaky_relu_backward".to_string(), 3, 3),
                ("sigmoid".to_string(), 3, 1),
                ("zeros".to_string(), 4, 2),
                ("symeig".to_string(), 6, 2),
                ("empty_like".to_string(), 8, 1),
                ("ones".to_string(), 9, 0),
            ]
        );
    }
}
