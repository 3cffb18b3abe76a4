"""The campaign's durable state: control snapshots (through ``ControlStore``), ledger records
(through ``Ledger``) and per-epoch arrivals (compare-and-set in KV ``ledger``)."""

from __future__ import annotations

import msgspec

from aios_rl.bus import Bus
from aios_rl.state import Kv, compare_and_set
from contracts import Episode, EpochArrivals, Names
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
