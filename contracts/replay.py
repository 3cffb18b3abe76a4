"""Replay sampling: the trainer asks for a batch by lane mix."""

from __future__ import annotations

import msgspec

from ._base import Message
from .episode import Episode
from .vocab import Environment, Lane

__all__ = ["ReplayBatch", "ReplaySampleRequest", "lane_for"]

_BY_VERDICT: dict[str, Lane] = {"better": "positive", "same": "neutral", "worse": "negative"}


def lane_for(ep: Episode) -> Lane | None:
    """The replay lane ``ep`` belongs in (the replay service routes by it; the dashboard shows
    it), or ``None`` when it is not a training rollout: a teacher's borderline case goes to
    ``diagnostic_only`` whatever the comparison says; otherwise the comparison's verdict decides
    (better: ``positive``, same: ``neutral``, worse: ``negative``); a failed comparison, or none,
    goes to ``diagnostic_only``."""
    if ep.role != "rollout":
        return None
    if ep.teacher_signal is not None and ep.teacher_signal.boundary:
        return "diagnostic_only"
    if ep.comparison is None:
        return "diagnostic_only"
    return _BY_VERDICT.get(ep.comparison.verdict, "diagnostic_only")


class ReplaySampleRequest(Message, frozen=True, kw_only=True):
    """Ask for up to ``size`` episodes, split across lanes by ``lane_mix`` (weights).

    ``diagnostic_only`` is never served for training, whatever the mix says."""

    SCHEMA = "replay_sample_request.v1"

    size: int
    lane_mix: dict[str, float] = msgspec.field(
        default_factory=lambda: {"positive": 0.5, "neutral": 0.25, "negative": 0.25}
    )
    environments: list[Environment] = []
    """Empty: every environment."""
    min_checkpoint_seq: int = 0
    """Only episodes whose acting checkpoint is at least this deep in the lineage."""
    seed: int = 0


class ReplayBatch(Message, frozen=True, kw_only=True):
    """The episodes served, with how many came from each lane."""

    SCHEMA = "replay_batch.v1"

    episodes: list[Episode] = []
    lane_counts: dict[str, int] = {}
