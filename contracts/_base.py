"""The base every wire message derives from.

Each message type names its schema once, as ``SCHEMA`` (``<name>.v<major>``). The codec puts it
in the ``Aios-Schema`` header, the JSON Schema files are named after it, and ``aios-rl tap``
decodes by it. New fields go at the end and carry defaults, so older readers keep working.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

__all__ = ["Message"]


class Message(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=False):
    """A message that travels on the bus: frozen, keyword-only, named by ``SCHEMA``."""

    SCHEMA: ClassVar[str] = ""
