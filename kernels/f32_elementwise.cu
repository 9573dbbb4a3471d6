// f32 elementwise: y = a*x + y. Plain CUDA C++; builds for every arch nvcc supports.
#include "common.cuh"
#include <vector>

__global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

int main() {
  const int n = 1 << 16;
  const float a = 1.5f;
  std::vector<float> x(n), y(n), ref(n), out(n);
  for (int i = 0; i < n; ++i) {
    x[i] = archsmith_input(i, 1);
    y[i] = archsmith_input(i, 2);
    ref[i] = a * x[i] + y[i];  // CPU reference
  }
  float *dx, *dy;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  saxpy<<<(n + 255) / 256, 256>>>(n, a, dx, dy);
  CHECK_LAUNCH("saxpy");
  CHECK(cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  double max_err = 0;
  for (int i = 0; i < n; ++i) max_err = std::fmax(max_err, std::fabs(out[i] - ref[i]));
  // a*x+y may be fused (one rounding) on the device and not on the host: allow a few ulps.
  return archsmith_report("f32_elementwise", saxpy, max_err, 1e-6);
}
