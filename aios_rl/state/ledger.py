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

import contextlib
import time
from collections.abc import Iterator
from typing import get_args, get_type_hints

import msgspec
import nats.errors
from nats.js.kv import KeyValue

from aios_rl.bus import Bus, BusError
from contracts import CampaignEvent, EpochRecord, Names
from contracts.subjects import BUCKET_LEDGER

from . import _kv

__all__ = ["EVENT_KINDS", "CorruptLedgerError", "Ledger", "LedgerError", "LedgerUnavailableError"]

EVENT_KINDS: tuple[str, ...] = get_args(get_type_hints(CampaignEvent)["kind"])
"""The kinds a campaign event may have (``phase``, ``decided``, ...)."""


class LedgerError(Exception):
    """Root of every error the ledger raises."""


class CorruptLedgerError(LedgerError):
    """A KV value in the ledger is not an EpochRecord."""


class LedgerUnavailableError(LedgerError):
    """NATS refused or did not answer (a failed put is safe to retry: it publishes once)."""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(EpochRecord)


def _decode(entry: _kv.KvEntry) -> EpochRecord:
    assert entry.value is not None
    try:
        return _decoder.decode(entry.value)
    except msgspec.DecodeError as exc:
        raise CorruptLedgerError(
            f"ledger key {entry.key!r} (revision {entry.revision}) is not an epoch record: {exc}"
        ) from exc


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    """The one place NATS and bus errors become ledger errors."""
    try:
        yield
    except (nats.errors.Error, BusError) as exc:
        raise LedgerUnavailableError(f"{what}: {exc!r}") from exc


class Ledger:
    """The stack's ``ledger`` bucket (under ``bus.names``). Every method may raise
    :class:`LedgerUnavailableError` and :class:`CorruptLedgerError`; an invalid campaign id or
    event kind raises ``ValueError``."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._bucket = bus.names.bucket(BUCKET_LEDGER)
        self._kv_handle: KeyValue | None = None

    async def _kv(self) -> KeyValue:
        if self._kv_handle is None:
            self._kv_handle = await self._bus.js.key_value(self._bucket)
        return self._kv_handle

    async def put(self, record: EpochRecord, kind: str = "phase") -> int:
        """Store ``record`` as its epoch's line and publish ``CampaignEvent(kind, record)``;
        returns the KV revision that holds it. Idempotent (see the module docstring)."""
        if kind not in EVENT_KINDS:
            raise ValueError(f"campaign event kind {kind!r} is not one of {EVENT_KINDS}")
        key = Names.key_epoch(record.campaign_id, record.epoch)
        data = _encoder.encode(record)
        with _translated(f"put ledger {key!r}"):
            entry = await _kv.latest(self._bus.js, self._bucket, key)
            if entry is not None and entry.value == data:
                revision = entry.revision  # this very change is stored already
            else:
                revision = await (await self._kv()).put(key, data)
            event = CampaignEvent(
                kind=kind,  # type: ignore[arg-type]  # checked against EVENT_KINDS above
                campaign_id=record.campaign_id,
                epoch=record.epoch,
                record=record,
                at=time.time(),
            )
            await self._bus.publish_durable(
                self._bus.names.campaign_event(kind),
                event,
                msg_id=f"{record.campaign_id}:{record.epoch}:{kind}:{record.phase}:{revision}",
            )
        return revision

    async def get(self, campaign_id: str, epoch: int) -> EpochRecord | None:
        """The record of one epoch, or ``None`` if it has none."""
        key = Names.key_epoch(campaign_id, epoch)
        with _translated(f"get ledger {key!r}"):
            entry = await _kv.latest(self._bus.js, self._bucket, key)
        return None if entry is None or entry.value is None else _decode(entry)

    async def records(self, campaign_id: str) -> list[EpochRecord]:
        """Every epoch record of a campaign, by epoch."""
        pattern = _kv.family(Names.key_epoch(campaign_id, 0))
        with _translated(f"list ledger of {campaign_id!r}"):
            entries = await _kv.read(self._bus.js, self._bucket, pattern, history=False)
        return sorted((_decode(e) for e in entries if e.value is not None), key=lambda r: r.epoch)
