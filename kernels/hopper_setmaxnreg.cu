// Hopper warp specialization's register reallocation: `setmaxnreg` (sm_90a only). A block of two
// warpgroups hands registers from a "producer" warpgroup (dec to 40) to a "consumer" warpgroup
// (inc to 232), as CUTLASS's warp-specialized kernels do, then both compute y = x*x + 1.
#include "common.cuh"
#include <vector>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "hopper_setmaxnreg needs setmaxnreg, which only the arch-specific sm_90a target has; kernels.toml declares min_arch = 9.0, arch_specific = true"
#endif

constexpr int kThreads = 256;  // two warpgroups

__global__ void __launch_bounds__(kThreads, 1) realloc_square(int n, const float *x, float *y) {
  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = x[i] * x[i] + 1.0f;
}

int main() {
  const int n = 1 << 15;
  std::vector<float> x(n), ref(n), out(n);
  for (int i = 0; i < n; ++i) {
    x[i] = archsmith_input(i, 12);
    ref[i] = x[i] * x[i] + 1.0f;  // CPU reference
  }
  float *dx, *dy;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  realloc_square<<<16, kThreads>>>(n, dx, dy);
  CHECK_LAUNCH("realloc_square");
  CHECK(cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  double max_err = 0;
  for (int i = 0; i < n; ++i) max_err = std::fmax(max_err, std::fabs(out[i] - ref[i]));
  return archsmith_report("hopper_setmaxnreg", realloc_square, max_err, 1e-6);
}
