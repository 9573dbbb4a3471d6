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
runs its registrations): one the package's import loaded is loaded; the others are loaded in a
fresh interpreter (a cpu/cuda variant pair registers the same operators, and a second
registration in one process aborts it) — the dynamic linker's verdict is what counts. That
interpreter loads them one after another (one torch import, not one per library); one that fails
there after others loaded is loaded again alone, so a clash with a neighbour is not its verdict.
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
    """Imports `m`, or, for an operator library, loads it as its package would. Returns the path
    of an operator library its package did not load (to be loaded in a fresh interpreter)."""
    if not operator_library:
        importlib.import_module(m)
        return None
    # Never dlopen'ed here before its package has had its say: loading runs its registrations.
    package = m.rpartition(".")[0]
    if package:
        importlib.import_module(package)  # its __init__ loads its own libraries
    spec = importlib.util.find_spec(m)
    if spec is None or not spec.origin:
        raise ModuleNotFoundError("No module named %r" % m, name=m)
    origin = os.path.realpath(spec.origin)
    if origin in {os.path.realpath(p) for p in torch.ops.loaded_libraries}:
        return None
    # One its package did not load, often a variant of one it did (torch-scatter loads
    # _scatter_cuda or else _scatter_cpu): loaded here it would register the same operators
    # twice, which aborts the process.
    return origin


LOAD_IN_TURN = """
import sys, torch
for path in sys.argv[1:]:
    torch.ops.load_library(path)
    print(path, flush=True)
"""


def load_fresh(paths):
    """Loads `paths` in turn in one fresh interpreter: (how many loaded, why the next did not)."""
    run = subprocess.run(
        [sys.executable, "-c", LOAD_IN_TURN, *paths],
        env=dict(os.environ), capture_output=True, text=True,
    )
    # Only the lines the loader printed count (a library's constructor may print too).
    wanted = set(paths)
    loaded = sum(1 for line in run.stdout.splitlines() if line in wanted)
    if run.returncode == 0 and loaded == len(paths):
        return loaded, None
    lines = [l.strip() for l in run.stderr.splitlines() if l.strip() and not l.startswith("frame #")]
    why = next((l for l in lines if "undefined symbol" in l or "what()" in l or "Error" in l), None)
    return min(loaded, len(paths) - 1), why or (lines[-1] if lines else "exit status %d" % run.returncode)


def load_leftovers(leftovers):
    """Yields (module, None) for each of `leftovers` ((module, path)) that loads in a fresh
    interpreter, else (module, the reason)."""
    while leftovers:
        loaded, why = load_fresh([path for _, path in leftovers])
        for m, _ in leftovers[:loaded]:
            yield m, None
        if why is None:
            return
        m, path = leftovers[loaded]
        if loaded:  # others were loaded before it: its own verdict is a load alone
            _, why = load_fresh([path])
        yield m, why
        leftovers = leftovers[loaded + 1:]


def failure(m, e):
    """The JSON line for module `m`, which failed with `e`."""
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
    return {
        "module": m,
        "ok": False,
        "kind": kind,
        "error": "%s: %s" % (type(e).__name__, text),
        "missing": missing,
        "file": os.path.relpath(where.filename, root) if where else None,
        "line": where.lineno if where else None,
    }


results, leftovers = {}, []
for token in mods:
    m = token.lstrip("!")
    try:
        path = load(m, token.startswith("!"))
    except BaseException as e:  # a failing module must not end the sweep
        results[m] = failure(m, e)
        continue
    if path is None:
        results[m] = {"module": m, "ok": True}
    else:
        leftovers.append((m, path))
for m, why in load_leftovers(leftovers):
    results[m] = {"module": m, "ok": True} if why is None else failure(
        m, ImportError("loaded with torch.ops.load_library in a fresh interpreter: %s" % why))
for token in mods:
    print(json.dumps(results[token.lstrip("!")]))
sys.stdout.flush()
