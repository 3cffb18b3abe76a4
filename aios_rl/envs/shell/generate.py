"""Phase 1 task generation: mutants of our own small modules, each verified by running its tests.

**Splits.** A candidate task is a (family, module variant, mutation site). Its *triple* is
(family, operator, variant), and the triple alone decides its split: ``heldout`` when the first
8 bytes of ``sha256("<family>/<operator>/<variant>")``, as an integer, are below
``HELDOUT_PERCENT`` modulo 100, ``train`` otherwise (:func:`split_of`). Variants do not depend on
the generation seed (see :mod:`.families`), so a held-out task never shares its triple with a
train task, whatever seeds the two splits were generated with.

**Order and determinism.** :func:`candidates` groups a split's candidates by (family, operator),
shuffles each group and the order of the groups with ``Random("<seed>/<split>")``, and deals one
from each group per round, so the first tasks spread over every family and operator.
:func:`generate` verifies candidates in that order (several at a time, results taken in order)
and keeps the first ``count`` that pass. The same seed gives the same tasks, and ``generate(n)``
is a prefix of ``generate(m)`` for ``n < m``.

**Verification of each task.** The variant's tests pass on the original module (checked once per
variant), fail on the mutant without timing out (the failing test ids are recorded), and, with
``check_distractors``, still fail after each distractor edit, without timing out (a distractor
that makes them pass or time out is dropped). The fix gives back the original file byte for
byte, so it passes by construction.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from contracts import ShellTask

from . import mutations
from ._common import GenerationError, Progress, deal
from .assemble import (
    assemble,
    candidate_edits,
    failure_reasons,
    pointed_functions,
    statement,
)
from .families import FAMILIES, VARIANTS, Rendered, render
from .mutations import Mutant, MutationError, Site
from .realcode import generate_real
from .verify import (
    Job,
    RunCache,
    RunResult,
    drop_bad_distractors,
    failing_test_ids,
    run_many,
)

__all__ = [
    "HELDOUT_PERCENT",
    "TEST_COMMAND",
    "Candidate",
    "GenerationError",
    "Progress",
    "candidates",
    "deal",
    "generate",
    "original_runs",
    "split_of",
]

Split = Literal["train", "heldout", "real"]

TEST_COMMAND = ["{python}", "-B", "-S", "-m", "unittest", "-q"]
"""``-B``: no bytecode cache, so an edit the same size as the code it replaces, made within the
second of a run, is never hidden by a stale ``.pyc``. ``-S``: stdlib only (tests need nothing
else), and interpreter start-up drops from ~0.2 s to ~0.04 s."""

HELDOUT_PERCENT = 30
"""Share of (family, operator, variant) triples held out, in percent."""

MIN_TIMEOUT_S = 2.0
"""Floor of a mutant run's timeout; otherwise 10 x the original's run time (mutants that loop
forever cost this much each)."""

MAX_TIMEOUT_S = 30.0


def split_of(family: str, operator: str, variant: int) -> Literal["train", "heldout"]:
    """The split of a (family, operator, variant) triple (see the module docstring)."""
    digest = hashlib.sha256(f"{family}/{operator}/{variant}".encode()).digest()
    return "heldout" if int.from_bytes(digest[:8], "big") % 100 < HELDOUT_PERCENT else "train"


@dataclass(frozen=True)
class Candidate:
    """A site in one module variant, not yet verified."""

    rendered: Rendered
    site: Site

    @property
    def triple(self) -> tuple[str, str, int]:
        return (self.rendered.family, self.site.operator, self.rendered.variant)


@functools.cache
def _variant_sites(family: str, variant: int) -> tuple[Rendered, list[Site]]:
    rendered = render(FAMILIES[family], variant)
    return rendered, mutations.sites(rendered.files[rendered.module_path])


def candidates(split: Literal["train", "heldout"], seed: int) -> list[Candidate]:
    """Every candidate of ``split``, in generation order (see the module docstring)."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split {split!r}: phase 1 splits are 'train' and 'heldout'")
    groups: dict[tuple[str, str], list[Candidate]] = {}
    for family in FAMILIES:
        for variant in range(VARIANTS):
            rendered, found = _variant_sites(family, variant)
            for site in found:
                if split_of(family, site.operator, variant) == split:
                    groups.setdefault((family, site.operator), []).append(Candidate(rendered, site))
    rng = random.Random(f"{seed}/{split}")
    keys = sorted(groups)
    for key in keys:
        rng.shuffle(groups[key])
    rng.shuffle(keys)
    return list(deal([groups[k] for k in keys]))


@dataclass
class _Original:
    result: RunResult

    @property
    def timeout(self) -> float:
        return min(MAX_TIMEOUT_S, max(MIN_TIMEOUT_S, 10 * self.result.seconds))


_ORIGINALS: dict[tuple[str, int], _Original] = {}
"""(family, variant) -> its original's passing run, shared by every generation in this process
(variants never change)."""


def original_runs(
    variants: Sequence[tuple[str, int]], workers: int = 2, cache: RunCache | None = None
) -> dict[tuple[str, int], RunResult]:
    """The passing test run of each (family, variant)'s original module, run once per process
    (variants never change). Raises ``GenerationError`` when an original fails its tests."""
    todo = {key: render(FAMILIES[key[0]], key[1]) for key in variants if key not in _ORIGINALS}
    results = run_many(
        [Job(r.files, TEST_COMMAND, MAX_TIMEOUT_S) for r in todo.values()],
        workers=workers,
        cache=cache,
    )
    for (key, rendered), result in zip(todo.items(), results, strict=True):
        if not result.passed:
            raise GenerationError(
                f"{rendered.module_path} (family {key[0]}, variant {key[1]}) fails its own "
                f"tests:\n{result.output[-2000:]}"
            )
        _ORIGINALS[key] = _Original(result)
    return {key: _ORIGINALS[key].result for key in variants}


class _Verifier:
    """Runs a batch of candidates through mutation, tests and distractor checks."""

    def __init__(self, *, workers: int, cache: RunCache | None) -> None:
        self.workers = workers
        self.cache = cache
        self.originals = _ORIGINALS
        self.timeouts: dict[str, float] = {}
        """task id -> the timeout its test runs get."""
        self.rejected: dict[str, int] = {}

    def _reject(self, why: str) -> None:
        self.rejected[why] = self.rejected.get(why, 0) + 1

    def _ensure_originals(self, batch: Sequence[Candidate]) -> None:
        original_runs(
            [(c.rendered.family, c.rendered.variant) for c in batch], self.workers, self.cache
        )

    def batch(self, batch: Sequence[Candidate], split: Split, seed: int) -> list[ShellTask]:
        """The candidates that verify, as tasks (distractors not yet checked), in order."""
        self._ensure_originals(batch)
        mutants: list[tuple[Candidate, Mutant] | None] = []
        for c in batch:
            try:
                mutant = mutations.apply(
                    c.rendered.files[c.rendered.module_path], c.site, c.rendered.module_path
                )
            except MutationError:
                self._reject("invalid mutant")
                mutants.append(None)
                continue
            mutants.append((c, mutant))
        live = [m for m in mutants if m is not None]
        results = run_many(
            [
                Job(
                    {**c.rendered.files, c.rendered.module_path: m.source},
                    TEST_COMMAND,
                    self.originals[(c.rendered.family, c.rendered.variant)].timeout,
                )
                for c, m in live
            ],
            workers=self.workers,
            cache=self.cache,
        )
        drafts = [
            self._draft(c, mutant, result, split, seed)
            for (c, mutant), result in zip(live, results, strict=True)
        ]
        return [d for d in drafts if d is not None]

    def _draft(
        self, c: Candidate, mutant: Mutant, result: RunResult, split: Split, seed: int
    ) -> ShellTask | None:
        if result.timed_out:
            self._reject("timeout")
            return None
        if result.passed:
            self._reject("survived")
            return None
        failing = failing_test_ids(result.output)
        if not failing:
            self._reject("no failing test ids")
            return None
        r = c.rendered
        files = {**r.files, r.module_path: mutant.source}
        family = FAMILIES[r.family]
        test_module = r.test_path.removesuffix(".py")
        rng = random.Random(f"{seed}/{split}/{r.family}/{r.variant}/{c.site}")
        edits = candidate_edits(
            path=r.module_path,
            original=r.files[r.module_path],
            mutant=mutant,
            pointed=pointed_functions({test_module: r.files[r.test_path]}, failing),
            rng=rng,
        )
        text = statement(
            intro=f"{r.module_path} implements {family.summary}; {r.test_path} tests it.",
            code_paths=[r.module_path],
            test_paths=[r.test_path],
            test_command=TEST_COMMAND,
            failing=failing,
            reasons=failure_reasons(result.output),
        )
        task = assemble(
            family=r.family,
            phase=1,
            split=split,
            files=files,
            test_command=TEST_COMMAND,
            test_files=[r.test_path],
            failing=failing,
            statement_text=text,
            edits=edits,
            mutant=mutant,
            source="generated",
        )
        self.timeouts[task.task_id] = self.originals[(r.family, r.variant)].timeout
        return task


def generate(
    count: int,
    seed: int = 0,
    split: Split = "train",
    *,
    workers: int = 2,
    check_distractors: bool = True,
    progress: Progress | None = None,
    cache: RunCache | None = None,
) -> list[ShellTask]:
    """``count`` verified tasks of ``split`` for ``seed`` (see the module docstring).

    ``split="real"`` generates phase 2 tasks (:func:`.realcode.generate_real`). ``cache``
    answers test runs made before (same interpreter, files and command). Raises
    ``GenerationError`` when the split has fewer than ``count`` candidates that verify, or an
    original module fails its own tests."""
    if split == "real":
        return generate_real(
            count,
            seed,
            workers=workers,
            check_distractors=check_distractors,
            progress=progress,
            cache=cache,
        )
    if count < 0:
        raise ValueError(f"count must not be negative, got {count}")
    pool = candidates(split, seed)
    verifier = _Verifier(workers=workers, cache=cache)
    tasks: list[ShellTask] = []
    batch_size = max(8, 8 * workers)
    at = 0
    while len(tasks) < count and at < len(pool):
        # Ask for a little more than is missing: a share of the mutants survive or time out.
        want = min(batch_size, 2 + int((count - len(tasks)) * 1.2))
        batch = pool[at : at + want]
        at += len(batch)
        drafts = verifier.batch(batch, split, seed)[: count - len(tasks)]
        if check_distractors:
            timeouts = [verifier.timeouts[t.task_id] for t in drafts]
            drafts = drop_bad_distractors(drafts, timeouts, workers=workers, cache=cache)
        tasks.extend(drafts)
        if progress is not None:
            progress(
                f"{split}: {len(tasks)}/{count} tasks verified, {at} candidates tried "
                f"(rejected: {verifier.rejected or 'none'})"
            )
    if len(tasks) < count:
        raise GenerationError(
            f"only {len(tasks)} of {count} {split} tasks verified from {len(pool)} candidates"
        )
    return tasks
