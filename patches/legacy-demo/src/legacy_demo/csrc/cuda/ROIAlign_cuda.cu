#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <THC/THC.h>
#include <THC/THCAtomics.cuh>
#include <THC/THCDeviceUtils.cuh>

#include "cuda/vision.h"

// TODO make it in a common file
#define CUDA_1D_KERNEL_LOOP(i, n)                            \
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; \
       i += blockDim.x * gridDim.x)

template <typename T>
__device__ T bilinear_interpolate(const T* plane, const int height, const int width, T y, T x) {
  if (y < -1.0 || y > height || x < -1.0 || x > width) {
    return 0;
  }
  if (y <= 0) y = 0;
  if (x <= 0) x = 0;

  int y_low = (int)y;
  int x_low = (int)x;
  int y_high;
  int x_high;

  if (y_low >= height - 1) {
    y_high = y_low = height - 1;
    y = (T)y_low;
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= width - 1) {
    x_high = x_low = width - 1;
    x = (T)x_low;
  } else {
    x_high = x_low + 1;
  }

  T ly = y - y_low;
  T lx = x - x_low;
  T hy = 1. - ly, hx = 1. - lx;
  return hy * hx * plane[y_low * width + x_low] + hy * lx * plane[y_low * width + x_high] +
         ly * hx * plane[y_high * width + x_low] + ly * lx * plane[y_high * width + x_high];
}

template <typename T>
__global__ void RoIAlignForward(const int nthreads, const T* bottom_data, const T spatial_scale,
                                const int channels, const int height, const int width,
                                const int pooled_height, const int pooled_width,
                                const int sampling_ratio, const bool aligned,
                                const T* bottom_rois, T* top_data) {
  CUDA_1D_KERNEL_LOOP(index, nthreads) {
    int pw = index % pooled_width;
    int ph = (index / pooled_width) % pooled_height;
    int c = (index / pooled_width / pooled_height) % channels;
    int n = index / pooled_width / pooled_height / channels;

    const T* roi = bottom_rois + n * 5;
    int roi_batch_ind = roi[0];
    const T offset = aligned ? (T)0.5 : (T)0.0;
    T roi_start_w = roi[1] * spatial_scale - offset;
    T roi_start_h = roi[2] * spatial_scale - offset;
    T roi_end_w = roi[3] * spatial_scale - offset;
    T roi_end_h = roi[4] * spatial_scale - offset;

    T roi_width = roi_end_w - roi_start_w;
    T roi_height = roi_end_h - roi_start_h;
    if (!aligned) {
      roi_width = max(roi_width, (T)1.);
      roi_height = max(roi_height, (T)1.);
    }
    T bin_size_h = roi_height / static_cast<T>(pooled_height);
    T bin_size_w = roi_width / static_cast<T>(pooled_width);

    const T* plane = bottom_data + (roi_batch_ind * channels + c) * height * width;

    int roi_bin_grid_h = (sampling_ratio > 0) ? sampling_ratio : ceil(roi_height / pooled_height);
    int roi_bin_grid_w = (sampling_ratio > 0) ? sampling_ratio : ceil(roi_width / pooled_width);
    const T count = max(roi_bin_grid_h * roi_bin_grid_w, 1);

    T output_val = 0.;
    for (int iy = 0; iy < roi_bin_grid_h; iy++) {
      const T y = roi_start_h + ph * bin_size_h +
                  static_cast<T>(iy + .5f) * bin_size_h / static_cast<T>(roi_bin_grid_h);
      for (int ix = 0; ix < roi_bin_grid_w; ix++) {
        const T x = roi_start_w + pw * bin_size_w +
                    static_cast<T>(ix + .5f) * bin_size_w / static_cast<T>(roi_bin_grid_w);
        output_val += bilinear_interpolate(plane, height, width, y, x);
      }
    }
    top_data[index] = output_val / count;
  }
}

at::Tensor ROIAlign_forward_cuda(const at::Tensor& input, const at::Tensor& rois,
                                 const float spatial_scale, const int pooled_height,
                                 const int pooled_width, const int sampling_ratio,
                                 const bool aligned) {
  AT_CHECK(input.type().is_cuda(), "input must be a CUDA tensor");
  AT_CHECK(rois.type().is_cuda(), "rois must be a CUDA tensor");
  AT_CHECK(rois.dim() == 2 && rois.size(1) == 5, "rois must be [K, 5]");

  auto num_rois = rois.size(0);
  auto channels = input.size(1);
  auto height = input.size(2);
  auto width = input.size(3);

  auto output = at::empty({num_rois, channels, pooled_height, pooled_width}, input.options());
  auto output_size = num_rois * pooled_height * pooled_width * channels;

  dim3 grid(std::min(THCCeilDiv((long)output_size, 512L), 4096L));
  dim3 block(512);

  if (output.numel() == 0) {
    THCudaCheck(cudaGetLastError());
    return output;
  }

  AT_DISPATCH_FLOATING_TYPES(input.type(), "ROIAlign_forward", [&] {
    RoIAlignForward<scalar_t><<<grid, block>>>(
        output_size, input.contiguous().data<scalar_t>(), spatial_scale, channels, height,
        width, pooled_height, pooled_width, sampling_ratio, aligned,
        rois.contiguous().data<scalar_t>(), output.data<scalar_t>());
  });
  THCudaCheck(cudaGetLastError());
  return output;
}
