"""The campaign's durable state: control snapshots (through ``ControlStore``), ledger records
(through ``Ledger``) and per-epoch arrivals (compare-and-set in KV ``ledger``)."""

from __future__ import annotations

import asyncio

import msgspec

from aios_rl.bus import Bus
from aios_rl.rollouts import summarize
from aios_rl.state import Kv, compare_and_set
from contracts import Episode, EpochArrivals, Names, RolloutSummary
from contracts.subjects import BUCKET_LEDGER

from .logic import add_arrival

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(EpochArrivals)


class Arrivals:
    """Counts each episode of an epoch once, whatever the redeliveries and replicas.

    Concurrent adds to one epoch in this process share one compare-and-set: while one is being
    written, the episodes that arrive queue up, and the next writer counts them all in one go
    (a group commit). Replicas still race through the compare-and-set; episodes arriving one at
    a time are written one at a time, as before."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.kv = Kv(bus, bus.names.bucket(BUCKET_LEDGER))
        self._queued: dict[str, list[tuple[Episode, asyncio.Future[bool]]]] = {}
        self._writing: dict[str, asyncio.Lock] = {}

    async def get(self, campaign_id: str, epoch: int) -> tuple[EpochArrivals, int]:
        entry = await self.kv.latest(Names.key_arrivals(campaign_id, epoch))
        if entry is None or entry.value is None:
            return EpochArrivals(campaign_id=campaign_id, epoch=epoch), 0
        return _dec.decode(entry.value), entry.revision

    async def add(self, ep: Episode) -> bool:
        """Count ``ep`` in its epoch; ``False`` when it was counted already. Raises what the
        compare-and-set raises (the episodes queued with it are written by the next caller)."""
        key = Names.key_arrivals(ep.campaign_id, ep.epoch)
        counted: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queued.setdefault(key, []).append((ep, counted))
        lock = self._writing.setdefault(key, asyncio.Lock())
        async with lock:
            if not counted.done():  # nobody wrote it meanwhile: write every queued episode
                batch = self._queued.pop(key)
                try:
                    news = await self._add_all(key, [e for e, _ in batch])
                except BaseException:
                    # Ours fails with this error; the others stay queued for the next writer.
                    others = [(e, f) for e, f in batch if f is not counted]
                    self._queued[key] = others + self._queued.get(key, [])
                    raise
                for (_, f), new in zip(batch, news, strict=True):
                    f.set_result(new)
        if key not in self._queued and not lock.locked():
            self._writing.pop(key, None)
        return counted.result()

    async def _add_all(self, key: str, eps: list[Episode]) -> list[bool]:
        """One compare-and-set counting ``eps`` (one epoch's); which of them were new."""
        empty = EpochArrivals(campaign_id=eps[0].campaign_id, epoch=eps[0].epoch)
        news: list[bool] = []

        def change(current: EpochArrivals | None) -> EpochArrivals | None:
            arrivals = current or empty
            news.clear()
            for ep in eps:
                updated = add_arrival(arrivals, ep)
                news.append(updated is not None)
                arrivals = updated or arrivals
            return arrivals if any(news) else None

        cas = await compare_and_set(
            self.kv,
            key,
            change,
            decode=lambda e: None if e.value is None else _dec.decode(e.value),
            encode=_enc.encode,
            attempts=1000,  # other replicas count the same epoch: keep trying
        )
        return news if cas.written else [False] * len(eps)


_summary_dec = msgspec.json.Decoder(RolloutSummary)

SUMMARY_MAX_BYTES = 512 * 1024
"""A rollout summary larger than this is kept without its actions (it cannot be branched from):
KV values stay far below the bus's payload limit."""


class Rollouts:
    """The summaries planning reads of each arrived rollout, per epoch (KV ``ledger``)."""

    def __init__(self, bus: Bus) -> None:
        self.kv = Kv(bus, bus.names.bucket(BUCKET_LEDGER))

    async def put(self, ep: Episode) -> RolloutSummary:
        """Keep ``ep``'s summary (idempotent: the same episode makes the same summary)."""
        summary = summarize(ep)
        data = _enc.encode(summary)
        if len(data) > SUMMARY_MAX_BYTES:
            summary = msgspec.structs.replace(summary, actions=[])
            data = _enc.encode(summary)
        await self.kv.put(Names.key_rollout(ep.campaign_id, ep.epoch, ep.episode_id), data)
        return summary

    async def all(self, campaign_id: str, epoch: int) -> dict[str, RolloutSummary]:
        """Episode id -> summary, for every rollout of the epoch that arrived. A value that does
        not decode is skipped (planning treats that rollout as not arrived)."""
        out: dict[str, RolloutSummary] = {}
        for _, raw in await self.kv.scan(Names.key_rollouts(campaign_id, epoch), complete=True):
            try:
                s = _summary_dec.decode(raw)
            except msgspec.DecodeError:
                continue
            out[s.episode_id] = s
        return out
