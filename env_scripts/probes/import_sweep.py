"""The import sweep: imports modules of a package on the target torch and says why each failure
failed. Standard library only (and torch, which it imports first, as users do).

archsmith starts it while a build runs, so torch's import overlaps the compile; the module names
arrive on stdin when the wheel exists (one line, space-separated; an empty line ends it quietly).
The package sits in the current directory. Prints one JSON object per module on stdout:
  {"module", "ok"} ("as": "operator-library" for a library loaded as below) and, for a failure, "kind", "error", "missing", "file", "line":
  kind "missing"      a third-party module that is not installed ("missing" names it);
  kind "removed-api"  a torch or NumPy name that is not there (a removed or renamed API);
  kind "error"        anything else (an extension that does not load, a bug in the package).
"file"/"line" is the package's own frame nearest the failure, when there is one.

An extension with no PyInit_ function is an operator library (TORCH_LIBRARY registrations, no
Python module): its package loads it with torch.ops.load_library, and so does the sweep — the
dynamic linker's verdict on it is what counts, not the import system's.
"""
import importlib
import importlib.util
import json
import os
import re
import sys
import traceback

import torch  # noqa: F401  (first, as users do; its import overlaps the build)

mods = sys.stdin.readline().split()
if not mods:
    sys.exit(0)
# The wheel was unpacked here after this process started: forget cached directory listings.
importlib.invalidate_caches()
root = os.path.realpath(os.getcwd())
LIBRARIES = ("torch", "numpy", "torchvision")


def own(top):
    """Whether `top` is a module of the package being swept (it sits in the current directory)."""
    return any(
        os.path.exists(os.path.join(root, top + suffix)) for suffix in ("", ".py")
    ) or any(name.startswith(top + ".") and name.endswith(".so") for name in os.listdir(root))


def load(m):
    """Imports `m`, or loads it as its package would when it is an operator library; says which."""
    try:
        importlib.import_module(m)
        return None
    except ImportError as e:
        if "does not define module export function" not in str(e):
            raise
        spec = importlib.util.find_spec(m)
        if spec is None or not spec.origin:
            raise
        torch.ops.load_library(spec.origin)
        return "operator-library"


for m in mods:
    try:
        loaded_as = load(m)
        line = {"module": m, "ok": True}
        if loaded_as:
            line["as"] = loaded_as
        print(json.dumps(line))
        continue
    except BaseException as e:  # a failing module must not end the sweep
        frames = [
            f for f in traceback.extract_tb(e.__traceback__)
            if os.path.realpath(f.filename).startswith(root + os.sep)
        ]
        where = frames[-1] if frames else None
        kind, missing = "error", None
        name = getattr(e, "name", None)
        text = str(e)
        if isinstance(e, ModuleNotFoundError) and name:
            top = name.split(".")[0]
            if top in LIBRARIES:
                kind = "removed-api"
            elif not own(top):
                kind, missing = "missing", top
        elif isinstance(e, (ImportError, AttributeError)) and re.search(
            r"\b(%s)\b" % "|".join(LIBRARIES), text
        ):
            kind = "removed-api"
        print(json.dumps({
            "module": m,
            "ok": False,
            "kind": kind,
            "error": "%s: %s" % (type(e).__name__, text),
            "missing": missing,
            "file": os.path.relpath(where.filename, root) if where else None,
            "line": where.lineno if where else None,
        }))
    sys.stdout.flush()
