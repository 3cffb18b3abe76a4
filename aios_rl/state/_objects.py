"""Reading Object Store objects without nats-py's ``ObjectStore.get`` gap.

``get`` reads chunks through an ordered push consumer and stops when the iterator ends; if the
consumer is reset or the subscription ends before the last chunk (seen here under load: 2 MiB
of an 8.7 MiB checkpoint came back), it returns the partial object without checking its
digest. :func:`read_object` instead fetches each chunk by direct get until it has the object's
size, then checks the SHA-256. The chunks of an object written alone sit one after the other in
the stream, so after the first one (``next_by_subj`` from the start) it asks for the following
sequences ``_WINDOW`` at a time, concurrently: an 8 MiB checkpoint in a few round trips instead
of 65 sequential ones (which, on a busy event loop, each wait their turn). At the first sequence
that is not one of this object's chunks (another object's chunks interleaved), it goes on chunk
by chunk with ``next_by_subj``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib

from nats.js import JetStreamContext

from aios_rl.errors import AiosError

__all__ = ["ObjectReadError", "read_object"]

_STREAM = "OBJ_{bucket}"
_CHUNKS = "$O.{bucket}.C.{nuid}"
_WINDOW = 16
"""Chunks asked for at once while they are contiguous."""


class ObjectReadError(AiosError):
    """The object's chunks do not add up to its recorded size or digest."""


async def read_object(js: JetStreamContext, bucket: str, name: str) -> bytes:
    """The whole object ``name`` of Object Store ``bucket``, verified.

    Raises nats-py's ``ObjectNotFoundError`` for a missing object and ``ObjectReadError`` for
    one whose chunks are missing or do not match its digest."""
    store = await js.object_store(bucket)
    info = await store.get_info(name)
    size = info.size or 0
    if size == 0:
        return b""
    stream = _STREAM.format(bucket=bucket)
    subject = _CHUNKS.format(bucket=bucket, nuid=info.nuid)
    parts: list[bytes] = []
    got = 0
    seq = 1
    contiguous = True
    while got < size:
        left = (info.chunks or 0) - len(parts)
        if parts and contiguous and left > 1:
            batch = await asyncio.gather(
                *(js.get_msg(stream, seq=seq + i, direct=True) for i in range(min(_WINDOW, left))),
                return_exceptions=True,
            )
            for msg in batch:
                if isinstance(msg, BaseException) or msg.subject != subject or not msg.data:
                    contiguous = False  # not ours (or gone): chunk by chunk from here
                    break
                parts.append(msg.data)
                got += len(msg.data)
                seq += 1
            continue
        msg = await js.get_msg(stream, seq=seq, subject=subject, next=True, direct=True)
        if msg.seq is None or not msg.data:
            raise ObjectReadError(f"{bucket}/{name}: chunk after sequence {seq} is empty")
        parts.append(msg.data)
        got += len(msg.data)
        seq = msg.seq + 1
    data = b"".join(parts)
    digest = (info.digest or "").split("=", 1)[-1]
    if got != size or (
        digest
        and base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4))
        != hashlib.sha256(data).digest()
    ):
        raise ObjectReadError(
            f"{bucket}/{name}: read {got} bytes of {size}, or the digest does not match"
        )
    return data
