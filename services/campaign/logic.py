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

from contracts import (
    CampaignSpec,
    CampaignState,
    Decision,
    EnvEpochStats,
    Episode,
    EpochArrivals,
    RolloutJob,
    Verdict,
)

__all__ = [
    "DecisionPlan",
    "add_arrival",
    "bounded_reward",
    "decide",
    "episode_deadline_s",
    "episode_id",
    "group_id",
    "plan_jobs",
    "sample_tasks",
    "split_counts",
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


def plan_jobs(spec: CampaignSpec, state: CampaignState, *, deadline: float) -> list[RolloutJob]:
    """Every job of the epoch in ``state``: rollouts under the candidate, reference runs under
    the reference, seeds fixed by (campaign seed, epoch, task, run)."""
    assert state.candidate is not None and state.reference is not None
    jobs: list[RolloutJob] = []
    for i, entry in enumerate(state.tasks):
        env, task_id = entry.split("/", 1)
        runs = [("rollout", k, state.candidate) for k in range(spec.group_size)]
        runs += [("reference", k, state.reference) for k in range(spec.reference_runs)]
        for role, k, ckpt in runs:
            eid = episode_id(spec.campaign_id, state.epoch, i, role, k)
            jobs.append(
                RolloutJob(
                    job_id=eid,
                    episode_id=eid,
                    environment=env,  # type: ignore[arg-type]
                    task_id=task_id,
                    campaign_id=spec.campaign_id,
                    epoch=state.epoch,
                    group_id=group_id(spec.campaign_id, state.epoch, i)
                    if role == "rollout"
                    else "",
                    role=role,  # type: ignore[arg-type]
                    checkpoint_id=ckpt,
                    seed=random.Random(f"{spec.seed}:{eid}").randrange(2**31),
                    regime=spec.regime,
                    deadline=deadline,
                    split=spec.split,
                    reference_checkpoint=state.reference if role == "rollout" else "",
                )
            )
    return jobs


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
    if ep.role != "rollout":
        return msgspec.structs.replace(
            arrivals, episode_ids=ids, references=arrivals.references + 1
        )
    old = arrivals.per_env.get(ep.environment, EnvEpochStats())
    reward = bounded_reward(ep.reward if ep.reward is not None else ep.env_reward)
    n = old.episodes + 1
    total = old.reward_sum + reward
    new = msgspec.structs.replace(
        old,
        episodes=n,
        reward_sum=total,
        mean_reward=total / n,
        **{ep.outcome: getattr(old, ep.outcome) + 1},
    )
    verdict = ep.comparison.verdict if ep.comparison else "comparison_failed"
    verdicts = dict(arrivals.verdicts)
    verdicts[verdict] = verdicts.get(verdict, 0) + 1
    return msgspec.structs.replace(
        arrivals,
        episode_ids=ids,
        per_env={**arrivals.per_env, ep.environment: new},
        verdicts=verdicts,
    )


@dataclass(frozen=True)
class DecisionPlan:
    """What an epoch's verdict does."""

    decision: Decision
    degradation_streak: int
    stable_streak: int
    train: bool


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
