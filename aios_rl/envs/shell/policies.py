"""Scripted policies for the shell environment: the oracle (knows the fix) and a uniform random
one. Baselines for evaluation and tests of the runner; pure, no NATS.

A policy here is ``policy(observation, candidates, step) -> action``, the shape
:func:`.episode.run_episode` takes, and what a scripted ``policy.act`` responder answers."""

from __future__ import annotations

import random
from collections.abc import Callable

from contracts import ShellTask

from .episode import SUBMIT

__all__ = ["Policy", "oracle_action", "oracle_policy", "random_policy"]

Policy = Callable[[str, list[str], int], str]


def oracle_action(task: ShellTask, candidates: list[str]) -> str:
    """The fix while it is offered, then ``submit`` (the shortest solution: two steps)."""
    fixes = [e.label for e in task.candidate_edits if e.is_fix]
    for label in fixes:
        if label in candidates:
            return label
    return SUBMIT


def oracle_policy(task: ShellTask) -> Policy:
    """:func:`oracle_action`; for an imported task whose known fix no candidate makes, the
    free-text command that applies it first (``importing.fix_command``), then ``submit``."""
    from .importing import fix_command

    command = None if any(e.is_fix for e in task.candidate_edits) else fix_command(task)
    if command is not None:
        return lambda _obs, _candidates, step: command if step == 0 else SUBMIT
    return lambda _obs, candidates, _step: oracle_action(task, candidates)


def random_policy(seed: int) -> Policy:
    """A uniform choice among the candidates, seeded."""
    rng = random.Random(seed)
    return lambda _obs, candidates, _step: rng.choice(candidates)
