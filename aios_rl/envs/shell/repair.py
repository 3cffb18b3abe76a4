"""Candidate edits for a task nobody injected: the mutation operators applied, as repairs, at the
lines fault localisation ranks most suspicious, each checked by running the tests. Pure except
that the checks run through the executor given (the sandbox, for users' code).

The known fix is not an input here: :func:`propose` sees the buggy files, the test command and
the ranked lines, nothing else, so a candidate equals the person's fix only when an operator
produced it on its own (``tests/test_realrepo.py`` checks that a task's candidates are the same
with and without a known fix).

Order of work: the ``max_lines`` most suspicious lines (Ochiai score above 0), every operator's
site on each, in rank order; the first ``max_tries`` distinct edits are run against the tests.
A candidate that makes every test pass is a *solving* candidate (``is_fix``: hidden, as for
generated tasks). Offered: every solving candidate, then the best ranked others up to ``offer``
edits in all, shuffled with a generator seeded by the task's files so their order tells nothing.
Edits that time out the tests are never offered; each check's time limit is five times the
slowest verification run (at least 5 s), so an edit that makes the tests loop costs seconds, not
the sandbox's whole limit. A check that times out runs once more with a limit
``RETRY_FACTOR`` times as long before its edit is dropped: a machine that got busy after the
verification runs (a parallel test suite, other imports) must not change which edits a task
offers. With a per-test timeout (:mod:`.pertest`) every check has it too: an
edit that makes a test loop is then an edit whose tests fail, judged like any other.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from contracts import CandidateEdit

from . import mutations
from .assemble import _label
from .mutations import MutationError
from .pertest import timed_command
from .sandbox import ExecResult, Executor
from .verify import EditError, apply_edit, command_argv, failing_test_ids, materialize

__all__ = ["RETRY_FACTOR", "Proposal", "RepairOptions", "edits_at", "propose", "run_tests_with"]


RETRY_FACTOR = 4.0
"""How much longer the second run of a check that timed out may take than the first."""


@dataclass(frozen=True)
class RepairOptions:
    max_lines: int = 12
    """Most suspicious lines whose operator sites become edits."""
    max_tries: int = 40
    """Distinct edits run against the tests (each one test run)."""
    offer: int = 6
    """Edits offered (more when more solve)."""
    workers: int = 2
    """Test runs at once."""


@dataclass
class Proposal:
    edits: list[CandidateEdit]
    """Offered, shuffled (``is_fix`` on the solving ones)."""
    solving: list[str] = field(default_factory=list)
    """Labels of the edits that make every test pass, best ranked first."""
    tried: int = 0
    partial: list[str] = field(default_factory=list)
    """Labels of edits that fix some failing tests and break none."""


def edits_at(
    files: Mapping[str, str], ranked: Sequence[tuple[str, int]], *, max_lines: int
) -> list[tuple[CandidateEdit, int]]:
    """Every distinct operator edit on the first ``max_lines`` of ``ranked`` (``(path, line)``,
    best first), with the rank (0-based) of its line, in rank order."""
    sites_of: dict[str, list[mutations.Site]] = {}
    out: list[tuple[CandidateEdit, int]] = []
    seen: set[tuple[str, str]] = set()
    for rank, (path, line) in enumerate(ranked[:max_lines]):
        source = files.get(path)
        if source is None or not path.endswith(".py"):
            continue
        if path not in sites_of:
            try:
                sites_of[path] = mutations.sites(source)
            except (SyntaxError, ValueError):
                sites_of[path] = []
        for site in sites_of[path]:
            if site.line != line:
                continue
            try:
                mutant = mutations.apply(source, site, path)
            except MutationError:
                continue
            gt = mutant.ground_truth
            if (path, mutant.source) in seen:
                continue
            seen.add((path, mutant.source))
            edit = CandidateEdit(
                label=_label(path, gt.line, gt.original, gt.mutated),
                path=path,
                old=gt.original,
                new=gt.mutated,
            )
            try:
                apply_edit(files, edit)
            except EditError:
                continue  # its text is not unique in the file: an episode could not apply it
            out.append((edit, rank))
    return out


def run_tests_with(
    files: Mapping[str, str],
    test_command: Sequence[str],
    executor: Executor,
    *,
    hash_seed: int = 0,
    work_root: Path | None = None,
    timeout_s: float | None = None,
    per_test_s: float = 0.0,
) -> ExecResult:
    """Run the test command on ``files`` in a fresh directory through ``executor``, with
    ``PYTHONHASHSEED`` set to ``hash_seed`` (runs with other seeds catch tests that depend on
    hash order); ``timeout_s``: a limit tighter than the executor's (coreutils ``timeout``; the
    run then reads as timed out); ``per_test_s``: each test's limit (:mod:`.pertest`, 0: none)."""
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="aios-import-", dir=work_root))
    try:
        materialize(files, tmp)
        command = command_argv(timed_command(test_command, per_test_s))
        argv = ["/usr/bin/env", f"PYTHONHASHSEED={hash_seed}", *command]
        if timeout_s is not None:
            argv = ["/usr/bin/timeout", "-k", "1", f"{timeout_s:.1f}", *argv]
        result = executor.run(argv, tmp)
        if timeout_s is not None and result.exit_code in (124, 137) and not result.timed_out:
            return dataclasses.replace(result, timed_out=True, killed_by="wall_timeout")
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def propose(
    files: Mapping[str, str],
    test_command: Sequence[str],
    failing: Sequence[str],
    ranked: Sequence[tuple[str, int]],
    executor: Executor,
    *,
    options: RepairOptions | None = None,
    work_root: Path | None = None,
    timeout_s: float | None = None,
    per_test_s: float = 0.0,
) -> Proposal:
    """The candidate edits of a task (see the module docstring); ``timeout_s`` bounds each
    check (an edit can make the tests loop: it is then not offered, after a second run timed
    out too), ``per_test_s`` each test in it."""
    opts = options or RepairOptions()
    found = edits_at(files, ranked, max_lines=opts.max_lines)[: opts.max_tries]
    before = set(failing)

    def check(edit: CandidateEdit) -> ExecResult:
        def run(limit: float | None) -> ExecResult:
            return run_tests_with(
                apply_edit(files, edit),
                test_command,
                executor,
                work_root=work_root,
                timeout_s=limit,
                per_test_s=per_test_s,
            )

        result = run(timeout_s)
        if not result.timed_out:
            return result
        # A busy machine can push a run that does not loop past its limit: once more, with a
        # longer limit, before it is dropped, so the candidates of a task do not depend on the
        # machine's load.
        return run(None if timeout_s is None else RETRY_FACTOR * timeout_s)

    if opts.workers > 1 and len(found) > 1:
        with ThreadPoolExecutor(max_workers=opts.workers) as pool:
            results = list(pool.map(check, [e for e, _ in found]))
    else:
        results = [check(e) for e, _ in found]
    solving: list[CandidateEdit] = []
    partial: list[CandidateEdit] = []
    others: list[CandidateEdit] = []
    for (edit, _rank), result in zip(found, results, strict=True):
        if result.timed_out or (result.blocked_reason and result.killed_by != "output_limit"):
            continue
        if result.exit_code == 0:
            solving.append(
                CandidateEdit(
                    label=edit.label, path=edit.path, old=edit.old, new=edit.new, is_fix=True
                )
            )
            continue
        after = set(failing_test_ids(result.output))
        if after and after < before:
            partial.append(edit)
        others.append(edit)
    offered = [*solving, *others[: max(0, opts.offer - len(solving))]]
    digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()
    random.Random(digest).shuffle(offered)
    return Proposal(
        edits=offered,
        solving=[e.label for e in solving],
        tried=len(found),
        partial=[e.label for e in partial],
    )
