"""Trainer update commands and their results."""

from __future__ import annotations

from typing import Literal

from ._base import Message
from .campaign import TrainerSettings

__all__ = ["TrainerUpdate", "TrainerUpdateResult"]


class TrainerUpdate(Message, frozen=True, kw_only=True):
    """Run one update of the student from ``base_checkpoint`` (``active`` when empty)."""

    SCHEMA = "trainer_update.v1"

    update_id: str
    campaign_id: str = ""
    epoch: int = 0
    base_checkpoint: str = ""
    settings: TrainerSettings = TrainerSettings()
    source: Literal["online", "offline", "mixed"] = "online"
    group_ids: list[str] = []
    """Online: the fresh groups (episodes in stream ``EPISODES``) to learn from."""
    reference_checkpoint: str = ""
    """KL target; the base checkpoint when empty."""
    since: float = 0.0
    """Online: read fresh episodes published at or after this unix time (the epoch's start)."""


class TrainerUpdateResult(Message, frozen=True, kw_only=True):
    """The checkpoint an update produced and its metrics."""

    SCHEMA = "trainer_update_result.v1"

    update_id: str
    checkpoint_id: str
    parent_id: str | None = None
    samples: int = 0
    metrics: dict[str, float] = {}
