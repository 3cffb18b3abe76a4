"""The campaign's durable state: control snapshots (through ``ControlStore``), ledger records
(through ``Ledger``) and per-epoch arrivals (compare-and-set in KV ``ledger``)."""

from __future__ import annotations

import msgspec
import nats.js.errors
from nats.js.kv import KeyValue

from aios_rl.bus import Bus
from contracts import Episode, EpochArrivals, Names
from contracts.subjects import BUCKET_LEDGER

from .logic import add_arrival

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(EpochArrivals)


class Arrivals:
    """Counts each episode of an epoch once, whatever the redeliveries and replicas."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._kv: KeyValue | None = None

    async def kv(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self.bus.js.key_value(self.bus.names.bucket(BUCKET_LEDGER))
        return self._kv

    async def get(self, campaign_id: str, epoch: int) -> tuple[EpochArrivals, int]:
        kv = await self.kv()
        try:
            entry = await kv.get(Names.key_arrivals(campaign_id, epoch))
        except nats.js.errors.KeyNotFoundError:
            return EpochArrivals(campaign_id=campaign_id, epoch=epoch), 0
        assert entry.value is not None and entry.revision is not None
        return _dec.decode(entry.value), entry.revision

    async def add(self, ep: Episode) -> bool:
        """Count ``ep`` in its epoch; ``False`` when it was counted already."""
        kv = await self.kv()
        key = Names.key_arrivals(ep.campaign_id, ep.epoch)
        while True:
            current, revision = await self.get(ep.campaign_id, ep.epoch)
            updated = add_arrival(current, ep)
            if updated is None:
                return False
            try:
                if revision == 0:
                    await kv.create(key, _enc.encode(updated))
                else:
                    await kv.update(key, _enc.encode(updated), last=revision)
                return True
            except (nats.js.errors.KeyWrongLastSequenceError, nats.js.errors.KeyValueError):
                continue  # another replica counted something meanwhile: re-read and retry
