"""Encode messages to JSON with their schema header; decode them back, checking both.

Decoders and encoders are built once per type. Every failure to decode raises
:class:`DecodeError`, which says why (``missing_schema``, ``unknown_schema``, ``wrong_schema``,
``invalid_payload``) and keeps the schema it saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from ._base import Message
from .subjects import SCHEMA_HEADER

__all__ = [
    "ContractError",
    "DecodeError",
    "decode",
    "decode_any",
    "encode",
    "register",
    "schema_of",
]

M = TypeVar("M", bound=Message)

_encoder = msgspec.json.Encoder()
_decoders: dict[type, msgspec.json.Decoder[Any]] = {}
_by_schema: dict[str, type[Message]] = {}


class ContractError(Exception):
    """Root of every error the contracts package raises."""


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
    """JSON bytes and headers (the schema header plus any given) for ``msg``."""
    out = dict(headers) if headers else {}
    out[SCHEMA_HEADER] = msg.SCHEMA
    return _encoder.encode(msg), out


def decode(data: bytes, headers: Mapping[str, str] | None, expected: type[M]) -> M:
    """Decode ``data`` into ``expected``.

    Raises ``DecodeError`` when the schema header is missing or names another contract, or when
    the payload does not fit the type."""
    schema = (headers or {}).get(SCHEMA_HEADER, "")
    if not schema:
        raise DecodeError(
            "missing_schema", f"no {SCHEMA_HEADER} header; expected {expected.SCHEMA}"
        )
    if schema != expected.SCHEMA:
        raise DecodeError(
            "wrong_schema", f"header says {schema}, expected {expected.SCHEMA}", schema
        )
    try:
        return _decoder(expected).decode(data)
    except msgspec.DecodeError as exc:
        raise DecodeError("invalid_payload", f"{expected.SCHEMA}: {exc}", schema) from exc


def decode_any(data: bytes, headers: Mapping[str, str] | None) -> Message:
    """Decode by whatever registered contract the schema header names.

    Raises ``DecodeError`` as :func:`decode` does, and ``unknown_schema`` for a name no type
    claims."""
    schema = (headers or {}).get(SCHEMA_HEADER, "")
    if not schema:
        raise DecodeError("missing_schema", f"no {SCHEMA_HEADER} header")
    t = _by_schema.get(schema)
    if t is None:
        raise DecodeError("unknown_schema", f"no contract is named {schema!r}", schema)
    return decode(data, headers, t)
