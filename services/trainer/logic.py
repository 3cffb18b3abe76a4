"""Trainer logic without NATS: which episodes an update learns from (the update itself is
``aios_rl.student.train.train_step``, shared with the in-process kernel)."""

from __future__ import annotations

from collections.abc import Iterable

from contracts import Episode, TrainerUpdate

__all__ = ["select_online", "split_offline"]


def select_online(
    req: TrainerUpdate, episodes: Iterable[Episode]
) -> tuple[list[Episode], list[Episode], list[Episode]]:
    """From compared episodes, this update's fresh rollouts (its campaign, epoch and groups;
    one copy per episode id), and among them the ones better / worse than the reference
    (distillation targets / KL states)."""
    groups = set(req.group_ids)
    seen: set[str] = set()
    fresh: list[Episode] = []
    for ep in episodes:
        if ep.role != "rollout" or ep.episode_id in seen:
            continue
        if req.campaign_id and ep.campaign_id != req.campaign_id:
            continue
        if req.campaign_id and ep.epoch != req.epoch:
            continue
        if groups and ep.group_id not in groups:
            continue
        seen.add(ep.episode_id)
        fresh.append(ep)
    fresh.sort(key=lambda e: e.episode_id)  # stream order varies; the update must not
    boundary = lambda e: e.teacher_signal is not None and e.teacher_signal.boundary  # noqa: E731
    better = [
        e for e in fresh if e.comparison and e.comparison.verdict == "better" and not boundary(e)
    ]
    worse = [
        e for e in fresh if e.comparison and e.comparison.verdict == "worse" and not boundary(e)
    ]
    return fresh, better, worse


def split_offline(
    episodes: Iterable[Episode],
) -> tuple[list[Episode], list[Episode], list[Episode]]:
    """A replay batch by lane: (neutral for policy gradient, positive to distil, negative for KL)."""
    by_lane: dict[str, list[Episode]] = {"neutral": [], "positive": [], "negative": []}
    for ep in sorted(episodes, key=lambda e: e.episode_id):
        if ep.lane in by_lane:
            by_lane[ep.lane].append(ep)
    return by_lane["neutral"], by_lane["positive"], by_lane["negative"]
