"""A ported package's own test suite, run against the built wheel: the strongest smoke test there is.

usage: package_tests.py DIR [FILE...]

Runs pytest (which also runs unittest test cases) over the test files copied into DIR, and the
FILEs (tests of the package's own directory, placed inside the installed package), with the
wheel installed on PYTHONPATH, not the source tree: what is tested is what was built. A test that
fails only because this host has no GPU (torch not compiled with CUDA, no driver, no device) is
counted as `needs-gpu`, not as a failure; a test the suite itself skips is `skipped`.

Each test file is imported by its path (`--import-mode=importlib`): a `test/` package (the
standard library's name) cannot shadow the installed wheel, and a test inside the installed
package is its module (`pkg.pkg_test`), so its relative imports reach the wheel's modules.

Prints, last, `ARCHSMITH_TESTS {json}`: `passed`, `failed`, `skipped`, `needs_gpu`, `errors`
(files not collected), `failures` (the first ten failed tests: `{test, error}`), `not_collected`
(the first ten files pytest could not import: `{file, error}`), `gpu` (whether torch sees one).
Exit 0 when it ran (the report says how it went); 2 when pytest is missing.
"""

import json
import os
import re
import sys

try:
    import pytest
except ImportError:
    print("ARCHSMITH_TESTS " + json.dumps({"error": "pytest is not installed in this env"}))
    sys.exit(2)

from archsmith_no_gpu import NO_GPU  # noqa: E402  (beside this script)


def first_error(report):
    """The exception line of a failure (pytest's `E   ...` lines), else its last line."""
    text = getattr(report, "longreprtext", "") or str(report.longrepr or "")
    errors = [l[1:].strip() for l in text.splitlines() if l.startswith("E ")]
    line = errors[0] if errors else (text.strip().splitlines() or [""])[-1]
    return line[:300], text


class Collect:
    def __init__(self, gpu, copied):
        self.gpu = gpu
        # Node ids are relative to the folder above all tests; the copied ones are named as in
        # the source (`tests/test_ops.py`, not `package-tests/tests/test_ops.py`).
        self.copied = copied
        self.counts = {"passed": 0, "failed": 0, "skipped": 0, "needs_gpu": 0, "errors": 0}
        self.failures = []
        self.not_collected = []

    def name(self, nodeid):
        return nodeid[len(self.copied) :] if nodeid.startswith(self.copied) else nodeid

    def pytest_runtest_logreport(self, report):
        # One verdict per test: its call, or its setup when that did not pass.
        if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
            return
        if report.outcome == "passed":
            self.counts["passed"] += 1
        elif report.outcome == "skipped":
            self.counts["skipped"] += 1
        else:
            line, text = first_error(report)
            if not self.gpu and NO_GPU.search(text):
                self.counts["needs_gpu"] += 1
            else:
                self.counts["failed"] += 1
                if len(self.failures) < 10:
                    self.failures.append({"test": self.name(report.nodeid), "error": line})

    def pytest_collectreport(self, report):
        if report.outcome == "failed":
            self.counts["errors"] += 1
            line, _ = first_error(report)
            if len(self.not_collected) < 10:
                self.not_collected.append({"file": self.name(report.nodeid) or "collection", "error": line})


def main():
    directory, in_package = sys.argv[1], sys.argv[2:]
    rootdir = os.path.commonpath([directory, *in_package])
    try:
        import torch

        gpu = bool(torch.cuda.is_available())
    except Exception:
        gpu = False
    copied = os.path.relpath(directory, rootdir)
    collect = Collect(gpu, "" if copied == "." else copied + "/")
    # importlib: test files are imported by path, never as a package that shadows the wheel;
    # their helpers come from the directories archsmith put on PYTHONPATH after the wheel.
    args = [
        "-q",
        "-p",
        "no:cacheprovider",
        "--import-mode=importlib",
        # A file that cannot be imported is reported; the others still run.
        "--continue-on-collection-errors",
        # Tests are named from the folder above them all (`package-tests/…`, `smoke-site/pkg/…`).
        "--rootdir",
        rootdir,
        directory,
        *in_package,
    ]
    code = pytest.main(args, plugins=[collect])
    report = dict(
        collect.counts,
        failures=collect.failures,
        not_collected=collect.not_collected,
        gpu=gpu,
        pytest_exit=int(code),
    )
    print("ARCHSMITH_TESTS " + json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
