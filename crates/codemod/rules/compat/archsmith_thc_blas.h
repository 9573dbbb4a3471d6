// THC's BLAS calls (removed with THC in torch 1.11) over cuBLAS, added by archsmith's codemod
// beside each file whose THCudaBlas_* calls it rewrote (rules thc-blas-compat-*). Same arguments
// as THC's THCBlas.h less the THCState, same column-major order, THC's int-range checks and
// leading-dimension adjustment (adjustLdLevel2/3 in THCBlas.cu); the handle is torch's own, on the
// current stream.
#pragma once
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Exceptions.h>
#include <algorithm>
#include <climits>
#include <cstdint>

namespace archsmith_thc {

inline cublasOperation_t op(char trans) {
  switch (trans) {
    case 'n': case 'N': return CUBLAS_OP_N;
    case 't': case 'T': return CUBLAS_OP_T;
    case 'c': case 'C': return CUBLAS_OP_C;
  }
  TORCH_CHECK(false, "THCudaBlas: trans must be one of t, n, c; got ", trans);
}

inline int narrow(int64_t v, const char* what) {
  TORCH_CHECK(v <= INT_MAX, "THCudaBlas: ", what, " = ", v, " exceeds ", INT_MAX, ", cuBLAS's bound");
  return static_cast<int>(v);
}

// THC's adjustLdLevel3: a leading dimension of a 1-wide matrix may be anything; cuBLAS checks it.
inline void adjust_ld3(char ta, char tb, int64_t m, int64_t n, int64_t k, int64_t& lda, int64_t& ldb, int64_t& ldc) {
  bool ta_ = ta == 't' || ta == 'T', tb_ = tb == 't' || tb == 'T';
  if (n <= 1) ldc = std::max<int64_t>(m, 1);
  if (ta_ ? m <= 1 : k <= 1) lda = std::max<int64_t>(ta_ ? k : m, 1);
  if (tb_ ? k <= 1 : n <= 1) ldb = std::max<int64_t>(tb_ ? n : k, 1);
}

// Called directly, not through at::cuda::blas::gemm/gemv: torch 2.15 declares those but does not
// export them from libtorch_cuda.so, so an extension calling them builds and then fails to load.
#define ARCHSMITH_THC_GEMM(NAME, T, CUBLAS)                                                        \
  inline void NAME(char transa, char transb, int64_t m, int64_t n, int64_t k, T alpha, T* a,       \
                   int64_t lda, T* b, int64_t ldb, T beta, T* c, int64_t ldc) {                    \
    adjust_ld3(transa, transb, m, n, k, lda, ldb, ldc);                                            \
    TORCH_CUDABLAS_CHECK(CUBLAS(at::cuda::getCurrentCUDABlasHandle(), op(transa), op(transb),      \
        narrow(m, "m"), narrow(n, "n"), narrow(k, "k"), &alpha, a, narrow(lda, "lda"), b,          \
        narrow(ldb, "ldb"), &beta, c, narrow(ldc, "ldc")));                                        \
  }
ARCHSMITH_THC_GEMM(Sgemm, float, cublasSgemm)
ARCHSMITH_THC_GEMM(Dgemm, double, cublasDgemm)

// THC's adjustLdLevel2 for gemv.
#define ARCHSMITH_THC_GEMV(NAME, T, CUBLAS)                                                        \
  inline void NAME(char trans, int64_t m, int64_t n, T alpha, T* a, int64_t lda, T* x,             \
                   int64_t incx, T beta, T* y, int64_t incy) {                                     \
    if (n <= 1) lda = std::max<int64_t>(m, 1);                                                     \
    TORCH_CUDABLAS_CHECK(CUBLAS(at::cuda::getCurrentCUDABlasHandle(), op(trans), narrow(m, "m"),   \
        narrow(n, "n"), &alpha, a, narrow(lda, "lda"), x, narrow(incx, "incx"), &beta, y,          \
        narrow(incy, "incy")));                                                                    \
  }
ARCHSMITH_THC_GEMV(Sgemv, float, cublasSgemv)
ARCHSMITH_THC_GEMV(Dgemv, double, cublasDgemv)

#define ARCHSMITH_THC_GEMM_BATCHED(NAME, T, CUBLAS)                                                \
  inline void NAME(char transa, char transb, int64_t m, int64_t n, int64_t k, T alpha,             \
                   const T* a[], int64_t lda, const T* b[], int64_t ldb, T beta, T* c[],           \
                   int64_t ldc, int64_t batchCount) {                                              \
    adjust_ld3(transa, transb, m, n, k, lda, ldb, ldc);                                            \
    TORCH_CUDABLAS_CHECK(CUBLAS(at::cuda::getCurrentCUDABlasHandle(), op(transa), op(transb),      \
        narrow(m, "m"), narrow(n, "n"), narrow(k, "k"), &alpha, a, narrow(lda, "lda"), b,          \
        narrow(ldb, "ldb"), &beta, c, narrow(ldc, "ldc"), narrow(batchCount, "batchCount")));      \
  }
ARCHSMITH_THC_GEMM_BATCHED(SgemmBatched, float, cublasSgemmBatched)
ARCHSMITH_THC_GEMM_BATCHED(DgemmBatched, double, cublasDgemmBatched)

#define ARCHSMITH_THC_GEMM_STRIDED(NAME, T, CUBLAS)                                                \
  inline void NAME(char transa, char transb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, \
                   int64_t lda, int64_t strideA, const T* b, int64_t ldb, int64_t strideB, T beta, \
                   T* c, int64_t ldc, int64_t strideC, int64_t batchCount) {                       \
    adjust_ld3(transa, transb, m, n, k, lda, ldb, ldc);                                            \
    TORCH_CUDABLAS_CHECK(CUBLAS(at::cuda::getCurrentCUDABlasHandle(), op(transa), op(transb),      \
        narrow(m, "m"), narrow(n, "n"), narrow(k, "k"), &alpha, a, narrow(lda, "lda"), strideA, b, \
        narrow(ldb, "ldb"), strideB, &beta, c, narrow(ldc, "ldc"), strideC,                        \
        narrow(batchCount, "batchCount")));                                                        \
  }
ARCHSMITH_THC_GEMM_STRIDED(SgemmStridedBatched, float, cublasSgemmStridedBatched)
ARCHSMITH_THC_GEMM_STRIDED(DgemmStridedBatched, double, cublasDgemmStridedBatched)

// THC's adjustLdLevel2 for ger.
#define ARCHSMITH_THC_GER(NAME, T, CUBLAS)                                                         \
  inline void NAME(int64_t m, int64_t n, T alpha, T* x, int64_t incx, T* y, int64_t incy, T* a,    \
                   int64_t lda) {                                                                  \
    if (n <= 1) lda = std::max<int64_t>(m, 1);                                                     \
    TORCH_CUDABLAS_CHECK(CUBLAS(at::cuda::getCurrentCUDABlasHandle(), narrow(m, "m"),              \
        narrow(n, "n"), &alpha, x, narrow(incx, "incx"), y, narrow(incy, "incy"), a,               \
        narrow(lda, "lda")));                                                                      \
  }
ARCHSMITH_THC_GER(Sger, float, cublasSger)
ARCHSMITH_THC_GER(Dger, double, cublasDger)

}  // namespace archsmith_thc
