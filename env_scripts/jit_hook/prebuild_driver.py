"""archsmith's JIT prebuild driver: runs a source tree's own code where it calls torch's load() or
load_inline() (directly or through a wrapper of its own), so the calls resolve exactly as they do
at run time, with archsmith_jit_hook recording each compile (ARCHSMITH_JIT_PREBUILD).

argv[1]: a JSON list of triggers {"root": DIR, "module": DOTTED, "call": FUNCTION or null}: the
module is imported with DIR first on sys.path (a module-level call runs then), and FUNCTION, a
top-level function that takes no arguments, is called. One line per trigger on stdout:
`archsmith-jit-trigger: {"module", "call", "ok", "error"}`. Standard library only.
"""

import importlib
import json
import os
import sys
import traceback

import archsmith_jit_hook

archsmith_jit_hook.install()


def main():
    with open(sys.argv[1]) as f:
        triggers = json.load(f)
    for t in triggers:
        result = {"module": t["module"], "call": t.get("call"), "ok": True, "error": None}
        if t["root"] not in sys.path:
            sys.path.insert(0, t["root"])
        try:
            module = importlib.import_module(t["module"])
            if t.get("call"):
                getattr(module, t["call"])()
        except BaseException as e:  # a trigger's failure is reported, the next one still runs
            result["ok"] = False
            last = traceback.extract_tb(e.__traceback__)[-1:] or [None]
            where = "" if last[0] is None else " (%s:%d)" % (os.path.basename(last[0].filename), last[0].lineno)
            result["error"] = "%s: %s%s" % (type(e).__name__, str(e).strip().splitlines()[-1:] and str(e).strip().splitlines()[-1] or "", where)
        sys.stdout.write("archsmith-jit-trigger: %s\n" % json.dumps(result))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
