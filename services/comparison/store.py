"""The ``comparison`` KV bucket: the only state of the service, so any replica (or a restarted
process) carries on from it.

- ``stats.<task>.<checkpoint>`` → :class:`TaskStats`, updated by compare-and-set on the revision;
- ``pending.<episode_id>`` → :class:`PendingComparison`, a rollout waiting for its reference; once
  resolved, its subject is purged from the bucket's stream, so scanning ``pending.>`` costs only
  what is really waiting (a delete would leave a tombstone per episode forever);
- ``compared.<episode_id>`` → :class:`ComparedMark`, written after the episode went out on
  ``episode.compared``: a duplicate arriving after the stream's de-duplication window is dropped.

**Corrupt values.** A statistics or pending value that does not decode, or that
:func:`~.logic.check_stats` / :func:`~.logic.check_pending` refuses (a sum that is not finite, counts
that disagree), is logged (``comparison.corrupt_value``), counted (:attr:`Store.corrupt_values`)
and treated as absent: statistics start again from the next episode counted (its
compare-and-set overwrites the bad value), a pending record is purged. An honest episode is never
retried or dead-lettered for what another left in the bucket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import msgspec

from aios_rl.bus import Bus, get_logger
from aios_rl.comparison import (
    ComparedMark,
    PendingComparison,
    TaskStats,
    add_episode,
    check_pending,
    check_stats,
)
from aios_rl.state import (
    ContentionError,
    ErrorKinds,
    Kv,
    UnavailableError,
    compare_and_set,
    family,
)
from contracts import Episode, Names
from contracts.subjects import BUCKET_COMPARISON

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


class Store:
    """Typed access to the ``comparison`` bucket of ``bus``'s namespace."""

    def __init__(self, bus: Bus, *, cas_attempts: int = 64) -> None:
        self.bus = bus
        self.kv = Kv(bus, bus.names.bucket(BUCKET_COMPARISON), _KINDS)
        self.cas_attempts = cas_attempts
        self.cas_conflicts = 0
        self.corrupt_values = 0
        """Values met that did not decode or were refused (each read counts), treated as absent."""
        self.log = get_logger(service="comparison")

    async def _get(self, key: str) -> bytes | None:
        entry = await self.kv.latest(key)
        return None if entry is None else entry.value

    def _corrupt(self, key: str, revision: int | None, exc: Exception) -> None:
        self.corrupt_values += 1
        self.log.error(
            "comparison.corrupt_value",
            key=key,
            revision=revision,
            error=str(exc),
            treated_as="absent",
        )

    def _stats(self, key: str, data: bytes | None, revision: int | None = None) -> TaskStats | None:
        """``data`` as statistics; ``None`` (reported) when it is not sound ones."""
        if data is None:
            return None
        try:
            return check_stats(_stats_decoder.decode(data))
        except (msgspec.DecodeError, ValueError) as exc:
            self._corrupt(key, revision, exc)
            return None

    def _pending(
        self, key: str, data: bytes | None, revision: int | None = None
    ) -> PendingComparison | None:
        """``data`` as a pending record; ``None`` (reported) when it cannot be resolved."""
        if data is None:
            return None
        try:
            return check_pending(_pending_decoder.decode(data))
        except (msgspec.DecodeError, ValueError) as exc:
            self._corrupt(key, revision, exc)
            return None

    # -- statistics --------------------------------------------------------------------------------
    async def stats(self, task_id: str, checkpoint_id: str) -> TaskStats | None:
        """The statistics of ``checkpoint_id`` on ``task_id``; ``None`` before any episode or
        when the stored value is corrupt (reported)."""
        key = Names.key_task_stats(task_id, checkpoint_id)
        entry = await self.kv.latest(key)
        return None if entry is None else self._stats(key, entry.value, entry.revision)

    async def count(self, ep: Episode) -> tuple[TaskStats, bool]:
        """Count ``ep`` into the statistics of (its task, its checkpoint), once: returns them
        and whether this call added it (``False``: it was counted already).

        Corrupt statistics under the key are reported and replaced by ones counting ``ep``
        alone. Raises ``ValueError`` for an episode whose reward is refused or whose ids are not
        key tokens, ``StoreContention`` when every compare-and-set attempt lost a race."""
        key = Names.key_task_stats(ep.task_id, ep.checkpoint_id)
        cas = await compare_and_set(
            self.kv,
            key,
            lambda current: add_episode(current, ep),
            decode=lambda e: self._stats(e.key, e.value, e.revision),
            encode=_encoder.encode,
            attempts=self.cas_attempts,
        )
        self.cas_conflicts += cas.conflicts
        assert cas.value is not None
        return cas.value, cas.written

    async def stats_of(self, checkpoint_id: str) -> list[TaskStats]:
        """Every task's statistics of ``checkpoint_id`` but corrupt ones (reported); complete
        (raises ``ScanIncomplete`` if the server stops delivering)."""
        raw = await self.kv.scan(Names.key_task_stats_of(checkpoint_id), complete=True)
        found = (self._stats(k, v) for k, v in raw)
        return [s for s in found if s is not None]

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
        when it is already waiting. A corrupt record under the key is reported and replaced."""
        key = Names.key_pending(pending.episode.episode_id)
        cas = await compare_and_set(
            self.kv,
            key,
            lambda current: current or pending,
            decode=lambda e: self._pending(e.key, e.value, e.revision),
            encode=_encoder.encode,
        )
        return cas.written

    async def pending(self) -> list[PendingComparison]:
        """Every rollout waiting now. Best effort under concurrent resolution (a record purged
        while the scan runs can end it early): callers scan again on their next sweep. A corrupt
        record can never be resolved: it is reported and purged."""
        raw = await self.kv.scan(family(Names.key_pending("x")), complete=False)
        out = []
        for key, value in raw:
            pending = self._pending(key, value)
            if pending is None:
                await self.kv.purge(key)
            else:
                out.append(pending)
        return out

    async def drop_pending(self, episode_id: str) -> None:
        """Remove a pending record and its every trace (purge, no tombstone)."""
        await self.kv.purge(Names.key_pending(episode_id))
