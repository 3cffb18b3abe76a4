"""Running a task's tests and checking a task: the mutant fails, the fix passes, distractors don't.

Tests run as real processes in a fresh temporary directory per run (so no bytecode cache can
outlive an edit), with ``{python}`` in the test command replaced by this interpreter, through
``sandbox.LocalExecutor``: no isolation (these are our own tests and our own mutants), but the
sandbox's clean environment (``PYTHONHASHSEED=0``, ``HOME`` and ``TMPDIR`` the runner's temporary
directory), a wall-clock timeout that kills the whole process group, and the limits below. A
task with a per-test timeout (``ShellTask.test_timeout_s``, :mod:`.pertest`) runs its tests with
it, here too.

Task files are written byte for byte (UTF-8, no newline translation: a CRLF line stays one).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import NamedTuple

import msgspec

from aios_rl.errors import AiosError
from contracts import CandidateEdit, ShellTask

from .pertest import timed_command
from .sandbox import LocalExecutor, SandboxConfig

__all__ = [
    "EditError",
    "Job",
    "RunCache",
    "RunResult",
    "apply_edit",
    "check_task",
    "default_cache_dir",
    "drop_bad_distractors",
    "failing_test_ids",
    "materialize",
    "run_files",
    "run_many",
    "task_id_of",
]

OUTPUT_LIMIT = 1 << 20
"""Bytes of a run's output kept; a run that writes more is killed (and so fails)."""

MEMORY_LIMIT = 2 << 30
"""Address-space limit of a test process (a mutant's runaway loop must not take the host)."""

FILE_SIZE_LIMIT = 64 << 20
"""Largest file a test process may write."""


class EditError(AiosError, ValueError):
    """An edit does not apply: its ``old`` text does not occur exactly once in its file."""


class RunResult(NamedTuple):
    """What one test run gave."""

    exit_code: int | None
    """``None`` when the run timed out; 128 + N when signal N ended it."""
    output: str
    """stdout and stderr, interleaved, at most ``OUTPUT_LIMIT`` bytes."""
    timed_out: bool
    seconds: float

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def _run_tests(task_dir: Path, argv: Sequence[str], timeout: float) -> RunResult:
    """Run ``argv`` in ``task_dir`` with a ``timeout`` in seconds (see the module docstring)."""
    config = SandboxConfig(
        # Per process; the wall-clock timeout is the real bound. A multithreaded test process
        # may use several CPUs' worth of time in it: the CPU limit must never end it first.
        cpu_seconds=math.ceil(timeout) * (os.cpu_count() or 1),
        memory_bytes=MEMORY_LIMIT,
        max_output_bytes=OUTPUT_LIMIT,
        wall_timeout_s=timeout,
        max_file_bytes=FILE_SIZE_LIMIT,
    )
    result = LocalExecutor(config).run(list(argv), task_dir)
    return RunResult(
        exit_code=None if result.timed_out else result.exit_code,
        output=result.output,
        timed_out=result.timed_out,
        seconds=result.duration_s,
    )


def _safe_path(rel: str) -> PurePosixPath:
    path = PurePosixPath(rel)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError(f"task file path {rel!r} must be relative and stay inside the task")
    return path


def materialize(files: Mapping[str, str], directory: Path) -> None:
    """Write ``files`` (relative path -> text) under ``directory``, each as its UTF-8 bytes (no
    newline translation). Raises ``ValueError`` for a path that would leave it."""
    for rel, text in files.items():
        target = directory.joinpath(*_safe_path(rel).parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text.encode("utf-8"))


def command_argv(test_command: Sequence[str]) -> list[str]:
    """The test command with ``{python}`` replaced by this interpreter."""
    return [a.replace("{python}", sys.executable) for a in test_command]


def run_files(
    files: Mapping[str, str], test_command: Sequence[str], *, timeout: float, per_test: float = 0.0
) -> RunResult:
    """Materialise ``files`` in a fresh temporary directory and run the test command there
    (each test limited to ``per_test`` seconds when above 0, see :mod:`.pertest`)."""
    with tempfile.TemporaryDirectory(prefix="aios-shell-") as tmp:
        materialize(files, Path(tmp))
        argv = command_argv(timed_command(test_command, per_test))
        return _run_tests(Path(tmp), argv, timeout)


class Job(NamedTuple):
    """One test run to make: these files, this command, this timeout (and per-test timeout)."""

    files: Mapping[str, str]
    test_command: Sequence[str]
    timeout: float
    per_test: float = 0.0
    """The task's ``test_timeout_s`` (0: none)."""


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/aios-rl/shell`` (``~/.cache/aios-rl/shell`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "aios-rl" / "shell"


@dataclass(frozen=True)
class RunCache:
    """Test-run results on disk, keyed by everything that decides them: the interpreter (its
    path and version), the files and the test command. A cached run that timed out is reused
    only for a timeout no longer than it had; one that finished but took longer than the new
    timeout reads as timed out. Also holds small JSON records (:meth:`load`, :meth:`store`).

    Entries are written atomically (temporary file, then rename), so concurrent generators may
    share a directory."""

    directory: Path

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def key(self, *parts: object) -> str:
        """A key for ``parts`` (JSON-able) on this interpreter."""
        payload = json.dumps(
            [sys.executable, sys.version, *parts], sort_keys=True, separators=(",", ":")
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def load(self, key: str) -> object | None:
        path = self._path(key)
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:  # a torn or foreign file: treat as a miss
            return None

    def store(self, key: str, value: object) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8"
        ) as f:
            json.dump(value, f)
        os.replace(f.name, path)

    def _job_key(self, job: Job) -> str:
        if job.per_test > 0:
            return self.key("run", dict(job.files), list(job.test_command), job.per_test)
        return self.key("run", dict(job.files), list(job.test_command))

    def get(self, job: Job) -> RunResult | None:
        record = self.load(self._job_key(job))
        if not isinstance(record, dict):
            return None
        result = RunResult(**record["result"])
        if result.timed_out:
            return result if record["timeout"] >= job.timeout else None
        if result.seconds > job.timeout:
            return RunResult(None, result.output, True, job.timeout)
        return result

    def put(self, job: Job, result: RunResult) -> None:
        self.store(self._job_key(job), {"timeout": job.timeout, "result": result._asdict()})


def run_many(
    jobs: Sequence[Job], *, workers: int = 2, cache: RunCache | None = None
) -> list[RunResult]:
    """Run every job (``workers`` at a time); results in the jobs' order. With a ``cache``,
    jobs it answers are not run, and the others' results are added to it."""
    results: list[RunResult | None] = [cache.get(j) if cache else None for j in jobs]
    todo = [i for i, r in enumerate(results) if r is None]

    def one(i: int) -> RunResult:
        job = jobs[i]
        return run_files(job.files, job.test_command, timeout=job.timeout, per_test=job.per_test)

    if workers <= 1 or len(todo) <= 1:
        fresh = [one(i) for i in todo]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            fresh = list(pool.map(one, todo))
    for i, result in zip(todo, fresh, strict=True):
        results[i] = result
        if cache is not None:
            cache.put(jobs[i], result)
    return [r for r in results if r is not None]


_FAILURE_RE = re.compile(r"^(?:FAIL|ERROR): (\S+) \(([^)\s]+)\)", re.MULTILINE)
_PYTEST_RE = re.compile(r"^(?:FAILED|ERROR) (\S+?::\S+?)(?: - .*)?$", re.MULTILINE)


def failing_test_ids(output: str) -> list[str]:
    """The ids of the tests a run reports as failing or erroring, sorted, each once: ``unittest``'s
    (``module.Class.test``; subtests fold into their test) and pytest's short summary
    (``path::Class::test``, node ids)."""
    ids = set()
    for name, where in _FAILURE_RE.findall(output):
        ids.add(where if where.endswith("." + name) or where == name else f"{where}.{name}")
    ids.update(_PYTEST_RE.findall(output))
    return sorted(ids)


def task_id_of(files: Mapping[str, str], test_command: Sequence[str]) -> str:
    """The content address of a task: the first 16 hex digits of the sha256 of the canonical
    JSON (sorted keys, no spaces, UTF-8) of its files and test command."""
    canonical = json.dumps(
        {"files": dict(files), "test_command": list(test_command)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def apply_edit(files: Mapping[str, str], edit: CandidateEdit) -> dict[str, str]:
    """The files with ``edit`` applied. Raises ``EditError`` unless ``edit.old`` occurs exactly
    once in ``edit.path``."""
    text = files.get(edit.path)
    if text is None:
        raise EditError(f"edit {edit.label!r}: no file {edit.path!r} in the task")
    count = text.count(edit.old)
    if count != 1:
        raise EditError(f"edit {edit.label!r}: its text occurs {count} times in {edit.path}")
    out = dict(files)
    out[edit.path] = text.replace(edit.old, edit.new, 1)
    return out


def check_task(
    task: ShellTask, *, timeout: float = 60.0, workers: int = 2, distractors: bool = True
) -> list[str]:
    """Everything wrong with ``task``, run for real (empty: the task is sound).

    Checks the content address, that the tests fail on the task's files with exactly
    ``failing_tests`` failing, that there is one fix and it makes the tests pass, that the
    ground truth's mutated text occurs once, and (``distractors``) that no other candidate edit
    makes the tests pass. Every run has the task's per-test timeout (``test_timeout_s``)."""
    problems = []
    if task.task_id != task_id_of(task.files, task.test_command):
        problems.append("task_id is not the content address of files + test_command")
    gt = task.ground_truth
    if task.files.get(gt.path, "").count(gt.mutated) != 1:
        problems.append("ground truth's mutated text does not occur exactly once")
    fixes = [e for e in task.candidate_edits if e.is_fix]
    if len(fixes) != 1:
        problems.append(f"{len(fixes)} candidate edits are marked as the fix")
    per_test = task.test_timeout_s
    jobs = [Job(task.files, task.test_command, timeout, per_test)]
    labels = ["as given"]
    for edit in task.candidate_edits:
        if not (edit.is_fix or distractors):
            continue
        try:
            jobs.append(Job(apply_edit(task.files, edit), task.test_command, timeout, per_test))
            labels.append(edit.label)
        except EditError as exc:
            problems.append(str(exc))
    results = run_many(jobs, workers=workers)
    mutant = results[0]
    if mutant.passed or mutant.timed_out:
        problems.append("the tests do not fail on the task as given")
    elif failing_test_ids(mutant.output) != sorted(task.failing_tests):
        problems.append(
            f"failing tests {failing_test_ids(mutant.output)} differ from "
            f"the recorded {sorted(task.failing_tests)}"
        )
    by_label = {e.label: e for e in task.candidate_edits}
    for label, result in zip(labels[1:], results[1:], strict=True):
        if by_label[label].is_fix and not result.passed:
            problems.append(f"the fix {label!r} does not make the tests pass")
        if not by_label[label].is_fix and result.passed:
            problems.append(f"distractor {label!r} makes the tests pass")
        if not by_label[label].is_fix and result.timed_out:
            problems.append(f"distractor {label!r} makes the tests time out")
    return problems


def drop_bad_distractors(
    tasks: Sequence[ShellTask],
    timeouts: Sequence[float],
    *,
    workers: int = 2,
    cache: RunCache | None = None,
) -> list[ShellTask]:
    """The tasks without the distractors whose edit makes the tests pass (a second fix) or
    time out (an episode that picks one would hold a runner for the whole timeout), run for
    real: every task's distractors in one parallel batch, ``timeouts[i]`` for ``tasks[i]``."""
    jobs, owners = [], []
    for i, (task, timeout) in enumerate(zip(tasks, timeouts, strict=True)):
        for edit in task.candidate_edits:
            if not edit.is_fix:
                jobs.append(
                    Job(
                        apply_edit(task.files, edit),
                        task.test_command,
                        timeout,
                        task.test_timeout_s,
                    )
                )
                owners.append((i, edit.label))
    results = run_many(jobs, workers=workers, cache=cache)
    bad = {owner for owner, r in zip(owners, results, strict=True) if r.passed or r.timed_out}
    out = []
    for i, task in enumerate(tasks):
        kept = [e for e in task.candidate_edits if (i, e.label) not in bad]
        if len(kept) < len(task.candidate_edits):
            task = msgspec.structs.replace(task, candidate_edits=kept)
        out.append(task)
    return out
