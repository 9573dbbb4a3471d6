"""archsmith's pool of builds: runs independent builds (a package's extensions for the build
hooks' sitecustomize, a JIT tree's triggers for the prebuild driver) each in a forked process, up
to N at once, all sharing one pool of N job slots. Standard library only.

The pool is a GNU make jobserver: a named pipe holding N - 1 tokens (the process that made it holds
the first slot) that each child's ninja joins through MAKEFLAGS, with MAX_JOBS unset (ninja ignores
a jobserver when given -j) and nvcc's --threads dropped. A build starts when a slot is free, and a
running one widens into slots no other build takes, so the pool never runs more compiles than N,
and the last build gets every core. Where ninja is older than 1.13 (no jobserver client), each
child gets `per_child_jobs` as its MAX_JOBS instead (the build's jobs shared out).

Each child's output goes to its own log and is replayed whole when it ends, so the build log stays
readable; progress lines `archsmith-ext: start|done|FAILED NAME (k/total, Ns)` say where it is
(archsmith's progress display reads them).
"""

import os
import sys
import time
import traceback


def say(message):
    sys.stdout.write("archsmith-ext: %s\n" % message)
    sys.stdout.flush()


def safe_name(name):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def ninja_joins_jobservers():
    """Whether the ninja on PATH is a jobserver client (ninja >= 1.13)."""
    import subprocess

    try:
        out = subprocess.run(["ninja", "--version"], capture_output=True, text=True).stdout
        major, minor = (int(x) for x in out.strip().split(".")[:2])
    except (OSError, ValueError):
        return False
    return (major, minor) >= (1, 13)


class Jobserver:
    """A GNU make jobserver of `slots` job slots: a named pipe holding slots - 1 tokens (the
    process that made it holds the first slot). Children join it through MAKEFLAGS.

    Inside a pool that builds beside this one share (ARCHSMITH_JOB_POOL names its pipe: a tree's
    packages built at once, crates/workflows/src/build_ext/job_pool.rs), it joins that pool instead: this
    process's slot is the one the pool's driver took for this build, and every further child
    takes a token from the shared pipe, so all builds together stay within its slots."""

    def __init__(self, slots, directory):
        shared = os.environ.get("ARCHSMITH_JOB_POOL")
        self.shared = bool(shared)
        if shared:
            self.path = shared
            self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
            self.makeflags = " -j%d --jobserver-auth=fifo:%s" % (slots, self.path)
            return
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


def join_pool(jobserver, per_child_jobs):
    """A child's build environment: the shared pool, or its share of MAX_JOBS."""
    if jobserver is not None:
        os.environ.pop("MAX_JOBS", None)
        os.environ["MAKEFLAGS"] = jobserver.makeflags
        flags = os.environ.get("NVCC_APPEND_FLAGS", "").split()
        flags = [f for f in flags if not f.startswith("--threads")]
        os.environ["NVCC_APPEND_FLAGS"] = " ".join(flags)
    elif per_child_jobs:
        os.environ["MAX_JOBS"] = str(per_child_jobs)


class Done:
    """A build that ended: its item, whether its process exited 0, its time and its output."""

    def __init__(self, item, ok, seconds, output):
        self.item, self.ok, self.seconds, self.output = item, ok, seconds, output


def run(items, at_once, build, log_dir, noun, per_child_jobs=None, startable=None):
    """Runs `build(item)` for each `(index, name, item)` of `items` (in the order to start) in a
    forked child, at most `at_once` at a time in one pool of `at_once` job slots; a child whose
    build raises (SystemExit: quietly), or whose process dies, failed. `startable(queue, running)` (optional) is the
    position in `queue` of the next entry that may start while the items `running` build, or None
    to wait for one of them. Returns a Done for each item, in the order they ended."""
    os.makedirs(log_dir, exist_ok=True)
    jobserver = Jobserver(at_once, os.path.abspath(log_dir)) if ninja_joins_jobservers() else None
    if jobserver is None and os.environ.get("ARCHSMITH_JOB_POOL"):
        # In a shared pool its ninja cannot join, this build has its one slot: one at a time.
        at_once = 1
    total = len(items)
    if jobserver is not None and jobserver.shared:
        say("building %d %s in the pool of job slots shared with the builds beside it (%s)" % (total, noun, jobserver.path))
    elif jobserver is not None:
        say("building %d %s in one pool of %d job slots" % (total, noun, at_once))
    else:
        say("building %d %s, %d at a time" % (total, noun, at_once))
    queue = list(items)
    running = {}
    ended = []
    own_slot_free = True
    while queue or running:
        while queue and len(running) < at_once:
            position = 0
            if startable is not None:
                position = startable(queue, [r[0][2] for r in running.values()])
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
            entry = queue.pop(position)
            index, name, item = entry
            log = os.path.join(log_dir, "%03d-%s.log" % (index, safe_name(name)))
            say("start %s (%d/%d)" % (name, index + 1, total))
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(log, jobserver, per_child_jobs, build, item)
            running[pid] = (entry, log, time.time(), token)
        # With items waiting for a slot, poll: a child may end, a ninja may give a token back,
        # or what `startable` waits for may happen. Otherwise only a child's end changes anything.
        if queue and len(running) < at_once:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                time.sleep(0.05)
                continue
        else:
            pid, status = os.wait()
        if pid not in running:
            continue
        (index, name, item), log, started, token = running.pop(pid)
        if token is not None:
            jobserver.give(token)
        else:
            own_slot_free = True
        ok = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        try:
            with open(log, errors="replace") as f:
                output = f.read()
        except OSError:
            output = ""
        sys.stdout.write(output)
        seconds = time.time() - started
        ended.append(Done(item, ok, seconds, output))
        say("%s %s (%d/%d, %.0fs)" % ("done" if ok else "FAILED", name, len(ended), total, seconds))
    return ended


def _child(log, jobserver, per_child_jobs, build, item):
    code = 1
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        join_pool(jobserver, per_child_jobs)
        build(item)
        code = 0
    except SystemExit as e:  # a build that said why it failed and asked to end
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
