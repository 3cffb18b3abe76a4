"""Phase 2 task generation: bugs injected into real code we did not write, caught by its own tests.

The code is pure-Python modules of the standard library of the running interpreter, checked by
their upstream tests from Python's ``test`` package (both found through ``importlib``, never a
hard-coded path). A task directory holds three files:

- ``<module>.py``: a copy of the module, with one mutation;
- ``test_<module>.py``: the upstream test file, unchanged;
- ``run_tests.py``: :data:`RUNNER`, which makes the tests use the copy (the test command is
  ``python -B -S run_tests.py``).

**Why a runner.** The copy must win over the standard library's module of the same name, and
``python -m unittest`` has already imported many of them (``textwrap``, ``difflib``, ``fnmatch``,
``heapq``, ... through ``argparse``, ``unittest`` and ``site``), so a plain ``import`` in the
tests would get the pristine module. The runner imports the copy in its place in
``sys.modules``, puts a finder first on ``sys.meta_path`` that serves every import of that name,
including the tests' ``import_helper.import_fresh_module`` calls, from the task directory, and
fails the run when ``sys.modules`` holds anything but the copy before or after the tests.

**C accelerators.** A module whose functions a C module replaces (``heapq`` / ``_heapq``,
``bisect`` / ``_bisect``, ``operator`` / ``_operator``) keeps its pure-Python code reachable only
through the tests' fresh imports with the accelerator blocked, which the finder serves from the
copy too. Mutants are only drawn from lines the upstream tests execute (measured once per module
with a line tracer), so code the accelerator shadows is never mutated.

**Verification.** Per module: the upstream tests pass on the unmodified copy, and that run's time
sets the module's timeout (``max(MIN_TIMEOUT_S, 6 x`` it, capped by ``run_budget_s``; modules
slower than the budget are skipped). Per task: the tests fail on the mutant without timing out
(failing ids recorded), and no distractor makes them pass or time out.

**Order.** Candidates are grouped by (module, operator), shuffled by ``Random("<seed>/real")``
and dealt one per group per round, as in phase 1. ``source`` records the module and the
interpreter (``stdlib:textwrap@CPython-3.11.7``).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import platform
import random
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contracts import ShellTask

from . import mutations
from ._common import GenerationError, Progress, deal
from .assemble import assemble, candidate_edits, failure_reasons, pointed_functions, statement
from .mutations import Mutant, MutationError, Site
from .verify import (
    Job,
    RunCache,
    _run_tests,
    command_argv,
    drop_bad_distractors,
    failing_test_ids,
    materialize,
    run_many,
)

__all__ = [
    "DEFAULT_MODULES",
    "FAST_MODULES",
    "RUNNER",
    "TEST_COMMAND",
    "RealModule",
    "generate_real",
    "prepare",
]

TEST_COMMAND = ["{python}", "-B", "-S", "run_tests.py"]

DEFAULT_MODULES = (
    "textwrap",
    "colorsys",
    "fractions",
    "shlex",
    "fnmatch",
    "string",
    "graphlib",
    "ipaddress",
    "heapq",
    "bisect",
    "operator",
    "base64",
    "reprlib",
    "copy",
    "netrc",
    "quopri",
    "gettext",
    "plistlib",
)
"""Pure-Python modules whose upstream tests take well under a second (``heapq``, ``bisect``
and ``operator`` have C accelerators: their tests reach the Python code by fresh imports)."""

FAST_MODULES = ("textwrap", "colorsys", "string", "bisect", "fnmatch", "fractions")
"""A handful of the quickest, for samples."""

MIN_TIMEOUT_S = 2.0
RUN_BUDGET_S = 20.0

RUNNER = '''"""Run the upstream tests in {tests}.py against the copy of `{module}` in this directory.

The copy must win over the standard library's module of the same name, which the test framework
may already have imported: the copy replaces it in sys.modules, and every fresh import of the
name (the tests' import_fresh_module) is served from this directory too.
"""

import importlib
import importlib.machinery
import os
import random
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = "{module}"
TESTS = "{tests}"


class TaskCopyFinder:
    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, [HERE])
        if spec is None:
            raise ImportError(MODULE + ".py is missing from " + HERE)
        return spec


def check_copy():
    copy = sys.modules.get(MODULE)
    path = getattr(copy, "__file__", None)
    if path is None or os.path.dirname(os.path.abspath(path)) != HERE:
        sys.exit(MODULE + " is not this directory's copy but " + repr(copy))


random.seed(0)  # upstream tests draw random inputs: the same run must fail the same tests
sys.path.insert(0, HERE)
sys.meta_path.insert(0, TaskCopyFinder)
sys.modules.pop(MODULE, None)
importlib.import_module(MODULE)
check_copy()
program = unittest.main(module=TESTS, argv=[sys.argv[0], "-q"], exit=False)
check_copy()
sys.exit(0 if program.result.wasSuccessful() else 1)
'''
"""The task's ``run_tests.py`` (``{module}`` and ``{tests}`` filled in)."""

_COVERAGE = """import json, os, runpy, sys, threading

out_path, target = sys.argv[1], os.path.abspath(sys.argv[2])
lines = set()


def local(frame, event, arg):
    if event == "line":
        lines.add(frame.f_lineno)
    return local


def tracer(frame, event, arg):
    if frame.f_code.co_filename != target:
        return None
    lines.add(frame.f_lineno)
    return local


sys.argv = ["run_tests.py"]
sys.settrace(tracer)
threading.settrace(tracer)
try:
    runpy.run_path("run_tests.py", run_name="__main__")
except SystemExit:
    pass
finally:
    sys.settrace(None)
    with open(out_path, "w") as f:
        json.dump(sorted(lines), f)
"""
"""Generation-time only (never a task file): runs ``run_tests.py`` under a line tracer and
writes the lines of the module copy the tests executed."""


def python_version() -> str:
    return f"{platform.python_implementation()}-{platform.python_version()}"


@dataclass(frozen=True)
class RealModule:
    """A standard library module prepared for phase 2: its files and what its tests cover."""

    name: str
    module_path: str
    test_path: str
    files: dict[str, str]
    """The pristine task files: module copy, upstream tests, runner."""
    covered: frozenset[int]
    """Lines of the module the upstream tests execute."""
    seconds: float
    """How long the pristine tests took."""
    timeout: float

    @property
    def source(self) -> str:
        return f"stdlib:{self.name}@{python_version()}"


def _locate(name: str) -> tuple[Path, Path, str]:
    """The module's file, its upstream test file and the test module's name.

    Raises ``GenerationError`` when either is missing or the module is not one pure-Python
    file."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise GenerationError(f"{name} is not a pure-Python module here")
    if spec.submodule_search_locations is not None:
        raise GenerationError(f"{name} is a package; phase 2 takes single-file modules")
    tests_spec = importlib.util.find_spec("test")
    if tests_spec is None or not tests_spec.submodule_search_locations:
        raise GenerationError("Python's test package is not installed")
    test_name = "test_" + name.lstrip("_")
    test_file = Path(next(iter(tests_spec.submodule_search_locations))) / f"{test_name}.py"
    if not test_file.is_file():
        raise GenerationError(f"{name} has no upstream test file {test_file.name}")
    return Path(spec.origin), test_file, test_name


@functools.cache
def prepare(
    name: str, run_budget_s: float = RUN_BUDGET_S, cache: RunCache | None = None
) -> RealModule:
    """Copy ``name`` and its upstream tests, check the tests pass on the copy within the budget,
    and measure which lines they execute (once per process; with ``cache``, once per
    interpreter and module source).

    Raises ``GenerationError`` when the module cannot be used."""
    module_file, test_file, test_name = _locate(name)
    module_path, test_path = f"{name}.py", f"{test_name}.py"
    files = {
        module_path: module_file.read_text(encoding="utf-8"),
        test_path: test_file.read_text(encoding="utf-8"),
        "run_tests.py": RUNNER.replace("{module}", name).replace("{tests}", test_name),
    }
    key = cache.key("prepare", files, run_budget_s) if cache is not None else ""
    record = cache.load(key) if cache is not None else None
    if isinstance(record, dict):
        seconds, covered = float(record["seconds"]), frozenset(record["covered"])
    else:
        seconds, covered = _measure(name, files, module_path, run_budget_s)
        if cache is not None:
            cache.store(key, {"seconds": seconds, "covered": sorted(covered)})
    return RealModule(
        name=name,
        module_path=module_path,
        test_path=test_path,
        files=files,
        covered=covered,
        seconds=seconds,
        timeout=min(run_budget_s, max(MIN_TIMEOUT_S, 6 * seconds)),
    )


def _measure(
    name: str, files: dict[str, str], module_path: str, run_budget_s: float
) -> tuple[float, frozenset[int]]:
    """How long the upstream tests take on the pristine copy, and which of its lines they run.
    Raises ``GenerationError`` when they fail or exceed the budget."""
    with tempfile.TemporaryDirectory(prefix="aios-real-") as tmp:
        task_dir = Path(tmp)
        materialize(files, task_dir)
        clean = _run_tests(task_dir, command_argv(TEST_COMMAND), run_budget_s)
        if not clean.passed:
            raise GenerationError(
                f"the upstream tests of {name} do not pass on its copy within {run_budget_s}s:"
                f"\n{clean.output[-2000:]}"
            )
        out = task_dir / ".covered.json"
        (task_dir / ".coverage_harness.py").write_text(_COVERAGE, encoding="utf-8")
        traced = _run_tests(
            task_dir,
            [sys.executable, "-B", "-S", ".coverage_harness.py", str(out), module_path],
            max(4 * run_budget_s, 60.0),
        )
        if traced.timed_out or not out.is_file():
            raise GenerationError(f"measuring what the tests of {name} cover failed")
        return clean.seconds, frozenset(json.loads(out.read_text()))


def _candidates(modules: Sequence[RealModule], seed: int) -> list[tuple[RealModule, Site]]:
    groups: dict[tuple[str, str], list[tuple[RealModule, Site]]] = {}
    for module in modules:
        source = module.files[module.module_path]
        for site in mutations.sites(source):
            if site.line in module.covered:
                groups.setdefault((module.name, site.operator), []).append((module, site))
    rng = random.Random(f"{seed}/real")
    keys = sorted(groups)
    for key in keys:
        rng.shuffle(groups[key])
    rng.shuffle(keys)
    return list(deal([groups[k] for k in keys]))


def _task(
    module: RealModule, mutant: Mutant, output: str, failing: list[str], seed: int
) -> ShellTask:
    files = {**module.files, module.module_path: mutant.source}
    test_module = module.test_path.removesuffix(".py")
    rng = random.Random(f"{seed}/real/{module.name}/{mutant.site}")
    edits = candidate_edits(
        path=module.module_path,
        original=module.files[module.module_path],
        mutant=mutant,
        pointed=pointed_functions({test_module: module.files[module.test_path]}, failing),
        rng=rng,
    )
    text = statement(
        intro=(
            f"{module.module_path} is a copy of the `{module.name}` module of the "
            f"{python_version().replace('-', ' ')} standard library, and {module.test_path} its "
            f"upstream tests; run_tests.py makes them test this copy. A bug has been introduced "
            f"into the copy."
        ),
        code_paths=[module.module_path],
        test_paths=[module.test_path, "run_tests.py"],
        test_command=TEST_COMMAND,
        failing=failing,
        reasons=failure_reasons(output),
    )
    return assemble(
        family=module.name,
        phase=2,
        split="real",
        files=files,
        test_command=TEST_COMMAND,
        test_files=[module.test_path, "run_tests.py"],
        failing=failing,
        statement_text=text,
        edits=edits,
        mutant=mutant,
        source=module.source,
    )


def generate_real(
    count: int,
    seed: int = 0,
    *,
    modules: Sequence[str] = DEFAULT_MODULES,
    workers: int = 2,
    run_budget_s: float = RUN_BUDGET_S,
    check_distractors: bool = True,
    progress: Progress | None = None,
    cache: RunCache | None = None,
) -> list[ShellTask]:
    """``count`` verified phase 2 tasks (split ``real``) from ``modules`` (see the module
    docstring). Deterministic for a seed, and ``generate_real(n)`` is a prefix of
    ``generate_real(m)`` for ``n < m`` (same modules).

    Modules whose tests fail on the copy or exceed ``run_budget_s`` are skipped (reported through
    ``progress``). Raises ``GenerationError`` when fewer than ``count`` tasks verify."""
    if count < 0:
        raise ValueError(f"count must not be negative, got {count}")
    prepared = []
    for name in modules:
        try:
            prepared.append(prepare(name, run_budget_s, cache))
        except GenerationError as exc:
            if progress is not None:
                progress(f"real: skipping {name}: {str(exc).splitlines()[0]}")
            continue
        if progress is not None:
            m = prepared[-1]
            progress(
                f"real: {name}: tests pass on the copy in {m.seconds:.2f}s, "
                f"{len(m.covered)} lines covered"
            )
    pool = _candidates(prepared, seed)
    tasks: list[ShellTask] = []
    rejected: dict[str, int] = {}
    batch_size = max(8, 8 * workers)
    at = 0
    while len(tasks) < count and at < len(pool):
        want = min(batch_size, 2 + int((count - len(tasks)) * 1.5))
        batch = pool[at : at + want]
        at += len(batch)
        live: list[tuple[RealModule, Mutant]] = []
        for module, site in batch:
            try:
                mutant = mutations.apply(module.files[module.module_path], site, module.module_path)
            except MutationError:
                rejected["invalid mutant"] = rejected.get("invalid mutant", 0) + 1
                continue
            live.append((module, mutant))
        results = run_many(
            [Job({**m.files, m.module_path: mu.source}, TEST_COMMAND, m.timeout) for m, mu in live],
            workers=workers,
            cache=cache,
        )
        drafts, timeouts = [], []
        for (module, mutant), result in zip(live, results, strict=True):
            failing = failing_test_ids(result.output)
            if result.timed_out or result.passed or not failing:
                why = "timeout" if result.timed_out else "survived" if result.passed else "no ids"
                rejected[why] = rejected.get(why, 0) + 1
                continue
            drafts.append(_task(module, mutant, result.output, failing, seed))
            timeouts.append(module.timeout)
        drafts, timeouts = drafts[: count - len(tasks)], timeouts[: count - len(tasks)]
        if check_distractors:
            drafts = drop_bad_distractors(drafts, timeouts, workers=workers, cache=cache)
        tasks.extend(drafts)
        if progress is not None:
            progress(
                f"real: {len(tasks)}/{count} tasks verified, {at} candidates tried "
                f"(rejected: {rejected or 'none'})"
            )
    if len(tasks) < count:
        raise GenerationError(
            f"only {len(tasks)} of {count} real tasks verified from {len(pool)} candidates"
        )
    return tasks
