"""The epoch ledger against a real nats-server, each test in a namespace of its own."""

from __future__ import annotations

import msgspec
import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from aios_rl.bus import Bus
from aios_rl.state import _kv
from aios_rl.state.ledger import EVENT_KINDS, CorruptLedgerError, Ledger
from contracts import CampaignEvent, EnvEpochStats, EpochRecord, Names, PointerMove, decode
from contracts.subjects import BUCKET_LEDGER, MSG_ID_HEADER, STREAM_EVENTS

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def ledger(bus: Bus) -> Ledger:
    return Ledger(bus)


def record(epoch: int, campaign: str = "c1", **kw: object) -> EpochRecord:
    return EpochRecord(campaign_id=campaign, epoch=epoch, **kw)  # type: ignore[arg-type]


async def events(bus: Bus, names: Names) -> list[tuple[CampaignEvent, str]]:
    """Every campaign event the EVENTS stream holds, with its message id, read back through a
    JetStream pull consumer; checks the stream holds no more than were read."""
    stream = names.stream(STREAM_EVENTS)
    info = await bus.js.stream_info(stream, subjects_filter=names.campaign_event(">"))
    held = sum((info.state.subjects or {}).values())
    if not held:
        return []
    psub = await bus.js.pull_subscribe(
        names.campaign_event(">"),
        stream=stream,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
    )
    try:
        msgs = []
        while len(msgs) < held:
            msgs += await psub.fetch(held - len(msgs), timeout=5.0)
    finally:
        await psub.unsubscribe()
    return [
        (decode(m.data, m.headers, CampaignEvent), (m.headers or {})[MSG_ID_HEADER]) for m in msgs
    ]


async def test_put_and_get_round_trip(bus: Bus, ledger: Ledger, names: Names) -> None:
    assert await ledger.get("c1", 0) is None
    rec = record(
        0,
        phase="decide",
        active_checkpoint="abc",
        per_env={"shell": EnvEpochStats(episodes=4, success=3, mean_reward=0.75)},
        verdict="better",
        decision="promote",
        pointer_moves=[PointerMove(pointer="last_stable", old="x", new="abc")],
        timings={"collect": 1.0, "decide": 2.0},
    )
    revision = await ledger.put(rec, kind="decided")
    assert await ledger.get("c1", 0) == rec
    kv = await bus.js.key_value(names.bucket(BUCKET_LEDGER))
    assert (await kv.get(Names.key_epoch("c1", 0))).revision == revision
    [(ev, msg_id)] = await events(bus, names)
    assert (ev.kind, ev.campaign_id, ev.epoch, ev.record) == ("decided", "c1", 0, rec)
    assert ev.at > 0 and msg_id == f"c1:0:decided:decide:{revision}"


async def test_records_are_one_campaigns_epochs_in_order(ledger: Ledger) -> None:
    for rec in [record(2), record(0), record(1), record(0, "c2"), record(5, "c1x")]:
        await ledger.put(rec)
    await ledger.put(record(1, phase="train"))  # a phase change rewrites the epoch's line
    got = await ledger.records("c1")
    assert [(r.epoch, r.phase) for r in got] == [(0, "collect"), (1, "train"), (2, "collect")]
    assert [r.epoch for r in await ledger.records("c2")] == [0]
    assert await ledger.records("nobody") == []


async def test_every_change_publishes_one_event(bus: Bus, ledger: Ledger, names: Names) -> None:
    await ledger.put(record(0), kind="started")
    await ledger.put(record(0, phase="compare"))
    await ledger.put(record(0, phase="decide", decision="hold"), kind="decided")
    got = await events(bus, names)
    assert [(e.kind, e.record.phase if e.record else None) for e, _ in got] == [
        ("started", "collect"),
        ("phase", "compare"),
        ("decided", "decide"),
    ]


async def test_a_retried_put_does_not_publish_twice(bus: Bus, ledger: Ledger, names: Names) -> None:
    rec = record(3, phase="train", new_checkpoint="n1")
    first = await ledger.put(rec)
    again = await ledger.put(rec)  # e.g. the caller timed out and tried again
    assert again == first
    key = Names.key_epoch("c1", 3)
    assert len(await _kv.read(bus.js, names.bucket(BUCKET_LEDGER), key, history=True)) == 1
    assert len(await events(bus, names)) == 1


async def test_a_put_retried_after_a_crash_before_publishing_publishes_once(
    bus: Bus, ledger: Ledger, names: Names
) -> None:
    rec = record(4, phase="compare")
    kv = await bus.js.key_value(names.bucket(BUCKET_LEDGER))
    # The first attempt wrote the record, then died before publishing its event.
    written = await kv.put(Names.key_epoch("c1", 4), msgspec.json.encode(rec))
    assert await events(bus, names) == []
    assert await ledger.put(rec) == written
    assert await ledger.put(rec) == written
    [(ev, msg_id)] = await events(bus, names)
    assert ev.record == rec and msg_id == f"c1:4:phase:compare:{written}"


async def test_bad_input_and_bad_values_raise(bus: Bus, ledger: Ledger, names: Names) -> None:
    assert "phase" in EVENT_KINDS
    with pytest.raises(ValueError, match="kind"):
        await ledger.put(record(0), kind="exploded")
    with pytest.raises(ValueError):
        await ledger.put(record(0, campaign="no spaces allowed"))
    kv = await bus.js.key_value(names.bucket(BUCKET_LEDGER))
    await kv.put(Names.key_epoch("c1", 9), b"[1, 2]")
    with pytest.raises(CorruptLedgerError):
        await ledger.get("c1", 9)
    assert await events(bus, names) == []
