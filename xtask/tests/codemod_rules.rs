//! The rule catalogue's own before/after tests, run from the data, plus the catalogue's coverage
//! of the legacy APIs that shared/research/codemods.md lists.

use archsmith::codemod::catalogue::{Action, RuleKind};
use archsmith::codemod::engine::apply_rules;
use archsmith::codemod::{builtin, Catalogue};

#[test]
fn every_rule_passes_its_before_after_tests_and_is_idempotent() {
    let cat = builtin();
    let mut failures = Vec::new();
    for rule in &cat.rules {
        assert!(
            !rule.tests.is_empty(),
            "rule `{}` has no [[rule.test]]",
            rule.id
        );
        assert!(!rule.why.is_empty(), "rule `{}` has no `why`", rule.id);
        let mut changed_once = false;
        let mut reviewed_once = false;
        for (n, t) in rule.tests.iter().enumerate() {
            let out = apply_rules(std::iter::once(rule), rule.lang, t.before.as_bytes()).unwrap();
            let got = String::from_utf8(out.output.clone()).unwrap();
            let want = t.after.as_deref().unwrap_or(&t.before);
            if got != want {
                failures.push(format!(
                    "rule `{}` test {n}:\n--- want\n{want}\n--- got\n{got}",
                    rule.id
                ));
                continue;
            }
            changed_once |= got != t.before;
            let reviews = out.review.iter().filter(|r| r.rule == rule.id).count();
            reviewed_once |= reviews > 0;
            if reviews != t.review {
                failures.push(format!(
                    "rule `{}` test {n}: {} review item(s), expected {}: {:?}",
                    rule.id, reviews, t.review, out.review
                ));
            }
            let again = apply_rules(std::iter::once(rule), rule.lang, &out.output).unwrap();
            if again.output != out.output || !again.counts.is_empty() {
                failures.push(format!("rule `{}` test {n}: not idempotent", rule.id));
            }
        }
        // No test that cannot fail: a change rule must change something in its tests, a review
        // rule must report something.
        let changes = matches!(
            rule.action,
            Action::Rewrite { .. }
                | Action::Remove { .. }
                | Action::Include { review: false, .. }
                | Action::PyString { drop: true, .. }
        );
        if changes && !changed_once {
            failures.push(format!("rule `{}`: no test shows a change", rule.id));
        }
        if !changes && !reviewed_once {
            failures.push(format!("rule `{}`: no test shows a review item", rule.id));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn catalogue_covers_the_researched_legacy_apis() {
    let cat = builtin();
    // Each legacy form from codemods.md §2/§3/§9 and a snippet the catalogue must act on.
    let cases: &[(&str, &str)] = &[
        ("AT_CHECK", "AT_CHECK(x, \"m\");"),
        ("AT_WARN", "AT_WARN(\"m\");"),
        ("AT_ERROR", "AT_ERROR(\"m\");"),
        ("AT_ASSERTM", "AT_ASSERTM(x, \"m\");"),
        ("AT_ASSERT", "AT_ASSERT(x);"),
        ("THArgCheck", "THArgCheck(x, 1, \"m\");"),
        ("THError", "THError(\"m\");"),
        ("THCudaCheck", "THCudaCheck(cudaGetLastError());"),
        ("THCCeilDiv", "int b = THCCeilDiv(n, 64);"),
        ("ATenCeilDiv", "int b = at::cuda::ATenCeilDiv(n, 64);"),
        ("THC/THC.h", "#include <THC/THC.h>\n"),
        ("THC/THCAtomics.cuh", "#include <THC/THCAtomics.cuh>\n"),
        (
            "THC/THCDeviceUtils.cuh",
            "#include <THC/THCDeviceUtils.cuh>\n",
        ),
        ("TH/TH.h", "#include <TH/TH.h>\n"),
        (
            "file-scope THCState",
            "THCState *state = at::globalContext().lazyInitCUDA();\n",
        ),
        ("THCudaMalloc", "p = THCudaMalloc(state, n);"),
        ("THCudaFree", "THCudaFree(state, p);"),
        (
            "THCState_getCurrentStream",
            "s = THCState_getCurrentStream(state);",
        ),
        (
            "THCudaBlas_Sgemm",
            "THCudaBlas_Sgemm(state, 'n', 'n', 1, 1, 1, 1.f, a, 1, b, 1, 0.f, c, 1);",
        ),
        (
            "THCudaBlas_Sgemv",
            "THCudaBlas_Sgemv(state, 't', 1, 1, 1.f, a, 1, x, 1, 0.f, y, 1);",
        ),
        (
            "THCudaBlas_SgemmBatched",
            "THCudaBlas_SgemmBatched(state, 'n', 'n', 1, 1, 1, 1.f, a, 1, b, 1, 0.f, c, 1, 2);",
        ),
        (
            "dispatch .type()",
            "AT_DISPATCH_FLOATING_TYPES(x.type(), \"f\", [&] {});",
        ),
        (".type().is_cuda()", "if (x.type().is_cuda()) {}"),
        (".type().scalarType()", "auto s = x.type().scalarType();"),
        (".data<T>()", "float* p = x.data<float>();"),
        ("c10::optional", "c10::optional<int> o;"),
        ("at::optional", "at::optional<int> o;"),
        ("c10::nullopt", "o = c10::nullopt;"),
        ("at::nullopt", "o = at::nullopt;"),
        ("ndimension", "int d = x.ndimension();"),
        // In a file that uses torch (a plain CUDA file has no torch stream to launch on).
        (
            "launch without stream",
            "auto s = at::zeros({1}); k<<<g, b>>>(x);",
        ),
        ("toType(other.type())", "y = x.toType(o.type());"),
    ];
    let py: &[(&str, &str)] = &[
        ("-std=c++14", "args = ['-O2', '-std=c++14']\n"),
        (
            "torch.utils.ffi",
            "from torch.utils.ffi import create_extension\n",
        ),
        (
            "-gencode",
            "nvcc = ['-gencode', 'arch=compute_35,code=sm_35']\n",
        ),
        ("-arch", "nvcc = ['-arch=sm_60']\n"),
    ];
    let check = |lang, name: &str, src: &str| {
        let out = archsmith::codemod::engine::apply(cat, lang, src.as_bytes()).unwrap();
        assert!(
            out.output != src.as_bytes() || !out.review.is_empty(),
            "catalogue does nothing for {name}: {src}"
        );
    };
    for (name, src) in cases {
        check(archsmith::codemod::Lang::Cpp, name, src);
    }
    for (name, src) in py {
        check(archsmith::codemod::Lang::Python, name, src);
    }
}

#[test]
fn every_rule_records_when_the_old_form_broke() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../patches/rules/torch-legacy.toml"),
    )
    .unwrap();
    let rules_in_file = text.matches("[[rule]]").count();
    let cat = builtin();
    assert_eq!(cat.rules.len(), rules_in_file);
    assert!(cat.rules.len() >= 40, "{} rules", cat.rules.len());
    // The three hard breaks of a maskrcnn-era extension are dated as the research found them.
    let v = |id: &str| {
        cat.get(id)
            .unwrap()
            .broke_in
            .as_ref()
            .map(|v| v.to_string())
    };
    assert_eq!(v("at-check").as_deref(), Some("1.5"));
    assert_eq!(v("thc-header").as_deref(), Some("1.11"));
    assert_eq!(v("dispatch-type").as_deref(), Some("2.6"));
    assert_eq!(v("type-is-cuda"), None); // still compiles, with a warning
    assert!(cat.rules.iter().any(|r| r.kind == RuleKind::Review));
}

#[test]
fn bad_catalogues_are_refused_with_the_rule_named() {
    let cases = [
        (
            "[[rule]]\nid='x'\nkind='rewrite'\nbroke_in='1.5'\nwhy='w'\nmatch='A'\n",
            "rule `x`",
        ),
        (
            "[[rule]]\nid='x'\nkind='rewrite'\nbroke_in='one'\nwhy='w'\nmatch='A'\nreplace='B'\n",
            "broke_in",
        ),
        (
            "[[rule]]\nid='x'\nkind='rewrite'\nbroke_in='1.5'\nwhy='w'\nmatch='f($A)'\nreplace='g($B)'\n",
            "$B",
        ),
        (
            "[[rule]]\nid='x'\nkind='rewrite'\nbroke_in='1.5'\nwhy='w'\nmatch='f($A)'\nreplace='g($A, $A)'\n",
            "twice",
        ),
        (
            "[[rule]]\nid='x'\nkind='review'\nbroke_in='1.5'\nwhy='w'\nmatch='f($A)'\nsuggest='s'\nwhere={B='x'}\n",
            "`B`",
        ),
        (
            "[[rule]]\nid='x'\nkind='rewrite'\nbroke_in='1.5'\nwhy='w'\nmatch='A'\nreplace='B'\nbogus=1\n",
            "bogus",
        ),
    ];
    for (text, needle) in cases {
        let err = format!("{:#}", Catalogue::parse("t.toml", text).unwrap_err());
        assert!(err.contains("t.toml"), "{err}");
        assert!(err.contains(needle), "expected {needle:?} in: {err}");
    }
}

/// `archsmith_thc_blas.h`, the header the `thc-blas-compat-*` rules write beside a rewritten file,
/// compiled against the real torch 2.15.0 and CUDA 13.2 headers (cuBLAS from torch's NVIDIA
/// wheels): each function has THC's parameter list less the `THCState *` — THC's declarations
/// from THCBlas.h (torch 1.10) written out here, compared type by type by the compiler — and each
/// rule's replacement names the function of its own name.
#[test]
fn the_thc_blas_compat_header_takes_thcs_arguments_less_the_state() {
    use archsmith::codemod::catalogue::bundled;
    let header = bundled("archsmith_thc_blas.h").unwrap();
    let cat = builtin();
    let compat: Vec<&str> = cat
        .rules
        .iter()
        .filter(|r| r.id.starts_with("thc-blas-compat-"))
        .map(|r| match &r.action {
            Action::Rewrite { replace, .. } => replace
                .strip_prefix("archsmith_thc::")
                .and_then(|s| s.strip_suffix("($$$A)"))
                .unwrap(),
            _ => panic!("{} is not a rewrite", r.id),
        })
        .collect();
    assert_eq!(
        compat,
        [
            "SgemmBatched",
            "DgemmBatched",
            "SgemmStridedBatched",
            "DgemmStridedBatched",
            "Sger",
            "Dger"
        ]
    );
    // THCBlas.h's own prototypes (torch 1.10), state first.
    let thc = r#"
struct THCState;
void THCudaBlas_SgemmBatched(THCState *state, char transa, char transb, int64_t m, int64_t n, int64_t k,
    float alpha, const float *a[], int64_t lda, const float *b[], int64_t ldb,
    float beta, float *c[], int64_t ldc, int64_t batchCount);
void THCudaBlas_DgemmBatched(THCState *state, char transa, char transb, int64_t m, int64_t n, int64_t k,
    double alpha, const double *a[], int64_t lda, const double *b[], int64_t ldb,
    double beta, double *c[], int64_t ldc, int64_t batchCount);
void THCudaBlas_SgemmStridedBatched(THCState *state, char transa, char transb, int64_t m, int64_t n, int64_t k,
    float alpha, const float *a, int64_t lda, int64_t strideA, const float *b, int64_t ldb, int64_t strideB,
    float beta, float *c, int64_t ldc, int64_t strideC, int64_t batchCount);
void THCudaBlas_DgemmStridedBatched(THCState *state, char transa, char transb, int64_t m, int64_t n, int64_t k,
    double alpha, const double *a, int64_t lda, int64_t strideA, const double *b, int64_t ldb, int64_t strideB,
    double beta, double *c, int64_t ldc, int64_t strideC, int64_t batchCount);
void THCudaBlas_Sger(THCState *state, int64_t m, int64_t n, float alpha, float *x, int64_t incx, float *y, int64_t incy, float *a, int64_t lda);
void THCudaBlas_Dger(THCState *state, int64_t m, int64_t n, double alpha, double *x, int64_t incx, double *y, int64_t incy, double *a, int64_t lda);
template <typename> struct less_state;
template <typename R, typename... A> struct less_state<R(THCState *, A...)> { using type = R(A...); };
"#;
    let mut src = format!("#include \"archsmith_thc_blas.h\"\n#include <type_traits>\n{thc}");
    for f in &compat {
        src.push_str(&format!(
            "static_assert(std::is_same_v<less_state<decltype(THCudaBlas_{f})>::type, decltype(archsmith_thc::{f})>, \"{f}\");\n"
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("archsmith_thc_blas.h"), header).unwrap();
    std::fs::write(dir.path().join("check.cpp"), src).unwrap();

    let tc = archsmith::toolchain::ensure(&"13.2".parse().unwrap()).unwrap();
    let env = archsmith::python::ensure_torch_env(&"2.15.0".parse().unwrap()).unwrap();
    let purelib = archsmith::build_ext::probe_env(&env.python)
        .unwrap()
        .purelib;
    let (wheel_includes, _) =
        archsmith::build_ext::nvidia_wheel_dirs(archsmith::kb::kb(), &purelib, 13);
    let torch_inc = purelib.join("torch/include");
    let out = std::process::Command::new("c++")
        .args(["-std=c++20", "-fsyntax-only", "-I"])
        .arg(dir.path())
        .arg("-I")
        .arg(&torch_inc)
        .arg("-I")
        .arg(torch_inc.join("torch/csrc/api/include"))
        .arg("-I")
        .arg(tc.cuda_home.join("include"))
        .args(
            wheel_includes
                .iter()
                .flat_map(|i| ["-I".to_string(), i.clone()]),
        )
        .arg(dir.path().join("check.cpp"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
