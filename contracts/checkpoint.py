"""Checkpoint metadata, the three lineage pointers, and pointer events."""

from __future__ import annotations

from typing import Literal

import msgspec

from ._base import Message
from .vocab import Algorithm, PointerName

__all__ = ["CheckpointEvent", "CheckpointMeta", "CheckpointPointers", "PointerMove"]


class CheckpointMeta(Message, frozen=True, kw_only=True):
    """What is known of one checkpoint: where its weights are and where it came from."""

    SCHEMA = "checkpoint_meta.v1"

    checkpoint_id: str
    """Content address: a prefix of the sha256 of the weights."""
    parent_id: str | None = None
    created_by: str = ""
    """The update that made it (trainer update id), or ``init``."""
    algorithm: Algorithm | Literal["init"] = "init"
    backend: str = "tiny"
    """The student backend that can load these weights."""
    object_name: str = ""
    size_bytes: int = 0
    sha256: str = ""
    created_at: float = 0.0
    seq: int = 0
    """Lineage depth: 0 for an initial checkpoint, parent's seq + 1 after."""
    metrics: dict[str, float] = {}


class CheckpointPointers(Message, frozen=True, kw_only=True):
    """The three pointers, moved together by one compare-and-set on KV ``checkpoints``."""

    SCHEMA = "checkpoint_pointers.v1"

    active: str | None = None
    pre_update_ref: str | None = None
    last_stable: str | None = None
    updated_at: float = 0.0
    reason: str = ""


class PointerMove(msgspec.Struct, frozen=True, kw_only=True):
    """One pointer changing value."""

    pointer: PointerName
    old: str | None
    new: str | None
    reason: str = ""


class CheckpointEvent(Message, frozen=True, kw_only=True):
    """Published on ``checkpoint.event.<kind>`` after a registry write."""

    SCHEMA = "checkpoint_event.v1"

    kind: Literal["stored", "advanced", "rolled_back", "promoted"]
    checkpoint_id: str | None = None
    pointers: CheckpointPointers = CheckpointPointers()
    moves: list[PointerMove] = []
    metrics: dict[str, float] = {}
    at: float = 0.0
