"""archsmith's load() hook: torch's JIT extensions (torch.utils.cpp_extension.load/load_inline)
found prebuilt instead of compiled at run time. Standard library only; inert unless
TORCH_EXTENSIONS_DIR holds an archsmith-jit.json (or a prebuild asks for it).

Why a hook: torch's _jit_compile starts every fresh process with an empty version table, so it
always writes build.ninja and runs ninja (which needs ninja on PATH and CUDA_HOME for nvcc) even
when the outputs are up to date. With the hook, a call whose inputs match a prebuilt entry imports
that module at once: no ninja, no nvcc, no CUDA_HOME.

The key of a call: the extension's name, torch's version, the Python version, the contents of
its sources in order, its flags (C++, CUDA, linker) and its kind. Include paths are not in it (a
copied image moves them) and neither are the headers they hold: torch's own check ignores headers
too.

Modes:
  run time (default): a match imports the prebuilt module; a call that matches nothing compiles as
    torch would, for the prebuild's TORCH_CUDA_ARCH_LIST (the plan), after saying so on stderr.
  ARCHSMITH_JIT_PREBUILD=FILE: every call compiles (the environment archsmith set decides archs,
    nvcc and ninja) and appends one JSON line to FILE: the entry, or the error.

Loaded by archsmith-jit-hook.pth from site-packages (written by `archsmith build-ext` on a tree
of JIT extensions), or imported by archsmith's prebuild driver.
"""

import hashlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time

MANIFEST = "archsmith-jit.json"
_TARGET = "torch.utils.cpp_extension"


def _say(message):
    sys.stderr.write("archsmith: %s\n" % message)
    sys.stderr.flush()


def call_key(torch_version, name, sources, cflags, cuda_cflags, ldflags, with_cuda, python_module, standalone):
    h = hashlib.sha256()

    def put(value):
        data = value if isinstance(value, bytes) else str(value).encode()
        h.update(str(len(data)).encode() + b":" + data)

    for v in ("archsmith-jit-1", name, torch_version, "%d.%d" % sys.version_info[:2]):
        put(v)
    put(len(sources))
    for s in sources:
        with open(s, "rb") as f:
            put(f.read())
    for flags in (cflags, cuda_cflags, ldflags):
        flags = list(flags or [])
        put(len(flags))
        for x in flags:
            put(x)
    for v in (with_cuda, python_module, standalone):
        put(repr(v))
    return h.hexdigest()


def _read_manifest(root):
    path = os.path.join(root, MANIFEST)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _patch(module):
    original = getattr(module, "_jit_compile", None)
    if original is None or getattr(original, "_archsmith", False):
        return
    import inspect

    import torch

    signature = inspect.signature(original)
    record = os.environ.get("ARCHSMITH_JIT_PREBUILD")

    def _jit_compile(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        sources = list(a["sources"])
        with_cuda = a.get("with_cuda")
        if with_cuda is None:
            with_cuda = any(map(module._is_cuda_file, sources))
        key = call_key(
            torch.__version__, a["name"], sources, a.get("extra_cflags"),
            a.get("extra_cuda_cflags"), a.get("extra_ldflags"), bool(with_cuda),
            bool(a.get("is_python_module")), bool(a.get("is_standalone")),
        )
        if record:
            return _prebuild(original, module, bound, key, with_cuda, record)
        root = os.environ.get("TORCH_EXTENSIONS_DIR")
        manifest = _read_manifest(root) if root else None
        if manifest is None:
            return original(*bound.args, **bound.kwargs)  # not ours: torch as it is
        for e in manifest.get("extensions", []):
            if e.get("key") == key:
                return _load(module, os.path.join(root, e["dir"]), e, a)
        arch_list = manifest.get("arch_list")
        _say(
            "JIT extension %s matches no prebuilt one in %s (its sources or flags changed since "
            "the prebuild, or torch did): compiling it now, for TORCH_CUDA_ARCH_LIST=%s"
            % (a["name"], root, arch_list)
        )
        if arch_list:
            os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list
        return _registered(a["name"], original(*bound.args, **bound.kwargs))

    _jit_compile._archsmith = True
    module._jit_compile = _jit_compile


def _load(module, directory, entry, a):
    if a.get("is_standalone"):
        return os.path.join(directory, entry["file"])
    return _registered(
        entry["module"],
        module._import_module_from_library(entry["module"], directory, a.get("is_python_module")),
    )


def _registered(name, result):
    """The loaded module under its name in sys.modules, as torch's imp.load_module put it before
    torch moved to importlib.util.module_from_spec: wrappers written then import the extension by
    name right after load() (stylegan2-ada's custom_ops.get_plugin), and without this fall back
    to their slow code on every torch since."""
    if isinstance(result, type(sys)) and name not in sys.modules:
        sys.modules[name] = result
    return result


def _prebuild(original, module, bound, key, with_cuda, record):
    a = bound.arguments
    name = a["name"]
    line = {"name": name, "key": key, "with_cuda": bool(with_cuda),
            "sources": [os.path.abspath(s) for s in a["sources"]],
            "build_directory": os.path.abspath(a["build_directory"]),
            "python_module": bool(a.get("is_python_module")),
            "standalone": bool(a.get("is_standalone")),
            "trigger": os.environ.get("ARCHSMITH_JIT_TRIGGER")}
    # Ninja's [k/n] lines reach archsmith's log and progress display (verbose is not in the key).
    if "verbose" in a:
        a["verbose"] = True
    started = time.time()
    sys.stdout.write("archsmith-jit: building %s\n" % name)
    sys.stdout.flush()
    try:
        result = original(*bound.args, **bound.kwargs)
    except BaseException as e:
        # Wrappers often catch this and fall back to slow code with a warning: the record keeps it.
        line["error"] = "%s: %s" % (type(e).__name__, e)
        _append(record, line)
        raise
    version = module.JIT_EXTENSION_VERSIONER.get_version(name) or 0
    line["module"] = name if version == 0 else "%s_v%d" % (name, version)
    _registered(line["module"], result)
    sys.stdout.write("archsmith-jit: built %s (%.0f s)\n" % (name, time.time() - started))
    sys.stdout.flush()
    line["file"] = line["module"] + (module.LIB_EXT if not a.get("is_standalone") else module.EXEC_EXT)
    _append(record, line)
    return result


def _append(path, line):
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


class _Finder(importlib.abc.MetaPathFinder):
    """Patches torch.utils.cpp_extension right after it is first executed (torch is not
    imported by this hook: a process that never loads an extension pays nothing)."""

    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        # The spec of the finders after this one (another patcher's too), else the path's.
        spec = None
        for finder in sys.meta_path[sys.meta_path.index(self) + 1:] if self in sys.meta_path else []:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                break
        if spec is None:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                _patch(module)

        spec.loader = _Loader()
        return spec


def install():
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    if _TARGET in sys.modules:
        _patch(sys.modules[_TARGET])
    else:
        sys.meta_path.insert(0, _Finder())


def _wanted():
    if os.environ.get("ARCHSMITH_JIT_PREBUILD"):
        return True
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    return bool(root) and os.path.isfile(os.path.join(root, MANIFEST))


if _wanted():
    install()
