"""Runs torch's own TORCH_CUDA_ARCH_LIST parser on each spec and prints what it returns.

Input (stdin): a JSON array of specs; null means "unset". Output (stdout): a JSON array of
{"spec", "ok", "flags", "error"} in the same order. Used by archsmith's side-by-side tests so that
archsmith's reading of the list is checked against the real torch.utils.cpp_extension.
"""
import json
import os
import sys

import torch
from torch.utils import cpp_extension


def main() -> None:
    specs = json.load(sys.stdin)
    results = []
    for spec in specs:
        if spec is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = spec
        try:
            flags = cpp_extension._get_cuda_arch_flags()
            results.append({"spec": spec, "ok": True, "flags": flags, "error": None})
        except Exception as e:  # torch raises ValueError or IndexError; report either
            results.append({"spec": spec, "ok": False, "flags": None, "error": f"{type(e).__name__}: {e}"})
    json.dump({"torch": torch.__version__, "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
