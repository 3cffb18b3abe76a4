"""The checkpoint registry: weights in the Object Store ``weights``, metadata and the three
lineage pointers in KV ``checkpoints``, every pointer move one compare-and-set.

A checkpoint's id is its content address: the first 16 hex digits of the sha256 of its weights.
Weights only ever travel through the Object Store (never a KV value or a message); KV holds
``meta.<id>`` (a :class:`~contracts.CheckpointMeta`) and ``pointers`` (the
:class:`~contracts.CheckpointPointers`). The move rules are in :mod:`aios_rl.state.lineage`.

**The race rule.** Every move (:meth:`CheckpointRegistry.advance`, ``rollback``, ``promote``,
``init``) reads the pointers, plans the move on them (pure), and writes the result with one
compare-and-set on the revision it read. Each move takes an optional ``expect_active``: the
``active`` the caller based its decision on (``None``: "nothing is active yet").

- If the pointers' ``active`` is not ``expect_active`` (checked before every attempt), the move
  raises :class:`StalePointersError` and writes nothing: the caller's decision was about a
  checkpoint that is no longer active (someone advanced or rolled back meanwhile), so it must
  re-read and decide again.
- If the compare-and-set loses to another writer, the move re-reads and tries again, as long
  as the expectation still holds (e.g. the other writer only promoted). Without
  ``expect_active`` the move is simply re-planned on the fresh pointers, so it applies on top
  of whatever won (an ``advance`` then makes the winner's ``active`` its ``pre_update_ref``),
  and raises whatever the fresh plan raises (a second concurrent rollback finds nothing to roll
  back to: :class:`InvalidMoveError`).
- After ``max_attempts`` lost compare-and-sets in a row it raises
  :class:`PointerContentionError` (a ``StalePointersError``), having written nothing.

A move is never half-applied: the three pointers are one KV value. A move that changes
nothing (advance to the active checkpoint, promote when ``last_stable`` is already active, init
when something is active) writes nothing, publishes nothing and returns no moves. An advance
to the checkpoint already active is such a no-op even when ``expect_active`` no longer holds:
its goal is reached, so retrying an advance whose reply was lost is safe. After a
successful compare-and-set the move publishes a :class:`~contracts.CheckpointEvent` on
``checkpoint.event.<kind>`` with ``Nats-Msg-Id = pointers:<revision>``.

**Watching.** :meth:`CheckpointRegistry.watch` yields the pointers now, then after every move.
It is a KV watch (an ordered push consumer); those can stall silently after a server restart,
so it re-creates its consumer after every reconnect, and it skips a revision that does not
decode (see :class:`aios_rl.state._kv.KvWatch`).
"""

from __future__ import annotations

import enum
import hashlib
import time
from collections.abc import Callable, Mapping
from typing import Literal, NamedTuple

import msgspec

from aios_rl.bus import Bus, BusError
from contracts import Algorithm, CheckpointEvent, CheckpointMeta, CheckpointPointers, Names
from contracts.subjects import BUCKET_CHECKPOINTS, OBJECTS_WEIGHTS

from . import _kv
from ._errors import ContentionError, StaleRevisionError, UnavailableError
from ._handles import EntryDecoder, ErrorKinds, Kv, Objects, compare_and_set
from .lineage import (
    CorruptCheckpointError,
    EventNotPublishedError,
    InvalidMoveError,
    Moved,
    PointerContentionError,
    RegistryError,
    RollbackTarget,
    StalePointersError,
    UnknownCheckpointError,
    plan_advance,
    plan_promote,
    plan_rollback,
    render_tree,
)

__all__ = [
    "ANY",
    "CheckpointRegistry",
    "CorruptCheckpointError",
    "EventNotPublishedError",
    "InvalidMoveError",
    "Moved",
    "PointerContentionError",
    "RegistryError",
    "RegistrySnapshot",
    "RegistryUnavailableError",
    "RollbackTarget",
    "StalePointersError",
    "UnknownCheckpointError",
    "checkpoint_id_of",
    "render_tree",
]

ID_HEX_DIGITS = 16


class _Any(enum.Enum):
    ANY = "any"


ANY = _Any.ANY
"""Default of ``expect_active``: the caller did not base its move on a particular active."""

Expectation = str | None | Literal[_Any.ANY]


class RegistryUnavailableError(RegistryError, UnavailableError):
    """NATS refused or did not answer a request (not connected, bucket missing, timeout)."""


class RegistrySnapshot(NamedTuple):
    """The pointers (with their KV revision, 0 if never written) and every checkpoint's meta."""

    pointers: CheckpointPointers
    revision: int
    metas: dict[str, CheckpointMeta]


def checkpoint_id_of(weights: bytes) -> str:
    """The content address of ``weights``: the first 16 hex digits of their sha256."""
    return hashlib.sha256(weights).hexdigest()[:ID_HEX_DIGITS]


_encoder = msgspec.json.Encoder()
_meta = EntryDecoder(CheckpointMeta, CorruptCheckpointError, "KV key", "checkpoint metadata")
_pointers = EntryDecoder(
    CheckpointPointers, CorruptCheckpointError, "KV key", "checkpoint pointers"
)


def _decode_pointers(entry: _kv.KvEntry) -> CheckpointPointers:
    return _pointers(entry) or CheckpointPointers()


_KINDS = ErrorKinds(unavailable=RegistryUnavailableError)


class CheckpointRegistry:
    """Store, load and move checkpoints in the stack's ``checkpoints`` KV and ``weights``
    Object Store (under ``bus.names``); both must be provisioned.

    Every method may raise :class:`RegistryUnavailableError` when NATS fails; the others are
    listed per method. See the module docstring for the race rule."""

    def __init__(self, bus: Bus, *, max_attempts: int = 50) -> None:
        self._bus = bus
        self._kv = Kv(bus, bus.names.bucket(BUCKET_CHECKPOINTS), _KINDS)
        self._weights = Objects(bus, bus.names.bucket(OBJECTS_WEIGHTS), _KINDS)
        self._max_attempts = max_attempts

    # -- checkpoints ----------------------------------------------------------------------------

    async def store(
        self,
        weights: bytes,
        *,
        parent_id: str | None,
        created_by: str,
        algorithm: Algorithm | Literal["init"],
        backend: str = "tiny",
        metrics: Mapping[str, float] | None = None,
    ) -> CheckpointMeta:
        """Store ``weights`` under their content address and return their meta (``seq`` is the
        parent's + 1, 0 without a parent).

        Idempotent: storing bytes already stored uploads nothing and returns the meta recorded
        the first time (whatever parent, creator or metrics this call names). Publishes a
        ``stored`` event each call (``Nats-Msg-Id = <id>:stored``: once within the stream's
        duplicate window). Raises ``UnknownCheckpointError`` for an unknown ``parent_id``,
        ``EventNotPublishedError`` when only the event failed."""
        digest = hashlib.sha256(weights).hexdigest()
        cid = digest[:ID_HEX_DIGITS]
        key = Names.key_checkpoint_meta(cid)
        meta = await self._find_meta(cid)
        if meta is None:
            parent = await self.meta(parent_id) if parent_id is not None else None
            object_name = Names.object_weights(cid)
            await self._upload(object_name, weights)
            meta = CheckpointMeta(
                checkpoint_id=cid,
                parent_id=parent_id,
                created_by=created_by,
                algorithm=algorithm,
                backend=backend,
                object_name=object_name,
                size_bytes=len(weights),
                sha256=digest,
                created_at=time.time(),
                seq=parent.seq + 1 if parent is not None else 0,
                metrics=dict(metrics or {}),
            )
            try:
                await self._kv.write(key, _encoder.encode(meta), revision=0)
            except StaleRevisionError:
                meta = await self.meta(cid)  # a concurrent store of the same bytes won
        event = CheckpointEvent(
            kind="stored", checkpoint_id=cid, metrics=meta.metrics, at=time.time()
        )
        await self._publish(event, msg_id=f"{cid}:stored", result=meta)
        return meta

    async def _upload(self, object_name: str, weights: bytes) -> None:
        if await self._weights.size(object_name) != len(weights):
            await self._weights.put(object_name, weights)

    async def _find_meta(self, checkpoint_id: str) -> CheckpointMeta | None:
        entry = await self._kv.latest(Names.key_checkpoint_meta(checkpoint_id))
        return None if entry is None else _meta(entry)

    async def meta(self, checkpoint_id: str) -> CheckpointMeta:
        """The meta of a stored checkpoint. Raises ``UnknownCheckpointError``."""
        try:
            meta = await self._find_meta(checkpoint_id)
        except ValueError:  # not even a valid key token
            raise UnknownCheckpointError(checkpoint_id) from None
        if meta is None:
            raise UnknownCheckpointError(checkpoint_id)
        return meta

    async def load(self, checkpoint_id: str) -> bytes:
        """The weights of a stored checkpoint, checked against their sha256.

        Raises ``UnknownCheckpointError``, and ``CorruptCheckpointError`` when the weights are
        missing or do not match the meta."""
        meta = await self.meta(checkpoint_id)
        try:
            # Chunk by chunk, size and digest checked: nats-py's get() can return a partial object.
            data = await self._weights.get(meta.object_name)
        except RegistryUnavailableError as exc:
            raise CorruptCheckpointError(f"checkpoint {checkpoint_id}: {exc}") from exc
        if data is None:
            raise CorruptCheckpointError(
                f"checkpoint {checkpoint_id}: weights {meta.object_name!r} are missing"
            )
        if len(data) != meta.size_bytes or hashlib.sha256(data).hexdigest() != meta.sha256:
            raise CorruptCheckpointError(
                f"checkpoint {checkpoint_id}: loaded {len(data)} bytes whose sha256 does not "
                f"match the meta ({meta.size_bytes} bytes, {meta.sha256[:16]}...)"
            )
        return data

    async def lineage(self, checkpoint_id: str) -> list[CheckpointMeta]:
        """The checkpoint and its ancestors, from it up to the root.

        Raises ``UnknownCheckpointError`` for an unknown id, ``CorruptCheckpointError`` when
        an ancestor's meta is missing or the parents loop."""
        out = [await self.meta(checkpoint_id)]
        seen = {checkpoint_id}
        while (parent := out[-1].parent_id) is not None:
            if parent in seen:
                raise CorruptCheckpointError(f"lineage of {checkpoint_id} loops at {parent}")
            try:
                out.append(await self.meta(parent))
            except UnknownCheckpointError as exc:
                raise CorruptCheckpointError(
                    f"lineage of {checkpoint_id} breaks: ancestor {parent} has no meta"
                ) from exc
            seen.add(parent)
        return out

    async def snapshot(self) -> RegistrySnapshot:
        """The pointers and every stored checkpoint's meta, for :func:`render_tree`."""
        pointers, revision = await self.pointers()
        pattern = _kv.family(Names.key_checkpoint_meta("x"))
        entries = await self._kv.read(pattern, history=False)
        metas = {m.checkpoint_id: m for m in map(_meta, entries) if m is not None}
        return RegistrySnapshot(pointers, revision, metas)

    # -- pointers ---------------------------------------------------------------------------------

    async def pointers(self) -> tuple[CheckpointPointers, int]:
        """The pointers and their KV revision; empty pointers and 0 if never written."""
        entry = await self._kv.latest(Names.key_pointers())
        if entry is None:
            return CheckpointPointers(), 0
        return _decode_pointers(entry), entry.revision

    async def pointer_history(self) -> list[tuple[CheckpointPointers, int]]:
        """Every kept revision of the pointers (64 by the topology), oldest first."""
        entries = await self._kv.read(Names.key_pointers(), history=True)
        return [(_decode_pointers(e), e.revision) for e in entries if e.value is not None]

    async def init(self, checkpoint_id: str, reason: str = "init") -> Moved:
        """Make ``checkpoint_id`` active and ``last_stable`` if nothing is active yet; otherwise
        change nothing (so every service may call it at start-up). Raises
        ``UnknownCheckpointError``, ``PointerContentionError``, ``EventNotPublishedError``."""
        meta = await self.meta(checkpoint_id)

        def plan(p: CheckpointPointers, now: float) -> Moved:
            if p.active is not None:
                return Moved(p, [])
            return plan_advance(p, checkpoint_id, reason=reason, now=now)

        return await self._move("advanced", plan, ANY, meta)

    async def advance(
        self, new_id: str, reason: str = "", *, expect_active: Expectation = ANY
    ) -> Moved:
        """Make ``new_id`` active; the previous active becomes ``pre_update_ref`` (the first
        advance also sets ``last_stable``). A no-op when ``new_id`` is already active, whatever
        ``expect_active`` says: retrying an advance whose reply was lost is safe.

        Raises ``UnknownCheckpointError``, ``StalePointersError`` (see the race rule),
        ``EventNotPublishedError``."""
        meta = await self.meta(new_id)

        def plan(p: CheckpointPointers, now: float) -> Moved:
            return plan_advance(p, new_id, reason=reason, now=now)

        def done(p: CheckpointPointers) -> bool:
            return p.active == new_id

        return await self._move("advanced", plan, expect_active, meta, done=done)

    async def rollback(
        self,
        to: RollbackTarget = "pre_update_ref",
        reason: str = "",
        *,
        expect_active: Expectation = ANY,
    ) -> Moved:
        """Make the ``to`` checkpoint active (it also becomes ``pre_update_ref``).

        Raises ``InvalidMoveError`` when there is nothing to roll back to (``to`` unset or
        already active), ``StalePointersError``, ``EventNotPublishedError``."""

        def plan(p: CheckpointPointers, now: float) -> Moved:
            return plan_rollback(p, to, reason=reason, now=now)

        return await self._move("rolled_back", plan, expect_active, None)

    async def promote(self, reason: str = "", *, expect_active: Expectation = ANY) -> Moved:
        """Make the active checkpoint ``last_stable`` (a no-op when it already is).

        Raises ``InvalidMoveError`` when nothing is active, ``StalePointersError``,
        ``EventNotPublishedError``."""

        def plan(p: CheckpointPointers, now: float) -> Moved:
            return plan_promote(p, reason=reason, now=now)

        return await self._move("promoted", plan, expect_active, None)

    async def _move(
        self,
        kind: Literal["advanced", "rolled_back", "promoted"],
        plan: Callable[[CheckpointPointers, float], Moved],
        expect_active: Expectation,
        meta: CheckpointMeta | None,
        *,
        done: Callable[[CheckpointPointers], bool] | None = None,
    ) -> Moved:
        planned: Moved | None = None

        def change(current: CheckpointPointers | None) -> CheckpointPointers | None:
            nonlocal planned
            current = current if current is not None else CheckpointPointers()
            planned = None
            if done is not None and done(current):
                planned = Moved(current, [])
                return None
            if expect_active is not ANY and current.active != expect_active:
                raise StalePointersError(
                    f"cannot move the pointers ({kind}): active is {current.active!r}, the "
                    f"caller expected {expect_active!r}; re-read and decide again",
                    current,
                )
            planned = plan(current, time.time())
            return planned.pointers if planned.moves else None

        try:
            cas = await compare_and_set(
                self._kv,
                Names.key_pointers(),
                change,
                decode=_decode_pointers,
                encode=_encoder.encode,
                attempts=self._max_attempts,
            )
        except ContentionError as exc:
            current, _ = await self.pointers()
            raise PointerContentionError(
                f"cannot move the pointers ({kind}): lost the compare-and-set "
                f"{self._max_attempts} times in a row",
                current,
            ) from exc
        assert planned is not None
        if not cas.written:
            return planned
        result = planned
        changed = result.pointers.active if kind != "promoted" else result.pointers.last_stable
        event = CheckpointEvent(
            kind=kind,
            checkpoint_id=changed,
            pointers=result.pointers,
            moves=result.moves,
            metrics=meta.metrics if meta is not None else {},
            at=result.pointers.updated_at,
        )
        await self._publish(event, msg_id=f"pointers:{cas.revision}", result=result)
        return result

    async def _publish(self, event: CheckpointEvent, *, msg_id: str, result: object) -> None:
        try:
            await self._bus.publish_durable(
                self._bus.names.checkpoint_event(event.kind), event, msg_id=msg_id
            )
        except BusError as exc:
            raise EventNotPublishedError(
                f"{event.kind} {event.checkpoint_id}: written, but its event was not "
                f"published: {exc}",
                result,
            ) from exc

    def watch_all(
        self, *, check_every: float = 1.0
    ) -> _kv.KvWatch[CheckpointPointers | CheckpointMeta]:
        """The pointers and every checkpoint's metadata now, then each write: the whole lineage
        live (the dashboard's graph). Corrupt revisions are skipped and counted."""

        def decode(entry: _kv.KvEntry) -> CheckpointPointers | CheckpointMeta | None:
            if entry.key == Names.key_pointers():
                return _pointers(entry)
            return _meta(entry)

        return self._kv.watch(">", decode, check_every=check_every)

    def watch(self, *, check_every: float = 1.0) -> _kv.KvWatch[CheckpointPointers]:
        """The pointers now (if ever written), then after every move, for hot reload::

            async with registry.watch() as updates:
                async for pointers in updates:
                    ...

        Re-creates its KV consumer after a reconnect (checked at least every ``check_every``
        seconds), so it keeps going across a server restart. A revision that is not pointers is
        skipped (logged, counted in the watch's ``skipped``), never raised: a follower keeps the
        last good pointers until valid ones are written."""

        return self._kv.watch(Names.key_pointers(), _pointers, check_every=check_every)
