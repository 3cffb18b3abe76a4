"""Reading and watching KV buckets without the gaps of nats-py's helpers.

Shared by the checkpoint registry, the control store and the ledger. A KV bucket is a stream
``KV_<bucket>`` whose subjects are ``$KV.<bucket>.<key>`` (NATS ADR-8); the revision of an entry
is its stream sequence, and a delete leaves a tombstone carrying a ``KV-Operation`` header.

Why not ``kv.history()`` / ``kv.keys()`` / ``kv.watch()`` directly:

- ``history()`` and ``keys()`` decide they are done from a consumer-info snapshot taken while
  messages are already flowing, so under concurrent writes they can stop early (see
  docs/nats-notes.md). :func:`read` first asks the stream for the last sequence the pattern holds and
  then reads an ordered consumer until it has seen that sequence: complete by construction.
- KV watchers are ordered push consumers that can stall silently after a server restart.
  :class:`KvWatch` re-creates its consumer, from the revision after the last one it yielded,
  whenever the connection has reconnected since the consumer was made. A revision its decoder
  refuses (``CorruptError``: garbage written by hand or by a bug) is logged, counted and skipped:
  the watch goes on, so whoever follows it keeps its last good value until a valid one comes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, NamedTuple, TypeVar

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext, api

from aios_rl.bus import Bus, get_logger

from ._errors import CorruptError

__all__ = ["KvEntry", "KvWatch", "family", "latest", "read"]

T = TypeVar("T")

_KV_OP = "KV-Operation"
_DELETED = frozenset({"DEL", "PURGE"})

_NO_MESSAGE = 10037
"""JetStream's error code for "no message found" (a missing stream is 10059: not ours to hide)."""

READ_TIMEOUT_S = 5.0
"""Longest wait for the next message while reading a key's history (the server has it already)."""


class KvEntry(NamedTuple):
    """One revision of one key; ``value`` is ``None`` for a delete or purge tombstone."""

    key: str
    revision: int
    value: bytes | None


def family(key: str) -> str:
    """The wildcard over a key's last token: ``meta.ab12`` -> ``meta.*``.

    Keys of one family are built by one ``contracts.Names`` method and differ only in their last
    token, so this keeps their format owned by ``Names``."""
    return key.rpartition(".")[0] + ".*"


def _stream(bucket_name: str) -> str:
    return f"KV_{bucket_name}"


def _subject(bucket_name: str, key: str) -> str:
    return f"$KV.{bucket_name}.{key}"


def _entry(bucket_name: str, subject: str, seq: int, data: bytes | None, headers: dict | None):
    deleted = bool(headers) and headers.get(_KV_OP) in _DELETED  # type: ignore[union-attr]
    key = subject[len(_subject(bucket_name, "")) :]
    return KvEntry(key, seq, None if deleted else (data or b""))


async def latest(js: JetStreamContext, bucket_name: str, key: str) -> KvEntry | None:
    """The newest revision of ``key`` (a tombstone included), or ``None`` if it never existed.

    A tombstone's revision is what a compare-and-set must name to write the key again. Raises
    ``nats.js.errors.NotFoundError`` when the bucket does not exist."""
    try:
        msg = await js.get_msg(_stream(bucket_name), subject=_subject(bucket_name, key))
    except nats.js.errors.NotFoundError as exc:
        if exc.err_code == _NO_MESSAGE:
            return None
        raise
    assert msg.subject is not None and msg.seq is not None
    return _entry(bucket_name, msg.subject, msg.seq, msg.data, msg.headers)


async def read(
    js: JetStreamContext, bucket_name: str, pattern: str, *, history: bool
) -> list[KvEntry]:
    """Every kept revision (``history=True``) or the newest revision of each key
    (``history=False``) matching ``pattern`` (a key or ``family``), oldest first, tombstones
    included. Complete even under concurrent writes: it reads up to the last revision the bucket
    held when it started (later writes may or may not be included).

    Raises ``nats.errors.TimeoutError`` when the server stops delivering."""
    stream, subject = _stream(bucket_name), _subject(bucket_name, pattern)
    try:
        last = await js.get_msg(stream, subject=subject)
    except nats.js.errors.NotFoundError as exc:
        if exc.err_code == _NO_MESSAGE:
            return []
        raise
    assert last.seq is not None
    policy = api.DeliverPolicy.ALL if history else api.DeliverPolicy.LAST_PER_SUBJECT
    sub = await js.subscribe(subject, stream=stream, ordered_consumer=True, deliver_policy=policy)
    out: list[KvEntry] = []
    try:
        while True:
            msg = await sub.next_msg(timeout=READ_TIMEOUT_S)
            seq = msg.metadata.sequence.stream
            out.append(_entry(bucket_name, msg.subject, seq, msg.data, msg.headers))
            if seq >= last.seq:
                return out
    finally:
        await sub.unsubscribe()


class KvWatch(Generic[T]):
    """Live updates of the keys matching ``pattern``: first the newest revision of each, then
    every later revision, decoded by ``decode`` (which returns ``None`` to skip an entry, e.g. a
    tombstone). Revisions come in increasing order and never twice.

    A revision ``decode`` refuses with a ``CorruptError`` is skipped, never raised: it is logged
    (``state.watch_skipped``) and counted in :attr:`skipped` (:attr:`last_skipped` says why), and
    the watch waits for the next revision. Any other error of ``decode`` ends the iteration.

    Use as ``async with watch: async for value in watch: ...``; plain ``async for`` works too
    (the consumer starts on the first step and ends with :meth:`aclose`).

    The consumer is re-created, from the revision after the last one yielded, whenever
    ``nc.stats["reconnects"]`` has moved since it was made: checked on every update and, while
    nothing arrives, every ``check_every`` seconds. So after a server restart updates resume
    within about ``check_every`` seconds of the reconnect, none missed that the bucket kept."""

    def __init__(
        self,
        bus: Bus,
        bucket_name: str,
        pattern: str,
        decode: Callable[[KvEntry], T | None],
        *,
        check_every: float = 1.0,
    ) -> None:
        self._bus = bus
        self._bucket = bucket_name
        self._pattern = pattern
        self._decode = decode
        self._check_every = check_every
        self._queue: asyncio.Queue[KvEntry] = asyncio.Queue()
        self._sub: Subscription | None = None
        self._reconnects = -1
        self._last = 0
        self._started = False
        self._closed = False
        self.skipped = 0
        """Revisions skipped because ``decode`` found them corrupt."""
        self.last_skipped = ""
        """Why the last one was skipped."""

    async def _on_msg(self, msg: Msg) -> None:
        seq = msg.metadata.sequence.stream
        self._queue.put_nowait(_entry(self._bucket, msg.subject, seq, msg.data, msg.headers))

    async def _subscribe(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except nats.errors.Error:
                pass  # the old consumer went with the old connection
            self._sub = None
        if self._last:
            config = api.ConsumerConfig(
                deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self._last + 1
            )
        else:
            config = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT)
        self._reconnects = self._bus.nc.stats["reconnects"]
        self._sub = await self._bus.js.subscribe(
            _subject(self._bucket, self._pattern),
            stream=_stream(self._bucket),
            cb=self._on_msg,
            ordered_consumer=True,
            config=config,
        )

    async def start(self) -> KvWatch[T]:
        """Create the consumer (done by the first step if not called)."""
        if not self._started and not self._closed:
            await self._subscribe()
            self._started = True
        return self

    async def aclose(self) -> None:
        """Stop watching; iteration then ends."""
        self._closed = True
        if self._sub is not None:
            sub, self._sub = self._sub, None
            try:
                await sub.unsubscribe()
            except nats.errors.Error:
                pass  # connection already closed or draining: nothing left to stop

    def _skip(self, entry: KvEntry, exc: CorruptError) -> None:
        self.skipped += 1
        self.last_skipped = str(exc)
        get_logger().error(
            "state.watch_skipped",
            bucket=self._bucket,
            key=entry.key,
            revision=entry.revision,
            error=str(exc),
            skipped=self.skipped,
        )

    async def __aenter__(self) -> KvWatch[T]:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __aiter__(self) -> KvWatch[T]:
        return self

    async def __anext__(self) -> T:
        await self.start()
        while not self._closed:
            if self._bus.nc.stats["reconnects"] != self._reconnects and self._bus.nc.is_connected:
                try:
                    await self._subscribe()
                except nats.errors.Error:
                    # JetStream may answer late right after a restart: try again next check.
                    self._reconnects = -1
            try:
                entry = await asyncio.wait_for(self._queue.get(), self._check_every)
            except TimeoutError:
                continue
            if entry.revision <= self._last:
                continue  # delivered again by a re-created consumer
            self._last = entry.revision
            try:
                value = self._decode(entry)
            except CorruptError as exc:
                self._skip(entry, exc)
                continue
            if value is not None:
                return value
        raise StopAsyncIteration
