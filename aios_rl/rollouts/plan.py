"""The rollout strategies, as round-by-round plans over a task's tree of rollouts. Pure.

An epoch runs in rounds. Round 0 is every task's base rollouts (``initial_runs``). When all of a
round's episodes are back, :func:`plan_round` reads what arrived (one :class:`Group` per task,
its rollouts as ``RolloutSummary``) and returns the next round's :class:`~contracts.BranchOrder`
list: continuations of a rollout from an intermediate step, fresh rollouts, or new tasks. An
empty plan ends the epoch's collection. Every draw is seeded by (campaign seed, episode, step),
so a restarted campaign plans the same rounds.

Strategies (``CampaignSpec.rollout_strategy``; ``M = group_size`` rollouts per task):

``uniform``
    GRPO-M: M base rollouts, no rounds.
``entropy``
    ARPO's entropy-based adaptive beaming: N < M base rollouts; then each round walks the
    previous round's rollouts step by step (step-major, as ARPO branches at each tool call of
    every active path) and at a step ``t >= 1`` branches ``Z`` continuations where
    ``P_t = alpha + beta * dH_t > tau``, ``dH_t = (H_t - H_0) / scale`` (``H_0`` the entropy at
    the rollout's first step, ``scale`` the largest entropy possible there, ``log K`` for K
    candidates, 1 nat for free text), ``alpha`` drawn uniformly per decision unless fixed; until
    the task has used M rollouts. Budget left when no step branches, or after the last round,
    goes to fresh rollouts (ARPO's supplement), so the task uses exactly M.
``dapo-filter``
    M base rollouts; a group whose rewards all tie gives GRPO nothing and is dropped from the
    update, and a new task is drawn in its place (DAPO's dynamic sampling), up to
    ``resample_cap`` tasks per epoch.
``heuristic``
    RAIL's warm-up policy: N base rollouts, then each round branches from the state with the
    highest entropy in the task's whole tree not branched yet, with a budget that doubles round
    by round (Z, 2Z, 4Z, ...); the rest goes to fresh rollouts after the last round.
``variance``
    A non-learned allocator (the VIP / Knapsack-RL idea): N base rollouts per task; then the
    rest of the epoch's budget, ``tasks x (M - N)`` rollouts, goes to the tasks in proportion to
    their predicted reward variance ``p (1 - p)`` (``p``: the task's mean reward so far, shrunk
    towards the epoch's mean by a prior of ``VARIANCE_PRIOR`` rollouts), as fresh rollouts, each
    task at most ``2 M`` in all. The same rollouts as uniform-M, spent where a group is most
    likely to have a contrast to learn from.
``rail``, ``rail-budget-only``, ``rail-frozen``
    N base rollouts; each round the RAIL service decides per task whether, where, how many and
    under which regime to branch (``aios_rl.rail``); no fill: what it does not spend is saved.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec

from contracts import BranchOrder, CampaignSpec, DecodingRegime, RolloutSummary

from .accounting import reward_contrast

__all__ = [
    "ADAPTIVE",
    "BRANCHING",
    "RAIL",
    "STRATEGIES",
    "Group",
    "budget",
    "continuation_id",
    "initial_runs",
    "plan_round",
    "scheduled_runs",
    "tied",
    "validate",
    "variance_shares",
]

RAIL: tuple[str, ...] = ("rail", "rail-budget-only", "rail-frozen")
"""The strategies the RAIL service decides (the campaign asks it each round)."""
STRATEGIES: tuple[str, ...] = (
    "uniform",
    "entropy",
    "dapo-filter",
    "heuristic",
    "variance",
    *RAIL,
)
"""Every strategy a campaign may name."""
BRANCHING: tuple[str, ...] = ("entropy", "heuristic", *RAIL)
"""The strategies that branch (their groups are trees)."""
ADAPTIVE: tuple[str, ...] = (*BRANCHING, "variance")
"""The strategies that start a task with N < M base rollouts and spend the rest in rounds."""
VARIANCE_PRIOR = 2.0
"""``variance``: how many rollouts' worth of the epoch's mean reward a task's estimate starts
from (a task seen twice, both failed, is not certain to fail)."""


@dataclass(frozen=True)
class Group:
    """One task of the epoch and the rollouts of it that have arrived."""

    task_index: int
    group_id: str
    rollouts: Sequence[RolloutSummary]


def validate(spec: CampaignSpec) -> None:
    """Raise ``ValueError`` (a one-line reason) when ``spec``'s strategy cannot be planned."""
    b = spec.branching
    if spec.rollout_strategy not in STRATEGIES:
        raise ValueError(
            f"unknown rollout strategy {spec.rollout_strategy!r}; "
            f"choose one of {', '.join(STRATEGIES)}"
        )
    if spec.group_size < 1:
        raise ValueError("group_size must be at least 1")
    if spec.rollout_strategy in ADAPTIVE:
        if spec.group_size < 2:
            raise ValueError(f"{spec.rollout_strategy} needs a budget (group_size) of at least 2")
        if not 0 <= b.initial < spec.group_size:
            raise ValueError(
                f"branching.initial must be below group_size ({spec.group_size}), got {b.initial}"
            )
    if b.branch_width < 1:
        raise ValueError(f"branching.branch_width must be at least 1, got {b.branch_width}")
    if b.max_rounds < 0 or b.resample_cap < 0:
        raise ValueError("branching.max_rounds and branching.resample_cap cannot be negative")
    if not all(math.isfinite(x) for x in (b.beta, b.tau, b.alpha or 0.0)):
        raise ValueError("branching.alpha, beta and tau must be finite")


def budget(spec: CampaignSpec) -> int:
    """Rollouts per task (M)."""
    return spec.group_size


def initial_runs(spec: CampaignSpec) -> int:
    """Base rollouts per task in round 0 (N): M for the strategies that spend no rounds."""
    if spec.rollout_strategy not in ADAPTIVE:
        return spec.group_size
    return spec.branching.initial or max(1, spec.group_size // 2)


def scheduled_runs(spec: CampaignSpec, orders: Sequence[BranchOrder]) -> dict[int, int]:
    """Task index -> rollouts scheduled so far by ``orders`` (round 0's base runs not included
    for tasks that came with the epoch; a ``task`` order counts its base runs)."""
    out: dict[int, int] = {}
    for o in orders:
        n = initial_runs(spec) if o.kind == "task" else o.count
        out[o.task_index] = out.get(o.task_index, 0) + n
    return out


def continuation_id(parent_episode_id: str, step: int, k: int) -> str:
    """The episode id of the ``k``-th continuation of a parent from ``step``."""
    return f"{parent_episode_id}-s{step}b{k}"


def tied(group: Group) -> bool:
    """Whether a group's rewards all tie (no contrast to learn from)."""
    return reward_contrast([r.reward for r in group.rollouts]) < 1e-12


def _regime(spec: CampaignSpec) -> DecodingRegime:
    return spec.branching.regime or spec.regime


def _scale(width: int) -> float:
    """The largest entropy a step can have: ``log K`` over K candidates, 1 nat for free text."""
    return math.log(width) if width > 1 else 1.0


def _branchable(s: RolloutSummary, t: int) -> bool:
    """Whether ``s`` can branch at step ``t``: a step after its own branch point (step 0 is a
    fresh rollout), followed by a decision, with a choice to make there."""
    return (
        t >= max(1, s.branch_step + 1 if s.parent_episode_id else 1)
        and t < len(s.actions)
        and t < len(s.entropies)
        and (t >= len(s.widths) or s.widths[t] != 1)
    )


def _first_entropy(s: RolloutSummary, by_id: Mapping[str, RolloutSummary]) -> float:
    """``H_0``: the entropy at the first step of the rollout's root (a continuation replays it)."""
    seen = 0
    while s.parent_episode_id and s.parent_episode_id in by_id and seen < 64:
        s, seen = by_id[s.parent_episode_id], seen + 1
    return s.entropies[0] if s.entropies else 0.0


def _fresh(spec: CampaignSpec, g: Group, rnd: int, count: int, used: int) -> BranchOrder:
    return BranchOrder(
        round=rnd,
        kind="fresh",
        task_index=g.task_index,
        count=count,
        first=used,
        regime=spec.regime,
        decided_by="uniform",
    )


def _branch(
    spec: CampaignSpec,
    g: Group,
    rnd: int,
    parent: RolloutSummary,
    step: int,
    count: int,
    first: int,
    decided_by: str,
) -> BranchOrder:
    return BranchOrder(
        round=rnd,
        kind="branch",
        task_index=g.task_index,
        parent_episode_id=parent.episode_id,
        step=step,
        count=count,
        first=first,
        regime=_regime(spec),
        decided_by=decided_by,  # type: ignore[arg-type]
    )


def _used(spec: CampaignSpec, g: Group, orders: Sequence[BranchOrder], base_tasks: int) -> int:
    scheduled = scheduled_runs(spec, orders).get(g.task_index, 0)
    return scheduled + (initial_runs(spec) if g.task_index < base_tasks else 0)


def _fresh_runs(spec: CampaignSpec, g: Group, orders: Sequence[BranchOrder]) -> int:
    """Base rollouts of the task so far (they are numbered on by a fresh order)."""
    return initial_runs(spec) + sum(
        o.count for o in orders if o.kind == "fresh" and o.task_index == g.task_index
    )


def _entropy_round(
    spec: CampaignSpec, g: Group, rnd: int, orders: Sequence[BranchOrder], base_tasks: int
) -> list[BranchOrder]:
    b = spec.branching
    left = budget(spec) - _used(spec, g, orders, base_tasks)
    if left <= 0:
        return []
    by_id = {r.episode_id: r for r in g.rollouts}
    sources = sorted((r for r in g.rollouts if r.round == rnd - 1), key=lambda r: r.episode_id)
    out: list[BranchOrder] = []
    longest = max((len(s.actions) for s in sources), default=0)
    for t in range(1, longest):
        for s in sources:
            if left <= 0:
                break
            if not _branchable(s, t):
                continue
            width = s.widths[t] if t < len(s.widths) else 0
            d_h = (s.entropies[t] - _first_entropy(s, by_id)) / _scale(width)
            alpha = (
                b.alpha
                if b.alpha is not None
                else random.Random(f"{spec.seed}:{s.episode_id}:{t}").random()
            )
            if alpha + b.beta * d_h > b.tau:
                n = min(b.branch_width, left)
                out.append(_branch(spec, g, rnd, s, t, n, 0, "entropy"))
                left -= n
    if left > 0 and b.fill and (not out or rnd >= b.max_rounds):
        out.append(_fresh(spec, g, rnd, left, _fresh_runs(spec, g, orders)))
    return out


def _heuristic_round(
    spec: CampaignSpec, g: Group, rnd: int, orders: Sequence[BranchOrder], base_tasks: int
) -> list[BranchOrder]:
    b = spec.branching
    left = budget(spec) - _used(spec, g, orders, base_tasks)
    if left <= 0:
        return []
    taken = {(o.parent_episode_id, o.step) for o in orders if o.kind == "branch"}
    states = [
        (s.entropies[t], s, t)
        for s in g.rollouts
        for t in range(len(s.actions))
        if _branchable(s, t) and (s.episode_id, t) not in taken
    ]
    out: list[BranchOrder] = []
    if states:
        _, s, t = min(states, key=lambda x: (-x[0], x[1].episode_id, x[2]))
        n = min(b.branch_width * 2 ** (rnd - 1), left)
        out.append(_branch(spec, g, rnd, s, t, n, 0, "heuristic"))
        left -= n
    if left > 0 and b.fill and (not states or rnd >= b.max_rounds):
        out.append(_fresh(spec, g, rnd, left, _fresh_runs(spec, g, orders)))
    return out


def variance_shares(rewards: Sequence[Sequence[float]], pool: int, cap: int) -> list[int]:
    """How many of ``pool`` extra rollouts each task gets, given each task's rewards so far:
    in proportion to ``p (1 - p)``, ``p`` its mean reward (clipped to [0, 1]) shrunk towards the
    mean of every task's rewards by ``VARIANCE_PRIOR`` rollouts; at most ``cap`` each (Hamilton's
    largest remainders, ties to the lower index; what no task can take is left unspent). Pure."""
    every = [min(1.0, max(0.0, r)) for rs in rewards for r in rs]
    prior = sum(every) / len(every) if every else 0.5
    weights = []
    for rs in rewards:
        clipped = [min(1.0, max(0.0, r)) for r in rs]
        p = (sum(clipped) + VARIANCE_PRIOR * prior) / (len(clipped) + VARIANCE_PRIOR)
        weights.append(p * (1.0 - p))
    if not weights or pool <= 0 or cap <= 0:
        return [0] * len(weights)
    if sum(weights) <= 0:  # every task certain (prior 0 or 1 and no contrast): spread evenly
        weights = [1.0] * len(weights)
    shares = [0] * len(weights)
    left, open_ = pool, set(range(len(weights)))
    while left > 0 and open_:
        total = sum(weights[i] for i in open_)
        ideal = {i: left * weights[i] / total for i in open_}
        full = {i for i in open_ if ideal[i] >= cap - shares[i]}
        if full:  # those reach the cap: fill them, share the rest among the others
            for i in full:
                left -= cap - shares[i]
                shares[i] = cap
            open_ -= full
            continue
        for i in open_:
            shares[i] += math.floor(ideal[i])
        left -= sum(math.floor(ideal[i]) for i in open_)
        by_remainder = sorted(open_, key=lambda i: (-(ideal[i] - math.floor(ideal[i])), i))
        for i in by_remainder[:left]:
            shares[i] += 1
        left = 0
    return shares


def _variance_round(
    spec: CampaignSpec,
    groups: Sequence[Group],
    rnd: int,
    orders: Sequence[BranchOrder],
    base_tasks: int,
) -> list[BranchOrder]:
    if rnd != 1:
        return []
    mine = sorted((g for g in groups if g.task_index < base_tasks), key=lambda g: g.task_index)
    n, m = initial_runs(spec), budget(spec)
    shares = variance_shares(
        [[r.reward for r in g.rollouts] for g in mine], len(mine) * (m - n), 2 * m - n
    )
    return [
        msgspec.structs.replace(
            _fresh(spec, g, rnd, k, _fresh_runs(spec, g, orders)), decided_by="variance"
        )
        for g, k in zip(mine, shares, strict=True)
        if k > 0
    ]


def plan_round(
    spec: CampaignSpec,
    rnd: int,
    groups: Sequence[Group],
    *,
    orders: Sequence[BranchOrder],
    base_tasks: int,
    tasks: int,
    new_tasks_available: int,
) -> list[BranchOrder]:
    """The orders of round ``rnd`` (>= 1), from the ``groups`` as they stand after round
    ``rnd - 1`` and every order so far. ``base_tasks``: tasks the epoch began with; ``tasks``:
    tasks it has now (a new task gets the next index); ``new_tasks_available``: how many more
    the split can give (``dapo-filter``). Empty: the epoch's collection is complete."""
    strategy = spec.rollout_strategy
    if strategy == "uniform" or strategy in RAIL or rnd < 1:
        return []  # RAIL's rounds are the RAIL service's
    b = spec.branching
    if strategy == "dapo-filter":
        cap = b.resample_cap or spec.tasks_per_epoch
        drawn = sum(1 for o in orders if o.kind == "task")
        last = {o.task_index for o in orders if o.kind == "task" and o.round == rnd - 1}
        previous = [
            g for g in groups if (g.task_index < base_tasks if rnd == 1 else g.task_index in last)
        ]
        n = min(sum(tied(g) for g in previous), cap - drawn, new_tasks_available)
        return [
            BranchOrder(round=rnd, kind="task", task_index=tasks + j, regime=spec.regime)
            for j in range(max(0, n))
        ]
    if strategy == "variance":
        return _variance_round(spec, groups, rnd, orders, base_tasks)
    if rnd > b.max_rounds:
        return []
    planner = _entropy_round if strategy == "entropy" else _heuristic_round
    out: list[BranchOrder] = []
    for g in sorted(groups, key=lambda g: g.task_index):
        out.extend(planner(spec, g, rnd, orders, base_tasks))
    return _numbered(out, orders)


def _numbered(new: list[BranchOrder], orders: Sequence[BranchOrder]) -> list[BranchOrder]:
    """``new`` with each branch's ``first`` after the continuations its parent already has from
    that step (so continuation ids never repeat)."""
    counts: dict[tuple[str, int], int] = {}
    for o in orders:
        if o.kind == "branch":
            key = (o.parent_episode_id, o.step)
            counts[key] = max(counts.get(key, 0), o.first + o.count)
    out = []
    for o in new:
        if o.kind != "branch":
            out.append(o)
            continue
        key = (o.parent_episode_id, o.step)
        first = counts.get(key, 0)
        counts[key] = first + o.count
        out.append(msgspec.structs.replace(o, first=first))
    return out
