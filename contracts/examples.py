"""A valid instance of any message, built from its type information alone: what a test or a
harness sends when it needs a well-formed message of a schema it only knows by name.

    example(registered()["rail_decide_request.v1"])          # required fields, smallest values
    example(Episode, full=True)                              # every field set, nested ones too

Pure: msgspec and the standard library.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
import msgspec.inspect as mi

from ._base import Message

__all__ = ["example"]

M = TypeVar("M", bound=Message)


def _value(info: mi.Type, *, full: bool) -> Any:
    """A builtin value that converts into the type ``info`` describes.

    ``full=False`` fills only required fields with the smallest values; ``full=True`` fills every
    field (optionals with a value, lists and dicts with one item) so nested types round-trip too.
    Raises ``TypeError`` for a kind of type it has no value for."""
    match info:
        case mi.StructType():
            out: dict[str, Any] = {}
            if info.tag_field is not None:
                out[info.tag_field] = info.tag
            for f in info.fields:
                if f.required or full:
                    out[f.encode_name] = _value(f.type, full=full)
            return out
        case mi.StrType() if info.pattern is not None:
            return "shell"  # the one constrained string: an environment name
        case mi.StrType():
            return "s1" if full else ""
        case mi.BoolType():
            return full
        case mi.IntType():
            return 3 if full else 0
        case mi.FloatType():
            return 0.25 if full else 0.0
        case mi.BytesType():
            return b"\x00\xffraw" if full else b""
        case mi.LiteralType():
            return info.values[-1] if full else info.values[0]
        case mi.ListType() | mi.VarTupleType() | mi.SetType() | mi.FrozenSetType():
            return [_value(info.item_type, full=full)] if full else []
        case mi.DictType():
            return {"k": _value(info.value_type, full=full)} if full else {}
        case mi.UnionType():
            options = [t for t in info.types if not isinstance(t, mi.NoneType)]
            return _value(options[-1] if full else options[0], full=full)
        case mi.AnyType():  # free JSON (a tool's definition): an object
            return {"k": "s1"} if full else {}
        case mi.NoneType():
            return None
    raise TypeError(f"no example value for {info!r}: extend contracts.examples._value")


def example(t: type[M], *, full: bool = False) -> M:
    """A valid ``t``: its required fields with the smallest values (``full``: every field with a
    value). Raises ``TypeError`` for a field of a kind it cannot fill."""
    return msgspec.convert(_value(mi.type_info(t), full=full), t)
