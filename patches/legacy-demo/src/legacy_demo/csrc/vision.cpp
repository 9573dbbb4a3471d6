// Python bindings. TORCH_EXTENSION_NAME is set by torch.utils.cpp_extension.
#include "nms.h"
#include "ROIAlign.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("nms", &nms, "non-maximum suppression: keep indices, highest score first");
  m.def("roi_align_forward", &ROIAlign_forward,
        "ROIAlign forward (rois: [K, 5] = batch index, x1, y1, x2, y2)");
}
