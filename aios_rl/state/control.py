"""Restart-safe control snapshots: one :class:`~contracts.ControlSnapshot` per key in KV
``control``, every write a compare-and-set on the key's revision.

``version`` counts the writes of a key: the first write is version 1, and each write stores the
version of the snapshot it was based on plus one. So a snapshot's version says how many writes
it has seen, and the KV revision is what compare-and-set checks.

Keys come from ``contracts.Names.key_control(owner, ident)`` (``campaign.<id>``, ``rail.default``,
``gateway.default``). The bucket keeps 32 revisions per key (:meth:`ControlStore.history`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

import msgspec

from aios_rl.bus import Bus, get_logger
from contracts import ControlSnapshot, ControlState, Names
from contracts.subjects import BUCKET_CONTROL

from . import _kv
from ._errors import (
    ContentionError,
    CorruptError,
    NotFoundError,
    StaleRevisionError,
    StateError,
    UnavailableError,
)
from ._handles import EntryDecoder, ErrorKinds, Kv, compare_and_set

__all__ = [
    "ControlContentionError",
    "ControlError",
    "ControlNotFoundError",
    "ControlStore",
    "ControlUnavailableError",
    "CorruptControlError",
    "StaleControlError",
]


class ControlError(StateError):
    """Root of every error the control store raises."""


class StaleControlError(ControlError):
    """The key moved past the revision the write was based on; nothing was written."""

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
        self.key = key


class ControlContentionError(StaleControlError, ContentionError):
    """An update lost the compare-and-set every time it was tried; nothing was written."""


class ControlNotFoundError(ControlError, NotFoundError):
    """The key holds no snapshot (and the caller gave no way to make one)."""


class CorruptControlError(ControlError, CorruptError):
    """A KV value under a control key is not a ControlSnapshot."""


class ControlUnavailableError(ControlError, UnavailableError):
    """NATS refused or did not answer a request (not connected, bucket missing, timeout)."""


_encoder = msgspec.json.Encoder()
_decode = EntryDecoder(ControlSnapshot, CorruptControlError, "control key", "a snapshot")


class _Contention(ControlContentionError):
    """What the compare-and-set helper raises; re-raised with the key by the store."""

    def __init__(self, message: str) -> None:
        super().__init__(message, key="")


_KINDS = ErrorKinds(
    unavailable=ControlUnavailableError, contention=_Contention, invalid_key=ControlError
)


class ControlStore:
    """Versioned snapshots in the stack's ``control`` bucket (under ``bus.names``).

    Every method may raise :class:`ControlUnavailableError` when NATS fails and (but
    :meth:`watch`, which skips it) :class:`CorruptControlError` for a value that does not
    decode."""

    def __init__(self, bus: Bus, *, max_attempts: int = 50) -> None:
        self._bus = bus
        self._kv = Kv(bus, bus.names.bucket(BUCKET_CONTROL), _KINDS)
        self._max_attempts = max_attempts

    async def load(self, key: str) -> tuple[ControlSnapshot | None, int]:
        """The snapshot under ``key`` (``None`` if none) and the revision to pass to
        :meth:`save` (0 when the key was never written)."""
        entry = await self._kv.latest(key)
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
        try:
            revision = await self._kv.write(snapshot.key, data, revision=expected_revision)
        except StaleRevisionError as exc:
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
        return await self._cas(key, lambda s: s if s is not None else self._stamp(key, factory()))

    @staticmethod
    def _stamp(
        key: str, state: ControlState, base: ControlSnapshot | None = None
    ) -> ControlSnapshot:
        """``state`` as the next write of ``base`` (a new key's first write without one)."""
        base = base or ControlSnapshot(key=key, state=state)
        return msgspec.structs.replace(
            base, state=state, version=base.version + 1, updated_at=time.time()
        )

    async def _cas(
        self, key: str, change: Callable[[ControlSnapshot | None], ControlSnapshot | None]
    ) -> ControlSnapshot:
        try:
            cas = await compare_and_set(
                self._kv,
                key,
                change,
                decode=_decode,
                encode=_encoder.encode,
                attempts=self._max_attempts,
            )
        except _Contention as exc:
            raise ControlContentionError(
                f"control key {key!r}: lost the compare-and-set {self._max_attempts} times in a row",
                key=key,
            ) from exc
        assert cas.value is not None
        return cas.value

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

        def change(snapshot: ControlSnapshot | None) -> ControlSnapshot | None:
            if snapshot is None:
                if init is None:
                    raise ControlNotFoundError(f"no control snapshot under {key!r}")
                return self._stamp(key, fn(init()))
            state = fn(snapshot.state)
            return snapshot if state == snapshot.state else self._stamp(key, state, snapshot)

        return await self._cas(key, change)

    async def all(self, owner: Literal["campaign", "rail", "gateway"]) -> list[ControlSnapshot]:
        """The newest snapshot of every key of one owner (``campaign.*``, ...), by key. A key
        whose value is not a snapshot is logged and left out (one bad key must not keep a
        service from starting)."""
        pattern = _kv.family(Names.key_control(owner, "x"))
        entries = await self._kv.read(pattern, history=False)
        return sorted(self._readable(entries), key=lambda s: s.key)

    async def history(self, key: str) -> list[ControlSnapshot]:
        """Every kept snapshot of ``key`` (the last 32 writes), oldest first; revisions that
        are not snapshots are logged and left out."""
        return self._readable(await self._kv.read(key, history=True))

    @staticmethod
    def _readable(entries: list[_kv.KvEntry]) -> list[ControlSnapshot]:
        out = []
        for entry in entries:
            try:
                snap = _decode(entry)
            except CorruptControlError as exc:
                get_logger().error("control.corrupt_value", key=entry.key, error=str(exc)[:500])
                continue
            if snap is not None:
                out.append(snap)
        return out

    def watch(self, key: str, *, check_every: float = 1.0) -> _kv.KvWatch[ControlSnapshot]:
        """The snapshot under ``key`` (or every key a wildcard matches: ``rail.*``) now, then
        every write::

            async with store.watch(key) as updates:
                async for snapshot in updates:
                    ...

        Re-creates its KV consumer after a reconnect, and skips (logs and counts in its
        ``skipped``) a revision that is not a snapshot instead of raising, so a follower keeps
        its last good snapshot (see :class:`aios_rl.state._kv.KvWatch`)."""
        return self._kv.watch(key, _decode, check_every=check_every)
