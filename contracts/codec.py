"""Encode messages to JSON with their schema header; decode them back, checking both.

Decoders and encoders are built once per type. Every failure to decode raises
:class:`DecodeError`, whatever the bytes hold, which says why (``missing_schema``,
``unknown_schema``, ``wrong_schema``, ``too_large``, ``too_deep``, ``invalid_payload``) and keeps
the schema it saw; every failure to encode raises :class:`EncodeError`.

Hostile input is refused before msgspec sees it: a payload over :data:`MAX_PAYLOAD_BYTES`, or
nested deeper than :data:`MAX_DEPTH` (msgspec's decoder recurses per level, and thousands of
levels end in a ``RecursionError``), is a ``DecodeError``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from ._base import Message
from .subjects import SCHEMA_HEADER

__all__ = [
    "MAX_DEPTH",
    "MAX_PAYLOAD_BYTES",
    "ContractError",
    "DecodeError",
    "EncodeError",
    "decode",
    "decode_any",
    "encode",
    "register",
    "schema_of",
]

M = TypeVar("M", bound=Message)

MAX_PAYLOAD_BYTES = 1024 * 1024
"""The largest payload :func:`decode` reads by default: NATS's default ``max_payload`` (1 MiB),
so no message of a default server is refused, and a server configured larger cannot make a
service parse more."""

MAX_DEPTH = 64
"""The deepest nesting of JSON objects and arrays :func:`decode` reads (our deepest contract
nests under ten levels)."""

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
"""A JSON string, escapes included: what it holds is text, never nesting."""
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPEN_CLOSE = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
"""Opening brackets to 2 and closing ones to 0: each byte minus one is the change of depth."""

_encoder = msgspec.json.Encoder()
_decoders: dict[type, msgspec.json.Decoder[Any]] = {}
_by_schema: dict[str, type[Message]] = {}


class ContractError(Exception):
    """Root of every error the contracts package raises."""


class EncodeError(ContractError):
    """A message could not be encoded: it holds what JSON cannot carry (a lone surrogate, an
    object of no JSON type), or it is no message at all."""


class DecodeError(ContractError):
    """A payload could not be decoded into the contract its header (or the caller) names."""

    def __init__(self, reason: str, detail: str, schema: str = "") -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.schema = schema


def register(*types: type[Message]) -> None:
    """Make message types known to :func:`decode_any` by their ``SCHEMA``.

    Raises ``ContractError`` when a type has no schema name or two types claim one."""
    for t in types:
        name = t.SCHEMA
        if not name:
            raise ContractError(f"{t.__name__} has no SCHEMA name.")
        known = _by_schema.get(name)
        if known is not None and known is not t:
            raise ContractError(f"schema {name!r} is claimed by {known.__name__} and {t.__name__}.")
        _by_schema[name] = t


def schema_of(t: type[Message] | Message) -> str:
    """The schema name of a message type or instance."""
    return t.SCHEMA


def registered() -> dict[str, type[Message]]:
    """Schema name -> type, for every registered message."""
    return dict(_by_schema)


def _decoder(t: type) -> msgspec.json.Decoder[Any]:
    dec = _decoders.get(t)
    if dec is None:
        dec = _decoders[t] = msgspec.json.Decoder(t)
    return dec


def encode(msg: Message, headers: Mapping[str, str] | None = None) -> tuple[bytes, dict[str, str]]:
    """JSON bytes and headers (the schema header plus any given) for ``msg``.

    Raises ``EncodeError`` when ``msg`` is not a message or holds what JSON cannot carry."""
    schema = msg.SCHEMA if isinstance(msg, Message) else ""
    if not schema:
        raise EncodeError(f"{type(msg).__name__} is not a message with a SCHEMA name.")
    out = dict(headers) if headers else {}
    out[SCHEMA_HEADER] = schema
    try:
        return _encoder.encode(msg), out
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        # ValueError covers UnicodeEncodeError (a lone surrogate in a string).
        raise EncodeError(f"{schema}: {type(exc).__name__}: {exc}") from exc


def _depth_exceeds(data: bytes, limit: int) -> bool:
    """Whether ``data`` nests objects and arrays deeper than ``limit`` (brackets in strings do
    not count, unclosed ones do). Linear: ``re`` drops the strings and ``bytes.translate``
    keeps the brackets, both in C; one Python pass over those brackets runs only when there
    are more than ``limit`` of them."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False  # the common case: too few brackets to nest that deep
    brackets = _STRING.sub(b"", data).translate(_OPEN_CLOSE, _NOT_BRACKETS)
    depth = 0
    for step in brackets:
        depth += step - 1
        if depth > limit:
            return True
    return False


def decode(
    data: bytes,
    headers: Mapping[str, str] | None,
    expected: type[M],
    *,
    max_bytes: int = MAX_PAYLOAD_BYTES,
) -> M:
    """Decode ``data`` into ``expected``.

    Raises ``DecodeError``, and nothing else whatever ``data`` holds: ``missing_schema`` /
    ``wrong_schema`` when the schema header is missing or names another contract, ``too_large``
    over ``max_bytes`` (raise it to read an Object Store document larger than a bus message),
    ``too_deep`` when it nests deeper than :data:`MAX_DEPTH`, ``invalid_payload`` when it is not
    JSON (invalid UTF-8, a lone surrogate, a number out of range, ``NaN``, ...) or does not fit
    the type. Of duplicate keys the last one wins."""
    schema = (headers or {}).get(SCHEMA_HEADER, "")
    if not schema:
        raise DecodeError(
            "missing_schema", f"no {SCHEMA_HEADER} header; expected {expected.SCHEMA}"
        )
    if schema != expected.SCHEMA:
        raise DecodeError(
            "wrong_schema", f"header says {schema}, expected {expected.SCHEMA}", schema
        )
    if len(data) > max_bytes:
        raise DecodeError(
            "too_large",
            f"{expected.SCHEMA}: {len(data)} bytes, more than the {max_bytes} a payload may hold",
            schema,
        )
    if _depth_exceeds(data, MAX_DEPTH):
        raise DecodeError(
            "too_deep", f"{expected.SCHEMA}: nested deeper than {MAX_DEPTH} levels", schema
        )
    try:
        return _decoder(expected).decode(data)
    except msgspec.DecodeError as exc:  # ValidationError included
        raise DecodeError("invalid_payload", f"{expected.SCHEMA}: {exc}", schema) from exc
    except RecursionError as exc:  # the depth check should make this unreachable
        raise DecodeError("too_deep", f"{expected.SCHEMA}: {exc}", schema) from exc


def decode_any(
    data: bytes, headers: Mapping[str, str] | None, *, max_bytes: int = MAX_PAYLOAD_BYTES
) -> Message:
    """Decode by whatever registered contract the schema header names.

    Raises ``DecodeError`` as :func:`decode` does, and ``unknown_schema`` for a name no type
    claims."""
    schema = (headers or {}).get(SCHEMA_HEADER, "")
    if not schema:
        raise DecodeError("missing_schema", f"no {SCHEMA_HEADER} header")
    t = _by_schema.get(schema)
    if t is None:
        raise DecodeError("unknown_schema", f"no contract is named {schema!r}", schema)
    return decode(data, headers, t, max_bytes=max_bytes)
