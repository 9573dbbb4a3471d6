// Tensor cores: one warp computes D = A*B + C with `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`
// (the m16n8k16 f16 shape needs sm_80+), against a CPU matmul of the same half inputs.
#include "common.cuh"
#include <cuda_fp16.h>
#include <vector>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "mma_sync needs mma.sync m16n8k16 (sm_80+); kernels.toml declares min_arch = 8.0"
#endif

constexpr int M = 16, N = 8, K = 16;

// A is MxK row-major, B is KxN stored column-major (B[n*K + k]), C and D are MxN row-major.
__global__ void mma_16x8x16(const __half *A, const __half *B, const float *C, float *D) {
  const int lane = threadIdx.x, group = lane >> 2, tig = lane & 3;
  // Fragment layouts from the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type").
  unsigned a[4], b[2];
  for (int r = 0; r < 4; ++r) {
    int row = group + ((r & 1) ? 8 : 0), col = tig * 2 + ((r & 2) ? 8 : 0);
    __half2 v = __halves2half2(A[row * K + col], A[row * K + col + 1]);
    a[r] = *reinterpret_cast<unsigned *>(&v);
  }
  for (int r = 0; r < 2; ++r) {
    int k = tig * 2 + (r ? 8 : 0), n = group;
    __half2 v = __halves2half2(B[n * K + k], B[n * K + k + 1]);
    b[r] = *reinterpret_cast<unsigned *>(&v);
  }
  float c[4], d[4];
  for (int r = 0; r < 4; ++r) c[r] = C[(group + ((r & 2) ? 8 : 0)) * N + tig * 2 + (r & 1)];
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
  for (int r = 0; r < 4; ++r) D[(group + ((r & 2) ? 8 : 0)) * N + tig * 2 + (r & 1)] = d[r];
}

int main() {
  std::vector<__half> A(M * K), B(K * N);
  std::vector<float> C(M * N), ref(M * N), D(M * N);
  for (int i = 0; i < M * K; ++i) A[i] = __float2half(archsmith_input(i, 9));
  for (int i = 0; i < K * N; ++i) B[i] = __float2half(archsmith_input(i, 10));
  for (int i = 0; i < M * N; ++i) C[i] = archsmith_input(i, 11);
  for (int m = 0; m < M; ++m)  // CPU reference in double from the same half inputs
    for (int n = 0; n < N; ++n) {
      double acc = C[m * N + n];
      for (int k = 0; k < K; ++k) acc += double(__half2float(A[m * K + k])) * __half2float(B[n * K + k]);
      ref[m * N + n] = float(acc);
    }
  __half *dA, *dB;
  float *dC, *dD;
  CHECK(cudaMalloc(&dA, A.size() * sizeof(__half)));
  CHECK(cudaMalloc(&dB, B.size() * sizeof(__half)));
  CHECK(cudaMalloc(&dC, C.size() * sizeof(float)));
  CHECK(cudaMalloc(&dD, D.size() * sizeof(float)));
  CHECK(cudaMemcpy(dA, A.data(), A.size() * sizeof(__half), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dB, B.data(), B.size() * sizeof(__half), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dC, C.data(), C.size() * sizeof(float), cudaMemcpyHostToDevice));
  mma_16x8x16<<<1, 32>>>(dA, dB, dC, dD);
  CHECK_LAUNCH("mma_16x8x16");
  CHECK(cudaMemcpy(D.data(), dD, D.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double max_err = 0;
  for (int i = 0; i < M * N; ++i) max_err = std::fmax(max_err, std::fabs(D[i] - ref[i]));
  // Products of halves are exact in f32; only the f32 accumulation order differs.
  return archsmith_report("mma_sync", mma_16x8x16, max_err, 1e-4);
}
