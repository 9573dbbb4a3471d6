"""archsmith's build hooks, loaded by the Python of an extension build (build-ext puts this
directory first on PYTHONPATH). Standard library only; nothing happens unless asked:

ARCHSMITH_PARALLEL_EXTENSIONS=N (N >= 2)
    setuptools builds a package's extensions one after another, each in its own ninja run of one
    or two files, so on a many-extension package most cores sit idle. This builds up to N
    extensions at once, longest first, each in a forked process with its own build_temp (torch's BuildExtension
    writes one build.ninja per build_temp, and its non-ninja path swaps the compiler executable on
    the shared compiler object, so threads would race; processes do not). Each child's output goes
    to its own log and is replayed whole when it ends, so the build log stays readable; progress
    lines `archsmith-ext: start|done|FAILED NAME (k/total, Ns)` say where it is.
    All children share one pool of N job slots: a GNU make jobserver (a named pipe holding N - 1
    tokens; this process's own slot runs the first extension) that each child's ninja joins
    through MAKEFLAGS, with MAX_JOBS unset (ninja ignores a jobserver when given -j) and nvcc's
    --threads dropped. An extension starts when a slot is free, and a running one widens into
    slots no other extension takes, so the package never runs more compiles than N, and the
    last extension gets every core. Where ninja is older than 1.13 (no jobserver client),
    ARCHSMITH_EXT_MAX_JOBS sets MAX_JOBS inside each child instead (the build's jobs shared out).

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
}


def _say(message):
    sys.stdout.write("archsmith-ext: %s\n" % message)
    sys.stdout.flush()


def _safe(name):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


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
    for position, (index, _) in enumerate(queue):
        if not (sources_of[index] & busy):
            return position
    return None


def _ninja_joins_jobservers():
    """Whether the ninja on PATH is a jobserver client (ninja >= 1.13)."""
    import subprocess

    try:
        out = subprocess.run(["ninja", "--version"], capture_output=True, text=True).stdout
        major, minor = (int(x) for x in out.strip().split(".")[:2])
    except (OSError, ValueError):
        return False
    return (major, minor) >= (1, 13)


class _Jobserver:
    """A GNU make jobserver of `slots` job slots: a named pipe holding slots - 1 tokens (the
    process that made it holds the first slot). Children join it through MAKEFLAGS."""

    def __init__(self, slots, directory):
        self.path = os.path.join(directory, "jobserver.fifo")
        if os.path.exists(self.path):
            os.unlink(self.path)
        os.mkfifo(self.path, 0o600)
        self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        os.write(self.fd, b"+" * (slots - 1))
        self.makeflags = " -j%d --jobserver-auth=fifo:%s" % (slots, self.path)

    def take(self):
        """A token, or None when every slot is in use."""
        try:
            return os.read(self.fd, 1) or None
        except BlockingIOError:
            return None

    def give(self, token):
        os.write(self.fd, token)


def _child_env_for(jobserver, per_child_jobs, wrappers=None):
    """A child's build environment: the shared pool, or its share of MAX_JOBS; the shared-source
    compiler wrappers first on PATH when the extension compiles a shared file."""
    if wrappers:
        os.environ["PATH"] = wrappers + os.pathsep + os.environ.get("PATH", "")
        if os.environ.get("ARCHSMITH_SHARED_SOURCE_CXX"):
            os.environ["CXX"] = os.environ["ARCHSMITH_SHARED_SOURCE_CXX"]
        # nvcc's own host steps compile temporary files that never hit: the real compiler.
        if os.environ.get("ARCHSMITH_SHARED_SOURCE_NVCC_CCBIN"):
            os.environ["NVCC_CCBIN"] = os.environ["ARCHSMITH_SHARED_SOURCE_NVCC_CCBIN"]
    if jobserver is not None:
        os.environ.pop("MAX_JOBS", None)
        os.environ["MAKEFLAGS"] = jobserver.makeflags
        flags = os.environ.get("NVCC_APPEND_FLAGS", "").split()
        flags = [f for f in flags if not f.startswith("--threads")]
        os.environ["NVCC_APPEND_FLAGS"] = " ".join(flags)
    elif per_child_jobs:
        os.environ["MAX_JOBS"] = per_child_jobs


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
        import time
        import traceback

        base_temp = self.build_temp
        log_dir = os.path.join(base_temp, "archsmith-ext-logs")
        os.makedirs(log_dir, exist_ok=True)
        per_child_jobs = os.environ.get("ARCHSMITH_EXT_MAX_JOBS")
        jobserver = None
        if _ninja_joins_jobservers():
            jobserver = _Jobserver(at_once, os.path.abspath(log_dir))
        total = len(extensions)
        # Longest first (CUDA sources cost most), so the short ones fill the end instead of one
        # long extension running alone while the other cores wait.
        queue = sorted(enumerate(extensions), key=lambda item: -_cost(item[1]))
        wrappers = os.environ.get("ARCHSMITH_SHARED_SOURCE_WRAPPERS")
        shared = _shared_sources(extensions) if wrappers else set()
        # Each extension's files that another extension compiles too, by its index.
        shared_of = [_sources(ext) & shared for ext in extensions]
        running = {}
        failed = []
        done = 0
        own_slot_free = True
        if jobserver is not None:
            _say("building %d extensions in one pool of %d job slots" % (total, at_once))
        else:
            _say("building %d extensions, %d at a time" % (total, at_once))
        if shared:
            _say(
                "%d source file(s) compiled by more than one extension, compiled once where the "
                "preprocessed text is the same: %s"
                % (len(shared), ", ".join(sorted(os.path.relpath(s) for s in shared)))
            )
        while queue or running:
            while queue and len(running) < at_once:
                position = 0
                if shared:
                    # A shared file still compiling in a running extension: a second compile
                    # now would miss its object. Once that compile has ended, it hits.
                    busy = set()
                    for other_index, other, _, _, _ in running.values():
                        if shared_of[other_index]:
                            temp = os.path.join(base_temp, _safe(other.name))
                            busy |= _still_compiling(temp, shared_of[other_index])
                    position = _next_startable(queue, shared_of, busy)
                    if position is None:
                        break
                # One runs on this process's own slot; each other needs a token.
                token = None
                if jobserver is not None and not own_slot_free:
                    token = jobserver.take()
                    if token is None:
                        break
                if token is None:
                    own_slot_free = False
                index, ext = queue.pop(position)
                log = os.path.join(log_dir, "%03d-%s.log" % (index, _safe(ext.name)))
                _say("start %s (%d/%d)" % (ext.name, index + 1, total))
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    code = 1
                    try:
                        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                        os.dup2(fd, 1)
                        os.dup2(fd, 2)
                        _child_env_for(
                            jobserver, per_child_jobs, wrappers if shared_of[index] else None
                        )
                        self.build_temp = os.path.join(base_temp, _safe(ext.name))
                        with self._filter_build_errors(ext):
                            self.build_extension(ext)
                        code = 0
                    except BaseException:
                        traceback.print_exc()
                    finally:
                        try:
                            sys.stdout.flush()
                            sys.stderr.flush()
                        finally:
                            os._exit(code)
                running[pid] = (index, ext, log, time.time(), token)
            # With extensions waiting for a slot, poll: a child may end, a ninja may give a
            # token back, or a shared file may finish compiling. Otherwise only a child's end
            # changes anything.
            if queue and len(running) < at_once:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    time.sleep(0.05)
                    continue
            else:
                pid, status = os.wait()
            if pid not in running:
                continue
            _, ext, log, started, token = running.pop(pid)
            if token is not None:
                jobserver.give(token)
            else:
                own_slot_free = True
            done += 1
            ok = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            try:
                with open(log, errors="replace") as f:
                    sys.stdout.write(f.read())
            except OSError:
                pass
            _say(
                "%s %s (%d/%d, %.0fs)"
                % ("done" if ok else "FAILED", ext.name, done, total, time.time() - started)
            )
            if not ok:
                failed.append(ext.name)
        if failed:
            raise SystemExit("error: building extension(s) failed: %s" % ", ".join(failed))

    cls._build_extensions_serial = _build_extensions_forked
    cls._archsmith_parallel = True


def _patch_cpp_extension(module):
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
            _say("ninja turned back on (the package set use_ninja=False)")

    cls.__init__ = __init__
    cls._archsmith_ninja = True


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


if os.environ.get("ARCHSMITH_PARALLEL_EXTENSIONS") or os.environ.get("ARCHSMITH_FORCE_NINJA"):
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
