#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <THC/THC.h>
#include <THC/THCDeviceUtils.cuh>

#include <vector>
#include <iostream>

#include "cuda/vision.h"

// One bit per (box, box) pair: bit j of mask[i * col_blocks + b] says whether box i suppresses
// box b * 64 + j. Boxes are sorted by score before the kernel runs.
int const threadsPerBlock = sizeof(unsigned long long) * 8;

__device__ inline float devIoU(float const* const a, float const* const b) {
  float left = max(a[0], b[0]), right = min(a[2], b[2]);
  float top = max(a[1], b[1]), bottom = min(a[3], b[3]);
  float width = max(right - left, 0.f), height = max(bottom - top, 0.f);
  float interS = width * height;
  float Sa = (a[2] - a[0]) * (a[3] - a[1]);
  float Sb = (b[2] - b[0]) * (b[3] - b[1]);
  return interS / (Sa + Sb - interS);
}

__global__ void nms_kernel(const int n_boxes, const float nms_overlap_thresh,
                           const float* dev_boxes, unsigned long long* dev_mask) {
  const int row_start = blockIdx.y;
  const int col_start = blockIdx.x;

  // if (row_start > col_start) return;

  const int row_size = min(n_boxes - row_start * threadsPerBlock, threadsPerBlock);
  const int col_size = min(n_boxes - col_start * threadsPerBlock, threadsPerBlock);

  __shared__ float block_boxes[threadsPerBlock * 4];
  if (threadIdx.x < col_size) {
    for (int k = 0; k < 4; k++) {
      block_boxes[threadIdx.x * 4 + k] = dev_boxes[(threadsPerBlock * col_start + threadIdx.x) * 4 + k];
    }
  }
  __syncthreads();

  if (threadIdx.x < row_size) {
    const int cur_box_idx = threadsPerBlock * row_start + threadIdx.x;
    const float* cur_box = dev_boxes + cur_box_idx * 4;
    unsigned long long t = 0;
    int start = 0;
    if (row_start == col_start) {
      start = threadIdx.x + 1;
    }
    for (int i = start; i < col_size; i++) {
      if (devIoU(cur_box, block_boxes + i * 4) > nms_overlap_thresh) {
        t |= 1ULL << i;
      }
    }
    const int col_blocks = THCCeilDiv(n_boxes, threadsPerBlock);
    dev_mask[cur_box_idx * col_blocks + col_start] = t;
  }
}

// Boxes are copied as float; the kept indices refer to the input order.
at::Tensor nms_cuda(const at::Tensor& dets, const at::Tensor& scores, const float threshold) {
  AT_CHECK(dets.type().is_cuda(), "dets must be a CUDA tensor");
  AT_CHECK(scores.type().is_cuda(), "scores must be a CUDA tensor");
  AT_CHECK(dets.dim() == 2 && dets.size(1) == 4, "dets must be [N, 4]");

  auto order_t = std::get<1>(scores.sort(0, /* descending=*/true));
  auto boxes_sorted = dets.index_select(0, order_t).to(at::kFloat).contiguous();

  int boxes_num = boxes_sorted.size(0);
  const int col_blocks = THCCeilDiv(boxes_num, threadsPerBlock);

  float* boxes_dev = boxes_sorted.data<float>();

  THCState *state = at::globalContext().lazyInitCUDA(); // TODO replace with getTHCState

  unsigned long long* mask_dev = NULL;
  // THCudaCheck(THCudaMalloc(state, (void**) &mask_dev,
  //                          boxes_num * col_blocks * sizeof(unsigned long long)));
  mask_dev = (unsigned long long*) THCudaMalloc(state, boxes_num * col_blocks * sizeof(unsigned long long));

  dim3 blocks(THCCeilDiv(boxes_num, threadsPerBlock),
              THCCeilDiv(boxes_num, threadsPerBlock));
  dim3 threads(threadsPerBlock);
  nms_kernel<<<blocks, threads>>>(boxes_num, threshold, boxes_dev, mask_dev);
  THCudaCheck(cudaGetLastError());

  std::vector<unsigned long long> mask_host(boxes_num * col_blocks);
  THCudaCheck(cudaMemcpy(&mask_host[0], mask_dev,
                         sizeof(unsigned long long) * boxes_num * col_blocks,
                         cudaMemcpyDeviceToHost));

  std::vector<unsigned long long> remv(col_blocks);
  memset(&remv[0], 0, sizeof(unsigned long long) * col_blocks);

  at::Tensor keep = at::empty({boxes_num}, dets.options().dtype(at::kLong).device(at::kCPU));
  int64_t* keep_out = keep.data<int64_t>();

  int num_to_keep = 0;
  for (int i = 0; i < boxes_num; i++) {
    int nblock = i / threadsPerBlock;
    int inblock = i % threadsPerBlock;

    if (!(remv[nblock] & (1ULL << inblock))) {
      keep_out[num_to_keep++] = i;
      unsigned long long* p = &mask_host[0] + i * col_blocks;
      for (int j = nblock; j < col_blocks; j++) {
        remv[j] |= p[j];
      }
    }
  }

  THCudaFree(state, mask_dev);
  // Positions in the sorted order -> indices into the input, still best first.
  return order_t.to(at::kCPU).index_select(0, keep.narrow(0, 0, num_to_keep));
}
