"""Prints what a Python environment offers as a torch runtime, as JSON on stdout.

Keys: python, torch (null when torch is not importable), cuda (torch.version.cuda), arch_list
(the archs torch was built for), cuda_available, devices [{name, cc}], error.
"""
import json
import sys
import warnings

info = {"python": "%d.%d.%d" % sys.version_info[:3], "torch": None, "cuda": None, "arch_list": [],
        "cuda_available": False, "devices": [], "error": None}
try:
    warnings.simplefilter("ignore")
    import torch

    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    try:
        flags = torch._C._cuda_getArchFlags() if hasattr(torch._C, "_cuda_getArchFlags") else ""
        info["arch_list"] = (flags or "").split() or list(torch.cuda.get_arch_list())
    except Exception:  # CPU builds have no arch list
        info["arch_list"] = []
    info["cuda_available"] = bool(torch.cuda.is_available())
    if info["cuda_available"]:
        for i in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(i)
            info["devices"].append({"name": torch.cuda.get_device_name(i), "cc": f"{major}.{minor}"})
except Exception as e:  # report, don't crash: doctor shows the reason
    info["error"] = f"{type(e).__name__}: {e}"
json.dump(info, sys.stdout)
