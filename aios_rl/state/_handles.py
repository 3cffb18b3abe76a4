"""Handles on one KV bucket and one Object Store, and the room's one compare-and-set.

Every store of the room reads and writes through these: nats errors become the store's own
classes here (:func:`~aios_rl.state._errors.translated`), complete reads and restart-safe
watches come from :mod:`._kv`, verified object reads from :mod:`._objects`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Iterator
from typing import Generic, NamedTuple, TypeVar

import msgspec
import nats.errors
import nats.js.errors
from nats.js import api
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from aios_rl.bus import Bus, BusError

from . import _kv
from ._errors import ContentionError, StaleRevisionError, UnavailableError
from ._objects import ObjectReadError, read_object

__all__ = [
    "Cas",
    "EntryDecoder",
    "ErrorKinds",
    "Kv",
    "Objects",
    "compare_and_set",
    "translated",
]

T = TypeVar("T")


class ErrorKinds(NamedTuple):
    """The classes a store's handles raise for each kind (its own subclasses, or the roots)."""

    unavailable: type[Exception] = UnavailableError
    contention: type[Exception] = ContentionError
    invalid_key: type[Exception] = ValueError


_STREAM_NOT_FOUND = 10059
"""JetStream's error code for a missing stream (a bucket that was never provisioned)."""

_MISSING_BUCKET = (
    "the bucket does not exist (no aios-rl state on this server yet, or another --namespace): "
    "run a command that writes first (`aios-rl demo`, `aios-rl train`), or, as the admin, "
    "`aios-rl auth provision`"
)
"""What a read of a bucket that was never provisioned says (the CLI prints it in one line)."""

ROOT_KINDS = ErrorKinds()
"""The room's root classes, for handles that no store owns."""


@contextlib.contextmanager
def translated(what: str, kinds: ErrorKinds = ROOT_KINDS) -> Iterator[None]:
    """Run the block, turning nats and bus errors into ``kinds``' classes: the room's one
    translation point. JetStream's "not found" and "wrong last sequence" errors pass through:
    each handle decides what a missing key or a lost compare-and-set means."""
    try:
        yield
    except nats.js.errors.KeyWrongLastSequenceError:
        raise
    except nats.js.errors.BucketNotFoundError as exc:
        raise kinds.unavailable(f"{what}: {_MISSING_BUCKET}") from exc
    except nats.js.errors.NotFoundError as exc:
        if exc.err_code == _STREAM_NOT_FOUND:  # the bucket itself: not provisioned
            raise kinds.unavailable(f"{what}: {_MISSING_BUCKET}") from exc
        raise
    except nats.js.errors.InvalidKeyError as exc:
        raise kinds.invalid_key(f"{what}: not a valid key") from exc
    except (nats.errors.Error, BusError, TimeoutError) as exc:
        raise kinds.unavailable(f"{what}: NATS failed: {exc!r}") from exc


_KV_STREAM = "KV_{bucket}"
_KV_OP = "KV-Operation"

SCAN_NEXT_TIMEOUT_S = 2.0
"""Longest wait for the next entry of a scan (the server holds them already)."""
_KV_SUBJECT = "$KV.{bucket}.{key}"


class Kv:
    """One KV bucket (its full name, as ``bus.names.bucket(...)`` gives it; provisioned).

    Every method raises ``kinds.unavailable`` when NATS fails and ``kinds.invalid_key`` for a
    key NATS refuses."""

    def __init__(self, bus: Bus, bucket: str, kinds: ErrorKinds = ROOT_KINDS) -> None:
        self.bus = bus
        self.bucket = bucket
        self.kinds = kinds
        self._handle: KeyValue | None = None

    async def _kv(self) -> KeyValue:
        if self._handle is None:
            with translated(f"open KV {self.bucket}", self.kinds):
                self._handle = await self.bus.js.key_value(self.bucket)
        return self._handle

    async def latest(self, key: str) -> _kv.KvEntry | None:
        """The newest revision of ``key`` (a tombstone has ``value`` ``None``), or ``None`` when
        the key was never written. Its revision is what :meth:`write` must name."""
        with translated(f"read {self.bucket}/{key}", self.kinds):
            return await _kv.latest(self.bus.js, self.bucket, key)

    async def write(self, key: str, data: bytes, *, revision: int) -> int:
        """Write ``data`` if ``key`` is still at ``revision`` (0: never written); returns the new
        revision. Raises ``StaleRevisionError`` (nothing written) when it moved on."""
        kv = await self._kv()
        with translated(f"write {self.bucket}/{key}", self.kinds):
            try:
                return await kv.update(key, data, last=revision)
            except nats.js.errors.KeyWrongLastSequenceError as exc:
                raise StaleRevisionError(
                    f"{self.bucket}/{key} is no longer at revision {revision}"
                ) from exc

    async def put(self, key: str, data: bytes) -> int:
        """Write ``data`` whatever the key holds; returns the revision."""
        kv = await self._kv()
        with translated(f"put {self.bucket}/{key}", self.kinds):
            return await kv.put(key, data)

    async def read(self, pattern: str, *, history: bool) -> list[_kv.KvEntry]:
        """Every kept revision (``history``) or the newest of each key matching ``pattern``,
        oldest first, tombstones included; complete under concurrent writes (see ``_kv.read``)."""
        with translated(f"read {self.bucket}/{pattern}", self.kinds):
            return await _kv.read(self.bus.js, self.bucket, pattern, history=history)

    async def scan(self, pattern: str, *, complete: bool) -> list[tuple[str, bytes]]:
        """(key, value) of the newest revision of every live key matching ``pattern``.

        Reads an ordered consumer until a message says nothing is pending after it: complete
        whatever other writers do meanwhile, and unlike :meth:`read` it does not wait for a
        revision that was purged while it ran. When the server stops delivering, raises
        ``kinds.unavailable`` if ``complete``, else returns what it read."""
        prefix = _KV_SUBJECT.format(bucket=self.bucket, key="")
        with translated(f"scan {self.bucket}/{pattern}", self.kinds):
            sub = await self.bus.js.subscribe(
                prefix + pattern,
                stream=_KV_STREAM.format(bucket=self.bucket),
                ordered_consumer=True,
                deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
            )
        out: list[tuple[str, bytes]] = []
        try:
            with translated(f"scan {self.bucket}/{pattern}", self.kinds):
                info = await sub.consumer_info()
            if not info.num_pending and not (info.delivered and info.delivered.consumer_seq):
                return out
            while True:
                try:
                    msg = await sub.next_msg(timeout=SCAN_NEXT_TIMEOUT_S)
                except nats.errors.TimeoutError as exc:
                    if complete:
                        raise self.kinds.unavailable(
                            f"scan of {pattern} in {self.bucket} stopped after {len(out)} keys"
                        ) from exc
                    return out
                if not (msg.headers and msg.headers.get(_KV_OP)):
                    out.append((msg.subject[len(prefix) :], msg.data))
                if msg.metadata.num_pending == 0:
                    return out
        finally:
            # A closing connection takes the ephemeral consumer with it.
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    async def purge(self, key: str) -> None:
        """Remove every revision of ``key`` from the bucket's stream: no tombstone is left."""
        with translated(f"purge {self.bucket}/{key}", self.kinds):
            await self.bus.js.purge_stream(
                _KV_STREAM.format(bucket=self.bucket),
                subject=_KV_SUBJECT.format(bucket=self.bucket, key=key),
            )

    def watch(
        self, pattern: str, decode: Callable[[_kv.KvEntry], T | None], *, check_every: float = 1.0
    ) -> _kv.KvWatch[T]:
        """Live updates of the keys matching ``pattern`` (see :class:`._kv.KvWatch`)."""
        return _kv.KvWatch(self.bus, self.bucket, pattern, decode, check_every=check_every)


class EntryDecoder(Generic[T]):
    """Decodes a KV entry's value as ``type`` (``None`` for a tombstone), raising
    ``corrupt`` with a sentence naming the key and revision for a value that is not one."""

    def __init__(self, type: type[T], corrupt: type[Exception], key: str, what: str) -> None:
        self._decoder = msgspec.json.Decoder(type)
        self._corrupt = corrupt
        self._key = key
        self._what = what

    def __call__(self, entry: _kv.KvEntry) -> T | None:
        if entry.value is None:
            return None
        try:
            return self._decoder.decode(entry.value)
        except msgspec.DecodeError as exc:
            raise self._corrupt(
                f"{self._key} {entry.key!r} (revision {entry.revision}) is not {self._what}: {exc}"
            ) from exc


class Cas(NamedTuple, Generic[T]):
    """What :func:`compare_and_set` left under the key."""

    value: T | None
    """The value now stored (``None``: the key holds nothing and nothing was written)."""
    revision: int
    """Its revision (0 when the key was never written)."""
    written: bool
    """Whether this call wrote it."""
    conflicts: int
    """Compare-and-sets lost to other writers before this one."""


async def compare_and_set(
    kv: Kv,
    key: str,
    change: Callable[[T | None], T | None],
    *,
    decode: Callable[[_kv.KvEntry], T | None],
    encode: Callable[[T], bytes],
    attempts: int = 50,
) -> Cas[T]:
    """Read-modify-write ``key`` with one compare-and-set on the revision read.

    ``change(current)`` (``None`` when the key holds nothing) returns the value to store, or
    ``current`` itself (the same object) or ``None`` to write nothing. It may run several
    times, each time on the newest value, so it must be pure; an exception it raises ends the
    call with nothing written. A lost compare-and-set re-reads after a short jittered back-off.
    Raises ``kv.kinds.contention`` after ``attempts`` lost in a row, ``kv.kinds.unavailable``
    when NATS fails, and whatever ``decode`` raises for a value that is not a ``T``."""
    for attempt in range(attempts):
        entry = await kv.latest(key)
        current = None if entry is None or entry.value is None else decode(entry)
        revision = 0 if entry is None else entry.revision
        updated = change(current)
        if updated is None or updated is current:
            return Cas(current, revision if current is not None else 0, False, attempt)
        try:
            revision = await kv.write(key, encode(updated), revision=revision)
        except StaleRevisionError:
            await asyncio.sleep(random.uniform(0, 0.001 * 2 ** min(attempt, 5)))
            continue
        return Cas(updated, revision, True, attempt)
    raise kv.kinds.contention(
        f"{kv.bucket}/{key}: lost the compare-and-set {attempts} times in a row"
    )


class Objects:
    """One Object Store bucket (full name; provisioned). Every method raises
    ``kinds.unavailable`` when NATS fails."""

    def __init__(self, bus: Bus, bucket: str, kinds: ErrorKinds = ROOT_KINDS) -> None:
        self.bus = bus
        self.bucket = bucket
        self.kinds = kinds
        self._handle: ObjectStore | None = None

    async def _store(self) -> ObjectStore:
        if self._handle is None:
            with translated(f"open object store {self.bucket}", self.kinds):
                self._handle = await self.bus.js.object_store(self.bucket)
        return self._handle

    async def get(self, name: str) -> bytes | None:
        """The whole object, its size and digest checked (never a partial object), or ``None``
        when there is none. A read whose chunks do not add up raises ``kinds.unavailable``."""
        await self._store()  # a missing bucket is unavailable, not a missing object
        with translated(f"read {self.bucket}/{name}", self.kinds):
            try:
                return await read_object(self.bus.js, self.bucket, name)
            except nats.js.errors.NotFoundError:
                return None
            except ObjectReadError as exc:
                raise self.kinds.unavailable(str(exc)) from exc

    async def exists(self, name: str) -> bool:
        """Whether an object (not deleted) is stored under ``name``."""
        obs = await self._store()
        with translated(f"look up {self.bucket}/{name}", self.kinds):
            try:
                info = await obs.get_info(name)
            except nats.js.errors.NotFoundError:
                return False
        return not info.deleted

    async def size(self, name: str) -> int | None:
        """The stored size of ``name``, ``None`` when there is none."""
        obs = await self._store()
        with translated(f"look up {self.bucket}/{name}", self.kinds):
            try:
                info = await obs.get_info(name)
            except nats.js.errors.NotFoundError:
                return None
        return None if info.deleted else (info.size or 0)

    async def put(self, name: str, data: bytes, *, headers: dict[str, str] | None = None) -> None:
        """Store ``data`` under ``name`` (replacing what was there)."""
        obs = await self._store()
        meta = api.ObjectMeta(name=name, headers=headers) if headers else None
        with translated(f"write {self.bucket}/{name}", self.kinds):
            await obs.put(name, data, meta=meta)
