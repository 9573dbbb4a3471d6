// FP8 e4m3 conversion with the hardware instruction `cvt.rn.satfinite.e4m3x2.f32` (sm_89+), checked
// bit-exactly against cuda_fp8.h's host (software) conversion.
#include "common.cuh"
#include <cuda_fp8.h>
#include <vector>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
#error "fp8_e4m3 needs the e4m3x2 cvt instruction (sm_89+); kernels.toml declares min_arch = 8.9"
#endif

// Converts pairs: out[2i] = e4m3(x[2i]), out[2i+1] = e4m3(x[2i+1]).
__global__ void to_e4m3(int pairs, const float *x, unsigned short *out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  unsigned short packed;
  // The first source lands in the upper byte, the second in the lower byte.
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(x[2 * i + 1]), "f"(x[2 * i]));
  out[i] = packed;
}

int main() {
  const int pairs = 4096, n = 2 * pairs;
  std::vector<float> x(n);
  std::vector<unsigned char> ref(n);
  for (int i = 0; i < n; ++i) {
    x[i] = archsmith_input(i, 8) * 512.0f;  // beyond e4m3's ±448, so saturation is exercised
    if (i % 97 == 0) x[i] = 0.0f;
    ref[i] = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E4M3);  // CPU reference
  }
  float *dx;
  unsigned short *dout;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dout, pairs * sizeof(unsigned short)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  to_e4m3<<<(pairs + 255) / 256, 256>>>(pairs, dx, dout);
  CHECK_LAUNCH("to_e4m3");
  std::vector<unsigned short> out(pairs);
  CHECK(cudaMemcpy(out.data(), dout, pairs * sizeof(unsigned short), cudaMemcpyDeviceToHost));
  int mismatches = 0;
  for (int i = 0; i < pairs; ++i) {
    mismatches += (out[i] & 0xff) != ref[2 * i];
    mismatches += (out[i] >> 8) != ref[2 * i + 1];
  }
  // Conversion is exact: any differing byte is a failure (max_err counts them).
  return archsmith_report("fp8_e4m3", to_e4m3, mismatches, 0);
}
