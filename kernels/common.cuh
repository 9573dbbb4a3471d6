// Shared host helpers for archsmith's test kernels: error checks that name the failing call and
// explain the one error archsmith exists to prevent ("no kernel image is available"), a comparison
// against the CPU reference, and the report line `cargo xtask kernels` parses.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

// Exit codes read by `cargo xtask kernels`.
enum { EXIT_PASS = 0, EXIT_MISMATCH = 1, EXIT_CUDA_ERROR = 2, EXIT_NO_IMAGE = 3 };

inline void archsmith_check(cudaError_t err, const char *what, const char *file, int line) {
  if (err == cudaSuccess) return;
  if (err == cudaErrorNoKernelImageForDevice) {
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    std::printf("NO_IMAGE %s: %s (%s:%d): this binary has no SASS for sm_%d%d and no PTX the driver can JIT "
                "for it; rebuild with the device's arch (or a lower one +PTX) in the arch list\n",
                what, cudaGetErrorString(err), file, line, major, minor);
    std::exit(EXIT_NO_IMAGE);
  }
  std::printf("CUDA_ERROR %s: %s (%s) at %s:%d\n", what, cudaGetErrorString(err), cudaGetErrorName(err), file, line);
  std::exit(EXIT_CUDA_ERROR);
}
#define CHECK(call) archsmith_check((call), #call, __FILE__, __LINE__)
#define CHECK_LAUNCH(name) archsmith_check(cudaGetLastError(), name, __FILE__, __LINE__)

// Prints `RESULT <name> cc=X.Y ptx=.. binary=.. max_err=.. PASS|FAIL` and returns the exit code.
template <typename Kernel>
inline int archsmith_report(const char *name, Kernel kernel, double max_err, double tolerance) {
  int dev = 0, major = 0, minor = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  cudaFuncAttributes attr{};
  CHECK(cudaFuncGetAttributes(&attr, kernel));
  bool pass = std::isfinite(max_err) && max_err <= tolerance;
  std::printf("RESULT %s cc=%d.%d binary_version=%d ptx_version=%d max_err=%g tolerance=%g %s\n", name, major, minor,
              attr.binaryVersion, attr.ptxVersion, max_err, tolerance, pass ? "PASS" : "FAIL");
  return pass ? EXIT_PASS : EXIT_MISMATCH;
}

// Deterministic inputs in [-1, 1) without <random>, so host and device see the same values.
inline float archsmith_input(int i, int salt) {
  unsigned x = static_cast<unsigned>(i) * 2654435761u + static_cast<unsigned>(salt) * 40503u + 1u;
  x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
  return static_cast<float>(x & 0xffff) / 32768.0f - 1.0f;
}
