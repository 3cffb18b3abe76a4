"""What a rollout costs and what a group teaches, computed once: the per-episode account, the
summary planning reads, and the reward contrast ``I(Y)`` before and after continuations."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import msgspec

from contracts import Episode, GroupContrast, RolloutAccount, RolloutSummary

__all__ = ["account_add", "episode_reward", "group_contrasts", "reward_contrast", "summarize"]


def reward_contrast(rewards: Sequence[float]) -> float:
    """``I(Y)``: the population variance of a group's rewards, the contrast a group gives GRPO
    to learn from (0 for a group of one or of equal rewards). RAIL's reward is the gain in it
    that a branch brings: ``I(Y_b) - I(Y_0)``."""
    if len(rewards) < 2:
        return 0.0
    mean = sum(rewards) / len(rewards)
    return sum((r - mean) ** 2 for r in rewards) / len(rewards)


def episode_reward(ep: Episode) -> float:
    """The reward an episode is trained on: the pipeline's (teacher-shaped) when it has one,
    else the environment's; a non-finite one counts as 0."""
    r = ep.reward if ep.reward is not None else ep.env_reward
    return r if math.isfinite(r) else 0.0


def summarize(ep: Episode) -> RolloutSummary:
    """What planning needs of one rollout (its tree position, reward and per-step uncertainty)."""
    steps = ep.trajectory
    return RolloutSummary(
        episode_id=ep.episode_id,
        campaign_id=ep.campaign_id,
        epoch=ep.epoch,
        group_id=ep.group_id,
        task_id=ep.task_id,
        environment=ep.environment,
        seed=ep.seed,
        parent_episode_id=ep.branch.parent_episode_id if ep.branch else "",
        branch_step=ep.branch.branch_step if ep.branch else 0,
        round=ep.branch.round if ep.branch else 0,
        reward=episode_reward(ep),
        outcome=ep.outcome,
        actions=[s.action for s in steps],
        entropies=[0.0 if s.replayed else s.entropy for s in steps],
        widths=[len(s.candidates) for s in steps],
        top1=[0.0 if s.replayed else s.top1_prob for s in steps],
        margins=[0.0 if s.replayed else s.margin for s in steps],
        hidden=[list(s.hidden) for s in steps] if any(s.hidden for s in steps) else [],
        replayed=sum(1 for s in steps if s.replayed),
    )


def account_add(acc: RolloutAccount, ep: Episode) -> RolloutAccount:
    """``acc`` with ``ep`` counted: a rollout as base or continuation with its sampled and
    replayed steps (one policy call per sampled step), a reference run apart."""
    replayed = sum(1 for s in ep.trajectory if s.replayed)
    sampled = len(ep.trajectory) - replayed
    if ep.role != "rollout":
        return msgspec.structs.replace(
            acc, references=acc.references + 1, reference_steps=acc.reference_steps + sampled
        )
    return msgspec.structs.replace(
        acc,
        base=acc.base + (ep.branch is None),
        continuations=acc.continuations + (ep.branch is not None),
        steps_sampled=acc.steps_sampled + sampled,
        steps_replayed=acc.steps_replayed + replayed,
        policy_calls=acc.policy_calls + sampled,
    )


def group_contrasts(
    summaries: Iterable[RolloutSummary], *, dropped: Iterable[str] = ()
) -> list[GroupContrast]:
    """Per group (sorted by id): ``I(Y)`` of its base rollouts (before) and of all its rollouts
    (after its continuations), and whether it was left out of the update."""
    out_of_update = set(dropped)
    groups: dict[str, list[RolloutSummary]] = {}
    for s in summaries:
        groups.setdefault(s.group_id, []).append(s)
    out = []
    for gid in sorted(groups):
        members = groups[gid]
        base = [m.reward for m in members if not m.parent_episode_id]
        every = [m.reward for m in members]
        out.append(
            GroupContrast(
                group_id=gid,
                task_id=members[0].task_id,
                base=len(base),
                continuations=len(every) - len(base),
                before=reward_contrast(base),
                after=reward_contrast(every),
                dropped=gid in out_of_update,
            )
        )
    return out
