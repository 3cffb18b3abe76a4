"""Text into hashed n-gram ids: no vocabulary to download, stable across processes."""

from __future__ import annotations

import re
import zlib

__all__ = ["hashed_ngrams"]

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+|[^\sA-Za-z0-9_]")


def hashed_ngrams(text: str, buckets: int, *, max_chars: int = 2048) -> list[int]:
    """Ids in ``[1, buckets)`` for character 3-grams and word uni/bi-grams of ``text``.

    Long text keeps its head and tail (where command output says most). Id 0 is padding, so an
    empty text maps to ``[0]``. ``crc32`` keeps ids stable across processes and machines."""
    if len(text) > max_chars:
        half = max_chars // 2
        text = text[:half] + "\n" + text[-half:]
    low = text.lower()
    ids: list[int] = []
    mod = buckets - 1
    padded = f"\x02{low}\x03"
    for i in range(len(padded) - 2):
        ids.append(1 + zlib.crc32(b"c" + padded[i : i + 3].encode()) % mod)
    words = _WORD.findall(low)
    prev = "\x02"
    for w in words:
        ids.append(1 + zlib.crc32(b"w" + w.encode()) % mod)
        ids.append(1 + zlib.crc32(b"b" + (prev + " " + w).encode()) % mod)
        prev = w
    return ids or [0]
