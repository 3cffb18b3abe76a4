"""Restart-safe control snapshots: one :class:`~contracts.ControlSnapshot` per key in KV
``control``, every write a compare-and-set on the key's revision.

``version`` counts the writes of a key: the first write is version 1, and each write stores the
version of the snapshot it was based on plus one. So a snapshot's version says how many writes
it has seen, and the KV revision is what compare-and-set checks.

Keys come from ``contracts.Names.key_control(owner, ident)`` (``campaign.<id>``, ``rail.default``,
``gateway.default``). The bucket keeps 32 revisions per key (:meth:`ControlStore.history`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Iterator
from typing import Literal

import msgspec
import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from aios_rl.bus import Bus
from contracts import ControlSnapshot, ControlState, Names
from contracts.subjects import BUCKET_CONTROL

from . import _kv

__all__ = [
    "ControlContentionError",
    "ControlError",
    "ControlNotFoundError",
    "ControlStore",
    "ControlUnavailableError",
    "CorruptControlError",
    "StaleControlError",
]


class ControlError(Exception):
    """Root of every error the control store raises."""


class StaleControlError(ControlError):
    """The key moved past the revision the write was based on; nothing was written."""

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
        self.key = key


class ControlContentionError(StaleControlError):
    """An update lost the compare-and-set every time it was tried; nothing was written."""


class ControlNotFoundError(ControlError):
    """The key holds no snapshot (and the caller gave no way to make one)."""


class CorruptControlError(ControlError):
    """A KV value under a control key is not a ControlSnapshot."""


class ControlUnavailableError(ControlError):
    """NATS refused or did not answer a request (not connected, bucket missing, timeout)."""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ControlSnapshot)


def _decode(entry: _kv.KvEntry) -> ControlSnapshot | None:
    if entry.value is None:
        return None
    try:
        return _decoder.decode(entry.value)
    except msgspec.DecodeError as exc:
        raise CorruptControlError(
            f"control key {entry.key!r} (revision {entry.revision}) is not a snapshot: {exc}"
        ) from exc


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    """The one place NATS errors become control-store errors."""
    try:
        yield
    except nats.js.errors.InvalidKeyError as exc:
        raise ControlError(f"{what}: not a valid KV key") from exc
    except nats.errors.Error as exc:
        raise ControlUnavailableError(f"{what}: NATS failed: {exc!r}") from exc


class ControlStore:
    """Versioned snapshots in the stack's ``control`` bucket (under ``bus.names``).

    Every method may raise :class:`ControlUnavailableError` when NATS fails and
    :class:`CorruptControlError` for a value that does not decode."""

    def __init__(self, bus: Bus, *, max_attempts: int = 50) -> None:
        self._bus = bus
        self._bucket = bus.names.bucket(BUCKET_CONTROL)
        self._max_attempts = max_attempts
        self._kv_handle: KeyValue | None = None

    async def _kv(self) -> KeyValue:
        if self._kv_handle is None:
            self._kv_handle = await self._bus.js.key_value(self._bucket)
        return self._kv_handle

    async def load(self, key: str) -> tuple[ControlSnapshot | None, int]:
        """The snapshot under ``key`` (``None`` if none) and the revision to pass to
        :meth:`save` (0 when the key was never written)."""
        with _translated(f"load control {key!r}"):
            entry = await _kv.latest(self._bus.js, self._bucket, key)
        if entry is None:
            return None, 0
        return _decode(entry), entry.revision

    async def save(
        self, snapshot: ControlSnapshot, expected_revision: int
    ) -> tuple[ControlSnapshot, int]:
        """Write ``snapshot`` under ``snapshot.key`` if the key is still at
        ``expected_revision`` (0: never written). Stores ``version + 1`` and the time; returns
        what was stored and its revision. Raises ``StaleControlError``."""
        stored = msgspec.structs.replace(
            snapshot, version=snapshot.version + 1, updated_at=time.time()
        )
        data = _encoder.encode(stored)
        with _translated(f"save control {snapshot.key!r}"):
            kv = await self._kv()
            try:
                if expected_revision == 0:
                    revision = await kv.create(snapshot.key, data)
                else:
                    revision = await kv.update(snapshot.key, data, last=expected_revision)
            except nats.js.errors.KeyWrongLastSequenceError as exc:
                raise StaleControlError(
                    f"control key {snapshot.key!r} is no longer at revision "
                    f"{expected_revision}: load it again and re-apply the change",
                    key=snapshot.key,
                ) from exc
        return stored, revision

    async def load_or_init(self, key: str, factory: Callable[[], ControlState]) -> ControlSnapshot:
        """The snapshot under ``key``, creating it from ``factory()`` if there is none.

        Race-safe: of several processes calling it at once exactly one creates the snapshot
        and all return that one. Raises ``ControlContentionError`` if the key keeps changing
        between read and create (deleted and re-created) ``max_attempts`` times."""
        for _ in range(self._max_attempts):
            snapshot, revision = await self.load(key)
            if snapshot is not None:
                return snapshot
            try:
                stored, _ = await self.save(ControlSnapshot(key=key, state=factory()), revision)
            except StaleControlError:
                continue  # someone else created it first: read theirs
            return stored
        raise ControlContentionError(
            f"control key {key!r}: could not read or create it in {self._max_attempts} tries",
            key=key,
        )

    async def update(
        self,
        key: str,
        fn: Callable[[ControlState], ControlState],
        *,
        init: Callable[[], ControlState] | None = None,
    ) -> ControlSnapshot:
        """Read-modify-write: store ``fn(state)``, retrying on a lost compare-and-set, and
        return the stored snapshot. ``fn`` must be pure: it may run several times, each time
        on the newest state. If it returns an equal state nothing is written.

        A missing key starts from ``init()`` when given, else raises ``ControlNotFoundError``.
        Raises ``ControlContentionError`` after ``max_attempts`` lost compare-and-sets."""
        for attempt in range(self._max_attempts):
            snapshot, revision = await self.load(key)
            if snapshot is None:
                if init is None:
                    raise ControlNotFoundError(f"no control snapshot under {key!r}")
                snapshot = ControlSnapshot(key=key, state=init())
                state = fn(snapshot.state)
            else:
                state = fn(snapshot.state)
                if state == snapshot.state:
                    return snapshot
            try:
                stored, _ = await self.save(
                    msgspec.structs.replace(snapshot, state=state), revision
                )
            except StaleControlError:
                await asyncio.sleep(random.uniform(0, 0.001 * 2 ** min(attempt, 5)))
                continue
            return stored
        raise ControlContentionError(
            f"control key {key!r}: lost the compare-and-set {self._max_attempts} times in a row",
            key=key,
        )

    async def all(self, owner: Literal["campaign", "rail", "gateway"]) -> list[ControlSnapshot]:
        """The newest snapshot of every key of one owner (``campaign.*``, ...), by key."""
        pattern = _kv.family(Names.key_control(owner, "x"))
        with _translated(f"list control {pattern!r}"):
            entries = await _kv.read(self._bus.js, self._bucket, pattern, history=False)
        snaps = [s for s in map(_decode, entries) if s is not None]
        return sorted(snaps, key=lambda s: s.key)

    async def history(self, key: str) -> list[ControlSnapshot]:
        """Every kept snapshot of ``key`` (the last 32 writes), oldest first."""
        with _translated(f"history of control {key!r}"):
            entries = await _kv.read(self._bus.js, self._bucket, key, history=True)
        return [s for s in map(_decode, entries) if s is not None]

    def watch(self, key: str, *, check_every: float = 1.0) -> _kv.KvWatch[ControlSnapshot]:
        """The snapshot under ``key`` now (if any), then every write::

            async with store.watch(key) as updates:
                async for snapshot in updates:
                    ...

        Re-creates its KV consumer after a reconnect (see :class:`aios_rl.state._kv.KvWatch`)."""
        return _kv.KvWatch(self._bus, self._bucket, key, _decode, check_every=check_every)
