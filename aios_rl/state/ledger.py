"""The epoch ledger: one :class:`~contracts.EpochRecord` per campaign epoch in KV ``ledger``
(key ``<campaign>.<epoch:06d>``), each write announced by a :class:`~contracts.CampaignEvent`
on ``campaign.event.<kind>`` (stream ``EVENTS``).

**Retried puts publish once.** :meth:`Ledger.put` does not rewrite a record that is already
stored byte for byte; it reuses that revision. The event's ``Nats-Msg-Id`` is
``<campaign>:<epoch>:<kind>:<phase>:<revision>``, so putting the same record again (after a
timeout, a crash between the KV write and the publish, or a restarted campaign replaying its
last step) publishes the event if it is missing and is de-duplicated by JetStream if it is not
(within the stream's duplicate window, 2 minutes).
"""

from __future__ import annotations

import time
from typing import get_args, get_type_hints

import msgspec

from aios_rl.bus import Bus, BusError
from contracts import CampaignEvent, EpochRecord, HeldoutScore, Names
from contracts.subjects import BUCKET_LEDGER

from . import _kv
from ._errors import CorruptError, StateError, UnavailableError
from ._handles import EntryDecoder, ErrorKinds, Kv

__all__ = ["EVENT_KINDS", "CorruptLedgerError", "Ledger", "LedgerError", "LedgerUnavailableError"]

EVENT_KINDS: tuple[str, ...] = get_args(get_type_hints(CampaignEvent)["kind"])
"""The kinds a campaign event may have (``phase``, ``decided``, ...)."""


class LedgerError(StateError):
    """Root of every error the ledger raises."""


class CorruptLedgerError(LedgerError, CorruptError):
    """A KV value in the ledger is not an EpochRecord."""


class LedgerUnavailableError(LedgerError, UnavailableError):
    """NATS refused or did not answer (a failed put is safe to retry: it publishes once)."""


_encoder = msgspec.json.Encoder()
_decode = EntryDecoder(EpochRecord, CorruptLedgerError, "ledger key", "an epoch record")
_decode_heldout = EntryDecoder(HeldoutScore, CorruptLedgerError, "ledger key", "a held-out score")


_KINDS = ErrorKinds(unavailable=LedgerUnavailableError)


class Ledger:
    """The stack's ``ledger`` bucket (under ``bus.names``). Every method may raise
    :class:`LedgerUnavailableError` and :class:`CorruptLedgerError`; an invalid campaign id or
    event kind raises ``ValueError``."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._kv = Kv(bus, bus.names.bucket(BUCKET_LEDGER), _KINDS)

    async def put(self, record: EpochRecord, kind: str = "phase", *, reason: str = "") -> int:
        """Store ``record`` as its epoch's line and publish ``CampaignEvent(kind, record)``
        (with ``reason``, for a failure); returns the KV revision that holds it. Idempotent (see
        the module docstring)."""
        if kind not in EVENT_KINDS:
            raise ValueError(f"campaign event kind {kind!r} is not one of {EVENT_KINDS}")
        key = Names.key_epoch(record.campaign_id, record.epoch)
        data = _encoder.encode(record)
        entry = await self._kv.latest(key)
        if entry is not None and entry.value == data:
            revision = entry.revision  # this very change is stored already
        else:
            revision = await self._kv.put(key, data)
        event = CampaignEvent(
            kind=kind,  # type: ignore[arg-type]  # checked against EVENT_KINDS above
            campaign_id=record.campaign_id,
            epoch=record.epoch,
            record=record,
            at=time.time(),
            reason=reason,
        )
        try:
            await self._bus.publish_durable(
                self._bus.names.campaign_event(kind),
                event,
                msg_id=f"{record.campaign_id}:{record.epoch}:{kind}:{record.phase}:{revision}",
            )
        except BusError as exc:
            raise LedgerUnavailableError(f"put ledger {key!r}: {exc!r}") from exc
        return revision

    async def get(self, campaign_id: str, epoch: int) -> EpochRecord | None:
        """The record of one epoch, or ``None`` if it has none."""
        key = Names.key_epoch(campaign_id, epoch)
        entry = await self._kv.latest(key)
        return None if entry is None else _decode(entry)

    async def records(self, campaign_id: str) -> list[EpochRecord]:
        """Every epoch record of a campaign, by epoch."""
        pattern = _kv.family(Names.key_epoch(campaign_id, 0))
        entries = await self._kv.read(pattern, history=False)
        return sorted((r for r in map(_decode, entries) if r is not None), key=lambda r: r.epoch)

    async def put_heldout(self, score: HeldoutScore) -> int:
        """Store a held-out score of a campaign's policy (one per epoch; a later one for the
        same epoch replaces it); returns the KV revision."""
        return await self._kv.put(
            Names.key_heldout(score.campaign_id, score.epoch), _encoder.encode(score)
        )

    async def heldout(self, campaign_id: str) -> list[HeldoutScore]:
        """Every held-out score of a campaign, by epoch."""
        pattern = _kv.family(Names.key_heldout(campaign_id, 0))
        entries = await self._kv.read(pattern, history=False)
        scores = (s for s in map(_decode_heldout, entries) if s is not None)
        return sorted(scores, key=lambda s: s.epoch)

    def watch(self, *, check_every: float = 1.0) -> _kv.KvWatch[EpochRecord]:
        """Every campaign's epoch records: the newest of each now, then every rewrite (the
        dashboard's live view). A corrupt revision is skipped and counted, never raised."""
        return self._kv.watch("*.*", _decode, check_every=check_every)

    def watch_heldout(self, *, check_every: float = 1.0) -> _kv.KvWatch[HeldoutScore]:
        """Every campaign's held-out scores: the newest of each now, then every write."""
        return self._kv.watch(Names.key_heldouts(), _decode_heldout, check_every=check_every)
