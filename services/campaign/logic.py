"""The campaign's decisions, pure: which tasks an epoch runs, which jobs that makes, how
arrivals are counted, and what a verdict does to the pointers.

An epoch: sample tasks by environment ratio -> a group of ``group_size`` rollouts of each task
under the candidate (``active``) plus ``reference_runs`` runs under the reference
(``pre_update_ref``) -> one verdict for the whole student -> promote, hold or roll back -> train
(not after a rollback: the restored policy collects fresh groups next epoch) -> next epoch.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec

from aios_rl.rollouts import RAIL, account_add, continuation_id, initial_runs
from contracts import (
    BranchInfo,
    BranchOrder,
    CampaignSpec,
    CampaignState,
    Decision,
    EnvEpochStats,
    Episode,
    EpochArrivals,
    EpochVerdictRequest,
    RolloutJob,
    RolloutSummary,
    Verdict,
    job_max_steps,
)

__all__ = [
    "DecisionPlan",
    "add_arrival",
    "bounded_reward",
    "decide",
    "episode_deadline_s",
    "episode_id",
    "group_id",
    "new_tasks_available",
    "plan_jobs",
    "resample_tasks",
    "round_runs",
    "sample_tasks",
    "scheduled_ids",
    "split_counts",
    "verdict_request",
]


ACK_WAITS_PER_DEADLINE = 3
"""An epoch waits for its episodes at least this many runner ack waits: the jobs a killed runner
held come back after one ack wait, so even a second kill leaves time to run them."""


def episode_deadline_s(asked_s: float, ack_waits_s: Sequence[float]) -> float:
    """How long an epoch waits for its episodes: the spec's ``asked_s``, stretched to
    ``ACK_WAITS_PER_DEADLINE`` times the longest ack wait of the runners it uses."""
    return max(asked_s, ACK_WAITS_PER_DEADLINE * max(ack_waits_s, default=0.0))


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
                "sampling_seed": seed,
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


JOB_MAX_STEPS: int = next(
    f.default for f in msgspec.structs.fields(RolloutJob) if f.name == "max_steps"
)
"""The most steps a rollout job asks for (runners may cap it lower): RAIL's progress scale."""


MAX_ABS_REWARD = 1e6
"""Rewards are clipped to this magnitude before they are summed (and a non-finite one counts as
0): a hostile episode can skew an epoch's mean, never make the stored sums unreadable."""


def bounded_reward(reward: float) -> float:
    """``reward`` clipped to ``MAX_ABS_REWARD`` in magnitude; 0 for NaN or infinite."""
    if not math.isfinite(reward):
        return 0.0
    return max(-MAX_ABS_REWARD, min(MAX_ABS_REWARD, reward))


def add_arrival(arrivals: EpochArrivals, ep: Episode) -> EpochArrivals | None:
    """``arrivals`` with ``ep`` counted, or ``None`` when it was counted already."""
    if ep.episode_id in arrivals.episode_ids:
        return None
    ids = [*arrivals.episode_ids, ep.episode_id]
    account = account_add(arrivals.account, ep)
    if ep.role != "rollout":
        return msgspec.structs.replace(
            arrivals, episode_ids=ids, references=arrivals.references + 1, account=account
        )
    old = arrivals.per_env.get(ep.environment, EnvEpochStats())
    reward = bounded_reward(ep.reward if ep.reward is not None else ep.env_reward)
    n = old.episodes + 1
    total = old.reward_sum + reward
    verdict = ep.comparison.verdict if ep.comparison else "comparison_failed"
    new = msgspec.structs.replace(
        old,
        episodes=n,
        reward_sum=total,
        mean_reward=total / n,
        verdicts={**old.verdicts, verdict: old.verdicts.get(verdict, 0) + 1},
        **{ep.outcome: getattr(old, ep.outcome) + 1},
    )
    verdicts = dict(arrivals.verdicts)
    verdicts[verdict] = verdicts.get(verdict, 0) + 1
    return msgspec.structs.replace(
        arrivals,
        episode_ids=ids,
        per_env={**arrivals.per_env, ep.environment: new},
        verdicts=verdicts,
        account=account,
    )


@dataclass(frozen=True)
class DecisionPlan:
    """What an epoch's verdict does."""

    decision: Decision
    degradation_streak: int
    stable_streak: int
    train: bool


def verdict_request(state: CampaignState) -> EpochVerdictRequest:
    """The comparison asked at the end of an epoch: the epoch's candidate against its reference
    over the epoch's tasks, each named with its environment, so a mixed campaign gets one verdict
    for the whole student with the per-environment veto (``services.comparison.logic``)."""
    spec = state.spec
    pairs = [t.split("/", 1) for t in sorted(state.tasks)]
    return EpochVerdictRequest(
        campaign_id=spec.campaign_id,
        epoch=state.epoch,
        candidate=state.candidate or "",
        reference=state.reference or "",
        margin=spec.comparison_margin,
        tasks=sorted({task for _, task in pairs}),
        environments={task: env for env, task in pairs},
    )


def decide(
    verdict: Verdict,
    *,
    degradation_streak: int,
    stable_streak: int,
    spec: CampaignSpec,
    first: bool,
) -> DecisionPlan:
    """One decision for the whole student.

    - ``worse``: roll ``active`` back to ``pre_update_ref``; when that makes
      ``degradation_streak_limit`` degradations in a row, back to ``last_stable`` instead. No
      training this epoch.
    - ``better`` / ``same``: the update held; after ``stable_epochs_to_promote`` such epochs in a
      row, promote ``active`` to ``last_stable``.
    - ``comparison_failed``: hold (an outage is never a degradation); the streaks stay.
    On the first epoch the candidate is its own reference: ``same`` by construction, a hold.
    """
    if first:
        return DecisionPlan("hold", degradation_streak, stable_streak, train=True)
    if verdict == "worse":
        streak = degradation_streak + 1
        if streak >= spec.degradation_streak_limit:
            return DecisionPlan("rollback_last_stable", 0, 0, train=False)
        return DecisionPlan("rollback_pre_update", streak, 0, train=False)
    if verdict in ("better", "same"):
        stable = stable_streak + 1
        if stable >= spec.stable_epochs_to_promote:
            return DecisionPlan("promote", 0, 0, train=True)
        return DecisionPlan("hold", 0, stable, train=True)
    return DecisionPlan("hold", degradation_streak, stable_streak, train=True)
