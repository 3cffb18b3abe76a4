"""Replay routing, sampling and retention, pure: no NATS here.

**Lane rule** (:func:`lane_for`). Only training rollouts (role ``rollout``) enter a lane;
reference and eval runs are skipped. A rollout the teacher marked as a borderline case
(``teacher_signal.boundary``) goes to ``diagnostic_only`` whatever the comparison says. Otherwise
the comparison verdict decides: ``better`` → ``positive``, ``same`` → ``neutral``, ``worse`` →
``negative``. A ``comparison_failed`` verdict, or no comparison at all, goes to ``diagnostic_only``:
a failed comparison says nothing about the episode's quality, so it is kept for analysis and never
trained on.

**Sampling plan** (:func:`plan_sample`). Only the trainable lanes (``positive``, ``neutral``,
``negative``) are ever served; ``diagnostic_only`` never is, whatever the mix says. The candidates
of a lane are its entries in the requested environments (all when none are named) whose acting
checkpoint is at least ``min_checkpoint_seq`` deep (an unknown checkpoint counts as depth 0). The
``size`` is split across the lanes with candidates in proportion to their mix weights
(renormalised over those lanes), rounding by largest remainder (ties: lane order); a lane with
fewer candidates than its share gives what it cannot fill to the others, again by weight. So the
batch holds ``min(size, candidates of the weighted lanes)`` episodes, never one twice. Within a
lane the draw is seeded by ``(seed, lane)`` over candidates in stream order, so the same seed and
stream content give the same batch. ``positive`` and ``negative`` draw uniformly without
replacement; ``neutral`` draws for diversity: tasks in a seeded order, one episode per task per
round, so no task repeats before every task has given one.

**Retention** (:func:`retention_excess`, :func:`purge_points`). A lane over its limit loses its
oldest messages (lowest stream sequences, all environments together) until it is back at the
limit.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from contracts import LANES, Lane, ReplaySampleRequest
from contracts.replay import lane_for

__all__ = [
    "TRAINABLE_LANES",
    "IndexEntry",
    "ReplayIndex",
    "lane_for",
    "plan_sample",
    "purge_points",
    "retention_excess",
    "split_quota",
    "validate_request",
]

TRAINABLE_LANES: tuple[Lane, ...] = ("positive", "neutral", "negative")
"""The lanes a sample may draw from, in plan order; ``diagnostic_only`` is never served."""

# -- the index ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One episode held in the ``REPLAY`` stream."""

    seq: int
    """Its stream sequence (fetch it with a direct get)."""
    episode_id: str
    lane: Lane
    environment: str
    task_id: str
    checkpoint_id: str = ""


class ReplayIndex:
    """(lane, environment) -> entries in stream order, and episode id -> entry.

    Each episode id is held at most once: :meth:`add` refuses a second entry for it."""

    def __init__(self) -> None:
        self._lists: dict[tuple[str, str], list[IndexEntry]] = defaultdict(list)
        self._by_id: dict[str, IndexEntry] = {}
        self._by_seq: dict[int, IndexEntry] = {}
        self._checkpoints: Counter[str] = Counter()
        self._lane_sizes: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, episode_id: object) -> bool:
        return episode_id in self._by_id

    def add(self, entry: IndexEntry) -> bool:
        """Hold ``entry``; ``False`` (and no change) when its episode or its seq is already held."""
        if entry.episode_id in self._by_id or entry.seq in self._by_seq:
            return False
        entries = self._lists[(entry.lane, entry.environment)]
        if not entries or entries[-1].seq < entry.seq:
            entries.append(entry)
        else:
            entries.insert(bisect.bisect(entries, entry.seq, key=lambda e: e.seq), entry)
        self._by_id[entry.episode_id] = entry
        self._by_seq[entry.seq] = entry
        self._checkpoints[entry.checkpoint_id] += 1
        self._lane_sizes[entry.lane] += 1
        return True

    def remove(self, seq: int) -> IndexEntry | None:
        """Forget the entry at stream sequence ``seq``; the entry, or ``None`` if none is held."""
        entry = self._by_seq.pop(seq, None)
        if entry is None:
            return None
        entries = self._lists[(entry.lane, entry.environment)]
        del entries[bisect.bisect_left(entries, seq, key=lambda e: e.seq)]
        del self._by_id[entry.episode_id]
        self._checkpoints[entry.checkpoint_id] -= 1
        if not self._checkpoints[entry.checkpoint_id]:
            del self._checkpoints[entry.checkpoint_id]
        self._lane_sizes[entry.lane] -= 1
        return entry

    def get(self, episode_id: str) -> IndexEntry | None:
        return self._by_id.get(episode_id)

    def counts(self) -> dict[str, int]:
        """Lane -> entries held, for every lane (zeros included)."""
        return {lane: self._lane_sizes[lane] for lane in LANES}

    def checkpoint_ids(self) -> list[str]:
        """Distinct acting checkpoints of the entries held, sorted."""
        return sorted(self._checkpoints)

    def entries(self, lane: str, environments: Iterable[str] | None = None) -> list[IndexEntry]:
        """The entries of ``lane`` in the given environments (``None``: all), in stream order."""
        wanted = None if environments is None else set(environments)
        lists = [
            entries
            for (ln, env), entries in sorted(self._lists.items())
            if ln == lane and (wanted is None or env in wanted)
        ]
        return list(heapq.merge(*lists, key=lambda e: e.seq))


# -- sampling -------------------------------------------------------------------------------------


def validate_request(req: ReplaySampleRequest, *, max_size: int) -> None:
    """Raise ``ValueError`` for a request that can never be served as asked."""
    if req.size < 0:
        raise ValueError(f"size must be >= 0, got {req.size}.")
    if req.size > max_size:
        raise ValueError(
            f"size {req.size} is above the largest batch this service serves ({max_size}); "
            "ask for several smaller batches."
        )
    unknown = sorted(set(req.lane_mix) - set(LANES))
    if unknown:
        raise ValueError(f"lane_mix names unknown lanes {unknown}; lanes are {list(LANES)}.")
    bad = {k: w for k, w in req.lane_mix.items() if not (math.isfinite(w) and w >= 0)}
    if bad:
        raise ValueError(f"lane_mix weights must be finite and >= 0, got {bad}.")


def split_quota(
    size: int, weights: Mapping[str, float], available: Mapping[str, int]
) -> dict[str, int]:
    """How many to take from each lane of ``TRAINABLE_LANES``: ``size`` split by ``weights`` over
    the lanes with a positive weight and candidates, each capped at its candidates, what a lane
    cannot fill going to the others by weight; largest remainder rounding, ties by lane order."""
    quota = dict.fromkeys(TRAINABLE_LANES, 0)
    open_lanes = [
        ln for ln in TRAINABLE_LANES if weights.get(ln, 0.0) > 0 and available.get(ln, 0) > 0
    ]
    remaining = min(size, sum(available.get(ln, 0) for ln in open_lanes))
    while remaining > 0 and open_lanes:
        total = sum(weights[ln] for ln in open_lanes)
        shares = {ln: remaining * weights[ln] / total for ln in open_lanes}
        take = {ln: math.floor(shares[ln]) for ln in open_lanes}
        leftover = remaining - sum(take.values())
        by_remainder = sorted(
            open_lanes, key=lambda ln: (-(shares[ln] - take[ln]), TRAINABLE_LANES.index(ln))
        )
        for ln in by_remainder[:leftover]:
            take[ln] += 1
        for ln in open_lanes:
            got = min(take[ln], available[ln] - quota[ln])
            quota[ln] += got
            remaining -= got
        open_lanes = [ln for ln in open_lanes if quota[ln] < available[ln]]
    return quota


def _diverse(entries: Sequence[IndexEntry], k: int, rng: random.Random) -> list[IndexEntry]:
    """``k`` entries, round-robin over tasks (seeded task order, seeded order within a task)."""
    by_task: dict[str, list[IndexEntry]] = defaultdict(list)
    for e in entries:
        by_task[e.task_id].append(e)
    tasks = sorted(by_task)
    rng.shuffle(tasks)
    for t in tasks:
        rng.shuffle(by_task[t])
    out: list[IndexEntry] = []
    depth = 0
    while len(out) < k:
        for t in tasks:
            if depth < len(by_task[t]):
                out.append(by_task[t][depth])
                if len(out) == k:
                    break
        depth += 1
    return out


def plan_sample(
    index: ReplayIndex, req: ReplaySampleRequest, checkpoint_seqs: Mapping[str, int]
) -> list[IndexEntry]:
    """The entries to serve for ``req`` (see the module docstring), lane by lane in
    ``TRAINABLE_LANES`` order. ``checkpoint_seqs`` maps a checkpoint id to its lineage depth; an
    id it lacks counts as 0."""
    envs = req.environments or None
    candidates: dict[str, list[IndexEntry]] = {}
    for lane in TRAINABLE_LANES:
        entries = index.entries(lane, envs)
        if req.min_checkpoint_seq > 0:
            entries = [
                e
                for e in entries
                if checkpoint_seqs.get(e.checkpoint_id, 0) >= req.min_checkpoint_seq
            ]
        candidates[lane] = entries
    quota = split_quota(
        req.size, req.lane_mix, {ln: len(entries) for ln, entries in candidates.items()}
    )
    plan: list[IndexEntry] = []
    for lane in TRAINABLE_LANES:
        k = quota[lane]
        if not k:
            continue
        rng = random.Random(f"{req.seed}/{lane}")
        if lane == "neutral":
            plan += _diverse(candidates[lane], k, rng)
        else:
            plan += rng.sample(candidates[lane], k)
    return plan


# -- retention ------------------------------------------------------------------------------------


def retention_excess(seqs: Iterable[int], limit: int) -> list[int]:
    """The stream sequences to delete so that at most ``limit`` remain: the oldest, ascending."""
    ordered = sorted(seqs)
    return ordered[: max(0, len(ordered) - max(0, limit))]


def purge_points(victims: Iterable[IndexEntry]) -> dict[str, int]:
    """Environment -> the first sequence to keep on ``replay.<lane>.<env>``, for victims of one
    lane chosen by :func:`retention_excess`. Every entry of the lane that is not a victim is newer
    than every victim, so purging each environment's subject below its point removes exactly the
    victims (one purge per subject rather than one delete per message)."""
    points: dict[str, int] = {}
    for e in victims:
        points[e.environment] = max(points.get(e.environment, 0), e.seq + 1)
    return dict(sorted(points.items()))
