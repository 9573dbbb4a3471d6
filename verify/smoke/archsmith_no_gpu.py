"""What torch, the driver and legacy ops say when something wants a GPU this host does not have:
one list for the smoke tests (`generic_ops.py`) and the package's own tests (`package_tests.py`)."""

import re

# torch and the CUDA driver, when the host has no GPU (or no driver).
NO_GPU = re.compile(
    r"Torch not compiled with CUDA enabled"
    r"|Found no NVIDIA driver"
    r"|No CUDA GPUs are available"
    r"|no CUDA-capable device is detected"
    r"|CUDA driver initialization failed"
    r"|CUDA driver version is insufficient"
    r"|Cannot access accelerator device when none is available"
)

# Legacy CUDA-only ops given a CPU tensor (`CHECK_CUDA(x)`, `AT_ASSERTM(x.is_cuda())`).
WANTS_CUDA = re.compile(
    r"CUDA tensor|must be (a )?CUDA|is_cuda|\.cuda\(\)|on (the )?GPU", re.IGNORECASE
)
