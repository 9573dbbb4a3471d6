"""The one probe of a Python environment: which Python, torch and CUDA it is. Prints JSON on stdout.

Standard library only; archsmith runs it with `python -I` (isolated: no user site, no PYTHONPATH).
Without arguments it does not import torch (a fraction of a second): torch's version and CUDA
variant are read from `torch/version.py`. With `--import-torch` it imports torch and adds what only
the live module knows: the archs it was built for, whether CUDA is available, the devices.

Keys: python, purelib, has_pip, torch (null without torch), cuda (torch.version.cuda, null for a CPU
build), imported (whether torch was imported), arch_list, cuda_available, devices [{name, cc}],
error (why torch could not be read or imported; null when all went well).
With `--modules a,b` it adds modules {name: importable} (found by importlib, not imported).
With `--distributions a,b` it adds distributions {name: version or null} (from their metadata).
Always: torch_dir (where the torch package is), packages {distribution: version} for torch and its
usual companions (from their metadata, not imported), conda_paths (sys.path entries inside a conda
environment: a prefix with a conda-meta directory), executable (the interpreter's real path, past
venv links and shims), extension_suffixes (importlib.machinery.EXTENSION_SUFFIXES: the file names
this Python imports compiled modules from), site_packages (site.getsitepackages(): purelib and, on
Debian, /usr/lib/python3/dist-packages where its python3-* packages are).
With `--import-torch`, cudnn {compile, runtime} as torch reports them (null without cuDNN).
With `--import-torch`, config is torch.__config__.show() (build settings, paths), and with
`--gpu-smoke` as well, gpu_smoke is "ok" or why a small CUDA computation failed (null: not run);
with `--cpu-smoke`, cpu_smoke is "ok" or how a small CPU computation (a matmul through torch's BLAS,
an elementwise kernel through its CPU dispatch) differs from the same sums in plain Python.
"""
import importlib.machinery
import importlib.util
import json
import os
import sys
import sysconfig

info = {
    "python": "%d.%d.%d" % sys.version_info[:3],
    "purelib": sysconfig.get_paths()["purelib"],
    "executable": os.path.realpath(sys.executable),
    "extension_suffixes": importlib.machinery.EXTENSION_SUFFIXES,
    "has_pip": importlib.util.find_spec("pip") is not None,
    "torch": None,
    "cuda": None,
    "imported": False,
    "arch_list": [],
    "cuda_available": False,
    "devices": [],
    "error": None,
    "modules": {},
    "torch_dir": None,
    "packages": {},
    "conda_paths": [],
    "cudnn": None,
    "config": None,
    "gpu_smoke": None,
    "cpu_smoke": None,
    "distributions": {},
}


def arg_value(flag):
    args = sys.argv[1:]
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


COMPANIONS = (
    "torch", "torchvision", "torchaudio", "triton", "numpy", "lightning", "pytorch-lightning",
    "torchmetrics", "transformers", "xformers", "nvidia-cudnn-cu11", "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime", "setuptools",
)
try:
    import importlib.metadata as metadata

    for dist in COMPANIONS:
        try:
            info["packages"][dist] = metadata.version(dist)
        except Exception:
            pass
    for dist in filter(None, (arg_value("--distributions") or "").split(",")):
        try:
            info["distributions"][dist] = metadata.version(dist)
        except Exception:
            info["distributions"][dist] = None
except ImportError:
    pass


def in_conda(path):
    """True when `path` lies inside a conda environment (an ancestor holds conda-meta/)."""
    import os

    p = os.path.abspath(path)
    while True:
        if os.path.isdir(os.path.join(p, "conda-meta")):
            return True
        parent = os.path.dirname(p)
        if parent == p:
            return False
        p = parent


info["conda_paths"] = [p for p in sys.path if p and in_conda(p)]
try:
    import site

    info["site_packages"] = list(site.getsitepackages())
except Exception:  # an old virtualenv's site module has no getsitepackages
    info["site_packages"] = [info["purelib"]]

for name in filter(None, (arg_value("--modules") or "").split(",")):
    try:
        info["modules"][name] = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        info["modules"][name] = False


def read_version_py():
    """torch.__version__ and torch.version.cuda from the generated version.py, without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    for location in spec.submodule_search_locations:
        info["torch_dir"] = location
        try:
            with open(location + "/version.py", encoding="utf-8") as f:
                text = f.read()
        except OSError:
            continue
        values = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            key = key.split(":")[0].strip()
            if sep and key in ("__version__", "cuda"):
                value = value.strip()
                values[key] = None if value == "None" else value.strip("'\"")
        if values.get("__version__"):
            info["torch"] = values["__version__"]
            info["cuda"] = values.get("cuda")
            return True
    info["error"] = "torch is installed but its version.py has no __version__"
    return False


try:
    found = read_version_py()
    if "--import-torch" in sys.argv[1:] and found:
        import warnings

        warnings.simplefilter("ignore")
        import torch

        info["imported"] = True
        info["torch"] = torch.__version__
        info["cuda"] = torch.version.cuda
        try:
            flags = torch._C._cuda_getArchFlags() if hasattr(torch._C, "_cuda_getArchFlags") else ""
            info["arch_list"] = (flags or "").split() or list(torch.cuda.get_arch_list())
        except Exception:  # CPU builds have no arch list
            info["arch_list"] = []
        try:
            info["config"] = torch.__config__.show()
        except Exception as e:
            info["config"] = f"unavailable: {type(e).__name__}: {e}"
        try:
            if torch.backends.cudnn.is_available():
                compile_v = getattr(torch._C, "_cudnn", None)
                compile_v = ".".join(map(str, compile_v.getCompileVersion())) if compile_v else None
                runtime = torch.backends.cudnn.version()
                info["cudnn"] = {"compile": compile_v, "runtime": runtime}
        except Exception as e:
            info["cudnn"] = {"compile": None, "runtime": None, "error": f"{type(e).__name__}: {e}"}
        info["cuda_available"] = bool(torch.cuda.is_available())
        if "--cpu-smoke" in sys.argv[1:]:
            try:
                import math

                a = torch.arange(64, dtype=torch.float64).reshape(8, 8)
                got = (a @ a).sum().item()
                want = float(sum((i * 8 + k) * (k * 8 + j) for i in range(8) for j in range(8) for k in range(8)))
                sines = torch.sin(torch.linspace(0.0, 1.0, 1000, dtype=torch.float64)).sum().item()
                want_sines = sum(math.sin(i / 999) for i in range(1000))
                if abs(got - want) > 1e-9 * abs(want):
                    info["cpu_smoke"] = f"matmul {got} != {want}"
                elif abs(sines - want_sines) > 1e-9 * abs(want_sines):
                    info["cpu_smoke"] = f"sin sum {sines} != {want_sines}"
                else:
                    info["cpu_smoke"] = "ok"
            except Exception as e:
                info["cpu_smoke"] = f"{type(e).__name__}: {e}"
        if "--gpu-smoke" in sys.argv[1:] and info["cuda_available"]:
            try:
                a = torch.arange(64, dtype=torch.float32, device="cuda").reshape(8, 8)
                got = (a @ a).sum().item()
                want = float((a.cpu() @ a.cpu()).sum().item())
                info["gpu_smoke"] = "ok" if abs(got - want) <= 1e-3 * abs(want) else f"matmul {got} != CPU {want}"
            except Exception as e:
                info["gpu_smoke"] = f"{type(e).__name__}: {e}"
        if info["cuda_available"]:
            for i in range(torch.cuda.device_count()):
                major, minor = torch.cuda.get_device_capability(i)
                info["devices"].append({"name": torch.cuda.get_device_name(i), "cc": f"{major}.{minor}"})
except Exception as e:  # report, don't crash: the caller says what it means
    info["error"] = f"{type(e).__name__}: {e}"
json.dump(info, sys.stdout)
