//! `codemod --stable-abi`, after the rules: an `at::NAME(…)`/`torch::NAME(…)` call that no rule
//! rewrote to a `torch::stable` function, and that names an ATen operator, becomes a call of a
//! typed wrapper that reaches the operator through `torch_call_dispatcher` (torch ≥ 2.10: any
//! registered operator by name and overload, on a boxed stack).
//!
//! The wrappers are generated, one C++ overload per schema overload, from the
//! `native_functions.yaml` of the torch the build compiles against, into a header beside the
//! rewritten files ([`HEADER`], namespace [`NAMESPACE`]): the C++ compiler then chooses among
//! an operator's overloads as it chose among ATen's. `NAME_out` takes its `out=` tensors first,
//! as ATen's C++ API does; the dispatcher's stack is filled in the schema's order.
//!
//! Only what the dispatcher converts is generated (torch/csrc/shim_common.cpp's `to_ivalue`:
//! Tensor, int, SymInt, float, bool, str, ScalarType, Layout, MemoryFormat, Device, their
//! optionals and lists). An overload with any other argument (`Scalar`, `Dimname`, `Generator`,
//! …) or a default this reader cannot state in C++ is left out, and a call that no generated
//! overload can take stays a review item that says which argument stops it.
//!
//! The same step takes a method the stable tensor lacks (`x.resize_({n})` →
//! `archsmith_aten::resize_(x, {n})`) and the arithmetic on stable tensors a rule flagged; the
//! header also holds what has no schema to generate from but a plain meaning: operators on
//! stable tensors and numbers, an `Options` for TensorOptions chains, `full` (a Scalar fill),
//! `raw_alloc`/`raw_delete`, `CPU_tensor_apply1`–`4` and `getDeviceProperties`, which the
//! stable catalogue's rules call into.

use super::aten_schema::{Arg, Overload, Schemas};
use std::collections::BTreeSet;

pub use super::catalogue::{
    STABLE_DISPATCH as RULE, STABLE_DISPATCH_SINCE as SINCE, STABLE_DISPATCH_WHY as WHY,
};
/// The generated header, written beside the files that call into it.
pub const HEADER: &str = "archsmith_aten_ops.h";
pub const NAMESPACE: &str = "archsmith_aten";

/// One argument's C++ form in a wrapper.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Param {
    /// The parameter's type as the wrapper declares it.
    ty: String,
    name: String,
    default: Option<String>,
    /// How the stack receives it: `from(x)` or a helper's values.
    push: String,
    position: usize,
    /// Whether the C++ function declares it (the factory keywords an `Options` stands for
    /// are not).
    declared: bool,
}

/// One generated C++ overload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wrapper {
    /// The C++ name (`bmm`, `bmm_out`).
    pub name: String,
    op: String,
    overload: String,
    params: Vec<Param>,
    /// The return type and how it is read from the stack; None for `void`.
    ret: Option<(String, String)>,
    returns: usize,
}

/// Why one overload has no wrapper.
pub type Refusal = String;

/// The wrappers of the overloads of C++ name `name` (`baddbmm_out`), each distinct C++
/// signature once, and the reason each other overload was left out.
pub fn wrappers(schemas: &Schemas, name: &str) -> (Vec<Wrapper>, Vec<Refusal>) {
    let (mut out, mut refused): (Vec<Wrapper>, Vec<Refusal>) = (Vec::new(), Vec::new());
    for o in schemas.overloads(name).unwrap_or_default() {
        if let Some(why) = schemas.floor_refusal(o) {
            refused.push(format!("{}: {why}", schema_name(o)));
            continue;
        }
        match wrapper(name, o) {
            Ok(w) if !out.iter().any(|k| same_signature(k, &w)) => out.push(w),
            Ok(_) => {}
            Err(why) => refused.push(format!("{}: {why}", schema_name(o))),
        }
    }
    (out, refused)
}

fn schema_name(o: &Overload) -> String {
    match o.overload.as_str() {
        "" => format!("aten::{}", o.op),
        ov => format!("aten::{}.{ov}", o.op),
    }
}

fn same_signature(a: &Wrapper, b: &Wrapper) -> bool {
    a.params.len() == b.params.len() && a.params.iter().zip(&b.params).all(|(x, y)| x.ty == y.ty)
}

fn wrapper(name: &str, o: &Overload) -> Result<Wrapper, String> {
    let mut params = Vec::new();
    for a in &o.args {
        params.push(param(a)?);
    }
    let parts = return_types(&o.returns);
    let ret = match parts.as_slice() {
        [] => None,
        [one] => {
            let ty = value_type(one).ok_or_else(|| format!("returns `{one}`"))?;
            Some((
                ty.clone(),
                format!("torch::stable::detail::to<{ty}>(stack[0])"),
            ))
        }
        many => {
            let mut tys = Vec::new();
            for p in many {
                tys.push(value_type(p).ok_or_else(|| format!("returns `{p}`"))?);
            }
            let reads: Vec<String> = (tys.iter().enumerate())
                .map(|(i, t)| format!("torch::stable::detail::to<{t}>(stack[{i}])"))
                .collect();
            let ty = format!("std::tuple<{}>", tys.join(", "));
            Some((ty, format!("std::make_tuple({})", reads.join(", "))))
        }
    };
    Ok(Wrapper {
        name: name.to_string(),
        op: o.op.clone(),
        overload: o.overload.clone(),
        params,
        ret,
        returns: parts.len(),
    })
}

/// `(Tensor(a!) values, Tensor indices)` → each returned value's type; `()` → none.
fn return_types(returns: &str) -> Vec<String> {
    let r = returns.trim();
    let inner = match r.strip_prefix('(').and_then(|x| x.strip_suffix(')')) {
        Some(inner) => inner,
        None => r,
    };
    inner
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.rsplit_once(' ') {
            // `Tensor values`: a name after the type (a type never holds a space).
            Some((ty, _)) => ty.to_string(),
            None => p.to_string(),
        })
        .collect()
}

/// A schema type without its alias annotation: `Tensor(a!)` → `Tensor`, `Tensor(a)[]` →
/// `Tensor[]`.
fn unaliased(ty: &str) -> String {
    match (ty.find('('), ty.find(')')) {
        (Some(open), Some(close)) if open < close => format!("{}{}", &ty[..open], &ty[close + 1..]),
        _ => ty.to_string(),
    }
}

/// The C++ type of a schema element type the dispatcher converts.
fn element(ty: &str) -> Option<&'static str> {
    Some(match ty {
        "Tensor" => "torch::stable::Tensor",
        "int" | "SymInt" => "int64_t",
        "float" => "double",
        "bool" => "bool",
        "str" => "std::string",
        "ScalarType" => "torch::headeronly::ScalarType",
        "Layout" => "torch::headeronly::Layout",
        "MemoryFormat" => "torch::headeronly::MemoryFormat",
        "Device" => "torch::stable::Device",
        _ => return None,
    })
}

/// A returned value's C++ type.
fn value_type(ty: &str) -> Option<String> {
    let ty = unaliased(ty);
    match ty.strip_suffix("[]") {
        Some("Tensor") => Some("std::vector<torch::stable::Tensor>".into()),
        Some(_) => None,
        None => element(&ty)
            .filter(|t| *t != "std::string")
            .map(String::from),
    }
}

/// `int[2]` → (`int`, Some(2)); `int[]` → (`int`, None); None when it is no list.
fn list_of(ty: &str) -> Option<(&str, Option<usize>)> {
    let open = ty.find('[')?;
    let len = ty[open + 1..].strip_suffix(']')?;
    Some((&ty[..open], len.parse().ok()))
}

fn param(a: &Arg) -> Result<Param, String> {
    let ty = unaliased(&a.ty);
    let unmapped = || {
        format!(
            "takes `{} {}`, which the stable dispatcher cannot pass",
            a.ty, a.name
        )
    };
    let (optional, base) = match ty.strip_suffix('?') {
        Some(b) => (true, b.to_string()),
        None => (false, ty.clone()),
    };
    let name = cxx_name(&a.name);
    let (cxx, push) = match (list_of(&base), optional) {
        (Some(("int" | "SymInt", _)), false) => ("IntList".to_string(), format!("{name}.values")),
        (Some(("int" | "SymInt", _)), true) => ("OptIntList".to_string(), format!("{name}.values")),
        (Some(("Tensor", _)), false) => (
            "const std::vector<torch::stable::Tensor>&".to_string(),
            name.clone(),
        ),
        (Some(("Tensor?", _)), false) => (
            "const std::vector<std::optional<torch::stable::Tensor>>&".to_string(),
            name.clone(),
        ),
        (Some(("float", _)), false) => ("const std::vector<double>&".to_string(), name.clone()),
        (Some(_), _) => return Err(unmapped()),
        (None, _) => {
            let e = element(&base).ok_or_else(unmapped)?;
            match (optional, e) {
                (true, e) => (format!("std::optional<{e}>"), name.clone()),
                (false, "torch::stable::Tensor") => (format!("const {e}&"), name.clone()),
                (false, "std::string") => (format!("const {e}&"), name.clone()),
                (false, e) => (e.to_string(), name.clone()),
            }
        }
    };
    let default = match &a.default {
        None => None,
        Some(d) => Some(default_value(&base, optional, d).ok_or_else(|| {
            format!(
                "`{} {}={d}`: a default this reader cannot state in C++",
                a.ty, a.name
            )
        })?),
    };
    Ok(Param {
        ty: cxx,
        name,
        default,
        push: format!("torch::stable::detail::from({push})"),
        position: a.position,
        declared: true,
    })
}

/// A schema's argument name as a C++ parameter (a keyword gets a trailing `_`).
fn cxx_name(name: &str) -> String {
    const KEYWORDS: [&str; 12] = [
        "default", "char", "int", "float", "double", "bool", "class", "new", "delete", "this",
        "template", "operator",
    ];
    match KEYWORDS.contains(&name) {
        true => format!("{name}_"),
        false => name.to_string(),
    }
}

/// The schema's default `d` for a `base` (less `?`) argument, in C++.
fn default_value(base: &str, optional: bool, d: &str) -> Option<String> {
    if d == "None" {
        return optional.then(|| "std::nullopt".to_string());
    }
    if let Some((elem, len)) = list_of(base) {
        let items: Vec<String> = match d.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
            Some(inner) => (inner.split(',').map(str::trim))
                .filter(|x| !x.is_empty())
                .map(|x| number(x, elem))
                .collect::<Option<_>>()?,
            // `int[2] padding=0`: one value for each of the N.
            None => vec![number(d, elem)?; len?],
        };
        let helper = if optional { "OptIntList" } else { "IntList" };
        return matches!(elem, "int" | "SymInt")
            .then(|| format!("{helper}{{{}}}", items.join(", ")));
    }
    Some(match (base, d) {
        ("bool", "True") => "true".into(),
        ("bool", "False") => "false".into(),
        ("str", q) if q.len() >= 2 && (q.starts_with('"') || q.starts_with('\'')) => {
            format!("\"{}\"", &q[1..q.len() - 1])
        }
        ("ScalarType", t) => format!("torch::headeronly::ScalarType::{}", scalar_type(t)?),
        ("MemoryFormat", "contiguous_format") => {
            "torch::headeronly::MemoryFormat::Contiguous".into()
        }
        ("MemoryFormat", "preserve_format") => "torch::headeronly::MemoryFormat::Preserve".into(),
        ("Layout", "strided") => "torch::headeronly::Layout::Strided".into(),
        // at::Reduction's values (aten/src/ATen/core/Reduction.h).
        ("int", "Mean") => "1".into(),
        ("int", "Sum") => "2".into(),
        (b, n) => number(n, b)?,
    })
}

/// A numeric literal for an `int`/`float` argument.
fn number(n: &str, ty: &str) -> Option<String> {
    match ty {
        "int" | "SymInt" => n.parse::<i64>().ok().map(|v| v.to_string()),
        "float" => match n {
            "inf" => Some("std::numeric_limits<double>::infinity()".into()),
            "-inf" => Some("-std::numeric_limits<double>::infinity()".into()),
            _ => n.parse::<f64>().ok().map(|_| match n.contains(['.', 'e']) {
                true => n.to_string(),
                false => format!("{n}.0"),
            }),
        },
        _ => None,
    }
}

/// The schema's dtype defaults (`long`, `float`) as `torch::headeronly::ScalarType` members.
fn scalar_type(t: &str) -> Option<&'static str> {
    Some(match t {
        "long" => "Long",
        "int" => "Int",
        "float" => "Float",
        "double" => "Double",
        "bool" => "Bool",
        "half" => "Half",
        _ => return None,
    })
}

/// A factory's keyword group (`ScalarType? dtype, Layout? layout, Device? device, bool?
/// pin_memory`), which ATen's C++ API takes as one TensorOptions.
const FACTORY_KEYWORDS: [&str; 4] = ["dtype", "layout", "device", "pin_memory"];

impl Wrapper {
    /// A factory's second form: an `Options` (the header's TensorOptions) where the schema has
    /// the keyword group, as ATen's `at::zeros(size, x.options())`; earlier parameters lose
    /// their defaults (the options come after them).
    fn with_options(&self) -> Option<Wrapper> {
        let names: Vec<&str> = self.params.iter().map(|p| p.name.as_str()).collect();
        let at = names.windows(4).position(|w| w == FACTORY_KEYWORDS)?;
        let mut w = self.clone();
        for (k, p) in w.params.iter_mut().enumerate() {
            if k < at {
                p.default = None;
            } else if k < at + 4 {
                p.declared = false;
                let field = if p.name == "pin_memory" {
                    "pinned_memory"
                } else {
                    p.name.as_str()
                };
                p.push = format!("torch::stable::detail::from(options.{field}_)");
            }
        }
        w.params.insert(
            at,
            Param {
                ty: "const Options&".into(),
                name: "options".into(),
                default: None,
                push: String::new(),
                position: usize::MAX,
                declared: true,
            },
        );
        Some(w)
    }

    /// The inline C++ function, and its [`Self::with_options`] form where it has one.
    fn render(&self) -> String {
        let mut out = self.render_one();
        if let Some(w) = self.with_options() {
            out.push_str(&w.render_one());
        }
        out
    }

    fn render_one(&self) -> String {
        let decl: Vec<String> = (self.params.iter().filter(|p| p.declared))
            .map(|p| match &p.default {
                Some(d) => format!("{} {} = {d}", p.ty, p.name),
                None => format!("{} {}", p.ty, p.name),
            })
            .collect();
        let mut by_position: Vec<&Param> = (self.params.iter())
            .filter(|p| p.position != usize::MAX)
            .collect();
        by_position.sort_by_key(|p| p.position);
        let size = by_position.len().max(self.returns).max(1);
        let mut body = format!("  std::array<StableIValue, {size}> stack{{}};\n");
        for (i, p) in by_position.iter().enumerate() {
            body.push_str(&format!("  stack[{i}] = {};\n", p.push));
        }
        body.push_str(&format!(
            "  STABLE_TORCH_ERROR_CODE_CHECK(torch_call_dispatcher(\"aten::{}\", \"{}\", stack.data(), TORCH_ABI_VERSION));\n",
            self.op, self.overload
        ));
        let ret = match &self.ret {
            Some((ty, read)) => {
                body.push_str(&format!("  return {read};\n"));
                ty.as_str()
            }
            None => "void",
        };
        format!(
            "// aten::{}{}\ninline {ret} {}({}) {{\n{body}}}\n",
            self.op,
            if self.overload.is_empty() {
                String::new()
            } else {
                format!(".{}", self.overload)
            },
            self.name,
            decl.join(", ")
        )
    }
}

/// The header for the C++ names `names`: their wrappers and the two list helpers.
pub fn header(release: &super::aten_schema::Release, names: &BTreeSet<String>) -> String {
    let (schemas, torch) = (&release.schemas, &release.torch);
    let floor = match &release.floor {
        Some(f) => format!(",\n// each overload as torch {f} (the oldest release targeted) has it"),
        None => String::new(),
    };
    let mut out = format!(
        "// Generated by archsmith (codemod --stable-abi) from torch {torch}'s native_functions.yaml{floor}:\n\
         // ATen operators with no torch::stable function, called through torch_call_dispatcher\n\
         // (torch >= {SINCE}). Regenerated on each port; edit the calls, not this file.\n\
         #pragma once\n\
         #include <torch/csrc/stable/accelerator.h>\n\
         #include <torch/csrc/stable/library.h>\n\
         #include <torch/csrc/stable/ops.h>\n\
         #include <torch/csrc/stable/tensor.h>\n\
         #include <torch/headeronly/core/TensorAccessor.h>\n\
         #include <torch/headeronly/util/Exception.h>\n\
         #if __has_include(<cuda_runtime.h>)\n#include <cuda_runtime.h>\n#endif\n\
         #include <array>\n#include <cstdint>\n#include <initializer_list>\n#include <limits>\n#include <mutex>\n\
         #include <optional>\n#include <string>\n#include <tuple>\n#include <type_traits>\n#include <unordered_map>\n#include <utility>\n#include <vector>\n\n\
         namespace {NAMESPACE} {{\n\n{HELPERS}\n"
    );
    let mut all = names.clone();
    all.extend(OPERATOR_OPS.iter().map(|n| n.to_string()));
    all.extend(SCALAR_HELPER_OPS.iter().map(|n| n.to_string()));
    for name in &all {
        for w in wrappers(schemas, name).0 {
            out.push_str(&w.render());
            out.push('\n');
        }
    }
    out.push_str(&format!(
        "}} // namespace {NAMESPACE}\n\n{OPERATORS}\n{SCALAR_HELPERS}"
    ));
    out
}

/// ATen functions the header writes by hand (their schema has what the dispatcher cannot pass),
/// with the argument counts they take: `full` in [`HELPERS`], the rest in [`SCALAR_HELPERS`].
const HELPER_OPS: [(&str, usize, usize); 10] = [
    ("full", 2, 3),
    ("addmm", 3, 5),
    ("addmm_", 3, 5),
    ("add", 2, 3),
    ("add_", 2, 3),
    ("sub", 2, 3),
    ("sub_", 2, 3),
    ("elu", 1, 4),
    ("pow", 2, 2),
    ("pow_", 2, 2),
];

/// Whether a hand-written helper takes a call of `name` with `n` arguments.
fn helper_takes(name: &str, n: usize) -> bool {
    (HELPER_OPS.iter()).any(|(h, lo, hi)| *h == name && (*lo..=*hi).contains(&n))
}

/// The operators [`SCALAR_HELPERS`] call through their wrappers.
const SCALAR_HELPER_OPS: [&str; 3] = ["exp", "where", "pow"];

/// ATen ops whose `Scalar` arguments legacy code passes as numbers (`alpha`, `beta`): composed of
/// what the dispatcher can call, as ATen defines them, since torch 2.15's `to_ivalue` converts no
/// Scalar. Results agree with ATen's to rounding (ATen fuses `addmm` into one GEMM).
const SCALAR_HELPERS: &str = r#"namespace archsmith_aten {
// addmm: beta * self + alpha * (mat1 @ mat2); beta == 0 ignores self, NaN included, as ATen.
inline torch::stable::Tensor addmm(const torch::stable::Tensor& self, const torch::stable::Tensor& mat1,
                                   const torch::stable::Tensor& mat2, double beta = 1, double alpha = 1) {
  torch::stable::Tensor p = torch::stable::matmul(mat1, mat2);
  if (alpha != 1) p = p * alpha;
  if (beta == 0) return p;
  return beta == 1 ? self + p : self * beta + p;
}
// The in-place forms take the handle by value: a view (`torch::stable::select(x, 0, i)`) is an
// rvalue, and writing into it writes into x, as ATen's.
inline torch::stable::Tensor addmm_(torch::stable::Tensor self, const torch::stable::Tensor& mat1,
                                    const torch::stable::Tensor& mat2, double beta = 1, double alpha = 1) {
  torch::stable::copy_(self, addmm(self, mat1, mat2, beta, alpha));
  return self;
}
// add/sub with alpha: self ± alpha * other, other a tensor or a number.
template <class T>
torch::stable::Tensor add(const torch::stable::Tensor& self, const T& other, double alpha = 1) {
  return alpha == 1 ? self + other : self + other * alpha;
}
template <class T>
torch::stable::Tensor sub(const torch::stable::Tensor& self, const T& other, double alpha = 1) {
  return alpha == 1 ? self - other : self - other * alpha;
}
template <class T>
torch::stable::Tensor add_(torch::stable::Tensor self, const T& other, double alpha = 1) {
  torch::stable::copy_(self, add(self, other, alpha));
  return self;
}
template <class T>
torch::stable::Tensor sub_(torch::stable::Tensor self, const T& other, double alpha = 1) {
  torch::stable::copy_(self, sub(self, other, alpha));
  return self;
}
// pow with a number exponent: the Tensor_Tensor overload with the number as ATen wraps it.
template <class N, class = std::enable_if_t<std::is_arithmetic_v<N>>>
torch::stable::Tensor pow(const torch::stable::Tensor& self, N exponent) {
  return archsmith_aten::pow(self, archsmith_aten::wrapped(self, exponent));
}
template <class T>
torch::stable::Tensor pow_(torch::stable::Tensor self, const T& exponent) {
  torch::stable::copy_(self, archsmith_aten::pow(self, exponent));
  return self;
}
// elu: scale * (x > 0 ? x : alpha * (exp(x * input_scale) - 1)).
inline torch::stable::Tensor elu(const torch::stable::Tensor& x, double alpha = 1, double scale = 1,
                                 double input_scale = 1) {
  torch::stable::Tensor below = (archsmith_aten::exp(x * input_scale) - 1) * alpha;
  torch::stable::Tensor y = archsmith_aten::where(x > 0, x, below);
  return scale == 1 ? y : y * scale;
}
} // namespace archsmith_aten
"#;

/// The operators [`OPERATORS`] calls through their wrappers.
const OPERATOR_OPS: [&str; 13] = [
    "mul",
    "div",
    "neg",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "broadcast_tensors",
    "stack",
    "sum",
    "result_type",
];

/// Arithmetic and comparison operators on stable tensors and C++ numbers, as ATen's: the
/// stable tensor has none. `+` and `-` are torch::stable::subtract for floating results (its
/// alpha is a double, which ATen refuses for integer tensors) and a sum over the broadcast pair
/// in the result type for integer ones (the dispatcher cannot pass add's Scalar alpha). A
/// number becomes a 0-dim tensor of the type ATen's wrapped numbers promote to.
const OPERATORS: &str = r#"namespace archsmith_aten {
inline bool floating(torch::headeronly::ScalarType t) {
  using S = torch::headeronly::ScalarType;
  return t == S::Half || t == S::BFloat16 || t == S::Float || t == S::Double ||
      t == S::ComplexHalf || t == S::ComplexFloat || t == S::ComplexDouble;
}
template <class N>
torch::stable::Tensor wrapped(const torch::stable::Tensor& like, N v) {
  using S = torch::headeronly::ScalarType;
  S t = like.scalar_type();
  if constexpr (std::is_floating_point_v<N>) {
    t = floating(t) ? t : S::Float;
  } else {
    t = t == S::Bool ? S::Long : t;
  }
  torch::stable::Tensor s = torch::stable::new_empty(like, {}, t);
  torch::stable::fill_(s, static_cast<double>(v));
  return s;
}
inline torch::stable::Tensor integer_sum(const torch::stable::Tensor& a, const torch::stable::Tensor& b) {
  return archsmith_aten::sum(
      archsmith_aten::stack(archsmith_aten::broadcast_tensors({a, b}), 0), {0}, false,
      archsmith_aten::result_type(a, b));
}
} // namespace archsmith_aten

// Found by argument-dependent lookup: the operands are torch::stable tensors.
namespace torch::stable {
inline Tensor operator+(const Tensor& a, const Tensor& b) {
  return archsmith_aten::floating(archsmith_aten::result_type(a, b))
      ? torch::stable::subtract(a, b, -1.0) : archsmith_aten::integer_sum(a, b);
}
inline Tensor operator-(const Tensor& a, const Tensor& b) {
  return archsmith_aten::floating(archsmith_aten::result_type(a, b))
      ? torch::stable::subtract(a, b) : archsmith_aten::integer_sum(a, archsmith_aten::neg(b));
}
inline Tensor operator-(const Tensor& a) { return archsmith_aten::neg(a); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return archsmith_aten::mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return archsmith_aten::div(a, b); }
inline Tensor operator==(const Tensor& a, const Tensor& b) { return archsmith_aten::eq(a, b); }
inline Tensor operator!=(const Tensor& a, const Tensor& b) { return archsmith_aten::ne(a, b); }
inline Tensor operator<(const Tensor& a, const Tensor& b) { return archsmith_aten::lt(a, b); }
inline Tensor operator<=(const Tensor& a, const Tensor& b) { return archsmith_aten::le(a, b); }
inline Tensor operator>(const Tensor& a, const Tensor& b) { return archsmith_aten::gt(a, b); }
inline Tensor operator>=(const Tensor& a, const Tensor& b) { return archsmith_aten::ge(a, b); }
#define ARCHSMITH_NUMBER_OPERATOR(op)                                             \
  template <class N, class = std::enable_if_t<std::is_arithmetic_v<N>>>           \
  Tensor operator op(const Tensor& a, N n) { return a op archsmith_aten::wrapped(a, n); } \
  template <class N, class = std::enable_if_t<std::is_arithmetic_v<N>>>           \
  Tensor operator op(N n, const Tensor& a) { return archsmith_aten::wrapped(a, n) op a; }
ARCHSMITH_NUMBER_OPERATOR(+)
ARCHSMITH_NUMBER_OPERATOR(-)
ARCHSMITH_NUMBER_OPERATOR(*)
ARCHSMITH_NUMBER_OPERATOR(/)
ARCHSMITH_NUMBER_OPERATOR(==)
ARCHSMITH_NUMBER_OPERATOR(!=)
ARCHSMITH_NUMBER_OPERATOR(<)
ARCHSMITH_NUMBER_OPERATOR(<=)
ARCHSMITH_NUMBER_OPERATOR(>)
ARCHSMITH_NUMBER_OPERATOR(>=)
#undef ARCHSMITH_NUMBER_OPERATOR
// A temporary too: `select(x, 0, i) += e` (`x[i] += e`, codemod/tensor_subscripts.rs) writes
// through the view into `x`, as ATen's in-place op on `x[i]` does.
#define ARCHSMITH_COMPOUND_OPERATOR(op)                                            \
  inline Tensor& operator op##=(Tensor& a, const Tensor& b) { torch::stable::copy_(a, a op b); return a; } \
  template <class N, class = std::enable_if_t<std::is_arithmetic_v<N>>>            \
  Tensor& operator op##=(Tensor& a, N n) { torch::stable::copy_(a, a op n); return a; } \
  inline Tensor operator op##=(Tensor&& a, const Tensor& b) { torch::stable::copy_(a, a op b); return a; } \
  template <class N, class = std::enable_if_t<std::is_arithmetic_v<N>>>            \
  Tensor operator op##=(Tensor&& a, N n) { torch::stable::copy_(a, a op n); return a; }
ARCHSMITH_COMPOUND_OPERATOR(+)
ARCHSMITH_COMPOUND_OPERATOR(-)
ARCHSMITH_COMPOUND_OPERATOR(*)
ARCHSMITH_COMPOUND_OPERATOR(/)
#undef ARCHSMITH_COMPOUND_OPERATOR
} // namespace torch::stable
"#;

/// An `int[]` argument as ATen's IntArrayRef takes it: one int, a braced list, a vector, or a
/// stable tensor's `sizes()`; owned, so a temporary list outlives nothing it needs.
const HELPERS: &str = r#"struct IntList {
  std::vector<int64_t> values;
  IntList() = default;
  IntList(int64_t v) : values{v} {}
  IntList(std::initializer_list<int64_t> l) : values(l) {}
  IntList(const std::vector<int64_t>& v) : values(v) {}
  IntList(torch::headeronly::IntHeaderOnlyArrayRef r) : values(r.begin(), r.end()) {}
};

struct OptIntList {
  std::optional<std::vector<int64_t>> values;
  OptIntList(std::nullopt_t = std::nullopt) {}
  OptIntList(int64_t v) : values(std::vector<int64_t>{v}) {}
  OptIntList(std::initializer_list<int64_t> l) : values(std::vector<int64_t>(l)) {}
  OptIntList(const std::vector<int64_t>& v) : values(v) {}
  OptIntList(torch::headeronly::IntHeaderOnlyArrayRef r) : values(std::vector<int64_t>(r.begin(), r.end())) {}
};

// ATen's TensorOptions for the factories below: what `x.options()`, `at::device(d)`,
// `at::dtype(t)` and their chains say, passed as the schema's dtype/layout/device/pin_memory.
struct Options {
  std::optional<torch::headeronly::ScalarType> dtype_;
  std::optional<torch::headeronly::Layout> layout_;
  std::optional<torch::stable::Device> device_;
  std::optional<bool> pinned_memory_;
  Options dtype(torch::headeronly::ScalarType t) const { Options o = *this; o.dtype_ = t; return o; }
  Options layout(torch::headeronly::Layout l) const { Options o = *this; o.layout_ = l; return o; }
  Options device(torch::stable::Device d) const { Options o = *this; o.device_ = d; return o; }
  Options pinned_memory(bool p) const { Options o = *this; o.pinned_memory_ = p; return o; }
};
inline Options options_of(const torch::stable::Tensor& t) {
  return Options().dtype(t.scalar_type()).device(t.device()).layout(torch::headeronly::Layout::Strided);
}
inline Options device(torch::stable::Device d) { return Options().device(d); }
inline Options dtype(torch::headeronly::ScalarType t) { return Options().dtype(t); }

// aten::full: its fill value is a Scalar, which the dispatcher cannot pass; the stable C shim's
// full takes a double.
inline torch::stable::Tensor full(IntList size, double fill_value, const Options& options) {
  return torch::stable::full(size.values, fill_value, options.dtype_, options.layout_,
                             options.device_, options.pinned_memory_);
}
inline torch::stable::Tensor full(IntList size, double fill_value,
                                  std::optional<torch::headeronly::ScalarType> dtype = std::nullopt) {
  return torch::stable::full(size.values, fill_value, dtype);
}

// ATen's tensor accessors (`x.packed_accessor32<T, N, PtrTraits>()`, `x.accessor<T, N>()`,
// their types in kernel signatures): torch::headeronly's, with ATen's template parameters, built
// over the stable tensor's data pointer, sizes and strides with ATen's checks.
template <typename T, size_t N, template <typename U> class PtrTraits = torch::headeronly::DefaultPtrTraits,
          typename index_t = int64_t>
using GenericPackedTensorAccessor = torch::headeronly::HeaderOnlyGenericPackedTensorAccessor<T, N, PtrTraits, index_t>;
template <typename T, size_t N, template <typename U> class PtrTraits = torch::headeronly::DefaultPtrTraits,
          typename index_t = int64_t>
using PackedTensorAccessor = GenericPackedTensorAccessor<T, N, PtrTraits, index_t>;
template <typename T, size_t N, template <typename U> class PtrTraits = torch::headeronly::DefaultPtrTraits>
using PackedTensorAccessor32 = GenericPackedTensorAccessor<T, N, PtrTraits, int32_t>;
template <typename T, size_t N, template <typename U> class PtrTraits = torch::headeronly::DefaultPtrTraits>
using PackedTensorAccessor64 = GenericPackedTensorAccessor<T, N, PtrTraits, int64_t>;
template <typename T, size_t N, template <typename U> class PtrTraits = torch::headeronly::DefaultPtrTraits,
          typename index_t = int64_t>
using TensorAccessor = torch::headeronly::HeaderOnlyTensorAccessor<T, N, PtrTraits, index_t>;

template <typename T, size_t N>
T* accessor_data(const torch::stable::Tensor& t) {
  STD_TORCH_CHECK(t.dim() == static_cast<int64_t>(N), "TensorAccessor expected ", N,
                  " dims but tensor has ", t.dim());
  return static_cast<T*>(t.mutable_data_ptr());
}
template <typename T, size_t N, template <typename U> class PtrTraits = torch::headeronly::DefaultPtrTraits,
          typename index_t = int64_t>
GenericPackedTensorAccessor<T, N, PtrTraits, index_t> generic_packed_accessor(const torch::stable::Tensor& t) {
  return GenericPackedTensorAccessor<T, N, PtrTraits, index_t>(
      accessor_data<T, N>(t), t.sizes().data(), t.strides().data());
}
template <typename T, size_t N, template <typename U> class PtrTraits = torch::headeronly::DefaultPtrTraits,
          typename index_t = int64_t>
PackedTensorAccessor<T, N, PtrTraits, index_t> packed_accessor(const torch::stable::Tensor& t) {
  return generic_packed_accessor<T, N, PtrTraits, index_t>(t);
}
template <typename T, size_t N, template <typename U> class PtrTraits = torch::headeronly::DefaultPtrTraits>
PackedTensorAccessor32<T, N, PtrTraits> packed_accessor32(const torch::stable::Tensor& t) {
  STD_TORCH_CHECK(t.numel() <= static_cast<int64_t>(std::numeric_limits<int32_t>::max()),
                  "numel needs to be smaller than int32_t max; otherwise, please use packed_accessor64");
  return generic_packed_accessor<T, N, PtrTraits, int32_t>(t);
}
template <typename T, size_t N, template <typename U> class PtrTraits = torch::headeronly::DefaultPtrTraits>
PackedTensorAccessor64<T, N, PtrTraits> packed_accessor64(const torch::stable::Tensor& t) {
  return generic_packed_accessor<T, N, PtrTraits, int64_t>(t);
}
template <typename T, size_t N>
TensorAccessor<T, N> accessor(const torch::stable::Tensor& t) {
  return TensorAccessor<T, N>(accessor_data<T, N>(t), t.sizes().data(), t.strides().data());
}

// at::Tensor's assignment into a view (`x[i] = e`, rewritten by codemod/tensor_subscripts.rs): a copy into
// it, or a fill with a number.
inline torch::stable::Tensor assign(torch::stable::Tensor view, const torch::stable::Tensor& src) {
  torch::stable::copy_(view, src);
  return view;
}
template <class N, class = std::enable_if_t<std::is_arithmetic_v<N>>>
torch::stable::Tensor assign(torch::stable::Tensor view, N value) {
  torch::stable::fill_(view, static_cast<double>(value));
  return view;
}

// The caching allocator's raw_alloc/raw_delete (and THCudaMalloc/THCudaFree): a byte tensor on
// the current CUDA device, torch's caching allocator through the stable ABI, kept until
// raw_delete hands the pointer back.
inline std::unordered_map<void*, torch::stable::Tensor>& raw_buffers(std::unique_lock<std::mutex>& lock) {
  static std::mutex mutex;
  static std::unordered_map<void*, torch::stable::Tensor> buffers;
  lock = std::unique_lock<std::mutex>(mutex);
  return buffers;
}
inline void* raw_alloc(size_t bytes) {
  torch::stable::Tensor t = torch::stable::empty(
      {static_cast<int64_t>(bytes)}, torch::headeronly::ScalarType::Byte, std::nullopt,
      torch::stable::Device(torch::headeronly::kCUDA, torch::stable::accelerator::getCurrentDeviceIndex()));
  void* p = t.mutable_data_ptr();
  std::unique_lock<std::mutex> lock;
  raw_buffers(lock).emplace(p, std::move(t));
  return p;
}
inline void raw_delete(void* p) {
  std::unique_lock<std::mutex> lock;
  raw_buffers(lock).erase(p);
}

// ATen's CPU_tensor_apply1-4: op on each element of tensors of one size, in order, by
// reference; here over contiguous copies, copied back into a tensor that was not contiguous.
template <class... T, class Op, class... Tensors, std::size_t... I>
void cpu_tensor_apply_each(std::index_sequence<I...>, Op& op, Tensors&... ts) {
  std::array<torch::stable::Tensor, sizeof...(Tensors)> dense{torch::stable::contiguous(ts)...};
  auto data = std::make_tuple(dense[I].template mutable_data_ptr<T>()...);
  const int64_t n = dense[0].numel();
  for (int64_t i = 0; i < n; ++i) {
    op(std::get<I>(data)[i]...);
  }
  ((ts.is_contiguous() ? void() : void(torch::stable::copy_(ts, dense[I]))), ...);
}
template <class... T, class Op, class... Tensors>
void cpu_tensor_apply(Op op, Tensors&... ts) {
  cpu_tensor_apply_each<T...>(std::index_sequence_for<Tensors...>{}, op, ts...);
}
template <class T1, class Op>
void CPU_tensor_apply1(torch::stable::Tensor a, Op op) { cpu_tensor_apply<T1>(op, a); }
template <class T1, class T2, class Op>
void CPU_tensor_apply2(torch::stable::Tensor a, torch::stable::Tensor b, Op op) {
  cpu_tensor_apply<T1, T2>(op, a, b);
}
template <class T1, class T2, class T3, class Op>
void CPU_tensor_apply3(torch::stable::Tensor a, torch::stable::Tensor b, torch::stable::Tensor c, Op op) {
  cpu_tensor_apply<T1, T2, T3>(op, a, b, c);
}
template <class T1, class T2, class T3, class T4, class Op>
void CPU_tensor_apply4(torch::stable::Tensor a, torch::stable::Tensor b, torch::stable::Tensor c,
                       torch::stable::Tensor d, Op op) {
  cpu_tensor_apply<T1, T2, T3, T4>(op, a, b, c, d);
}

#if __has_include(<cuda_runtime.h>)
// at::cuda::getDeviceProperties: the CUDA runtime's answer for each device, asked once and kept.
inline cudaDeviceProp* getDeviceProperties(int64_t device) {
  static std::mutex mutex;
  static std::unordered_map<int64_t, cudaDeviceProp> props;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = props.find(device);
  if (it == props.end()) {
    cudaDeviceProp p;
    STD_CUDA_CHECK(cudaGetDeviceProperties(&p, static_cast<int>(device)));
    it = props.emplace(device, p).first;
  }
  return &it->second;
}
inline cudaDeviceProp* getCurrentDeviceProperties() {
  return getDeviceProperties(torch::stable::accelerator::getCurrentDeviceIndex());
}
#endif
"#;

/// One call this step leaves as it was, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreached {
    pub at: usize,
    pub reason: String,
}

/// What the step does to one file's text.
#[derive(Debug, Default)]
pub struct Dispatched {
    /// Edits (byte range, replacement): each call's `at::`/`torch::` becomes [`NAMESPACE`]`::`,
    /// and a method call `x.M(a)` becomes `NAMESPACE::M(x, a)`.
    pub edits: Vec<(usize, usize, Vec<u8>)>,
    /// Where each rewritten call's review item points (its qualifier's or receiver's first token).
    pub sites: Vec<usize>,
    /// The C++ names called.
    pub names: BTreeSet<String>,
    pub unreached: Vec<Unreached>,
}

impl Dispatched {
    /// Whether some generated overload of `name` takes `n` arguments; else why none does.
    fn reachable(schemas: &Schemas, name: &str, n: usize) -> Result<(), String> {
        let (ws, refused) = wrappers(schemas, name);
        let takes = |w: &Wrapper| {
            let required = w.params.iter().filter(|p| p.default.is_none()).count();
            required <= n && n <= w.params.len()
        };
        match (ws.iter().any(takes), refused.is_empty()) {
            (true, _) => Ok(()),
            (false, true) => Err(format!("no overload of aten::{name} takes {n} argument(s)")),
            (false, false) => Err(refused.join("; ")),
        }
    }
}

/// The `at::NAME(…)`/`torch::NAME(…)` calls of `src` that name an operator of `schemas`, and its
/// method calls `x.M(…)` of the methods the stable tensor lacks (`methods`: the
/// `stable-tensor-method` rule's list), each rewritten when a generated overload takes its
/// arguments (a method's receiver first).
pub fn plan(src: &[u8], schemas: &Schemas, methods: Option<&regex::bytes::Regex>) -> Dispatched {
    let mut out = Dispatched::default();
    let token = |at: usize| at + if src[at..].starts_with(b"::") { 2 } else { 0 };
    // Each (name, argument count) judged once: a file calls the same ops many times.
    let mut judged: std::collections::HashMap<(String, usize), Result<(), String>> =
        Default::default();
    for call in super::aten_schema::calls(src) {
        let helper = helper_takes(&call.name, call.args);
        if schemas.overloads(&call.name).is_none() && !helper {
            continue;
        }
        let q = call.qualifier.clone();
        let reach = match helper {
            true => Ok(()),
            false => (judged.entry((call.name.clone(), call.args)))
                .or_insert_with(|| Dispatched::reachable(schemas, &call.name, call.args))
                .clone(),
        };
        match reach {
            Ok(()) => {
                out.edits
                    .push((q.start, q.end, format!("{NAMESPACE}::").into_bytes()));
                out.sites.push(token(q.start));
                out.names.insert(call.name.clone());
            }
            Err(reason) => out.unreached.push(Unreached {
                at: token(q.start),
                reason,
            }),
        }
    }
    if let Some(re) = methods {
        method_calls(src, schemas, re, &mut out);
    }
    out
}

/// [`plan`]'s method calls: `x.M(a, b)` → `NAMESPACE::M(x, a, b)`. A chain's inner call is left
/// for the next round ([`apply`] runs until nothing changes).
fn method_calls(
    src: &[u8],
    schemas: &Schemas,
    methods: &regex::bytes::Regex,
    out: &mut Dispatched,
) {
    use super::pattern::{Matcher, Pattern};
    let toks = super::lexer::lex_c(src);
    let m = Matcher::new(src, &toks);
    let Ok(pat) = Pattern::compile("$X.$M(", super::lexer::lex_c) else {
        return;
    };
    let text = |c: (usize, usize)| {
        String::from_utf8_lossy(&src[m.span(c.0, c.1).0..m.span(c.0, c.1).1]).into_owned()
    };
    let accept = |caps: &super::pattern::Captures| {
        caps.get("M")
            .is_some_and(|&c| methods.is_match(text(c).as_bytes()))
    };
    let mut ti = 0;
    while ti < toks.len() {
        let Some((end, caps)) = m.match_at_where(&pat, ti, &accept) else {
            ti += 1;
            continue;
        };
        let (x, name) = (caps["X"], text(caps["M"]));
        let open = end - 1;
        let Some(close) = matching_paren(src, &toks, open) else {
            ti = end;
            continue;
        };
        let args = top_level_args(src, &toks, open, close);
        let receiver_start = toks[x.0].start;
        let dot = toks[x.1].start;
        let reach = match helper_takes(&name, args + 1) {
            true => Some(Ok(())),
            false => {
                (schemas.overloads(&name)).map(|_| Dispatched::reachable(schemas, &name, args + 1))
            }
        };
        match reach {
            Some(Ok(())) => {
                let call = format!("{NAMESPACE}::{name}(").into_bytes();
                out.edits.push((receiver_start, receiver_start, call));
                let sep = if args == 0 {
                    Vec::new()
                } else {
                    b", ".to_vec()
                };
                out.edits.push((dot, toks[open].start + 1, sep));
                out.sites.push(receiver_start);
                out.names.insert(name);
            }
            Some(Err(reason)) => out.unreached.push(Unreached {
                at: receiver_start,
                reason,
            }),
            None => out.unreached.push(Unreached {
                at: receiver_start,
                reason: format!("`{name}` is no ATen operator of this torch"),
            }),
        }
        ti = end; // past this call's `(`; its arguments may hold calls of their own
    }
}

fn matching_paren(src: &[u8], toks: &[super::lexer::Token], open: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (k, t) in toks.iter().enumerate().skip(open) {
        if t.kind == super::lexer::Kind::Comment {
            continue;
        }
        match t.text(src) {
            b"(" | b"[" | b"{" => depth += 1,
            b")" | b"]" | b"}" => {
                depth -= 1;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

/// How many arguments the parentheses `open`..`close` hold.
fn top_level_args(src: &[u8], toks: &[super::lexer::Token], open: usize, close: usize) -> usize {
    let inner: Vec<&super::lexer::Token> = toks[open + 1..close]
        .iter()
        .filter(|t| t.kind != super::lexer::Kind::Comment)
        .collect();
    if inner.is_empty() {
        return 0;
    }
    let mut depth = 0i32;
    let mut commas = 0;
    for t in inner {
        match t.text(src) {
            b"(" | b"[" | b"{" => depth += 1,
            b")" | b"]" | b"}" => depth -= 1,
            b"," if depth == 0 => commas += 1,
            _ => {}
        }
    }
    commas + 1
}

/// The C++ names `src` already calls as `archsmith_aten::NAME(`: a second run regenerates the
/// header with them, not only with what it rewrites itself.
fn already_called(src: &[u8]) -> BTreeSet<String> {
    let toks: Vec<_> = (super::lexer::lex_c(src).into_iter())
        .filter(|t| t.kind != super::lexer::Kind::Comment)
        .collect();
    let text = |i: usize| toks.get(i).map_or(&b""[..], |t| t.text(src));
    (0..toks.len())
        .filter(|&i| text(i) == NAMESPACE.as_bytes() && text(i + 1) == b"::")
        // A call, a template's (`CPU_tensor_apply2<float>(`) or a type's (`PackedTensorAccessor32<`).
        .filter(|&i| matches!(text(i + 3), b"(" | b"<"))
        .map(|i| String::from_utf8_lossy(text(i + 2)).into_owned())
        .collect()
}

/// The review rules whose items this step resolves (a call it rewrites) or explains (one it
/// cannot): ATen names no rule rewrites, methods the stable tensor lacks.
const LEFTOVER: &str = "stable-leftover";
const LEFTOVER_TORCH: &str = "stable-leftover-torch";
const METHOD: &str = "stable-tensor-method";
const ARITHMETIC: &str = "stable-tensor-arithmetic";

/// Rewrites the calls [`plan`] reaches in `out` (after the stable rules, on their output),
/// round after round while a chain's inner method call is left (`x.view(a).repeat(2)`), drops
/// the review items of the calls it rewrote and says, on those of the calls it left, why no
/// wrapper takes them; then includes the header in a file that calls into it (a rule's
/// `archsmith_aten::raw_alloc` too) or does arithmetic on stable tensors.
pub fn apply(out: &mut super::engine::Outcome, schemas: &Schemas) {
    let methods = super::catalogue::stable()
        .get(METHOD)
        .and_then(|r| r.wheres.iter().find(|(h, _)| h == "M"))
        .map(|(_, re)| re.clone());
    for _ in 0..8 {
        if !round(out, schemas, methods.as_ref()) {
            break;
        }
    }
    // Subscripts of stable tensors, after the calls around them were rewritten.
    let (edits, sites) = super::tensor_subscripts::edits(&out.output);
    if !edits.is_empty() {
        *out.counts.entry(RULE.to_string()).or_default() += sites.len();
        out.aten_ops.extend(OPERATOR_OPS.map(String::from));
        commit(out, edits);
    }
    out.aten_ops.extend(already_called(&out.output));
    if out.aten_ops.is_empty() {
        return;
    }
    drop_unused_headers(out);
    if let Some(with) = super::engine::ensure_include_as(&out.output, HEADER, true) {
        // An insertion: where the texts part, as long as the length they differ by.
        let at = (out.output.iter().zip(&with))
            .take_while(|(a, b)| a == b)
            .count();
        let added = with[at..at + (with.len() - out.output.len())].to_vec();
        commit(out, vec![(at, at, added)]);
    }
}

/// The stable catalogue's `drop-unused` include rules once more, on the text this step left:
/// an ATen/c10 header whose names were the calls it rewrote goes now (torch refuses those
/// headers under TORCH_TARGET_VERSION), with the review item that named it.
fn drop_unused_headers(out: &mut super::engine::Outcome) {
    let mut cat = super::catalogue::stable().clone();
    cat.rules.retain(|r| {
        matches!(r.action, super::catalogue::Action::Include { .. })
            && r.id.starts_with("stable-drop-unused")
    });
    let Ok(again) = super::engine::apply(&cat, super::catalogue::Lang::Cpp, &out.output) else {
        return;
    };
    // Only whole lines go: each line of the old text that the new one lacks is an edit.
    let mut edits = Vec::new();
    let (old, new) = (&out.output, &again.output);
    let (mut i, mut j) = (0, 0);
    while i < old.len() {
        let end = old[i..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(old.len(), |p| i + p + 1);
        if new.get(j..j + (end - i)) == Some(&old[i..end]) {
            j += end - i;
        } else {
            edits.push((i, end, Vec::new()));
        }
        i = end;
    }
    if edits.is_empty() || j != new.len() {
        return;
    }
    let now = out.trace.len();
    out.review
        .retain(|r| r.at.1 != now || !edits.iter().any(|e| (e.0..e.1).contains(&r.at.0)));
    for (k, v) in again.counts {
        *out.counts.entry(k).or_default() += v;
    }
    commit(out, edits);
}

/// One [`apply`] round; whether it changed anything.
fn round(
    out: &mut super::engine::Outcome,
    schemas: &Schemas,
    methods: Option<&regex::bytes::Regex>,
) -> bool {
    let p = plan(&out.output, schemas, methods);
    let now = out.trace.len();
    let ours = |r: &super::engine::ReviewItem| {
        [LEFTOVER, LEFTOVER_TORCH, METHOD].contains(&r.rule.as_str()) && r.at.1 == now
    };
    out.review
        .retain(|r| !(ours(r) && p.sites.contains(&r.at.0)));
    for u in &p.unreached {
        for r in out.review.iter_mut().filter(|r| ours(r) && r.at.0 == u.at) {
            if !r.suggestion.starts_with("no dispatcher wrapper") {
                r.suggestion = format!("no dispatcher wrapper takes this call: {}", u.reason);
            }
        }
    }
    // Arithmetic on stable tensors: the header's operators take it as written.
    let arithmetic = (out.review.iter())
        .filter(|r| r.rule == ARITHMETIC && r.at.1 == now)
        .count();
    out.review
        .retain(|r| !(r.rule == ARITHMETIC && r.at.1 == now));
    *out.counts.entry(RULE.to_string()).or_default() += arithmetic + p.sites.len();
    if arithmetic > 0 {
        out.aten_ops.extend(OPERATOR_OPS.map(String::from));
    }
    out.aten_ops.extend(p.names);
    if p.edits.is_empty() {
        return false;
    }
    commit(out, p.edits);
    true
}

/// Applies `edits` (byte range of the current output, replacement) as one trace step; the
/// review items still open move with the edits before them, in the new text's lines.
fn commit(out: &mut super::engine::Outcome, mut edits: Vec<(usize, usize, Vec<u8>)>) {
    let now = out.trace.len();
    edits.sort_by_key(|e| (e.0, e.1));
    let mut text = Vec::with_capacity(out.output.len() + 64 * edits.len());
    let mut done = 0;
    for (start, end, new) in &edits {
        text.extend_from_slice(&out.output[done..*start]);
        text.extend_from_slice(new);
        done = *end;
    }
    text.extend_from_slice(&out.output[done..]);
    out.trace.rewrites(RULE, &out.output, &edits);
    let index = crate::lint::LineIndex::new(&text);
    let steps = out.trace.len();
    // How far the text after each edit moved (edits sorted, disjoint): an item moves by the
    // edits that end at or before it, found by binary search, not by a walk over every edit.
    let moved_after: Vec<isize> = (edits.iter())
        .scan(0isize, |m, e| {
            *m += e.2.len() as isize - (e.1 - e.0) as isize;
            Some(*m)
        })
        .collect();
    for r in out.review.iter_mut().filter(|r| r.at.1 == now) {
        let before = edits.partition_point(|e| e.1 <= r.at.0);
        let moved = before.checked_sub(1).map_or(0, |k| moved_after[k]);
        let at = (r.at.0 as isize + moved) as usize;
        let (message, suggestion) = (
            std::mem::take(&mut r.message),
            std::mem::take(&mut r.suggestion),
        );
        let rule = r.rule.clone();
        *r = super::engine::review_item(&index, &text, at, &rule, message, suggestion);
        r.at.1 = steps;
    }
    out.output = text;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of torch 2.15.0's native_functions.yaml (from its PyPI wheel).
    const YAML: &str = r#"
- func: baddbmm.out(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)
- func: bmm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)
- func: max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)
- func: max.names_dim(Tensor self, Dimname dim, bool keepdim=False) -> (Tensor values, Tensor indices)
- func: avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor
- func: randperm(SymInt n, *, ScalarType? dtype=long, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
- func: repeat(Tensor self, SymInt[] repeats) -> Tensor
- func: item(Tensor self) -> Scalar
"#;

    /// Torch 2.15.0's lines (its PyPI wheel) of four operators, then 2.10.0's of the same.
    const YAML_2_15: &str = r#"
- func: bmm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)
- func: numel(Tensor self) -> int
- func: _cdist_backward(Tensor grad_output, Tensor x1, Tensor x2, float p, Tensor cdist) -> Tensor
- func: _scaled_dot_product_attention_math_for_mps(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, Tensor? dropout_mask=None, *, float? scale=None, bool enable_gqa=False) -> (Tensor, Tensor)
"#;
    const YAML_2_10: &str = r#"
- func: bmm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)
- func: _cdist_backward(Tensor grad, Tensor x1, Tensor x2, float p, Tensor cdist) -> Tensor
- func: _scaled_dot_product_attention_math_for_mps(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, Tensor? dropout_mask=None, *, float? scale=None) -> (Tensor, Tensor)
"#;

    #[test]
    fn an_overload_the_oldest_targeted_release_lacks_or_stacks_otherwise_gets_no_wrapper() {
        let mut s = Schemas::parse(YAML_2_15);
        s.reachable_from(&Schemas::parse(YAML_2_10), "2.10.0");
        assert_eq!(s.not_in_floor(), 2);
        // The same stack under another argument name: the dispatcher takes it on both.
        assert_eq!(wrappers(&s, "bmm_out").0.len(), 1);
        assert_eq!(wrappers(&s, "_cdist_backward").0.len(), 1);
        // New in 2.15 (2.10 would answer "could not find schema" at run time).
        let (none, why) = wrappers(&s, "numel");
        assert!(none.is_empty());
        assert_eq!(
            why,
            ["aten::numel: not in torch 2.10.0, the oldest release the stable wheel targets"]
        );
        // An argument added since: 2.10 would read a stack one short of 2.15's.
        let (none, why) = wrappers(&s, "_scaled_dot_product_attention_math_for_mps");
        assert!(none.is_empty());
        assert!(
            why[0].contains("has another schema (`_scaled_dot_product_attention_math_for_mps(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, Tensor? dropout_mask=None, *, float? scale=None) -> (Tensor, Tensor)`)"),
            "{why:?}"
        );
        // Unchecked, the same schemas give every wrapper.
        assert_eq!(wrappers(&Schemas::parse(YAML_2_15), "numel").0.len(), 1);
    }

    fn rendered(name: &str) -> String {
        let s = Schemas::parse(YAML);
        wrappers(&s, name).0.iter().map(Wrapper::render).collect()
    }

    #[test]
    fn wrappers_take_the_out_tensors_first_and_fill_the_stack_in_the_schemas_order() {
        let w = rendered("bmm_out");
        assert!(w.contains("inline torch::stable::Tensor bmm_out(const torch::stable::Tensor& out, const torch::stable::Tensor& self, const torch::stable::Tensor& mat2)"), "{w}");
        let order: Vec<&str> = w.lines().filter(|l| l.contains("stack[")).collect();
        assert!(
            order[0].contains("from(self)") && order[2].contains("from(out)"),
            "{w}"
        );
        assert!(w.contains(
            r#"torch_call_dispatcher("aten::bmm", "out", stack.data(), TORCH_ABI_VERSION)"#
        ));
    }

    #[test]
    fn defaults_lists_and_tuples_are_stated_in_cxx() {
        let pool = rendered("avg_pool2d");
        assert!(pool.contains("IntList kernel_size, IntList stride = IntList{}, IntList padding = IntList{0, 0}, bool ceil_mode = false, bool count_include_pad = true, std::optional<int64_t> divisor_override = std::nullopt"), "{pool}");
        let r = rendered("randperm");
        assert!(r.contains("std::optional<torch::headeronly::ScalarType> dtype = torch::headeronly::ScalarType::Long"), "{r}");
        let max = rendered("max");
        assert!(max.contains("inline std::tuple<torch::stable::Tensor, torch::stable::Tensor> max(const torch::stable::Tensor& self, int64_t dim, bool keepdim = false)"), "{max}");
        assert_eq!(
            max.matches("inline").count(),
            1,
            "the Dimname overload is left out: {max}"
        );
    }

    #[test]
    fn what_the_dispatcher_cannot_pass_is_named() {
        let s = Schemas::parse(YAML);
        let (ws, refused) = wrappers(&s, "baddbmm_out");
        assert!(ws.is_empty());
        assert_eq!(
            refused,
            ["aten::baddbmm.out: takes `Scalar beta`, which the stable dispatcher cannot pass"]
        );
        assert_eq!(wrappers(&s, "item").1, ["aten::item: returns `Scalar`"]);
    }

    #[test]
    fn calls_and_methods_are_rewritten_where_a_wrapper_takes_them() {
        let s = Schemas::parse(YAML);
        let methods = regex::bytes::Regex::new("^(repeat|item)$").unwrap();
        let src = b"auto a = at::bmm_out(o, x, y); // at::bmm_out(o)\nauto b = ::at::baddbmm_out(o, x, y, z);\nauto c = f(x).repeat({2, 1}); auto d = x.item();\nauto e = at::max(x, \"no\");";
        let p = plan(src, &s, Some(&methods));
        // Arity decides (a wrong argument type is the compiler's to say, as it was for ATen's).
        let names = ["bmm_out", "max", "repeat"].map(String::from);
        assert_eq!(p.names, BTreeSet::from(names));
        let mut text = src.to_vec();
        let mut edits = p.edits.clone();
        edits.sort_by_key(|e| std::cmp::Reverse((e.0, e.1)));
        for (a, b, new) in edits {
            text.splice(a..b, new);
        }
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.starts_with("auto a = archsmith_aten::bmm_out(o, x, y); // at::bmm_out(o)\n"),
            "{text}"
        );
        assert!(
            text.contains("auto c = archsmith_aten::repeat(f(x), {2, 1});"),
            "{text}"
        );
        let reasons: Vec<&str> = p.unreached.iter().map(|u| u.reason.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "aten::baddbmm.out: takes `Scalar beta`, which the stable dispatcher cannot pass",
                "aten::item: returns `Scalar`",
            ]
        );
    }
}
