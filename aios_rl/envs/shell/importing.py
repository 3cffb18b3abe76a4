"""Users' bugs as shell tasks: one tree with failing tests imported (``aios-rl shell import``), or
bug fixes mined from a git history (``aios-rl shell mine``). No NATS here; every test run goes
through the executor given (the policy sandbox: this is code we did not write).

Verification of a task (:func:`build_task`)
-------------------------------------------
1. The tests run ``runs`` times on the tree (run *i* with ``PYTHONHASHSEED=i``): every run must
   fail, without a timeout, and report the same non-empty set of failing test ids (unittest or
   pytest). Runs that disagree mean flaky tests: the task is rejected. Each test has
   ``test_timeout_s`` seconds (:mod:`.pertest`): a test that loops for ever fails and the run
   goes on, so a bug that hangs makes a task like any other. Only a run the wall-clock limit
   had to end (a hang the per-test timeout cannot stop, or outside any test) cannot be judged
   and rejects the tree; the first such run ends the verification.
2. With a known fix: the fixed tree's tests run ``runs`` times too and must all pass.
3. Fault localisation (:mod:`.localise`): per-test line coverage, Ochiai ranking.
4. Candidate edits (:mod:`.repair`) from the ranked lines, each checked by a test run; the known
   fix is never an input of that step. The task is *solvable by candidates* when one passes.

Every run of steps 1 to 4 has the same per-test timeout, and the task records it
(``ShellTask.test_timeout_s``) for every run after: episodes, checks.

Mining (:func:`mine`)
---------------------
For each non-merge commit (newest first; ``--since``, ``--limit``): the code files it changed
(not test files, :func:`~.repo.is_test_path`) are put back as they were in its parent, its test
files are kept as the commit left them (a fix usually comes with the test that shows the bug).
That tree is the task; the commit's code changes are the known fix. It becomes a task only if
the verification above holds: tests fail before (twice, alike), pass after (twice). A commit with
no code change, or whose tests do not fail before it, or flaky ones, are reported as rejected
with the reason. The split is drawn from the commit's hash (``heldout_share`` of commits go to
``real-heldout``), so the same commit always lands in the same split.
"""

from __future__ import annotations

import difflib
import hashlib
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aios_rl.errors import AiosError
from contracts import GroundTruth, KnownFix, ShellTask

from .assemble import failure_reasons, statement
from .localise import ochiai, spectrum
from .pertest import DEFAULT_TEST_TIMEOUT_S, supports
from .repair import RepairOptions, propose, run_tests_with
from .repo import (
    Commit,
    SnapshotError,
    SnapshotLimits,
    changed_lines,
    commits,
    diff,
    is_test_path,
    lines_of,
    patch_of,
    snapshot_commit,
)
from .sandbox import ExecResult, Executor
from .verify import failing_test_ids, task_id_of

__all__ = [
    "ImportOptions",
    "Imported",
    "MineReport",
    "RejectedTask",
    "build_task",
    "fix_command",
    "mine",
    "normalise_command",
    "split_for",
]

Progress = Callable[[str], None]


class RejectedTask(AiosError, ValueError):
    """The tree does not make a task (the message says why, in one line)."""


@dataclass(frozen=True)
class ImportOptions:
    runs: int = 2
    """Test runs per verification (each with another hash seed)."""
    repair: RepairOptions = field(default_factory=RepairOptions)
    limits: SnapshotLimits = field(default_factory=SnapshotLimits)
    split: str = "real"
    heldout_share: float = 0.2
    """Mining: share of commits (by hash) whose tasks go to ``real-heldout``."""
    test_timeout_s: float = DEFAULT_TEST_TIMEOUT_S
    """Seconds one test may run before it is stopped and counted as failing (0: no per-test
    limit); recorded in the task. Applies to test commands :func:`~.pertest.supports`."""


@dataclass
class Imported:
    """One verified task and what its import measured."""

    task: ShellTask
    solvable: bool
    """A generated candidate makes every test pass."""
    fix_rank: int | None
    """1-based rank, in the localisation, of the best ranked line the known fix touches (``None``:
    no known fix, or localisation never ranked one of its lines)."""
    tried: int
    """Candidate edits run against the tests."""
    seconds: float


@dataclass
class MineReport:
    tasks: list[Imported] = field(default_factory=list)
    rejected: list[tuple[str, str, str]] = field(default_factory=list)
    """(sha, subject, reason) of each commit that did not make a task."""
    commits: int = 0


def normalise_command(text: str) -> list[str]:
    """A test command as a task stores it: ``python``/``python3``/``python3.X`` become
    ``{python}`` (the runner's interpreter), a leading ``pytest`` becomes ``{python} -m pytest``.
    Raises ``ValueError`` for an empty command or unbalanced quotes."""
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"--test-cmd {text!r}: {exc}") from None
    if not argv:
        raise ValueError("--test-cmd is empty")
    head = argv[0]
    if head in ("python", "python3") or (head.startswith("python3.") and head[8:].isdigit()):
        argv[0] = "{python}"
    elif head in ("pytest", "py.test"):
        argv = ["{python}", "-m", "pytest", *argv[1:]]
    return argv


def split_for(sha: str, heldout_share: float) -> str:
    """``real-heldout`` for a ``heldout_share`` of commits (by the hash of ``sha``), else
    ``real``."""
    draw = int(hashlib.sha256(sha.encode()).hexdigest()[:8], 16) / 0x1_0000_0000
    return "real-heldout" if draw < heldout_share else "real"


def _judgeable(result: ExecResult, stuck: str) -> ExecResult:
    """``result``, unless a limit ended the run so it cannot be judged: raises ``RejectedTask``
    then, with ``stuck`` (why no per-test timeout ended it) after a timeout. An output flood is
    judged on what it printed."""
    if result.timed_out or (result.blocked_reason and result.killed_by != "output_limit"):
        why = result.blocked_reason or "timeout"
        raise RejectedTask(
            f"a test run was stopped: {why}" + (f"; {stuck}" if result.timed_out else "")
        )
    return result


def _failing_runs(results: Sequence[ExecResult]) -> list[str]:
    """The failing ids all runs agree on. Raises ``RejectedTask`` otherwise."""
    ids = []
    for r in results:
        if r.exit_code == 0:
            if any(x.exit_code != 0 for x in results):
                raise RejectedTask("flaky: the tests failed in one run and passed in another")
            raise RejectedTask("the tests pass: there is nothing to fix")
        ids.append(failing_test_ids(r.output))
    if any(i != ids[0] for i in ids):
        raise RejectedTask(f"flaky: runs disagree on the failing tests ({ids[0]} vs {ids[-1]})")
    if not ids[0]:
        tail = results[0].output.strip().splitlines()[-1:] or [""]
        raise RejectedTask(
            "the tests fail but report no failing test ids (a collection or import error?): "
            + tail[0][:200]
        )
    return ids[0]


def _first_hunk(before: str, after: str) -> tuple[int, str, str]:
    """(first line of ``before`` the change touches, fixed text, buggy text) of the first
    difference between ``before`` (buggy) and ``after`` (fixed)."""
    old, new = lines_of(before), lines_of(after)
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            return max(1, i1 + 1 if i2 > i1 else i1), "\n".join(new[j1:j2]), "\n".join(old[i1:i2])
    return 0, "", ""


def build_task(
    files: Mapping[str, str],
    test_command: Sequence[str],
    executor: Executor,
    *,
    name: str,
    source: str,
    fix: Mapping[str, str] | None = None,
    commit: str = "",
    message: str = "",
    split: str | None = None,
    options: ImportOptions | None = None,
    progress: Progress | None = None,
    work_root: Path | None = None,
) -> Imported:
    """A verified task from ``files`` (see the module docstring). ``fix``: path -> fixed text of
    the code files a known fix changes (``""`` deletes). Raises ``RejectedTask``."""
    opts = options or ImportOptions()
    say = progress or (lambda _line: None)
    started = time.monotonic()
    files = dict(sorted(files.items()))
    test_files = sorted(p for p in files if is_test_path(p))
    code_paths = [p for p in files if p.endswith(".py") and not is_test_path(p)]
    if not code_paths:
        raise RejectedTask("no Python code outside the tests")
    if not test_files:
        raise RejectedTask("no test files (test_*.py, *_test.py or under tests/)")
    if fix is not None and any(is_test_path(p) for p in fix):
        raise RejectedTask("the fix changes test files: a fix may change code only")
    per_test = opts.test_timeout_s if supports(test_command) else 0.0
    if per_test:
        stuck = (
            f"no test's {per_test:g}-s per-test timeout stopped it (a hang outside any test, or "
            "in code that blocks signals), or the tests are slow: raise --timeout"
        )
    elif opts.test_timeout_s:
        stuck = "this test command cannot have a per-test timeout (not {python} -m or a script)"
    else:
        stuck = "no per-test timeout was set"
    say(
        f"{name}: running the tests {opts.runs}x"
        + (f" ({per_test:g} s per test)" if per_test else " (no per-test timeout)")
    )
    runs = [
        _judgeable(
            run_tests_with(
                files,
                test_command,
                executor,
                hash_seed=i,
                work_root=work_root,
                per_test_s=per_test,
            ),
            stuck,
        )
        for i in range(opts.runs)
    ]
    failing = _failing_runs(runs)
    known: KnownFix | None = None
    fixed: dict[str, str] = {}
    if fix is not None:
        fixed = {p: t for p, t in {**files, **fix}.items() if not (p in fix and t == "")}
        changed = diff(files, fixed)
        if not changed:
            raise RejectedTask("the fix changes nothing")
        say(f"{name}: checking the known fix")
        after = [
            run_tests_with(
                fixed,
                test_command,
                executor,
                hash_seed=i,
                work_root=work_root,
                per_test_s=per_test,
            )
            for i in range(opts.runs)
        ]
        if not all(r.exit_code == 0 and not r.timed_out for r in after):
            flaky = any(r.exit_code == 0 for r in after)
            slow = any("per-test timeout:" in r.output for r in after)
            raise RejectedTask(
                "flaky: the tests passed in one run of the fixed tree and failed in another"
                if flaky
                else "the known fix does not make every test pass"
                + (f" (a test ran past the {per_test:g}-s per-test timeout)" if slow else "")
            )
        known = KnownFix(
            patch=patch_of(files, fixed, changed),
            files={p: fixed.get(p, "") for p in changed},
            lines=[
                f"{p}:{n}"
                for p in changed
                if p in files
                for n in changed_lines(files[p], fixed.get(p, ""))
            ],
            commit=commit,
            message=message,
        )
    say(f"{name}: localising ({len(failing)} failing tests)")
    spec = spectrum(files, test_command, code_paths, executor, work_root, per_test_s=per_test)
    scored = ochiai(spec) if spec is not None else []
    ranked = [(p, n) for p, n, score in scored if score > 0]
    say(f"{name}: trying repairs at {min(len(ranked), opts.repair.max_lines)} lines")
    slowest = max(r.duration_s for r in runs)
    proposal = propose(
        files,
        test_command,
        failing,
        ranked,
        executor,
        options=opts.repair,
        work_root=work_root,
        timeout_s=max(5.0, 5 * slowest),
        per_test_s=per_test,
    )
    suspicious = [f"{p}:{n}" for p, n in ranked[:50]]
    fix_rank = None
    if known is not None:
        ranks = [suspicious.index(x) + 1 for x in known.lines if x in suspicious]
        fix_rank = min(ranks) if ranks else None
    if known is not None:
        path = next(p for p in diff(files, fixed))
        line, original, mutated = _first_hunk(files.get(path, ""), fixed.get(path, ""))
        truth = GroundTruth(
            path=path,
            line=line,
            operator="known_fix",
            original=original,
            mutated=mutated,
            description=message or "the known fix (see known_fix)",
        )
    else:
        top = ranked[0] if ranked else ("", 0)
        truth = GroundTruth(
            path=top[0],
            line=top[1],
            operator="unknown",
            original="",
            mutated="",
            description="imported without a known fix",
        )
    pointed = sorted({p for p, _ in ranked[:10]}) or code_paths[:5]
    text = statement(
        intro=(
            f"This directory is a snapshot of {name}, a real code base whose tests fail. "
            f"The failing tests run code in {', '.join(pointed)}."
        ),
        code_paths=pointed,
        test_paths=test_files[:8] + (["..."] if len(test_files) > 8 else []),
        test_command=test_command,
        failing=failing,
        reasons=failure_reasons(runs[0].output),
    )
    task = ShellTask(
        task_id=task_id_of(files, test_command),
        phase=2,
        split=split or opts.split,  # type: ignore[arg-type]
        family=name,
        statement=text,
        files=files,
        test_command=list(test_command),
        test_files=test_files,
        failing_tests=failing,
        candidate_edits=proposal.edits,
        ground_truth=truth,
        source=source,
        known_fix=known,
        suspicious=suspicious,
        test_timeout_s=per_test,
    )
    return Imported(
        task=task,
        solvable=bool(proposal.solving),
        fix_rank=fix_rank,
        tried=proposal.tried,
        seconds=time.monotonic() - started,
    )


def mine(
    repo: Path,
    test_command: Sequence[str],
    executor: Executor,
    *,
    rev: str = "HEAD",
    since: str = "",
    limit: int = 0,
    options: ImportOptions | None = None,
    progress: Progress | None = None,
    work_root: Path | None = None,
) -> MineReport:
    """Tasks from the bug fixes in ``repo``'s history (see the module docstring)."""
    opts = options or ImportOptions()
    say = progress or (lambda _line: None)
    report = MineReport()
    history: list[Commit] = commits(repo, rev=rev, since=since, limit=limit)
    report.commits = len(history)
    name = Path(repo).resolve().name
    for i, c in enumerate(history, 1):
        short = c.sha[:12]
        try:
            after = snapshot_commit(repo, c.sha, opts.limits).files
            before = snapshot_commit(repo, c.parent, opts.limits).files
        except SnapshotError as exc:
            report.rejected.append((c.sha, c.subject, str(exc)))
            continue
        code = [p for p in diff(before, after) if not is_test_path(p)]
        if not any(p.endswith(".py") for p in code):
            report.rejected.append((c.sha, c.subject, "no Python code change"))
            say(f"[{i}/{len(history)}] {short} {c.subject[:50]}: no Python code change")
            continue
        pre = {p: t for p, t in after.items() if p not in code}
        pre.update({p: before[p] for p in code if p in before})
        try:
            got = build_task(
                pre,
                test_command,
                executor,
                name=name,
                source=f"mined:{name}@{short}",
                fix={p: after.get(p, "") for p in code},
                commit=c.sha,
                message=c.subject,
                split=split_for(c.sha, opts.heldout_share),
                options=opts,
                work_root=work_root,
            )
        except RejectedTask as exc:
            report.rejected.append((c.sha, c.subject, str(exc)))
            say(f"[{i}/{len(history)}] {short} {c.subject[:50]}: rejected: {exc}")
            continue
        report.tasks.append(got)
        say(
            f"[{i}/{len(history)}] {short} {c.subject[:50]}: task {got.task.task_id} "
            f"({got.task.split}; {'solvable' if got.solvable else 'not solvable'} by candidates)"
        )
    return report


def fix_command(task: ShellTask, limit: int = 6000) -> str | None:
    """A shell command that applies the task's known fix in its directory (what the oracle
    teacher hints when no candidate edit fixes the task), or ``None`` when there is no known
    fix or the command would exceed ``limit`` characters. It writes the fixed files' bytes
    exactly (CRLF lines, no newline at the end)."""
    if task.known_fix is None:
        return None
    marker = "AIOS_FIX_" + hashlib.sha256(task.known_fix.patch.encode()).hexdigest()[:8]
    writes = []
    for path, text in sorted(task.known_fix.files.items()):
        quoted = shlex.quote(path)
        if text == "":
            writes.append(f"rm -f {quoted}")
        elif text.endswith("\n"):
            writes.append(f"cat > {quoted} <<'{marker}'\n{text}{marker}")
        else:  # a here-document ends in a newline the file does not have: cut it off
            writes.append(f"cat > {quoted} <<'{marker}'\n{text}\n{marker}\ntruncate -s -1 {quoted}")
    command = "\n".join(writes)
    return command if len(command) <= limit else None
