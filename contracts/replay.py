"""Replay sampling: the trainer asks for a batch by lane mix."""

from __future__ import annotations

import msgspec

from ._base import Message
from .episode import Episode
from .vocab import Environment

__all__ = ["ReplayBatch", "ReplaySampleRequest"]


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
