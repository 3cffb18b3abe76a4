"""The ``comparison`` KV bucket: the only state of the service, so any replica (or a restarted
process) carries on from it.

- ``stats.<task>.<checkpoint>`` → :class:`TaskStats`, updated by compare-and-set on the revision;
- ``pending.<episode_id>`` → :class:`PendingComparison`, a rollout waiting for its reference; once
  resolved, its subject is purged from the bucket's stream, so scanning ``pending.>`` costs only
  what is really waiting (a delete would leave a tombstone per episode forever);
- ``compared.<episode_id>`` → :class:`ComparedMark`, written after the episode went out on
  ``episode.compared``: a duplicate arriving after the stream's de-duplication window is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

import msgspec
import nats.errors
import nats.js.errors
from nats.js import api
from nats.js.client import KV_PRE_TEMPLATE, KV_STREAM_TEMPLATE
from nats.js.kv import KeyValue

from aios_rl.bus import Bus
from contracts import Episode, Names
from contracts.subjects import BUCKET_COMPARISON

from .logic import ComparedMark, PendingComparison, TaskStats, add_episode

__all__ = ["ScanIncomplete", "Store", "StoreContention"]

SCAN_NEXT_TIMEOUT_S = 2.0
"""Longest wait for the next entry of a scan (the server holds them already)."""

_KV_OP = "KV-Operation"
_encoder = msgspec.json.Encoder()
_stats_decoder = msgspec.json.Decoder(TaskStats)
_pending_decoder = msgspec.json.Decoder(PendingComparison)


def _family(key: str) -> str:
    """The wildcard over a key's last token (``pending.e1`` → ``pending.*``), so the key format
    stays owned by ``contracts.Names``."""
    return key.rpartition(".")[0] + ".*"


class StoreContention(RuntimeError):
    """A statistics key kept changing under us for every compare-and-set attempt."""


class ScanIncomplete(RuntimeError):
    """A scan of the bucket stopped before the server said it had delivered everything."""


class Store:
    """Typed access to the ``comparison`` bucket of ``bus``'s namespace."""

    def __init__(self, bus: Bus, *, cas_attempts: int = 64) -> None:
        self.bus = bus
        self.bucket = bus.names.bucket(BUCKET_COMPARISON)
        self.cas_attempts = cas_attempts
        self._stream = KV_STREAM_TEMPLATE.format(bucket=self.bucket)
        self._prefix = KV_PRE_TEMPLATE.format(bucket=self.bucket)
        self._kv: KeyValue | None = None
        self._lock = asyncio.Lock()
        self.cas_conflicts = 0

    async def kv(self) -> KeyValue:
        """The bucket handle (looked up once; the bucket is provisioned at start-up)."""
        if self._kv is None:
            async with self._lock:
                if self._kv is None:
                    self._kv = await self.bus.js.key_value(self.bucket)
        return self._kv

    async def _get(self, key: str) -> tuple[bytes, int] | None:
        try:
            entry = await (await self.kv()).get(key)
        except nats.js.errors.KeyNotFoundError:  # also what nats-py raises for a tombstone
            return None
        return entry.value or b"", entry.revision or 0

    # -- statistics --------------------------------------------------------------------------------
    async def stats(self, task_id: str, checkpoint_id: str) -> TaskStats | None:
        """The statistics of ``checkpoint_id`` on ``task_id``, ``None`` before any episode."""
        got = await self._get(Names.key_task_stats(task_id, checkpoint_id))
        return None if got is None else _stats_decoder.decode(got[0])

    async def count(self, ep: Episode) -> tuple[TaskStats, bool]:
        """Count ``ep`` into the statistics of (its task, its checkpoint), once: returns them
        and whether this call added it (``False``: it was counted already).

        Raises ``ValueError`` for an episode without a finite reward or whose ids are not key
        tokens, ``StoreContention`` when every compare-and-set attempt lost a race."""
        key = Names.key_task_stats(ep.task_id, ep.checkpoint_id)
        kv = await self.kv()
        for _ in range(self.cas_attempts):
            got = await self._get(key)
            current = None if got is None else _stats_decoder.decode(got[0])
            updated = add_episode(current, ep)
            if updated is current:
                assert current is not None
                return current, False
            data = _encoder.encode(updated)
            try:
                if got is None:
                    await kv.create(key, data)
                else:
                    await kv.update(key, data, last=got[1])
            except nats.js.errors.KeyWrongLastSequenceError:
                self.cas_conflicts += 1
                continue  # another writer got there first: read again
            return updated, True
        raise StoreContention(
            f"{key}: {self.cas_attempts} compare-and-set attempts all lost to other writers"
        )

    async def stats_of(self, checkpoint_id: str) -> list[TaskStats]:
        """Every task's statistics of ``checkpoint_id`` (complete; raises ``ScanIncomplete``
        if the server stops delivering)."""
        raw = await self._scan(Names.key_task_stats_of(checkpoint_id), complete=True)
        return [_stats_decoder.decode(v) for _, v in raw]

    async def stats_for(self, tasks: Iterable[str], checkpoint_id: str) -> list[TaskStats]:
        """The statistics of ``checkpoint_id`` on each of ``tasks`` that has any."""
        found = await asyncio.gather(*(self.stats(t, checkpoint_id) for t in tasks))
        return [s for s in found if s is not None]

    # -- compared marks ----------------------------------------------------------------------------
    async def was_compared(self, episode_id: str) -> bool:
        return await self._get(Names.key_compared(episode_id)) is not None

    async def mark_compared(self, episode_id: str, mark: ComparedMark) -> None:
        await (await self.kv()).put(Names.key_compared(episode_id), _encoder.encode(mark))

    # -- pending rollouts --------------------------------------------------------------------------
    async def add_pending(self, pending: PendingComparison) -> bool:
        """Record a waiting rollout; ``False`` (and the first record kept, with its deadline)
        when it is already waiting."""
        key = Names.key_pending(pending.episode.episode_id)
        try:
            await (await self.kv()).create(key, _encoder.encode(pending))
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        return True

    async def pending(self) -> list[PendingComparison]:
        """Every rollout waiting now. Best effort under concurrent resolution (a record purged
        while the scan runs can end it early): callers scan again on their next sweep."""
        raw = await self._scan(_family(Names.key_pending("x")), complete=False)
        return [_pending_decoder.decode(v) for _, v in raw]

    async def drop_pending(self, episode_id: str) -> None:
        """Remove a pending record and its every trace (purge, no tombstone)."""
        await self.bus.js.purge_stream(
            self._stream, subject=self._prefix + Names.key_pending(episode_id)
        )

    # -- scanning ----------------------------------------------------------------------------------
    async def _scan(self, pattern: str, *, complete: bool) -> list[tuple[str, bytes]]:
        """(key, value) of the newest revision of every live key matching ``pattern``.

        Reads an ordered consumer until a message says nothing is pending after it, which is
        complete whatever other writers do meanwhile (unlike ``kv.keys()``, which decides from a
        consumer-info snapshot). When the server stops delivering, raises ``ScanIncomplete`` if
        ``complete``, else returns what it read."""
        sub = await self.bus.js.subscribe(
            self._prefix + pattern,
            stream=self._stream,
            ordered_consumer=True,
            deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
        )
        out: list[tuple[str, bytes]] = []
        try:
            info = await sub.consumer_info()
            if not info.num_pending and not (info.delivered and info.delivered.consumer_seq):
                return out
            while True:
                try:
                    msg = await sub.next_msg(timeout=SCAN_NEXT_TIMEOUT_S)
                except nats.errors.TimeoutError as exc:
                    if complete:
                        raise ScanIncomplete(
                            f"scan of {pattern} in {self.bucket} stopped after {len(out)} keys"
                        ) from exc
                    return out
                if not (msg.headers and msg.headers.get(_KV_OP)):
                    out.append((msg.subject[len(self._prefix) :], msg.data))
                if msg.metadata.num_pending == 0:
                    return out
        finally:
            # A closing connection takes the ephemeral consumer with it.
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
