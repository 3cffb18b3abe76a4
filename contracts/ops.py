"""Operational messages: dead letters and service status."""

from __future__ import annotations

import msgspec

from ._base import Message

__all__ = [
    "ConsumerStats",
    "DeadLetter",
    "ErrorReply",
    "ServiceStatus",
    "dead_letter_object",
    "request_dead_letter_object",
]


class DeadLetter(Message, frozen=True, kw_only=True):
    """A message that could not be processed, kept on ``dlq.<stream>`` for diagnosis: whole when
    it fits in a bus message, else its payload is in the Object Store ``evidence``
    (``payload_ref``) or, when that fails too, cut short (``payload_size`` and ``payload_sha256``
    describe the original). A request an endpoint refused because it came without a reply
    subject is kept on ``dlq.REQUESTS`` (no stream held it: ``stream`` and ``consumer`` are
    empty, ``endpoint`` names it)."""

    SCHEMA = "dead_letter.v1"

    service: str
    stream: str
    consumer: str
    subject: str
    stream_seq: int = 0
    deliveries: int = 0
    reason: str
    """``undecodable``, ``failed`` (retries exhausted), ``rejected`` (a permanent error) or
    ``no_reply`` (a request sent without a reply subject, not handled)."""
    error: str = ""
    schema: str = ""
    headers: dict[str, str] = {}
    payload: bytes = b""
    at: float = 0.0
    payload_size: int = 0
    """Bytes of the original payload (``payload`` is shorter when it was cut or stored away)."""
    payload_sha256: str = ""
    """Hex digest of the original payload, when ``payload`` does not hold all of it."""
    payload_ref: str = ""
    """Object Store ``evidence`` name of the original payload (:func:`dead_letter_object`), when
    it was too large to keep here."""
    endpoint: str = ""
    """The endpoint that refused a request (reason ``no_reply``); empty for a stream's message."""


def dead_letter_object(stream: str, seq: int) -> str:
    """The Object Store ``evidence`` name of a dead letter's payload: ``dlq/<stream>/<seq>``."""
    return f"dlq/{stream}/{seq}"


def request_dead_letter_object(service: str, endpoint: str, sha256: str) -> str:
    """The Object Store ``evidence`` name of the payload of a refused request's dead letter (it
    has no stream sequence): ``dlq/requests/<service>/<endpoint>/<sha256 of the payload>``."""
    return f"dlq/requests/{service}/{endpoint}/{sha256}"


class ConsumerStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of one durable consumer within one service process."""

    consumer: str
    subject: str
    processed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    last_error: str = ""
    schema: str = ""
    """The schema of the messages it reads (``episode.v1``, ...), as an endpoint's
    ``request_schema`` names what it takes."""


class ServiceStatus(Message, frozen=True, kw_only=True):
    """What a service process reports about itself beyond ``$SRV.STATS``."""

    SCHEMA = "service_status.v1"

    service: str
    instance: str
    version: str
    consumers: list[ConsumerStats] = []
    extra: dict[str, float] = {}
    """Service-specific counters (lane counts, cache sizes, ...)."""


class ErrorReply(Message, frozen=True, kw_only=True):
    """The body of every error reply of a service endpoint, beside the ``Nats-Service-Error`` /
    ``Nats-Service-Error-Code`` headers of the NATS service API (which carry the same code and
    message), so a client that parses every reply gets a typed error instead of an empty body.

    Codes: ``400`` the request did not decode (``expected_schema`` names what the endpoint
    takes), ``422`` the request can never succeed, ``500`` the handler failed, ``503`` a
    dependency is unavailable (retry later)."""

    SCHEMA = "error.v1"

    code: str
    message: str
    expected_schema: str = ""
    """The request schema the endpoint takes (its ``$SRV.INFO`` metadata says it too)."""
    service: str = ""
    endpoint: str = ""
