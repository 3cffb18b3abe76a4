"""The campaign's durable state: control snapshots (through ``ControlStore``), ledger records
(through ``Ledger``) and per-epoch arrivals (compare-and-set in KV ``ledger``)."""

from __future__ import annotations

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
    """Counts each episode of an epoch once, whatever the redeliveries and replicas."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.kv = Kv(bus, bus.names.bucket(BUCKET_LEDGER))

    async def get(self, campaign_id: str, epoch: int) -> tuple[EpochArrivals, int]:
        entry = await self.kv.latest(Names.key_arrivals(campaign_id, epoch))
        if entry is None or entry.value is None:
            return EpochArrivals(campaign_id=campaign_id, epoch=epoch), 0
        return _dec.decode(entry.value), entry.revision

    async def add(self, ep: Episode) -> bool:
        """Count ``ep`` in its epoch; ``False`` when it was counted already."""
        empty = EpochArrivals(campaign_id=ep.campaign_id, epoch=ep.epoch)
        cas = await compare_and_set(
            self.kv,
            Names.key_arrivals(ep.campaign_id, ep.epoch),
            lambda current: add_arrival(current or empty, ep),
            decode=lambda e: None if e.value is None else _dec.decode(e.value),
            encode=_enc.encode,
            attempts=1000,  # other replicas count the same epoch: keep trying
        )
        return cas.written


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
