"""Shortening text for a teacher to read, in ways the reader can recognise."""

from __future__ import annotations

__all__ = ["ELLIPSIS", "clip_head", "clip_middle", "shown_as"]

ELLIPSIS = "…"
"""Ends a label shortened by :func:`clip_head`."""


def clip_head(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its first ``limit - 1`` and ``…``.

    Used for action labels: a reader holding the full label can still recognise it
    (:func:`shown_as`)."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 1)] + ELLIPSIS


def clip_middle(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its head and tail around a marker
    that says how much was left out (observations: the end often holds the error)."""
    if len(text) <= limit:
        return text
    tail = limit // 3
    head = max(0, limit - tail)
    cut = len(text) - head - tail
    return f"{text[:head]}\n…[{cut} chars elided]…\n{text[len(text) - tail :] if tail else ''}"


def shown_as(full: str, shown: str) -> bool:
    """Whether ``shown`` is ``full`` as :func:`clip_head` may have shortened it."""
    if shown == full:
        return True
    head = shown[: -len(ELLIPSIS)] if shown.endswith(ELLIPSIS) else ""
    return bool(head.strip()) and len(full) > len(head) and full.startswith(head)
