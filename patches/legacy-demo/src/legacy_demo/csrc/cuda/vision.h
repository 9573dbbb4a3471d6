#pragma once
#include <torch/extension.h>

at::Tensor nms_cuda(const at::Tensor& dets, const at::Tensor& scores, const float threshold);

at::Tensor ROIAlign_forward_cuda(const at::Tensor& input, const at::Tensor& rois,
                                 const float spatial_scale, const int pooled_height,
                                 const int pooled_width, const int sampling_ratio,
                                 const bool aligned);
