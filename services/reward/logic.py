"""Reward fusion, pure: no NATS here.

``total = env_reward + clip(weight * score, -clip, +clip)`` when a usable teacher signal exists
(status ``ok``, not a boundary case); otherwise ``total = env_reward`` exactly. So the total is
monotone non-decreasing in both the environment reward and the teacher's score, stays within
``clip`` of the environment reward, and is the identity without a teacher.
"""

from __future__ import annotations

import math
import time

import msgspec

from contracts import Episode, RewardBreakdown, TeacherSignal

__all__ = ["fuse", "reward_episode", "usable"]


def usable(signal: TeacherSignal | None) -> bool:
    """A teacher signal shapes reward only when it parsed and is not a borderline case."""
    return (
        signal is not None
        and signal.status == "ok"
        and not signal.boundary
        and math.isfinite(signal.score)
    )


def fuse(
    env_reward: float, signal: TeacherSignal | None, *, weight: float, clip: float
) -> RewardBreakdown:
    """The reward breakdown for one episode. Raises ``ValueError`` for a non-finite env reward."""
    if not math.isfinite(env_reward):
        raise ValueError(f"environment reward must be finite, got {env_reward!r}")
    if not usable(signal):
        return RewardBreakdown(
            env_reward=env_reward, teacher_weight=0.0, shaping=0.0, clip=clip, total=env_reward
        )
    assert signal is not None
    score = max(-1.0, min(1.0, signal.score))
    shaping = max(-clip, min(clip, weight * score))
    return RewardBreakdown(
        env_reward=env_reward,
        teacher_score=score,
        teacher_weight=weight,
        shaping=shaping,
        clip=clip,
        total=env_reward + shaping,
    )


def reward_episode(ep: Episode, *, weight: float, clip: float, now: float | None = None) -> Episode:
    """``ep`` with its reward, breakdown and ``rewarded`` stage stamp set."""
    breakdown = fuse(ep.env_reward, ep.teacher_signal, weight=weight, clip=clip)
    stages = dict(ep.timings.stages)
    stages["rewarded"] = time.time() if now is None else now
    return msgspec.structs.replace(
        ep,
        reward=breakdown.total,
        reward_breakdown=breakdown,
        timings=msgspec.structs.replace(ep.timings, stages=stages),
    )
