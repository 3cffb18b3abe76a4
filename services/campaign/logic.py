"""The campaign's decisions, pure: how arrivals are counted, how long an epoch waits, and what a
verdict does to the pointers. Which tasks an epoch runs and which jobs each round makes are
planned by :mod:`aios_rl.rollouts.epoch` (shared with the in-process kernel).

An epoch: sample tasks by environment ratio -> a group of ``group_size`` rollouts of each task
under the candidate (``active``) plus ``reference_runs`` runs under the reference
(``pre_update_ref``) -> one verdict for the whole student -> promote, hold or roll back -> train
(not after a rollback: the restored policy collects fresh groups next epoch) -> next epoch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

from aios_rl.comparison import DecisionPlan
from aios_rl.comparison import decide_epoch as decide
from aios_rl.rollouts import account_add
from contracts import (
    EnvEpochStats,
    Episode,
    EpochArrivals,
)

__all__ = [
    "DecisionPlan",
    "add_arrival",
    "bounded_reward",
    "decide",
    "episode_deadline_s",
]


ACK_WAITS_PER_DEADLINE = 3
"""An epoch waits for its episodes at least this many runner ack waits: the jobs a killed runner
held come back after one ack wait, so even a second kill leaves time to run them."""


def episode_deadline_s(asked_s: float, ack_waits_s: Sequence[float]) -> float:
    """How long an epoch waits for its episodes: the spec's ``asked_s``, stretched to
    ``ACK_WAITS_PER_DEADLINE`` times the longest ack wait of the runners it uses."""
    return max(asked_s, ACK_WAITS_PER_DEADLINE * max(ack_waits_s, default=0.0))


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
