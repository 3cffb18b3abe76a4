"""Spectrum-based fault localisation for imported tasks: which code lines each test runs, whether
it passed, and the lines ranked by Ochiai suspiciousness. Pure except :func:`spectrum`, which runs
the task's tests once through an executor (the sandbox, for users' code).

How the spectrum is measured
----------------------------
:data:`HARNESS` is written into a copy of the task directory as ``.aios_spectrum.py`` and run in
place of the interpreter (``{python} ARGS`` becomes ``{python} -B .aios_spectrum.py OUT ARGS``).
It runs the same tests the same way (``-m pytest`` through ``pytest.main`` with a plugin, ``-m
unittest`` and scripts with ``unittest``'s result class patched), with a line tracer on every
thread that records, per test, the lines of the task's code files (not its test files) that ran.
A test's outcome is its own (a failing subtest fails its test); ids are the ones the runs report
(``module.Class.test`` for unittest, node ids for pytest), so they match the task's failing ids.
Lines run outside any test (imports, collection) are attributed to none.

Ochiai
------
For a line run by ``ef`` failing and ``ep`` passing tests, with ``F`` failing tests in all:
``ef / sqrt(F * (ef + ep))`` — 1 for a line every failing test runs and no passing test does, 0
for a line no failing test runs. Ties keep the order of the files, then of the lines.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .pertest import timed_command
from .sandbox import Executor
from .verify import command_argv, materialize

__all__ = ["HARNESS", "Spectrum", "ochiai", "spectrum", "traceable"]

OUT = ".aios_spectrum.json"
SCRIPT = ".aios_spectrum.py"

HARNESS = r'''"""Run a task's tests with a line tracer; write each test's outcome and code lines as JSON."""
import json, os, runpy, sys, threading, unittest

out_path, targets_path = sys.argv[1], sys.argv[2]
args = sys.argv[3:]
here = os.getcwd()
with open(targets_path) as f:
    targets = {os.path.join(here, p): p for p in json.load(f)}
current = [None]
lines = {}
failed = set()
ran = []


def local(frame, event, arg):
    if event == "line" and current[0] is not None:
        lines.setdefault(current[0], set()).add((targets[frame.f_code.co_filename], frame.f_lineno))
    return local


def tracer(frame, event, arg):
    if frame.f_code.co_filename not in targets:
        return None
    return local


def begin(test_id):
    current[0] = test_id
    ran.append(test_id)


def patch_unittest():
    result = unittest.TestResult
    start, fail, error, sub = result.startTest, result.addFailure, result.addError, result.addSubTest

    def start_test(self, test):
        begin(test.id())
        return start(self, test)

    def add_failure(self, test, err):
        failed.add(test.id())
        return fail(self, test, err)

    def add_error(self, test, err):
        failed.add(getattr(test, "id", lambda: str(test))())
        return error(self, test, err)

    def add_sub_test(self, test, subtest, err):
        if err is not None:
            failed.add(test.id())
        return sub(self, test, subtest, err)

    result.startTest, result.addFailure = start_test, add_failure
    result.addError, result.addSubTest = add_error, add_sub_test


code = 1
sys.settrace(tracer)
threading.settrace(tracer)
try:
    if args[:2] == ["-m", "pytest"]:
        import pytest

        class Plugin:
            @pytest.hookimpl(hookwrapper=True)
            def pytest_runtest_protocol(self, item, nextitem):
                begin(item.nodeid)
                yield
                current[0] = None

            def pytest_runtest_logreport(self, report):
                if report.failed:
                    failed.add(report.nodeid)

        sys.path.insert(0, here)
        code = pytest.main(args[2:], plugins=[Plugin()])
    elif args[:2] == ["-m", "unittest"]:
        patch_unittest()
        sys.path.insert(0, here)
        sys.argv = ["python -m unittest", *args[2:]]
        try:
            unittest.main(module=None)
        except SystemExit as exc:
            code = exc.code
    else:
        patch_unittest()
        sys.argv = list(args)
        sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
        try:
            runpy.run_path(args[0], run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code
finally:
    sys.settrace(None)
    threading.settrace(None)
    doc = {
        "exit": code if isinstance(code, int) else 1,
        "tests": {
            t: {"failed": t in failed, "lines": sorted(lines.get(t, ()))}
            for t in dict.fromkeys(ran)
        },
    }
    with open(out_path, "w") as f:
        json.dump(doc, f)
'''


@dataclass(frozen=True)
class Spectrum:
    """Per test: whether it failed and the code lines (``(path, line)``) it ran."""

    failed: Mapping[str, bool]
    lines: Mapping[str, frozenset[tuple[str, int]]]

    @property
    def failing(self) -> list[str]:
        return sorted(t for t, f in self.failed.items() if f)


_FLAGS = ("-B", "-S", "-s", "-u", "-E", "-I", "-q")
"""Interpreter flags a test command may carry that do not change what runs."""


def _program(test_command: Sequence[str]) -> list[str]:
    """The test command after ``{python}`` and its harmless interpreter flags."""
    rest = list(test_command[1:])
    while rest and rest[0] in _FLAGS:
        rest.pop(0)
    return rest


def traceable(test_command: Sequence[str]) -> bool:
    """Whether the harness can run this test command: ``{python}`` (with flags such as ``-B``)
    followed by ``-m pytest``, ``-m unittest`` or a script."""
    if len(test_command) < 2 or test_command[0] != "{python}":
        return False
    rest = _program(test_command)
    return bool(rest) and (
        rest[:2] in (["-m", "pytest"], ["-m", "unittest"]) or not rest[0].startswith("-")
    )


def spectrum(
    files: Mapping[str, str],
    test_command: Sequence[str],
    code_paths: Sequence[str],
    executor: Executor,
    work_root: Path | None = None,
    per_test_s: float = 0.0,
) -> Spectrum | None:
    """Run the tests once under the harness (see the module docstring), each test limited to
    ``per_test_s`` seconds when above 0 (:mod:`.pertest`: a test that loops is a failing test
    here too); ``None`` when the command cannot be traced or the run left no readable record."""
    if not traceable(test_command):
        return None
    args = _program(test_command)
    tmp = Path(tempfile.mkdtemp(prefix="aios-spectrum-", dir=work_root))
    try:
        materialize(
            {**files, SCRIPT: HARNESS, ".aios_targets.json": json.dumps(list(code_paths))}, tmp
        )
        harness = ["{python}", "-B", SCRIPT, OUT, ".aios_targets.json", *args]
        argv = command_argv(timed_command(harness, per_test_s))
        executor.run(argv, tmp)
        out = tmp / OUT
        if out.is_symlink() or not out.is_file():
            return None
        try:
            doc = json.loads(out.read_text(encoding="utf-8"))
            tests = doc["tests"]
            return Spectrum(
                failed={t: bool(v["failed"]) for t, v in tests.items()},
                lines={t: frozenset((p, int(n)) for p, n in v["lines"]) for t, v in tests.items()},
            )
        except (ValueError, KeyError, TypeError):
            return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ochiai(spec: Spectrum) -> list[tuple[str, int, float]]:
    """Every line some failing test ran, ``(path, line, score)``, most suspicious first (see the
    module docstring)."""
    failing = [t for t, f in spec.failed.items() if f]
    total_failed = len(failing)
    if not total_failed:
        return []
    ef: dict[tuple[str, int], int] = {}
    ep: dict[tuple[str, int], int] = {}
    for test, ran in spec.lines.items():
        counts = ef if spec.failed.get(test) else ep
        for key in ran:
            counts[key] = counts.get(key, 0) + 1
    scored = [
        (path, line, n / math.sqrt(total_failed * (n + ep.get((path, line), 0))))
        for (path, line), n in ef.items()
    ]
    scored.sort(key=lambda r: (-r[2], r[0], r[1]))
    return scored
