// __half arithmetic: y = x*x + b with native half intrinsics (__hfma), which need sm_53+.
#include "common.cuh"
#include <cuda_fp16.h>
#include <vector>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 530
#error "half_math needs native __half arithmetic (sm_53+); kernels.toml declares min_arch = 5.3"
#endif

__global__ void half_fma(int n, const __half *x, const __half *b, __half *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __hfma(x[i], x[i], b[i]);
}

int main() {
  const int n = 4096;
  std::vector<__half> x(n), b(n), out(n);
  std::vector<float> ref(n);
  for (int i = 0; i < n; ++i) {
    x[i] = __float2half(archsmith_input(i, 3));
    b[i] = __float2half(archsmith_input(i, 4));
    // CPU reference from the same (rounded) half inputs, in float, then rounded to half once.
    float xf = __half2float(x[i]), bf = __half2float(b[i]);
    ref[i] = __half2float(__float2half(xf * xf + bf));
  }
  __half *dx, *db, *dy;
  CHECK(cudaMalloc(&dx, n * sizeof(__half)));
  CHECK(cudaMalloc(&db, n * sizeof(__half)));
  CHECK(cudaMalloc(&dy, n * sizeof(__half)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(__half), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), n * sizeof(__half), cudaMemcpyHostToDevice));
  half_fma<<<(n + 127) / 128, 128>>>(n, dx, db, dy);
  CHECK_LAUNCH("half_fma");
  CHECK(cudaMemcpy(out.data(), dy, n * sizeof(__half), cudaMemcpyDeviceToHost));
  double max_err = 0;
  for (int i = 0; i < n; ++i) max_err = std::fmax(max_err, std::fabs(__half2float(out[i]) - ref[i]));
  // __hfma rounds once from the exact product-sum; float then half rounds twice: 1 half ulp near 2.
  return archsmith_report("half_math", half_fma, max_err, 2e-3);
}
