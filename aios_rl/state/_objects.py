"""Reading Object Store objects without nats-py's ``ObjectStore.get`` gap.

``get`` reads chunks through an ordered push consumer and stops when the iterator ends; if the
consumer is reset or the subscription ends before the last chunk (seen here under load: 2 MiB
of an 8.7 MiB checkpoint came back), it returns the partial object without checking its
digest. :func:`read_object` instead fetches each chunk by direct get (``next_by_subj`` from the
sequence after the previous chunk) until it has the object's size, then checks the SHA-256.
"""

from __future__ import annotations

import base64
import hashlib

from nats.js import JetStreamContext

__all__ = ["ObjectReadError", "read_object"]

_STREAM = "OBJ_{bucket}"
_CHUNKS = "$O.{bucket}.C.{nuid}"


class ObjectReadError(Exception):
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
    while got < size:
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
