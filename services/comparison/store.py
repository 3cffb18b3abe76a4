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
from collections.abc import Iterable

import msgspec

from aios_rl.bus import Bus
from aios_rl.state import (
    ContentionError,
    ErrorKinds,
    Kv,
    KvEntry,
    UnavailableError,
    compare_and_set,
    family,
)
from contracts import Episode, Names
from contracts.subjects import BUCKET_COMPARISON

from .logic import ComparedMark, PendingComparison, TaskStats, add_episode

__all__ = ["ScanIncomplete", "Store", "StoreContention"]

_encoder = msgspec.json.Encoder()
_stats_decoder = msgspec.json.Decoder(TaskStats)
_pending_decoder = msgspec.json.Decoder(PendingComparison)


class StoreContention(ContentionError):
    """A statistics key kept changing under us for every compare-and-set attempt."""


class ScanIncomplete(UnavailableError):
    """NATS failed, or a scan of the bucket stopped before the server said it had delivered
    everything."""


_KINDS = ErrorKinds(unavailable=ScanIncomplete, contention=StoreContention)


def _stats(entry: KvEntry) -> TaskStats | None:
    return None if entry.value is None else _stats_decoder.decode(entry.value)


class Store:
    """Typed access to the ``comparison`` bucket of ``bus``'s namespace."""

    def __init__(self, bus: Bus, *, cas_attempts: int = 64) -> None:
        self.bus = bus
        self.kv = Kv(bus, bus.names.bucket(BUCKET_COMPARISON), _KINDS)
        self.cas_attempts = cas_attempts
        self.cas_conflicts = 0

    async def _get(self, key: str) -> bytes | None:
        entry = await self.kv.latest(key)
        return None if entry is None else entry.value

    # -- statistics --------------------------------------------------------------------------------
    async def stats(self, task_id: str, checkpoint_id: str) -> TaskStats | None:
        """The statistics of ``checkpoint_id`` on ``task_id``, ``None`` before any episode."""
        got = await self._get(Names.key_task_stats(task_id, checkpoint_id))
        return None if got is None else _stats_decoder.decode(got)

    async def count(self, ep: Episode) -> tuple[TaskStats, bool]:
        """Count ``ep`` into the statistics of (its task, its checkpoint), once: returns them
        and whether this call added it (``False``: it was counted already).

        Raises ``ValueError`` for an episode without a finite reward or whose ids are not key
        tokens, ``StoreContention`` when every compare-and-set attempt lost a race."""
        key = Names.key_task_stats(ep.task_id, ep.checkpoint_id)
        cas = await compare_and_set(
            self.kv,
            key,
            lambda current: add_episode(current, ep),
            decode=_stats,
            encode=_encoder.encode,
            attempts=self.cas_attempts,
        )
        self.cas_conflicts += cas.conflicts
        assert cas.value is not None
        return cas.value, cas.written

    async def stats_of(self, checkpoint_id: str) -> list[TaskStats]:
        """Every task's statistics of ``checkpoint_id`` (complete; raises ``ScanIncomplete``
        if the server stops delivering)."""
        raw = await self.kv.scan(Names.key_task_stats_of(checkpoint_id), complete=True)
        return [_stats_decoder.decode(v) for _, v in raw]

    async def stats_for(self, tasks: Iterable[str], checkpoint_id: str) -> list[TaskStats]:
        """The statistics of ``checkpoint_id`` on each of ``tasks`` that has any."""
        found = await asyncio.gather(*(self.stats(t, checkpoint_id) for t in tasks))
        return [s for s in found if s is not None]

    # -- compared marks ----------------------------------------------------------------------------
    async def was_compared(self, episode_id: str) -> bool:
        return await self._get(Names.key_compared(episode_id)) is not None

    async def mark_compared(self, episode_id: str, mark: ComparedMark) -> None:
        await self.kv.put(Names.key_compared(episode_id), _encoder.encode(mark))

    # -- pending rollouts --------------------------------------------------------------------------
    async def add_pending(self, pending: PendingComparison) -> bool:
        """Record a waiting rollout; ``False`` (and the first record kept, with its deadline)
        when it is already waiting."""
        key = Names.key_pending(pending.episode.episode_id)
        cas = await compare_and_set(
            self.kv,
            key,
            lambda current: current or pending,
            decode=lambda e: None if e.value is None else _pending_decoder.decode(e.value),
            encode=_encoder.encode,
        )
        return cas.written

    async def pending(self) -> list[PendingComparison]:
        """Every rollout waiting now. Best effort under concurrent resolution (a record purged
        while the scan runs can end it early): callers scan again on their next sweep."""
        raw = await self.kv.scan(family(Names.key_pending("x")), complete=False)
        return [_pending_decoder.decode(v) for _, v in raw]

    async def drop_pending(self, episode_id: str) -> None:
        """Remove a pending record and its every trace (purge, no tombstone)."""
        await self.kv.purge(Names.key_pending(episode_id))
