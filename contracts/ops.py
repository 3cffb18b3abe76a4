"""Operational messages: dead letters and service status."""

from __future__ import annotations

import msgspec

from ._base import Message

__all__ = ["ConsumerStats", "DeadLetter", "ServiceStatus"]


class DeadLetter(Message, frozen=True, kw_only=True):
    """A message that could not be processed, kept whole on ``dlq.<stream>`` for diagnosis."""

    SCHEMA = "dead_letter.v1"

    service: str
    stream: str
    consumer: str
    subject: str
    stream_seq: int = 0
    deliveries: int = 0
    reason: str
    """``undecodable``, ``failed`` (retries exhausted) or ``rejected`` (a permanent error)."""
    error: str = ""
    schema: str = ""
    headers: dict[str, str] = {}
    payload: bytes = b""
    at: float = 0.0


class ConsumerStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of one durable consumer within one service process."""

    consumer: str
    subject: str
    processed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    last_error: str = ""


class ServiceStatus(Message, frozen=True, kw_only=True):
    """What a service process reports about itself beyond ``$SRV.STATS``."""

    SCHEMA = "service_status.v1"

    service: str
    instance: str
    version: str
    consumers: list[ConsumerStats] = []
    extra: dict[str, float] = {}
    """Service-specific counters (lane counts, cache sizes, ...)."""
