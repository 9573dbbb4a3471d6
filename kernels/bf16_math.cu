// __nv_bfloat16 arithmetic: y = x*w + b with native bf16 fma (__hfma on __nv_bfloat16), sm_80+.
#include "common.cuh"
#include <cuda_bf16.h>
#include <vector>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "bf16_math needs native __nv_bfloat16 arithmetic (sm_80+); kernels.toml declares min_arch = 8.0"
#endif

__global__ void bf16_fma(int n, const __nv_bfloat16 *x, const __nv_bfloat16 *w, const __nv_bfloat16 *b,
                         __nv_bfloat16 *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __hfma(x[i], w[i], b[i]);
}

int main() {
  const int n = 4096;
  std::vector<__nv_bfloat16> x(n), w(n), b(n), out(n);
  std::vector<float> ref(n);
  for (int i = 0; i < n; ++i) {
    x[i] = __float2bfloat16(archsmith_input(i, 5));
    w[i] = __float2bfloat16(archsmith_input(i, 6));
    b[i] = __float2bfloat16(archsmith_input(i, 7));
    float r = __bfloat162float(x[i]) * __bfloat162float(w[i]) + __bfloat162float(b[i]);
    ref[i] = __bfloat162float(__float2bfloat16(r));  // CPU reference, rounded to bf16 once
  }
  __nv_bfloat16 *dx, *dw, *db, *dy;
  const size_t bytes = n * sizeof(__nv_bfloat16);
  CHECK(cudaMalloc(&dx, bytes));
  CHECK(cudaMalloc(&dw, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dy, bytes));
  CHECK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dw, w.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
  bf16_fma<<<(n + 127) / 128, 128>>>(n, dx, dw, db, dy);
  CHECK_LAUNCH("bf16_fma");
  CHECK(cudaMemcpy(out.data(), dy, bytes, cudaMemcpyDeviceToHost));
  double max_err = 0;
  for (int i = 0; i < n; ++i) max_err = std::fmax(max_err, std::fabs(__bfloat162float(out[i]) - ref[i]));
  // One bf16 ulp at magnitude < 2 is 2^-7 (double rounding on the host may differ by one ulp).
  return archsmith_report("bf16_math", bf16_fma, max_err, 1.0 / 128);
}
