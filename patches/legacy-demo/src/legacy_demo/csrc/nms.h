#pragma once
#include "cpu/vision.h"

#ifdef WITH_CUDA
#include "cuda/vision.h"
#endif

// dets: [N, 4] boxes (x1, y1, x2, y2); scores: [N]. Returns the kept indices, best first.
at::Tensor nms(const at::Tensor& dets, const at::Tensor& scores, const float threshold) {
  if (dets.type().is_cuda()) {
#ifdef WITH_CUDA
    if (dets.numel() == 0)
      return at::empty({0}, dets.options().dtype(at::kLong).device(at::kCPU));
    return nms_cuda(dets, scores, threshold);
#else
    AT_ERROR("legacy_demo was not compiled with GPU support");
#endif
  }
  return nms_cpu(dets, scores, threshold);
}
