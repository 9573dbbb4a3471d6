"""archsmith's build hooks, loaded by the Python of an extension build (build-ext puts this
directory first on PYTHONPATH). Standard library only; nothing happens unless asked:

ARCHSMITH_PARALLEL_EXTENSIONS=N (N >= 2)
    setuptools builds a package's extensions one after another, each in its own ninja run of one
    or two files, so on a many-extension package most cores sit idle. This builds up to N
    extensions at once, longest first, each in a forked process with its own build_temp (torch's BuildExtension
    writes one build.ninja per build_temp, and its non-ninja path swaps the compiler executable on
    the shared compiler object, so threads would race; processes do not), in one pool of N job
    slots that every extension's ninja joins (archsmith_job_pool.py, which the JIT prebuild
    driver shares): the package never runs more compiles than N, and the last extension gets
    every core. Progress lines `archsmith-ext: start|done|FAILED NAME (k/total, Ns)` say where
    it is. Where ninja is older than 1.13 (no jobserver client), ARCHSMITH_EXT_MAX_JOBS sets
    MAX_JOBS inside each child instead (the build's jobs shared out).

ARCHSMITH_SHARED_SOURCE_WRAPPERS=DIR (with the above)
    many packages compile the same file into several extensions (torch-scatter's and
    torch-cluster's `cpu/*_cpu.cpp` go into both the `_cpu` and the `_cuda` variant of an op, with
    other -D flags that the file never reads). DIR holds `c++`/`g++`/`cc`/`gcc` wrappers that run
    ccache with a cache private to this build (hashing the preprocessed text, not the -D/-I flags
    or the build directory), and is put first on PATH for the extensions that share a file (and
    ARCHSMITH_SHARED_SOURCE_CXX, a wrapper of the caller's $CXX, becomes their $CXX, and
    ARCHSMITH_SHARED_SOURCE_NVCC_CCBIN their NVCC_CCBIN), so a shared file whose preprocessed
    text is the same compiles once. An extension that shares a file with a running one starts
    only once that one has finished compiling it (its ninja log lists the object; a compile
    before then would miss): the queue skips to the next extension meanwhile, and one waits
    only when nothing else is left.

ARCHSMITH_FORCE_NINJA=1
    a package that built with BuildExtension.with_options(use_ninja=False) compiles its files one
    by one; with ninja on PATH, torch's ninja path (the same flags, compiled in parallel) is used.

ARCHSMITH_STABLE_ABI_TARGET=0x020a000000000000
    a port to torch's stable ABI (port-extension --stable-abi): every extension is built with
    py_limited_api=True (torch's BuildExtension then compiles it with -DPy_LIMITED_API at the
    oldest CPython torch supports and links no libtorch_python), with
    -DTORCH_TARGET_VERSION=<value> (the oldest torch the port's code allows; -DUSE_CUDA too
    where it has CUDA sources, which the stable C shim's CUDA declarations need), the CUDA runtime
    linked statically (no NEEDED libcudart.so.N: the wheel is not bound to one CUDA major) and the
    torch libraries only as needed, and the wheel is tagged abi3 for that CPython: one wheel for
    every Python and every torch from the target on.

Any other sitecustomize on the path is run after this one.
"""

import importlib.abc
import importlib.machinery
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PATCHED = {
    "setuptools._distutils.command.build_ext": "_patch_build_ext",
    "distutils.command.build_ext": "_patch_build_ext",
    "torch.utils.cpp_extension": "_patch_cpp_extension",
    "setuptools.command.bdist_wheel": "_patch_bdist_wheel",
    "wheel.bdist_wheel": "_patch_bdist_wheel",
}


def _say(message):
    sys.stdout.write("archsmith-ext: %s\n" % message)
    sys.stdout.flush()


def _cost(ext):
    """A rough cost of building an extension: a .cu file compiles once per arch."""
    return sum(10 if str(src).endswith(".cu") else 1 for src in getattr(ext, "sources", []))


def _sources(ext):
    return {os.path.abspath(str(src)) for src in getattr(ext, "sources", [])}


def _shared_sources(extensions):
    """The source files that more than one extension compiles."""
    seen, shared = set(), set()
    for ext in extensions:
        sources = _sources(ext)
        shared |= seen & sources
        seen |= sources
    return shared


def _still_compiling(build_temp, sources):
    """Those of `sources` that ninja in `build_temp` has not finished compiling: its .ninja_log
    lists an object once its command has ended, and so after ccache stored the result."""
    try:
        with open(os.path.join(build_temp, ".ninja_log")) as f:
            fields = [line.split("\t") for line in f]
        built = [os.path.splitext(x[3])[0] for x in fields if len(x) >= 4]
    except OSError:
        return set(sources)
    left = set()
    for source in sources:
        stem = os.path.splitext(os.path.relpath(source))[0]
        if not any(b == stem or b.endswith(os.sep + stem) for b in built):
            left.add(source)
    return left


def _next_startable(queue, sources_of, busy):
    """The position in `queue` of the first extension that compiles none of the `busy` files,
    or None."""
    for position, (index, _, _) in enumerate(queue):
        if not (sources_of[index] & busy):
            return position
    return None


def _use_shared_source_wrappers(wrappers):
    """The shared-source compiler wrappers first on PATH, for an extension that compiles a file
    another extension compiles too."""
    os.environ["PATH"] = wrappers + os.pathsep + os.environ.get("PATH", "")
    if os.environ.get("ARCHSMITH_SHARED_SOURCE_CXX"):
        os.environ["CXX"] = os.environ["ARCHSMITH_SHARED_SOURCE_CXX"]
    # nvcc's own host steps compile temporary files that never hit: the real compiler.
    if os.environ.get("ARCHSMITH_SHARED_SOURCE_NVCC_CCBIN"):
        os.environ["NVCC_CCBIN"] = os.environ["ARCHSMITH_SHARED_SOURCE_NVCC_CCBIN"]


def _patch_build_ext(module):
    cls = getattr(module, "build_ext", None)
    if cls is None or getattr(cls, "_archsmith_parallel", False):
        return
    try:
        wanted = int(os.environ.get("ARCHSMITH_PARALLEL_EXTENSIONS", "1"))
    except ValueError:
        wanted = 1
    if wanted < 2 or not hasattr(os, "fork"):
        return
    serial = cls._build_extensions_serial

    def _build_extensions_forked(self):
        extensions = list(self.extensions)
        at_once = min(wanted, len(extensions))
        if at_once < 2:
            return serial(self)
        if _HERE not in sys.path:
            sys.path.insert(0, _HERE)
        import archsmith_job_pool as pool

        base_temp = self.build_temp
        wrappers = os.environ.get("ARCHSMITH_SHARED_SOURCE_WRAPPERS")
        shared = _shared_sources(extensions) if wrappers else set()
        # Each extension's files that another extension compiles too, by its index.
        shared_of = [_sources(ext) & shared for ext in extensions]
        if shared:
            _say(
                "%d source file(s) compiled by more than one extension, compiled once where the "
                "preprocessed text is the same: %s"
                % (len(shared), ", ".join(sorted(os.path.relpath(s) for s in shared)))
            )

        def startable(queue, running):
            if not shared:
                return 0
            # A shared file still compiling in a running extension: a second compile now would
            # miss its object. Once that compile has ended, it hits.
            busy = set()
            for other_index, other in running:
                if shared_of[other_index]:
                    temp = os.path.join(base_temp, pool.safe_name(other.name))
                    busy |= _still_compiling(temp, shared_of[other_index])
            return _next_startable(queue, shared_of, busy)

        def build(item):
            index, ext = item
            if shared_of[index]:
                _use_shared_source_wrappers(wrappers)
            self.build_temp = os.path.join(base_temp, pool.safe_name(ext.name))
            with self._filter_build_errors(ext):
                self.build_extension(ext)

        # Longest first (CUDA sources cost most), so the short ones fill the end instead of one
        # long extension running alone while the other cores wait.
        order = sorted(enumerate(extensions), key=lambda item: -_cost(item[1]))
        ended = pool.run(
            [(index, ext.name, (index, ext)) for index, ext in order],
            at_once,
            build,
            os.path.join(base_temp, "archsmith-ext-logs"),
            "extensions",
            per_child_jobs=os.environ.get("ARCHSMITH_EXT_MAX_JOBS"),
            startable=startable,
        )
        failed = [d.item[1].name for d in ended if not d.ok]
        if failed:
            raise SystemExit("error: building extension(s) failed: %s" % ", ".join(failed))

    cls._build_extensions_serial = _build_extensions_forked
    cls._archsmith_parallel = True


def _stable_abi_target():
    return os.environ.get("ARCHSMITH_STABLE_ABI_TARGET")


def _abi3_tag():
    """`cp310` for torch's min_supported_cpython `0x030A0000` (what -DPy_LIMITED_API gets)."""
    import torch.utils.cpp_extension as ce

    version = int(getattr(ce, "min_supported_cpython", "0x03090000"), 16)
    return "cp%d%d" % (version >> 24, (version >> 16) & 0xFF)


def _patch_bdist_wheel(module):
    cls = getattr(module, "bdist_wheel", None)
    if not _stable_abi_target() or cls is None or getattr(cls, "_archsmith_abi3", False):
        return
    finalize = cls.finalize_options

    def finalize_options(self):
        if not self.py_limited_api:
            self.py_limited_api = _abi3_tag()
        finalize(self)

    cls.finalize_options = finalize_options
    cls._archsmith_abi3 = True


def _patch_stable_abi(module):
    """Every extension on the limited API, for the stable ABI's target."""
    target = _stable_abi_target()
    cls = getattr(module, "BuildExtension", None)
    if not target or cls is None or getattr(cls, "_archsmith_stable", False):
        return
    build_extensions = cls.build_extensions

    def build_extensions_stable(self):
        for ext in self.extensions:
            ext.py_limited_api = True
            macros = [("TORCH_TARGET_VERSION", target)]
            if any(str(s).endswith(".cu") for s in ext.sources):
                # The stable C shim declares its CUDA entry points (torch_c10_cuda_check_msg,
                # behind STD_CUDA_CHECK) only under USE_CUDA.
                macros.append(("USE_CUDA", None))
            ext.define_macros = list(ext.define_macros or []) + macros
            # CppExtension/CUDAExtension linked libtorch_python unless told py_limited_api.
            ext.libraries = [lib for lib in ext.libraries if lib != "torch_python"]
            # The CUDA runtime linked in: `NEEDED libcudart.so.N` would bind the wheel to the
            # torch releases whose wheels bring CUDA N's runtime (torch's cu12 and cu13 wheels
            # both bring libc10_cuda/libtorch_cuda under the same names).
            if "cudart" in ext.libraries:
                ext.libraries = [
                    "cudart_static" if lib == "cudart" else lib for lib in ext.libraries
                ] + ["rt", "dl", "pthread"]
        # Only the torch libraries whose symbols the code uses stay NEEDED (CUDAExtension names
        # c10, torch, torch_cpu, c10_cuda and torch_cuda whatever the code calls): the flag must
        # come before the libraries, so it goes right after the linker driver.
        linker = getattr(self.compiler, "linker_so", None)
        if linker and "-Wl,--as-needed" not in linker:
            self.compiler.linker_so = linker[:1] + ["-Wl,--as-needed"] + linker[1:]
        _say("stable ABI: limited API, TORCH_TARGET_VERSION=%s, abi3 wheel, CUDA runtime linked statically, torch libraries as needed" % target)
        return build_extensions(self)

    cls.build_extensions = build_extensions_stable
    cls._archsmith_stable = True
    check = getattr(module, "_check_cuda_version", None)
    if check is not None:
        # torch refuses an nvcc of another CUDA major than its own, because an ordinary
        # extension shares torch's CUDA runtime. A stable one links its own in and reaches torch
        # only through C shims: archsmith compiles it with the oldest toolkit that covers its
        # archs (build_ext/mod.rs), for the oldest drivers.
        def _check_cuda_version_stable(compiler_name, compiler_version):
            try:
                check(compiler_name, compiler_version)
            except RuntimeError as e:
                # torch raises it as RuntimeError(CUDA_MISMATCH_MESSAGE, found, torch's).
                if not e.args or e.args[0] != getattr(module, "CUDA_MISMATCH_MESSAGE", None):
                    raise
                _say("stable ABI: nvcc's CUDA major differs from torch's; allowed (the runtime is linked in)")

        module._check_cuda_version = _check_cuda_version_stable


def _patch_cpp_extension(module):
    _patch_stable_abi(module)
    if os.environ.get("ARCHSMITH_FORCE_NINJA") != "1":
        return
    cls = getattr(module, "BuildExtension", None)
    if cls is None or getattr(cls, "_archsmith_ninja", False):
        return
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if not getattr(self, "use_ninja", True):
            try:
                module.verify_ninja_availability()
            except Exception:
                return
            self.use_ninja = True
            self._archsmith_forced_ninja = True
            _say("ninja turned back on (the package set use_ninja=False)")

    build_extensions = cls.build_extensions

    def build_extensions_from_any_directory(self):
        # ninja compiles from build/temp.*, not from the package's directory as distutils did:
        # a relative include directory ("cuda/include") that the package's own build found
        # would no longer be found, so they are made absolute first (against setup.py's
        # directory, the working directory setuptools runs in).
        if getattr(self, "_archsmith_forced_ninja", False):
            for ext in self.extensions:
                ext.include_dirs = [_absolute(d) for d in ext.include_dirs]
                args = ext.extra_compile_args
                if isinstance(args, dict):
                    ext.extra_compile_args = {k: _absolute_includes(v) for k, v in args.items()}
                elif isinstance(args, list):
                    ext.extra_compile_args = _absolute_includes(args)
        return build_extensions(self)

    cls.__init__ = __init__
    cls.build_extensions = build_extensions_from_any_directory
    cls._archsmith_ninja = True


def _absolute(path):
    return path if os.path.isabs(path) else os.path.abspath(path)


def _absolute_includes(args):
    """`-Irel` and `-I rel` made absolute; every other flag as it was."""
    out = []
    for i, a in enumerate(args):
        if a.startswith("-I") and len(a) > 2:
            a = "-I" + _absolute(a[2:])
        elif i > 0 and args[i - 1] == "-I":
            a = _absolute(a)
        out.append(a)
    return out


class _Finder(importlib.abc.MetaPathFinder):
    """Patches the modules above right after they are first executed."""

    def find_spec(self, name, path=None, target=None):
        if name not in _PATCHED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        patch = globals()[_PATCHED[name]]

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                patch(module)

        spec.loader = _Loader()
        return spec


if (
    os.environ.get("ARCHSMITH_PARALLEL_EXTENSIONS")
    or os.environ.get("ARCHSMITH_FORCE_NINJA")
    or _stable_abi_target()
):
    sys.meta_path.insert(0, _Finder())
    # Modules imported before this ran (rare in a fresh interpreter) are patched now.
    for _name, _fn in _PATCHED.items():
        if _name in sys.modules:
            globals()[_fn](sys.modules[_name])


def _chain():
    """Runs the next sitecustomize on sys.path, which this one would otherwise hide."""
    for entry in sys.path:
        if os.path.abspath(entry or ".") == _HERE:
            continue
        candidate = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.isfile(candidate):
            with open(candidate) as f:
                code = compile(f.read(), candidate, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": candidate})
            return


_chain()
