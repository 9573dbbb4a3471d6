#pragma once
#include "cpu/vision.h"

#ifdef WITH_CUDA
#include "cuda/vision.h"
#endif

// input: [N, C, H, W]; rois: [K, 5] (batch index, x1, y1, x2, y2) in input coordinates before
// spatial_scale. aligned = true shifts the box by half a pixel (Detectron2's ROIAlignV2).
at::Tensor ROIAlign_forward(const at::Tensor& input, const at::Tensor& rois,
                            const double spatial_scale, const int64_t pooled_height,
                            const int64_t pooled_width, const int64_t sampling_ratio,
                            const bool aligned) {
  if (input.type().is_cuda()) {
#ifdef WITH_CUDA
    return ROIAlign_forward_cuda(input, rois, spatial_scale, pooled_height, pooled_width,
                                 sampling_ratio, aligned);
#else
    AT_ERROR("legacy_demo was not compiled with GPU support");
#endif
  }
  return ROIAlign_forward_cpu(input, rois, spatial_scale, pooled_height, pooled_width,
                              sampling_ratio, aligned);
}
