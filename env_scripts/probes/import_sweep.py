"""The import sweep: imports modules of a package on the target torch and says why each failure
failed. Standard library only (and torch, which it imports first, as users do).

archsmith starts it while a build runs, so torch's import overlaps the compile; the module names
arrive on stdin when the wheel exists (one line, space-separated; an empty line ends it quietly;
`!NAME` names an operator library, a shared object with no PyInit_ function).
The package sits in the current directory. Prints one JSON object per module on stdout:
  {"module", "ok"} and, for a failure, "kind", "error", "missing", "file", "line":
  kind "missing"      a third-party module that is not installed ("missing" names it);
  kind "removed-api"  a torch or NumPy name that is not there (a removed or renamed API);
  kind "error"        anything else (an extension that does not load, a bug in the package).
"file"/"line" is the package's own frame nearest the failure, when there is one.

An extension with no PyInit_ function is an operator library (TORCH_LIBRARY registrations, no
Python module): its package loads it with torch.ops.load_library. It is never imported (dlopen
runs its registrations): one the package's import loaded is loaded; any other is loaded alone in
a fresh interpreter (a cpu/cuda variant pair registers the same operators, and a second
registration in one process aborts it) — the dynamic linker's verdict is what counts.
"""
import importlib
import importlib.util
import json
import os
import re
import subprocess
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


def load(m, operator_library):
    """Imports `m`, or, for an operator library, loads it as its package would."""
    if not operator_library:
        importlib.import_module(m)
        return
    # Never dlopen'ed here before its package has had its say: loading runs its registrations.
    package = m.rpartition(".")[0]
    if package:
        importlib.import_module(package)  # its __init__ loads its own libraries
    spec = importlib.util.find_spec(m)
    if spec is None or not spec.origin:
        raise ModuleNotFoundError("No module named %r" % m, name=m)
    origin = os.path.realpath(spec.origin)
    if origin in {os.path.realpath(p) for p in torch.ops.loaded_libraries}:
        return
    # One its package did not load, often a variant of one it did (torch-scatter loads
    # _scatter_cuda or else _scatter_cpu): loaded here it would register the same operators
    # twice, which aborts the process. Loaded alone in a fresh interpreter instead.
    alone = subprocess.run(
        [sys.executable, "-c", "import sys, torch; torch.ops.load_library(sys.argv[1])", origin],
        env=dict(os.environ), capture_output=True, text=True,
    )
    if alone.returncode != 0:
        lines = [l.strip() for l in alone.stderr.splitlines() if l.strip() and not l.startswith("frame #")]
        why = next((l for l in lines if "undefined symbol" in l or "what()" in l or "Error" in l), None)
        raise ImportError("loaded alone with torch.ops.load_library: %s" % (
            why or (lines[-1] if lines else "exit status %d" % alone.returncode)))


for token in mods:
    m = token.lstrip("!")
    try:
        load(m, token.startswith("!"))
        print(json.dumps({"module": m, "ok": True}))
        continue
    except BaseException as e:  # a failing module must not end the sweep
        frames = [
            f for f in traceback.extract_tb(e.__traceback__)
            # the sweep itself runs as `-c` (`<string>`), which realpath would put under root
            if not f.filename.startswith("<")
            and os.path.realpath(f.filename).startswith(root + os.sep)
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
