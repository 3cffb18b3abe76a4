"""One epoch's rollouts, planned, pure: which tasks an epoch runs, which jobs each round makes,
the tasks as groups of what came back, and the next round the strategy plans from them. The
campaign service (over the bus) and the in-process kernel (:mod:`aios_rl.local`) both plan every
epoch with this one module, so a benchmark's epoch is the campaign's.

An epoch: sample tasks by environment ratio (:func:`sample_tasks`) -> round 0, a group of
rollouts of each task under the candidate plus ``reference_runs`` runs under the reference
(:func:`plan_jobs`) -> when a round's episodes are back, :func:`plan_next` asks the strategy
(:func:`aios_rl.rollouts.plan_round`) for the next round (continuations, fresh rollouts, new
tasks), until it plans none. RAIL's rounds are planned by the RAIL service instead
(:mod:`aios_rl.rail.plan`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec

from contracts import (
    BranchInfo,
    BranchOrder,
    CampaignSpec,
    CampaignState,
    DecodingRegime,
    RolloutJob,
    RolloutSummary,
    job_max_steps,
)

from .plan import RAIL, Group, continuation_id, initial_runs, plan_round

__all__ = [
    "Run",
    "episode_id",
    "epoch_groups",
    "group_id",
    "new_tasks_available",
    "next_round",
    "plan_jobs",
    "plan_next",
    "resample_tasks",
    "rollouts_before",
    "round_runs",
    "sample_tasks",
    "sampling_seed",
    "scheduled_ids",
    "split_counts",
]


def split_counts(total: int, ratios: Mapping[str, float]) -> dict[str, int]:
    """``total`` tasks split by ``ratios`` (largest remainder; ties by name). Raises
    ``ValueError`` for an empty or non-positive ratio set."""
    weights = {k: v for k, v in ratios.items() if v > 0}
    if not weights:
        raise ValueError("the campaign names no environment with a positive ratio")
    s = sum(weights.values())
    exact = {k: total * v / s for k, v in weights.items()}
    counts = {k: math.floor(x) for k, x in exact.items()}
    left = total - sum(counts.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - counts[k]), k))[:left]:
        counts[k] += 1
    return counts


def sample_tasks(
    spec: CampaignSpec, epoch: int, available: Mapping[str, Sequence[str]]
) -> list[str]:
    """The epoch's tasks as ``<env>/<task_id>``: ``tasks_per_epoch`` split by ratio, drawn
    without repeats within an epoch (cycling when an environment has fewer tasks), seeded by
    (campaign seed, epoch). Raises ``ValueError`` when an environment has no tasks."""
    out: list[str] = []
    for env, n in sorted(split_counts(spec.tasks_per_epoch, spec.environments).items()):
        pool = sorted(available.get(env, ()))
        if not pool and n:
            raise ValueError(f"no {env} tasks in split {spec.split!r}: generate some first")
        rng = random.Random(f"{spec.seed}:{epoch}:{env}")
        order: list[str] = []
        while len(order) < n:
            batch = pool[:]
            rng.shuffle(batch)
            order.extend(batch)
        out.extend(f"{env}/{t}" for t in order[:n])
    return out


def group_id(campaign_id: str, epoch: int, index: int) -> str:
    return f"{campaign_id}-e{epoch}-t{index}"


def episode_id(campaign_id: str, epoch: int, index: int, role: str, k: int) -> str:
    """Fixed before the job is published, so a republished job makes the same episode."""
    tag = "r" if role == "rollout" else "ref"
    return f"{campaign_id}-e{epoch}-t{index}-{tag}{k}"


@dataclass(frozen=True)
class Run:
    """One episode an epoch schedules: its id, task, role and, for a continuation, its order."""

    episode_id: str
    task_index: int
    role: str
    k: int = 0
    order: BranchOrder | None = None


def round_runs(spec: CampaignSpec, state: CampaignState, rnd: int) -> list[Run]:
    """The episodes round ``rnd`` of the epoch in ``state`` schedules. Round 0: every task the
    epoch began with, ``initial_runs`` rollouts and ``reference_runs`` reference runs each.
    Later rounds: what their orders say (a new task brings its rollouts and reference runs)."""
    cid, epoch = spec.campaign_id, state.epoch
    base = state.base_tasks or len(state.tasks)

    def task_runs(i: int) -> list[Run]:
        runs = [
            Run(episode_id(cid, epoch, i, "rollout", k), i, "rollout", k)
            for k in range(initial_runs(spec))
        ]
        runs += [
            Run(episode_id(cid, epoch, i, "reference", k), i, "reference", k)
            for k in range(spec.reference_runs)
        ]
        return runs

    if rnd == 0:
        return [r for i in range(min(base, len(state.tasks))) for r in task_runs(i)]
    out: list[Run] = []
    for o in state.orders:
        if o.round != rnd:
            continue
        if o.kind == "task":
            out.extend(task_runs(o.task_index))
        elif o.kind == "fresh":
            out.extend(
                Run(episode_id(cid, epoch, o.task_index, "rollout", k), o.task_index, "rollout", k)
                for k in range(o.first, o.first + o.count)
            )
        else:
            out.extend(
                Run(continuation_id(o.parent_episode_id, o.step, k), o.task_index, "rollout", k, o)
                for k in range(o.first, o.first + o.count)
            )
    return out


def rollouts_before(spec: CampaignSpec, state: CampaignState, rnd: int) -> dict[int, list[str]]:
    """Task index -> the episode ids of its rollouts scheduled in rounds before ``rnd`` (the
    group ``Y_0`` a round's branches are measured against)."""
    before: dict[int, list[str]] = {}
    for k in range(rnd):
        for r in round_runs(spec, state, k):
            if r.role == "rollout":
                before.setdefault(r.task_index, []).append(r.episode_id)
    return before


def scheduled_ids(spec: CampaignSpec, state: CampaignState) -> set[str]:
    """Every episode the epoch has scheduled up to its current round."""
    return {r.episode_id for rnd in range(state.round + 1) for r in round_runs(spec, state, rnd)}


def plan_jobs(
    spec: CampaignSpec,
    state: CampaignState,
    *,
    deadline: float,
    rnd: int | None = None,
    parents: Mapping[str, RolloutSummary] | None = None,
) -> list[RolloutJob]:
    """The jobs of round ``rnd`` (default: the state's current round): rollouts under the
    candidate, reference runs under the reference, seeds fixed by (campaign seed, episode).
    A continuation replays its parent's first ``step`` actions (from ``parents``, the parents'
    summaries) in its parent's environment (same seed) and samples afresh after them.

    Raises ``KeyError`` when a continuation's parent is not in ``parents``."""
    assert state.candidate is not None and state.reference is not None
    rnd = state.round if rnd is None else rnd
    jobs: list[RolloutJob] = []
    for run in round_runs(spec, state, rnd):
        env, task_id = state.tasks[run.task_index].split("/", 1)
        rollout = run.role == "rollout"
        seed = random.Random(f"{spec.seed}:{run.episode_id}").randrange(2**31)
        extra: dict[str, object] = {}
        if run.order is not None and run.order.kind == "branch":
            o = run.order
            parent = (parents or {})[o.parent_episode_id]
            extra = {
                "prefix": list(parent.actions[: o.step]),
                "sampling_seed": sampling_seed(spec.seed, run.episode_id, o.regime),
                "branch": BranchInfo(
                    parent_episode_id=o.parent_episode_id,
                    branch_step=o.step,
                    budget=o.count,
                    regime=o.regime,
                    decided_by=o.decided_by,
                    round=o.round,
                ),
            }
            seed = parent.seed  # the parent's environment, so the prefix replays exactly
        jobs.append(
            RolloutJob(
                job_id=run.episode_id,
                episode_id=run.episode_id,
                environment=env,  # type: ignore[arg-type]
                task_id=task_id,
                campaign_id=spec.campaign_id,
                epoch=state.epoch,
                group_id=group_id(spec.campaign_id, state.epoch, run.task_index) if rollout else "",
                role=run.role,  # type: ignore[arg-type]
                checkpoint_id=state.candidate if rollout else state.reference,
                seed=seed,
                regime=run.order.regime if run.order is not None else spec.regime,
                deadline=deadline,
                split=spec.split,
                reference_checkpoint=state.reference if rollout else "",
                want_hidden=rollout and spec.rollout_strategy in RAIL,
                max_steps=job_max_steps(env),
                **extra,  # type: ignore[arg-type]
            )
        )
    return jobs


def sampling_seed(campaign_seed: int, episode_id: str, regime: DecodingRegime) -> int:
    """The seed a continuation samples its own steps with: of its campaign, its id (parent,
    branch step, index) and its regime, so two regimes at one branch point draw differently
    (one seed for every regime would leave the regime's effect tied to the same draws)."""
    key = f"{campaign_seed}:{episode_id}:{regime.temperature!r}:{regime.top_p!r}"
    return random.Random(key).randrange(2**31)


def resample_tasks(
    spec: CampaignSpec,
    epoch: int,
    available: Mapping[str, Sequence[str]],
    used: Sequence[str],
    n: int,
) -> list[str]:
    """``n`` more tasks for the epoch (``dapo-filter``), none it already has, drawn by the
    environments' ratio from what is left, seeded by (campaign seed, epoch, how many it has)."""
    taken = set(used)
    left = {
        env: sorted(t for t in available.get(env, ()) if f"{env}/{t}" not in taken)
        for env in spec.environments
    }
    rng = random.Random(f"{spec.seed}:{epoch}:resample:{len(used)}")
    out: list[str] = []
    weights = {e: w for e, w in spec.environments.items() if w > 0}
    while len(out) < n:
        envs = [e for e in sorted(weights) if left.get(e)]
        if not envs:
            break
        env = rng.choices(envs, weights=[weights[e] for e in envs])[0]
        pick = left[env].pop(rng.randrange(len(left[env])))
        out.append(f"{env}/{pick}")
    return out


def new_tasks_available(
    spec: CampaignSpec, available: Mapping[str, Sequence[str]], used: Sequence[str]
) -> int:
    """How many tasks of the campaign's environments the epoch has not drawn yet."""
    taken = set(used)
    return sum(
        1
        for env, w in spec.environments.items()
        if w > 0
        for t in available.get(env, ())
        if f"{env}/{t}" not in taken
    )


def epoch_groups(state: CampaignState, summaries: Mapping[str, RolloutSummary]) -> list[Group]:
    """The epoch's tasks as groups of the rollouts that arrived (in task order; a group's
    rollouts by episode id)."""
    spec = state.spec
    index = {group_id(spec.campaign_id, state.epoch, i): i for i in range(len(state.tasks))}
    members: dict[str, list[RolloutSummary]] = {g: [] for g in index}
    for s in sorted(summaries.values(), key=lambda s: s.episode_id):
        if s.group_id in members:
            members[s.group_id].append(s)
    return [Group(index[g], g, members[g]) for g in sorted(index, key=index.__getitem__)]


def plan_next(
    state: CampaignState,
    summaries: Mapping[str, RolloutSummary],
    available: Mapping[str, Sequence[str]],
) -> tuple[list[BranchOrder], list[str]] | None:
    """The next round's orders and the new tasks they bring, ``None`` when the strategy plans
    none (``uniform`` never does; the RAIL strategies are planned by the RAIL service).
    ``available``: the split's task ids per environment (read only by ``dapo-filter``, which
    draws new tasks). A continuation needs its parent's actions: an order whose parent's summary
    was kept without them is left out."""
    spec = state.spec
    if spec.rollout_strategy == "uniform" or spec.rollout_strategy in RAIL:
        return None
    orders = plan_round(
        spec,
        state.round + 1,
        epoch_groups(state, summaries),
        orders=state.orders,
        base_tasks=state.base_tasks or len(state.tasks),
        tasks=len(state.tasks),
        new_tasks_available=new_tasks_available(spec, available, state.tasks),
    )
    orders = [
        o
        for o in orders
        if o.kind != "branch"
        or (o.parent_episode_id in summaries and summaries[o.parent_episode_id].actions)
    ]
    if not orders:
        return None
    n_new = sum(1 for o in orders if o.kind == "task")
    new_tasks = resample_tasks(spec, state.epoch, available, state.tasks, n_new)
    orders = [
        o for o in orders if o.kind != "task" or o.task_index < len(state.tasks) + len(new_tasks)
    ]
    return (orders, new_tasks) if orders else None


def next_round(
    state: CampaignState, *, orders: Sequence[BranchOrder], tasks: Sequence[str], at: float
) -> CampaignState:
    """``state`` moved to its next round with ``orders`` (and the new ``tasks`` they bring)."""
    return msgspec.structs.replace(
        state,
        round=state.round + 1,
        round_started_at=at,
        orders=[*state.orders, *orders],
        tasks=[*state.tasks, *tasks],
        jobs_published=False,
    )
