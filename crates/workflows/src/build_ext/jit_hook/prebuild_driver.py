"""archsmith's JIT prebuild driver: runs a source tree's own code where it calls torch's load() or
load_inline() (directly or through a wrapper of its own), so the calls resolve exactly as they do
at run time, with archsmith_jit_hook recording each compile (ARCHSMITH_JIT_PREBUILD).

argv[1]: a JSON list of triggers {"root": DIR, "module": DOTTED, "call": FUNCTION or null}: the
module is imported with DIR first on sys.path (a module-level call runs then), and FUNCTION, a
top-level function that takes no arguments, is called. One line per trigger on stdout:
`archsmith-jit-trigger: {"module", "call", "ok", "error", "warnings", "stubbed"}`: what the
trigger warned (a wrapper that caught a failed build and fell back says so only there), and the
third-party modules the env lacks that stood in as stubs. Standard library only.

ARCHSMITH_PARALLEL_TRIGGERS=N (N >= 2): the triggers run N at a time, each in a forked process,
in one pool of N job slots that every compile's ninja joins (build_hooks/archsmith_job_pool.py, the
pool a package's extensions share); ARCHSMITH_TRIGGER_MAX_JOBS is each one's MAX_JOBS where ninja
cannot join a pool. Two triggers that reach one extension build it once: torch's lock in its build
directory makes the second wait, then load it.
"""

import importlib
import json
import os
import sys
import traceback
import types
import warnings

import archsmith_jit_hook

archsmith_jit_hook.install()


class _Stub(types.ModuleType):
    """A module the env lacks, standing in while a trigger runs: the tree imports it at module
    level (a download helper, a logger) but a load() call does not need it. Any attribute is a
    class that accepts anything, so `class X(stub.Base)` and decorators still work."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        stub = type(name, (), {"__init__": lambda self, *a, **k: None,
                               "__call__": lambda self, *a, **k: self,
                               "__getattr__": lambda self, n: self})
        setattr(self, name, stub)
        return stub


def _stub(name):
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sub = ".".join(parts[:i])
        if sub not in sys.modules:
            m = _Stub(sub)
            m.__path__ = []  # a package, so its submodules can be stubbed too
            sys.modules[sub] = m


def _in_tree(name, root):
    top = name.split(".")[0]
    return os.path.exists(os.path.join(root, top)) or os.path.exists(os.path.join(root, top + ".py"))


def _one_line(message):
    """A warning's first line, and its last when it carries a traceback (the error is there)."""
    lines = [l.strip() for l in message.strip().splitlines() if l.strip()]
    return lines[0] if len(lines) == 1 else "%s ... %s" % (lines[0], lines[-1])


def _run(t, stubbed):
    """Imports the trigger's module and calls its function; a third-party module the env lacks
    is stubbed and the trigger retried (the stubs are reported)."""
    for _ in range(50):
        before = set(sys.modules)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                module = importlib.import_module(t["module"])
                if t.get("call"):
                    getattr(module, t["call"])()
            return [_one_line(str(w.message)) for w in caught if str(w.message).strip()]
        except ModuleNotFoundError as e:
            if not e.name or e.name in sys.modules or _in_tree(e.name, t["root"]):
                raise
            root = os.path.abspath(t["root"]) + os.sep
            for name in set(sys.modules) - before:  # the tree's half-imported modules
                path = getattr(sys.modules[name], "__file__", None) or ""
                if os.path.abspath(path).startswith(root):
                    del sys.modules[name]
            _stub(e.name)
            stubbed.append(e.name)
    raise RuntimeError("too many missing modules")


def main():
    import torch  # first, so a retry never re-imports half of it

    # The prebuild is for GPUs this host may lack: code that gates its build on a visible GPU
    # (`assert torch.cuda.is_available()` in KNN_CUDA's wrapper) sees one while the triggers run,
    # as FORCE_CUDA=1 makes setup.py files build CUDA on a GPU-less host.
    if not torch.cuda.is_available():
        torch.cuda.is_available = lambda: True

    with open(sys.argv[1]) as f:
        triggers = json.load(f)
    try:
        at_once = min(int(os.environ.get("ARCHSMITH_PARALLEL_TRIGGERS", "1")), len(triggers))
    except ValueError:
        at_once = 1
    if at_once < 2 or not hasattr(os, "fork"):
        for t in triggers:
            _report(_trigger(t))
        return
    # Independent triggers build at once, in one pool of job slots (the build hooks' pool).
    hooks = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build_hooks")
    sys.path.insert(0, hooks)
    import archsmith_job_pool as pool

    sys.path.remove(hooks)

    def build(t):
        if not _report(_trigger(t))["ok"]:
            raise SystemExit(1)

    ended = pool.run(
        [(i, _label(t), t) for i, t in enumerate(triggers)],
        at_once,
        build,
        os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "trigger-logs"),
        "JIT triggers",
        per_child_jobs=os.environ.get("ARCHSMITH_TRIGGER_MAX_JOBS"),
    )
    for done in ended:
        if _PREFIX not in done.output:  # its process died before it could say
            _report(_result(done.item, "its process ended without a result (killed?)"))


_PREFIX = "archsmith-jit-trigger: "


def _label(t):
    return t["module"] + (".%s()" % t["call"] if t.get("call") else "")


def _result(t, error=None):
    return {"module": t["module"], "call": t.get("call"), "ok": error is None, "error": error,
            "warnings": [], "stubbed": []}


def _trigger(t):
    """Runs one trigger; what it did, as the line archsmith reads."""
    result = _result(t)
    os.environ["ARCHSMITH_JIT_TRIGGER"] = _label(t)  # the hook's record names it
    if t["root"] not in sys.path:
        sys.path.insert(0, t["root"])
    stubbed = []
    try:
        result["warnings"] = _run(t, stubbed)
    except BaseException as e:  # a trigger's failure is reported, the next one still runs
        result["ok"] = False
        last = traceback.extract_tb(e.__traceback__)[-1:] or [None]
        where = "" if last[0] is None else " (%s:%d)" % (os.path.basename(last[0].filename), last[0].lineno)
        lines = str(e).strip().splitlines()
        result["error"] = "%s: %s%s" % (type(e).__name__, lines[-1] if lines else "", where)
    result["stubbed"] = stubbed
    return result


def _report(result):
    sys.stdout.write(_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
    return result


if __name__ == "__main__":
    main()
