// THC's tensor accessors (removed with THC in torch 1.11) over at::Tensor, added by archsmith's
// codemod beside each file whose calls it rewrote (rule thc-tensor-accessor):
// THCudaTensor_data(state, t) becomes archsmith_thc::CudaTensor_data(t). Same return types as
// THCTensor.h, less the state; each takes an at::Tensor or a pointer to one (an FFI-era
// `THCudaTensor *t` parameter once its type is at::Tensor). data_ptr<T> checks the dtype the
// name promises, where THC trusted the caller.
#pragma once
#include <ATen/ATen.h>
#include <cstddef>
#include <cstdint>

namespace archsmith_thc {

inline const at::Tensor& tensor(const at::Tensor& t) { return t; }
inline const at::Tensor& tensor(const at::Tensor* t) {
  TORCH_CHECK(t != nullptr, "THC tensor accessor: the tensor is a null pointer");
  return *t;
}

#define ARCHSMITH_THC_TENSOR(NAME, T)                                                             \
  template <class X> T* NAME##_data(const X& t) { return tensor(t).template data_ptr<T>(); }      \
  template <class X> int64_t NAME##_size(const X& t, int dim) { return tensor(t).size(dim); }     \
  template <class X> int64_t NAME##_stride(const X& t, int dim) { return tensor(t).stride(dim); } \
  template <class X> int NAME##_nDimension(const X& t) {                                          \
    return static_cast<int>(tensor(t).dim());                                                     \
  }                                                                                               \
  template <class X> ptrdiff_t NAME##_nElement(const X& t) { return tensor(t).numel(); }         \
  template <class X> int NAME##_isContiguous(const X& t) { return tensor(t).is_contiguous(); }
ARCHSMITH_THC_TENSOR(CudaTensor, float)
ARCHSMITH_THC_TENSOR(CudaDoubleTensor, double)
ARCHSMITH_THC_TENSOR(CudaHalfTensor, at::Half)
ARCHSMITH_THC_TENSOR(CudaByteTensor, uint8_t)
ARCHSMITH_THC_TENSOR(CudaCharTensor, int8_t)
ARCHSMITH_THC_TENSOR(CudaShortTensor, int16_t)
ARCHSMITH_THC_TENSOR(CudaIntTensor, int)
ARCHSMITH_THC_TENSOR(CudaLongTensor, int64_t)
ARCHSMITH_THC_TENSOR(CudaBoolTensor, bool)
#undef ARCHSMITH_THC_TENSOR

}  // namespace archsmith_thc
