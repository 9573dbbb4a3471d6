// TH's CPU BLAS calls (gemm removed in torch 1.7, gemv in 1.6), added by archsmith's codemod beside
// each file whose calls it rewrote (rules th-blas-gemm, th-blas-gemv): THFloatBlas_gemm(…) becomes
// archsmith_th::FloatBlas_gemm(…). Same arguments as TH's THBlas.h, same column-major order and
// TH's leading-dimension fix-ups for one-wide matrices; the work is ATen's addmm_/addmv_ on strided
// views of the caller's memory (no copy), so it runs on the BLAS torch was built with.
#pragma once
#include <ATen/ATen.h>
#include <algorithm>
#include <cstdint>

namespace archsmith_th {

inline bool transposed(char trans) {
  switch (trans) {
    case 'n': case 'N': return false;
    case 't': case 'T': case 'c': case 'C': return true;  // real types: conjugate = transpose
  }
  TORCH_CHECK(false, "THBlas: trans must be one of n, t, c; got ", trans);
}

// A column-major rows x cols matrix with leading dimension ld, as a view of p.
template <class T> at::Tensor matrix(T* p, int64_t rows, int64_t cols, int64_t ld) {
  TORCH_CHECK(ld >= std::max<int64_t>(rows, 1), "THBlas: leading dimension ", ld, " < ", rows, " rows");
  return at::from_blob(p, {rows, cols}, {1, ld}, at::dtype(c10::CppTypeToScalarType<T>::value));
}

template <class T> at::Tensor vector(T* p, int64_t n, int64_t inc) {
  TORCH_CHECK(inc > 0, "THBlas: increment ", inc, " must be positive");
  return at::from_blob(p, {n}, {inc}, at::dtype(c10::CppTypeToScalarType<T>::value));
}

// C = alpha * op(A) * op(B) + beta * C; op(A) is m x k, op(B) k x n, C m x n.
template <class T>
void gemm(char transa, char transb, int64_t m, int64_t n, int64_t k, T alpha, T* a, int64_t lda,
          T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  bool ta = transposed(transa), tb = transposed(transb);
  if (n == 1) ldc = std::max<int64_t>(m, 1);  // THBlas_gemm's fix-ups
  if (ta ? m == 1 : k == 1) lda = std::max<int64_t>(ta ? k : m, 1);
  if (tb ? k == 1 : n == 1) ldb = std::max<int64_t>(tb ? n : k, 1);
  at::Tensor A = ta ? matrix(a, k, m, lda).t() : matrix(a, m, k, lda);
  at::Tensor B = tb ? matrix(b, n, k, ldb).t() : matrix(b, k, n, ldb);
  matrix(c, m, n, ldc).addmm_(A, B, beta, alpha);
}

// y = alpha * op(A) * x + beta * y; A is m x n.
template <class T>
void gemv(char trans, int64_t m, int64_t n, T alpha, T* a, int64_t lda, T* x, int64_t incx, T beta,
          T* y, int64_t incy) {
  bool t = transposed(trans);
  if (n == 1) lda = std::max<int64_t>(m, 1);  // THBlas_gemv's fix-up
  at::Tensor A = matrix(a, m, n, lda);
  vector(y, t ? n : m, incy).addmv_(t ? A.t() : A, vector(x, t ? m : n, incx), beta, alpha);
}

#define ARCHSMITH_TH_BLAS(NAME, T)                                                               \
  inline void NAME##Blas_gemm(char transa, char transb, int64_t m, int64_t n, int64_t k, T alpha, \
                              T* a, int64_t lda, T* b, int64_t ldb, T beta, T* c, int64_t ldc) {  \
    gemm<T>(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);                       \
  }                                                                                              \
  inline void NAME##Blas_gemv(char trans, int64_t m, int64_t n, T alpha, T* a, int64_t lda, T* x, \
                              int64_t incx, T beta, T* y, int64_t incy) {                        \
    gemv<T>(trans, m, n, alpha, a, lda, x, incx, beta, y, incy);                                 \
  }
ARCHSMITH_TH_BLAS(Float, float)
ARCHSMITH_TH_BLAS(Double, double)
#undef ARCHSMITH_TH_BLAS

}  // namespace archsmith_th
