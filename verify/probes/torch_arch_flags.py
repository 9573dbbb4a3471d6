"""Runs torch's own TORCH_CUDA_ARCH_LIST parser on each spec and prints what it returns.

Input (stdin): a JSON array of specs; null means "unset". Output (stdout): a JSON object
{"torch": version, "results": [{"spec", "ok", "flags", "error"}, ...]} in input order. Used by
archsmith's side-by-side tests so that archsmith's reading of the list is checked against the real
torch.utils.cpp_extension.

  python torch_arch_flags.py                 # the torch installed in this Python
  python torch_arch_flags.py --wheel W.whl   # the function as shipped in another torch wheel

With --wheel, `_get_cuda_arch_flags` is taken verbatim from that wheel's
torch/utils/cpp_extension.py (read from the zip) and run with a stand-in `torch` that reports no
GPU, so old releases can be checked without installing them.
"""
import ast
import collections
import json
import logging
import os
import re
import sys
import types
import typing
import warnings
import zipfile


def function_from_wheel(wheel):
    with zipfile.ZipFile(wheel) as z:
        source = z.read("torch/utils/cpp_extension.py").decode()
        version = z.read("torch/version.py").decode()
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_get_cuda_arch_flags")
    no_gpu = types.SimpleNamespace(
        device_count=lambda: 0,
        get_device_capability=lambda i: (0, 0),
        get_arch_list=lambda: [],
    )
    fake_torch = types.SimpleNamespace(
        cuda=no_gpu,
        distributed=types.SimpleNamespace(is_available=lambda: False, is_initialized=lambda: False),
    )
    namespace = {"os": os, "re": re, "collections": collections, "warnings": warnings, "torch": fake_torch,
                 "logger": logging.getLogger("cpp_extension"), **{k: getattr(typing, k) for k in typing.__all__}}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "cpp_extension.py", "exec"), namespace)
    m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", version)
    return namespace["_get_cuda_arch_flags"], m.group(1) if m else "?"


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--wheel":
        get_flags, version = function_from_wheel(sys.argv[2])
    else:
        import torch
        from torch.utils import cpp_extension

        get_flags, version = cpp_extension._get_cuda_arch_flags, torch.__version__
    specs = json.load(sys.stdin)
    results = []
    warnings.simplefilter("ignore")
    for spec in specs:
        if spec is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = spec
        try:
            flags = get_flags()
            results.append({"spec": spec, "ok": True, "flags": flags, "error": None})
        except Exception as e:  # torch raises ValueError or IndexError; report either
            results.append({"spec": spec, "ok": False, "flags": None, "error": f"{type(e).__name__}: {e}"})
    json.dump({"torch": version, "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
