"""Browser tasks for a split: site flows (:func:`.flows.generate`) and MiniWoB++ tasks, in equal
shares. MiniWoB tasks are the same 16 tasks in both splits with disjoint seeds (train seeds below
``HELDOUT_SEED``, held-out seeds from it); site tasks hold out one template per flow. The ``easy``
split is a curriculum's: the first stages of the site flows that have one, from the train
split's templates (``aios-rl browser benchmark-generate --split easy``, then ``train --split
easy``)."""

from __future__ import annotations

import msgspec

from contracts import BrowserTask

from . import flows
from .miniwob import MINIWOB_TASKS
from .store import browser_task_id

__all__ = ["EASY_SPLIT", "HELDOUT_SEED", "generate", "miniwob_tasks"]

HELDOUT_SEED = 1_000_000
"""MiniWoB seeds from here on belong to the held-out split."""

MINIWOB_MAX_STEPS = 10


def miniwob_tasks(count: int, seed: int, split: str) -> list[BrowserTask]:
    """``count`` MiniWoB++ tasks, the 16 names in turn, seeds by split."""
    base = HELDOUT_SEED if split == "heldout" else 0
    out = []
    for i in range(count):
        name = MINIWOB_TASKS[i % len(MINIWOB_TASKS)]
        t = BrowserTask(
            task_id="",
            kind="miniwob",
            flow=name,
            split=split,
            seed=base + seed * 10_000 + i,
            max_steps=MINIWOB_MAX_STEPS,
        )
        out.append(msgspec.structs.replace(t, task_id=browser_task_id(t)))
    return out


EASY_SPLIT = "easy"
"""The curriculum's split: the first stages of the site flows that have one
(:data:`.flows.EASY_FLOWS`), made from the ``train`` split's templates."""


def generate(count: int, seed: int, split: str) -> list[BrowserTask]:
    """``count`` tasks of ``split``: half site flows, half MiniWoB++ (site tasks first when the
    count is odd), deterministic for (count, seed, split); ``easy`` (:data:`EASY_SPLIT`): site
    flows' first stages only."""
    if split == EASY_SPLIT:
        return [
            _named(msgspec.structs.replace(t, split=EASY_SPLIT))
            for t in flows.generate(count, seed, "train", easy=True)
        ]
    sites = flows.generate((count + 1) // 2, seed, split)
    return [*sites, *miniwob_tasks(count // 2, seed, split)]


def _named(task: BrowserTask) -> BrowserTask:
    return msgspec.structs.replace(task, task_id=browser_task_id(task))
