//! The rule catalogue's own before/after tests, run from the data, plus the catalogue's coverage
//! of the legacy APIs that docs/research/codemods.md lists.

mod support;

use archsmith::codemod::catalogue::{Action, RuleKind};
use archsmith::codemod::engine::apply_rules;
use archsmith::codemod::{builtin, Catalogue};

#[test]
fn every_rule_passes_its_before_after_tests_and_is_idempotent() {
    let mut failures = Vec::new();
    // The legacy catalogue and the stable-ABI one (`codemod --stable-abi`).
    let stable = archsmith::codemod::catalogue::stable();
    for rule in builtin().rules.iter().chain(&stable.rules) {
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
                | Action::NeedsHeader { .. }
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
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../crates/codemod/rules/torch-legacy.toml"),
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
        .filter(|r| r.bundle.as_deref() == Some("archsmith_thc_blas.h"))
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
            "Sgemm",
            "Dgemm",
            "Sgemv",
            "Dgemv",
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
void THCudaBlas_Sgemv(THCState *state, char trans, int64_t m, int64_t n, float alpha, float *a, int64_t lda, float *x, int64_t incx, float beta, float *y, int64_t incy);
void THCudaBlas_Dgemv(THCState *state, char trans, int64_t m, int64_t n, double alpha, double *a, int64_t lda, double *x, int64_t incx, double beta, double *y, int64_t incy);
void THCudaBlas_Sgemm(THCState *state, char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha, float *a, int64_t lda, float *b, int64_t ldb, float beta, float *c, int64_t ldc);
void THCudaBlas_Dgemm(THCState *state, char transa, char transb, int64_t m, int64_t n, int64_t k, double alpha, double *a, int64_t lda, double *b, int64_t ldb, double beta, double *c, int64_t ldc);
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

    succeeds(
        cxx(dir.path())
            .args(["-fsyntax-only"])
            .arg(dir.path().join("check.cpp")),
        "",
    );
}

/// The real torch 2.15.0 env (provisioned once under archsmith's cache): its purelib, probed once
/// per test binary.
fn torch_purelib() -> &'static std::path::Path {
    static PURELIB: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PURELIB.get_or_init(|| {
        let env = archsmith::python::ensure_torch_env(&"2.15.0".parse().unwrap()).unwrap();
        archsmith::build_ext::probe_env(&env.python)
            .unwrap()
            .purelib
    })
}

/// Runs a compiler (or a compiled check) and fails the test with its output unless it succeeds;
/// returns its stdout.
fn succeeds(cmd: &mut std::process::Command, context: &str) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{context}{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A C++20 compiler invocation with torch 2.15.0's and CUDA 13.2's real headers (the toolkit and
/// NVIDIA's wheels from PyPI) and `dir` on the include path.
fn cxx(dir: &std::path::Path) -> std::process::Command {
    let tc = archsmith::toolchain::ensure(&"13.2".parse().unwrap()).unwrap();
    let purelib = torch_purelib();
    let (wheel_includes, _) = archsmith::build_ext::nvidia_wheel_dirs(purelib, 13);
    let torch_inc = purelib.join("torch/include");
    let mut cmd = std::process::Command::new("c++");
    cmd.args(["-std=c++20", "-I"])
        .arg(dir)
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
        );
    cmd
}

/// Every THC call of that era that takes a state, and TH's CPU BLAS, in one legacy file: the
/// codemod rewrites all of it with no review item, drops the state, writes the compatibility
/// headers beside it, and the result compiles against the real torch 2.15 and CUDA 13.2 headers.
#[test]
fn thc_state_calls_and_th_blas_port_with_no_review_item_and_compile_against_real_headers() {
    let legacy = r#"#include <ATen/ATen.h>
#include <THC/THC.h>
#include <TH/TH.h>

extern THCState *state;

void legacy(at::Tensor input, at::Tensor* rois, at::Tensor idx, float* host_a, float* host_c) {
  float* in = THCudaTensor_data(state, input);
  int64_t n = THCudaTensor_size(state, rois, 0) + THCudaTensor_stride(state, input, 1);
  int dims = THCudaTensor_nDimension(state, input) + THCudaTensor_isContiguous(state, rois);
  ptrdiff_t count = THCudaTensor_nElement(state, input);
  int64_t* i = THCudaLongTensor_data(state, idx);
  cudaStream_t s0 = THCState_getCurrentStream(state);
  cudaStream_t s1 = THCState_getCurrentStreamOnDevice(state, 0);
  cublasHandle_t blas = THCState_getCurrentBlasHandle(state);
  cusparseHandle_t sparse = THCState_getCurrentSparseHandle(state);
  cudaDeviceProp* prop = THCState_getCurrentDeviceProperties(state);
  int devices = THCState_getNumDevices(state);
  void* d = THCudaMalloc(state, 64);
  THCudaFree(state, d);
  void* h = THCudaHostAlloc(state, 64);
  THCudaHostFree(state, h);
  THCudaCheck(cudaGetLastError());
  THCudaCheckWarn(cudaStreamSynchronize(s0));
  THCublasCheck(cublasSetStream(blas, s1));
  THCusparseCheck(cusparseSetStream(sparse, s1));
  THFloatBlas_gemm('t', 'n', 2, 3, 4, 1.0f, host_a, 4, host_a, 4, 0.0f, host_c, 2);
  THFloatBlas_gemv('n', 2, 3, 1.0f, host_a, 2, host_a, 1, 0.0f, host_c, 1);
  (void)in; (void)n; (void)dims; (void)count; (void)i; (void)prop; (void)devices;
}
"#;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("legacy.cpp");
    let ported = ported_without_review(&file, legacy);
    assert!(
        !ported.contains("THC") && !ported.contains("TH/"),
        "{ported}"
    );
    for header in ["archsmith_thc_tensor.h", "archsmith_th_blas.h"] {
        assert!(dir.path().join(header).is_file(), "{header} not written");
    }
    succeeds(
        cxx(dir.path())
            .args(["-fsyntax-only", "-Werror=return-type"])
            .arg(&file),
        &format!("{ported}\n"),
    );
}

/// Issue 62: a THCDeviceTensor kernel of the THC era (the header, the two-, three- and
/// four-argument forms, getSize/getStride, a value built from data, sizes and strides) ports to
/// packed accessors with the index types and `RestrictPtrTraits` kept, no review item left, and
/// compiles against torch 2.15's real headers. Before the rules it stopped at the include.
#[test]
fn thc_device_tensors_port_to_packed_accessors_that_compile_against_real_headers() {
    let legacy = r#"#include <ATen/core/Tensor.h>
#include <THC/THCDeviceTensor.cuh>
#include <type_traits>

template <typename scalar_t>
__global__ void pool(THCDeviceTensor<scalar_t, 4, size_t, RestrictPtrTraits> in,
                     THCDeviceTensor<scalar_t, 3> out, THCDeviceTensor<int64_t, 2, int64_t> idx) {
  for (int c = 0; c < in.getSize(1); ++c) {
    out[0][c][0] = in[0][c][0][0] * static_cast<scalar_t>(in.getStride(3));
    idx[0][c] = static_cast<int64_t>(out.getSize(2));
  }
}

template <typename DType, int Dim>
static THCDeviceTensor<DType, Dim> devicetensor(const at::Tensor &blob) {
  int size[Dim];
  int stride[Dim];
  for (int i = 0; i < Dim; ++i) {
    size[i] = blob.size(i);
    stride[i] = blob.stride(i);
  }
  return THCDeviceTensor<DType, Dim>(blob.data_ptr<DType>(), size, stride);
}

void run(at::Tensor a, at::Tensor b, at::Tensor c) {
  auto out = devicetensor<float, 3>(b);
  pool<float><<<1, 1>>>(a.generic_packed_accessor<float, 4, at::RestrictPtrTraits, size_t>(), out,
              c.generic_packed_accessor<int64_t, 2, at::DefaultPtrTraits, int64_t>());
  static_assert(std::is_same_v<decltype(out), at::PackedTensorAccessor32<float, 3>>);
}
"#;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pool.cu");
    let ported = ported_without_review(&file, legacy);
    assert!(!ported.contains("THC"), "{ported}");
    assert!(
        ported.contains(
            "at::GenericPackedTensorAccessor<scalar_t, 4, at::RestrictPtrTraits, size_t> in"
        ),
        "{ported}"
    );
    // nvcc, one arch: at::RestrictPtrTraits is declared for CUDA compiles only
    // (ATen/core/TensorAccessor.h).
    let tc = archsmith::toolchain::ensure(&"13.2".parse().unwrap()).unwrap();
    let mut nvcc = std::process::Command::new(tc.cuda_home.join("bin/nvcc"));
    nvcc.args(cxx(dir.path()).get_args())
        .args(["-arch=sm_90", "-c", "-o"])
        .arg(dir.path().join("pool.o"))
        .arg(&file);
    succeeds(&mut nvcc, &format!("{ported}\n"));
}

/// archsmith_th_blas.h against a plain triple loop, on the CPU with torch's real libraries:
/// every transpose pair, padded leading dimensions, one-wide matrices with the leading dimension
/// TH let callers leave wrong, gemv both ways with strided vectors, beta 0 ignoring NaN in C.
#[test]
fn the_th_blas_compat_header_matches_a_reference_gemm_and_gemv() {
    let header = archsmith::codemod::catalogue::bundled("archsmith_th_blas.h").unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("archsmith_th_blas.h"), header).unwrap();
    std::fs::write(
        dir.path().join("check.cpp"),
        r#"#include "archsmith_th_blas.h"
#include <cmath>
#include <cstdio>
#include <vector>

// Column-major reference, as BLAS defines it.
static double at_(const std::vector<double>& a, bool t, int64_t ld, int64_t r, int64_t c) {
  return t ? a[c + r * ld] : a[r + c * ld];
}

int main() {
  int failures = 0, cases = 0;
  const char ops[] = {'n', 't', 'N', 'T'};
  for (int64_t m : {1, 3, 5}) for (int64_t n : {1, 2, 4}) for (int64_t k : {1, 3}) for (char ta : ops) for (char tb : ops) {
    bool ta_ = ta == 't' || ta == 'T', tb_ = tb == 't' || tb == 'T';
    int64_t lda = (ta_ ? k : m) + 2, ldb = (tb_ ? n : k) + 1, ldc = m + 3;
    std::vector<double> a(lda * 8), b(ldb * 8), c(ldc * 8), want;
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(i + 1.0);
    for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(i * 0.7);
    for (size_t i = 0; i < c.size(); ++i) c[i] = 0.25 * i;
    want = c;
    for (int64_t i = 0; i < m; ++i) for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += at_(a, ta_, lda, i, p) * at_(b, tb_, ldb, p, j);
      want[i + j * ldc] = 1.5 * s + 0.5 * c[i + j * ldc];
    }
    archsmith_th::DoubleBlas_gemm(ta, tb, m, n, k, 1.5, a.data(), lda, b.data(), ldb, 0.5, c.data(), ldc);
    ++cases;
    for (size_t i = 0; i < c.size(); ++i)
      if (std::abs(c[i] - want[i]) > 1e-12) { ++failures; std::printf("gemm %c%c m%ld n%ld k%ld at %zu: %g != %g\n", ta, tb, m, n, k, i, c[i], want[i]); break; }
  }
  // THBlas let a one-wide C carry any ldc (DCNv2 passes n_ for a k_ x 1 product): fixed up, not refused.
  {
    std::vector<float> ones(4, 1.f), bias = {1, 2, 3}, out(12, NAN);
    archsmith_th::FloatBlas_gemm('t', 'n', 4, 3, 1, 1.0f, ones.data(), 1, bias.data(), 1, 0.0f, out.data(), 4);
    ++cases;
    for (int j = 0; j < 3; ++j) for (int i = 0; i < 4; ++i)
      if (out[i + 4 * j] != bias[j]) { ++failures; std::printf("bias broadcast at %d,%d: %g\n", i, j, out[i + 4 * j]); }
  }
  for (char t : {'n', 't'}) {
    int64_t m = 3, n = 4, lda = 5, incx = 2, incy = 3;
    bool t_ = t == 't';
    std::vector<double> a(lda * n), x(16), y(16), want;
    for (size_t i = 0; i < a.size(); ++i) a[i] = i * 0.5 - 2;
    for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0 / (i + 1);
    for (size_t i = 0; i < y.size(); ++i) y[i] = i;
    want = y;
    int64_t rows = t_ ? n : m, cols = t_ ? m : n;
    for (int64_t i = 0; i < rows; ++i) {
      double s = 0;
      for (int64_t j = 0; j < cols; ++j) s += (t_ ? a[j + i * lda] : a[i + j * lda]) * x[j * incx];
      want[i * incy] = 2.0 * s - 1.0 * y[i * incy];
    }
    archsmith_th::DoubleBlas_gemv(t, m, n, 2.0, a.data(), lda, x.data(), incx, -1.0, y.data(), incy);
    ++cases;
    for (size_t i = 0; i < y.size(); ++i)
      if (std::abs(y[i] - want[i]) > 1e-12) { ++failures; std::printf("gemv %c at %zu: %g != %g\n", t, i, y[i], want[i]); break; }
  }
  std::printf("%d cases, %d failures\n", cases, failures);
  return failures != 0;
}
"#,
    )
    .unwrap();
    let lib = torch_purelib().join("torch/lib");
    let exe = dir.path().join("check");
    succeeds(
        cxx(dir.path())
            .arg(dir.path().join("check.cpp"))
            .arg("-o")
            .arg(&exe)
            .arg("-L")
            .arg(&lib)
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .args(["-ltorch_cpu", "-lc10"]),
        "",
    );
    let stdout = succeeds(&mut std::process::Command::new(&exe), "");
    assert!(stdout.contains("291 cases, 0 failures"), "{stdout}");
}

/// The macros `c10-check-op` renames, each as c10's logging header defined it.
const C10_CHECK_OPS: [&str; 13] = [
    "CHECK_EQ",
    "CHECK_NE",
    "CHECK_LE",
    "CHECK_LT",
    "CHECK_GE",
    "CHECK_GT",
    "DCHECK_EQ",
    "DCHECK_NE",
    "DCHECK_LE",
    "DCHECK_LT",
    "DCHECK_GE",
    "DCHECK_GT",
    "CHECK_NOTNULL",
];

/// The rule's release is read, not remembered: c10's logging header in the wheel of the last
/// torch before the rule's `broke_in` (from the knowledge base, read from PyPI by range) defines
/// every renamed macro, and the wheel of `broke_in` defines none of them but each `TORCH_` one.
#[test]
fn the_c10_check_rename_happened_in_the_release_the_rule_names() {
    const HEADER: &str = "torch/include/c10/util/logging_is_not_google_glog.h";
    let rule = builtin()
        .rules
        .iter()
        .find(|r| r.id == "c10-check-op")
        .unwrap();
    let broke = rule.broke_in.clone().unwrap();
    let mut releases: Vec<_> = archsmith::kb::kb()
        .torch
        .iter()
        .map(|r| r.version.clone())
        .collect();
    releases.sort();
    let before = releases
        .iter()
        .rfind(|v| v.major_minor() < broke)
        .expect("a release before the rule's");
    let first = releases
        .iter()
        .find(|v| v.major_minor() == broke)
        .expect("a release of the rule's broke_in");
    let pypi = archsmith::pypi::Pypi::recorded(archsmith::pypi::repository_recordings());
    let files = pypi.files("torch").unwrap();
    let header = |v: &archsmith::version::Version| {
        let wheel = archsmith::pypi::linux_wheel(&files, v).unwrap();
        let bytes = pypi.members(wheel, &[HEADER]).unwrap().remove(0);
        String::from_utf8(bytes.unwrap_or_else(|| panic!("{} has no {HEADER}", wheel.filename)))
            .unwrap()
    };
    let (old, new) = (header(before), header(first));
    let defines = |text: &str, name: &str| {
        text.lines().any(|l| {
            l.trim_start()
                .strip_prefix('#')
                .map(str::trim_start)
                .and_then(|l| l.strip_prefix("define"))
                .is_some_and(|l| l.trim_start().starts_with(&format!("{name}(")))
        })
    };
    for name in C10_CHECK_OPS {
        assert!(defines(&old, name), "torch {before} does not define {name}");
        assert!(!defines(&new, name), "torch {first} still defines {name}");
        assert!(
            defines(&new, &format!("TORCH_{name}")),
            "torch {first} lacks TORCH_{name}"
        );
    }
}

/// A legacy file using c10's check macros does not compile against torch 2.15's headers
/// (`'CHECK_EQ' was not declared`, what users meet) and does once the rule has run.
#[test]
fn c10_check_macros_compile_against_real_headers_once_renamed() {
    let dir = tempfile::tempdir().unwrap();
    let body: String = C10_CHECK_OPS
        .iter()
        .map(|m| match *m {
            "CHECK_NOTNULL" => "  CHECK_NOTNULL(p);\n".to_string(),
            m => format!("  {m}(a, b);\n"),
        })
        .collect();
    let legacy =
        format!("#include <c10/util/Logging.h>\nvoid checks(int a, int b, int *p) {{\n{body}}}\n");
    let compile = |text: &str| {
        std::fs::write(dir.path().join("checks.cpp"), text).unwrap();
        cxx(dir.path())
            .args(["-fsyntax-only"])
            .arg(dir.path().join("checks.cpp"))
            .output()
            .unwrap()
    };
    let before = compile(&legacy);
    assert!(!before.status.success());
    // gcc quotes the name with the locale's marks.
    let said = String::from_utf8_lossy(&before.stderr);
    assert!(
        said.lines()
            .any(|l| l.contains("CHECK_EQ") && l.contains("was not declared")),
        "{said}"
    );
    let rules = builtin().rules.iter().filter(|r| r.id == "c10-check-op");
    let out = apply_rules(rules, archsmith::codemod::Lang::Cpp, legacy.as_bytes()).unwrap();
    let ported = String::from_utf8(out.output.clone()).unwrap();
    assert_eq!(out.counts.values().sum::<usize>(), C10_CHECK_OPS.len());
    let after = compile(&ported);
    assert!(
        after.status.success(),
        "{ported}\n{}",
        String::from_utf8_lossy(&after.stderr)
    );
}

/// A package's own test helpers from the 1.x days (torch.testing's dtype getters and random
/// aliases, removed in 2.0) are rewritten by the Python rows and then run on torch 2.15: every
/// getter returns the dtypes, and `make_non_contiguous` is a review item with its replacement.
#[test]
fn removed_torch_testing_helpers_are_rewritten_and_run_on_a_current_torch() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("helpers.py");
    std::fs::write(
        &file,
        "import torch\nfrom torch.testing import get_all_dtypes, get_all_int_dtypes\nimport torch.testing as tt\n\n\ndef dtypes():\n    return (get_all_dtypes(include_bool=False), get_all_int_dtypes(), tt.get_all_fp_dtypes(),\n            torch.testing.get_all_complex_dtypes(), torch.testing.get_all_math_dtypes('cpu'))\n\n\ndef noise():\n    return tt.rand(3), torch.testing.randn(2, 2)\n\n\ndef shuffled(t):\n    return torch.testing.make_non_contiguous(t)\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["codemod", "--force", "--json"])
        .arg(dir.path())
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let review = doc.to_string();
    assert!(
        review.contains("torch.testing.make_non_contiguous")
            && review.contains("noncontiguous=True"),
        "{review}"
    );
    let ported = std::fs::read_to_string(&file).unwrap();
    assert!(
        !ported.contains("tt.get_all") && !ported.contains("tt.rand"),
        "{ported}"
    );
    // Run the ported helpers (all but the review item) on torch 2.15.
    let env = archsmith::python::ensure_torch_env(&"2.15.0".parse().unwrap()).unwrap();
    let run = std::process::Command::new(&env.python)
        .current_dir(dir.path())
        .args([
            "-c",
            "import helpers, torch\nd = helpers.dtypes()\nassert torch.float32 in d[0] and torch.bool not in d[0], d[0]\nassert torch.int64 in d[1] and torch.float64 in d[2] and torch.complex64 in d[3] and torch.float64 in d[4]\nassert tuple(helpers.noise()[0].shape) == (3,)\nprint('ok', len(d[0]))\n",
        ])
        .output()
        .unwrap();
    assert!(
        run.status.success() && String::from_utf8_lossy(&run.stdout).starts_with("ok"),
        "{ported}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// A file that used `std::unique_ptr` after `<random>` and `<set>` (torch-points-kernels'
/// `neighbors.cpp`) does not compile with this host's g++ — the compiler itself names `<memory>` —
/// and compiles once `std-memory-header` has run; a second run adds nothing.
#[test]
fn a_standard_header_the_host_compiler_no_longer_pulls_in_is_added() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = "#include <chrono>\n#include <random>\n#include <set>\n\n\
                  struct Tree { explicit Tree(int) {} };\n\
                  int build() {\n  std::unique_ptr<Tree> index(new Tree(3));\n  \
                  return index ? 1 : 0;\n}\n";
    let compile = |text: &str| {
        std::fs::write(dir.path().join("neighbors.cpp"), text).unwrap();
        std::process::Command::new("c++")
            .args(["-std=c++17", "-fsyntax-only"])
            .arg(dir.path().join("neighbors.cpp"))
            .output()
            .unwrap()
    };
    let before = compile(legacy);
    assert!(
        !before.status.success(),
        "this host's libstdc++ pulls in <memory>"
    );
    let said = String::from_utf8_lossy(&before.stderr);
    assert!(said.contains("<memory>"), "{said}");
    let rules = builtin().rules.iter().filter(|r| r.id.starts_with("std-"));
    let out = apply_rules(
        rules.clone(),
        archsmith::codemod::Lang::Cpp,
        legacy.as_bytes(),
    )
    .unwrap();
    let ported = String::from_utf8(out.output.clone()).unwrap();
    assert_eq!(
        out.counts.get("std-memory-header"),
        Some(&1),
        "{:?}",
        out.counts
    );
    assert!(
        ported.contains("#include <set>\n#include <memory>\n"),
        "{ported}"
    );
    let after = compile(&ported);
    assert!(
        after.status.success(),
        "{ported}\n{}",
        String::from_utf8_lossy(&after.stderr)
    );
    let again = apply_rules(rules, archsmith::codemod::Lang::Cpp, &out.output).unwrap();
    assert!(again.counts.is_empty() && again.output == out.output);
}

/// The operator schemas of the torch env archsmith provisioned for `version` (the file its PyPI
/// wheel installed).
fn env_schemas(version: &str) -> archsmith::codemod::aten_schema::Schemas {
    let env = archsmith::python::ensure_torch_env(&version.parse().unwrap()).unwrap();
    let purelib = archsmith::build_ext::probe_env(&env.python)
        .unwrap()
        .purelib;
    archsmith::port_extension::signature_changes::from_env(&purelib)
        .unwrap()
        .unwrap()
}

/// Issue 62: an ATen call that no longer binds is read from the releases' own schemas (the
/// native_functions.yaml of torch 2.11.0's and 2.15.0's real wheels, as their envs installed
/// them): `at::qr(m)` bound in 2.11.0 and the operator is gone in 2.15.0; the three-argument
/// `leaky_relu_backward` of 2019 code binds in neither (it gained `self_is_result` before 1.12);
/// calls that still bind, and names that are no operator, give nothing.
#[test]
fn aten_calls_the_target_no_longer_binds_are_named_with_both_schemas() {
    use archsmith::port_extension::signature_changes::{review, Releases};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ops.cpp"),
        "#include <torch/extension.h>\n\
         at::Tensor f(at::Tensor g, at::Tensor x, at::Tensor m) {\n\
         \x20 auto qr = at::qr(m);  // at::symeig(m) in a comment is no call\n\
         \x20 auto d = at::leaky_relu_backward(g, x, 0.2);\n\
         \x20 auto z = at::zeros({2, 2}, x.options());\n\
         \x20 at::cuda::CUDAGuard guard(x.device());\n\
         \x20 return std::get<0>(qr) + d + z + at::sigmoid(x);\n\
         }\n",
    )
    .unwrap();
    let say = |_: &str| {};
    let mut releases = Releases::inserted_only(&say);
    releases.insert("2.11.0".parse().unwrap(), env_schemas("2.11.0"));
    releases.insert("2.15.0".parse().unwrap(), env_schemas("2.15.0"));
    let rows = review(
        dir.path(),
        &"2.11.0".parse().unwrap(),
        &"2.15.0".parse().unwrap(),
        &mut releases,
    )
    .unwrap();
    let got: Vec<(usize, &str)> = rows
        .iter()
        .map(|r| (r.line, r.suggestion.as_str()))
        .collect();
    assert_eq!(got.len(), 2, "{got:#?}");
    assert_eq!(got[0].0, 3);
    assert!(
        got[0].1.starts_with("at::qr(…) with 1 argument(s) binds in torch 2.11.0 (`qr(Tensor self, bool some=True) -> (Tensor Q, Tensor R)`) but not from torch 2.15.0; torch 2.15.0: the operator is gone"),
        "{}",
        got[0].1
    );
    assert_eq!(got[1].0, 4);
    assert!(
        got[1].1.starts_with("at::leaky_relu_backward(…) with 3 argument(s) binds in no torch from 2.11.0 to 2.15.0; torch 2.15.0: `leaky_relu_backward(Tensor grad_output, Tensor self, Scalar negative_slope, bool self_is_result) -> Tensor`"),
        "{}",
        got[1].1
    );
    assert!(rows.iter().all(|r| r.rule == "aten-signature"));
}

/// The live read: torch 1.12.0's schemas, by HTTP range from its PyPI wheel (the oldest wheel
/// that ships native_functions.yaml), kept under the cache; `leaky_relu_backward` already has
/// `self_is_result` there, and `symeig` (removed in 2.0) is still an operator.
#[test]
#[ignore = "live tier: reads torch 1.12.0's wheel on PyPI by HTTP range; cargo test -- --ignored"]
fn the_oldest_schemas_are_read_from_the_wheel_by_range() {
    use archsmith::port_extension::signature_changes::{oldest_with_schemas, Releases};
    let kept = archsmith::paths::cache_dir()
        .join("torch-schemas")
        .join(format!(
            "torch-{}.native_functions.yaml",
            oldest_with_schemas()
        ));
    let _ = std::fs::remove_file(&kept);
    let said = std::cell::RefCell::new(Vec::new());
    let say = |m: &str| said.borrow_mut().push(m.to_string());
    let mut releases = Releases::new(&say);
    let old = releases.of(&oldest_with_schemas()).unwrap();
    assert!(said.borrow()[0].contains("from its PyPI wheel"), "{said:?}");
    assert!(kept.is_file());
    assert!(old.len() > 1000, "{}", old.len());
    assert_eq!(old.accepts("leaky_relu_backward", 4), Some(true));
    assert_eq!(old.accepts("leaky_relu_backward", 3), Some(false));
    assert_eq!(old.accepts("symeig", 2), Some(true));
}

/// The include directory of the env of torch `version` (provisioned once, shared).
fn env_include(version: &str) -> std::path::PathBuf {
    let env = match version {
        "2.11.0" => support::older_torch_on_another_python(),
        v => archsmith::python::ensure_torch_env(&v.parse().unwrap()).unwrap(),
    };
    archsmith::build_ext::probe_env(&env.python)
        .unwrap()
        .purelib
        .join("torch/include")
}

/// What the port says of `#include <header>` against `target`, from `trees`.
fn described(
    header: &str,
    target: &archsmith::version::Version,
    trees: &mut archsmith::port_extension::header_history::IncludeTrees,
) -> String {
    archsmith::port_extension::header_history::went(header, None, target, trees)
        .unwrap()
        .unwrap()
        .describe(header, target)
}

/// Issue 62: a header the target no longer ships is named with the release that dropped it and
/// what the target offers instead, read from two real include trees (torch 2.11.0's and
/// 2.15.0's, as their envs installed them): `c10/util/complex_utils.h` moved to torch's
/// header-only tree; `ATen/Dimname.h`'s last copy only forwarded to `ATen/core/Dimname.h`, which
/// named tensors took with them; a header torch never had is not blamed on torch.
#[test]
fn a_removed_header_is_named_with_the_release_that_dropped_it() {
    use archsmith::port_extension::header_history::IncludeTrees;
    let said = std::cell::RefCell::new(Vec::new());
    let say = |m: &str| said.borrow_mut().push(m.to_string());
    let mut trees = IncludeTrees::inserted_only(&say);
    let old: archsmith::version::Version = "2.11.0".parse().unwrap();
    let target: archsmith::version::Version = "2.15.0".parse().unwrap();
    trees.insert_dir(old, env_include("2.11.0")).unwrap();
    trees
        .insert_dir(target.clone(), env_include("2.15.0"))
        .unwrap();
    let mut describe = |h: &str| described(h, &target, &mut trees);
    assert_eq!(
        describe("c10/util/complex_utils.h"),
        "#include <c10/util/complex_utils.h>: torch 2.11.0 shipped it, torch 2.15.0 no longer does; torch 2.15.0 has complex_utils.h at <torch/headeronly/util/complex_utils.h>"
    );
    assert_eq!(
        describe("ATen/Dimname.h"),
        "#include <ATen/Dimname.h>: torch 2.11.0 shipped it, torch 2.15.0 no longer does; its last copy (torch 2.11.0) only included <ATen/core/Dimname.h>, which torch 2.15.0 no longer has either"
    );
    assert!(
        describe("mylib/archsmith_fixture_ops.h").starts_with(
            "#include <mylib/archsmith_fixture_ops.h>: none of the 1 torch releases read from 2.11.0 on ships it, nor does torch 2.15.0 or the source; torch 2.15.0 has no header named archsmith_fixture_ops.h"
        )
    );
    assert!(said.borrow().is_empty(), "{said:?}");
}

/// The live read: with no era, the releases' include trees are read newest first from the target
/// back to the one that ships the header, each listed from its wheel's zip directory by range and kept:
/// `ATen/CUDAGeneratorImpl.h` left the top level in 1.11 for `ATen/cuda/`; `ATen/core/Macros.h`
/// (gone in 1.12) only forwarded to `c10/macros/Macros.h`.
#[test]
#[ignore = "live tier: reads torch 1.x wheels' zip directories on PyPI by HTTP range; cargo test -- --ignored"]
fn removed_headers_are_placed_by_the_wheels_on_pypi() {
    use archsmith::port_extension::header_history::IncludeTrees;
    let said = std::cell::RefCell::new(Vec::new());
    let say = |m: &str| said.borrow_mut().push(m.to_string());
    let mut trees = IncludeTrees::new(&say);
    let target: archsmith::version::Version = "2.15.0".parse().unwrap();
    trees
        .insert_dir(target.clone(), env_include("2.15.0"))
        .unwrap();
    let mut describe = |h: &str| described(h, &target, &mut trees);
    assert_eq!(
        describe("ATen/CUDAGeneratorImpl.h"),
        "#include <ATen/CUDAGeneratorImpl.h>: torch 1.10.0 shipped it, torch 1.11.0 no longer does; torch 2.15.0 has CUDAGeneratorImpl.h at <ATen/cuda/CUDAGeneratorImpl.h>"
    );
    assert_eq!(
        describe("ATen/core/Macros.h"),
        "#include <ATen/core/Macros.h>: torch 1.11.0 shipped it, torch 1.12.0 no longer does; its last copy (torch 1.11.0) only included <c10/macros/Macros.h>, which torch 2.15.0 has: include that instead"
    );
    let kept = archsmith::paths::cache_dir().join("torch-headers/torch-1.11.0.txt");
    assert!(kept.is_file(), "{said:?}");
}

/// Writes `legacy` to `file`, ports it with the built-in rules and returns the result, which must
/// leave no review item.
fn ported_without_review(file: &std::path::Path, legacy: &str) -> String {
    std::fs::write(file, legacy).unwrap();
    let report = archsmith::codemod::run(
        builtin(),
        std::slice::from_ref(&file.to_path_buf()),
        archsmith::codemod::Mode::Apply,
    )
    .unwrap();
    let ported = std::fs::read_to_string(file).unwrap();
    assert_eq!(
        report.review_items, 0,
        "{:#?}\n{ported}",
        report.files[0].review
    );
    ported
}

/// Issue 62: ATen calls written before an operator gained an argument without a default
/// (`leaky_relu_backward`'s `self_is_result`, `grid_sampler_2d_backward`'s `align_corners` and
/// `output_mask`) do not compile against torch 2.15's real headers ("too few arguments", what
/// users meet); completed from the env's own native_functions.yaml and the knowledge base's
/// derived values they do, and `embedding_backward` without `sparse` (no derivation) is left for
/// the review.
#[test]
fn derived_arguments_make_legacy_aten_calls_compile_against_real_headers() {
    use archsmith::port_extension::signature_changes::derive_arguments;
    let dir = tempfile::tempdir().unwrap();
    let legacy = "#include <ATen/ops/leaky_relu_backward.h>\n\
                  #include <ATen/ops/grid_sampler_2d_backward.h>\n\
                  at::Tensor f(const at::Tensor& g, const at::Tensor& x, const at::Tensor& grid) {\n\
                  \x20 auto d = at::leaky_relu_backward(g, x, 0.2);\n\
                  \x20 auto gs = at::grid_sampler_2d_backward(g, x, grid, 0, 0);\n\
                  \x20 return std::get<0>(gs).defined() ? d : g;\n\
                  }\n";
    let file = dir.path().join("ops.cpp");
    let compile = || {
        cxx(dir.path())
            .args(["-fsyntax-only"])
            .arg(&file)
            .output()
            .unwrap()
    };
    std::fs::write(&file, legacy).unwrap();
    let before = compile();
    assert!(!before.status.success());
    assert!(
        String::from_utf8_lossy(&before.stderr).contains("leaky_relu_backward"),
        "{}",
        String::from_utf8_lossy(&before.stderr)
    );
    let derived = derive_arguments(dir.path(), &env_schemas("2.15.0")).unwrap();
    let passed: Vec<Vec<String>> = derived
        .iter()
        .map(|d| d.passed.iter().map(|(_, v)| v.clone()).collect())
        .collect();
    assert_eq!(passed, [vec!["false"], vec!["true", "{true, true}"]]);
    let after = compile();
    assert!(
        after.status.success(),
        "{}\n{}",
        std::fs::read_to_string(&file).unwrap(),
        String::from_utf8_lossy(&after.stderr)
    );
    let schemas = env_schemas("2.15.0");
    assert!(derive_arguments(dir.path(), &schemas).unwrap().is_empty());
    // Every knowledge-base row names an argument the real schema asks for with no default.
    for row in &archsmith::kb::kb().aten_derived_arguments {
        let asks = schemas.overloads(&row.op).is_some_and(|ovs| {
            ovs.iter().any(|o| {
                o.args
                    .iter()
                    .any(|a| a.name == row.argument && a.default.is_none())
            })
        });
        assert!(
            asks,
            "{}.{}: not in torch 2.15.0's schema",
            row.op, row.argument
        );
        assert!(!row.source.is_empty() && !row.why.is_empty());
    }
}
