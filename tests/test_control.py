"""The control store against a real nats-server, each test in a namespace of its own."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import msgspec
import pytest

from aios_rl.bus import Bus, connect
from aios_rl.state.control import (
    ControlNotFoundError,
    ControlStore,
    CorruptControlError,
    StaleControlError,
)
from contracts import (
    CampaignSpec,
    CampaignState,
    ControlSnapshot,
    ControlState,
    GatewaySettings,
    Names,
    RailState,
)
from contracts.subjects import BUCKET_CONTROL

pytestmark = pytest.mark.timeout(60)

RAIL = Names.key_control("rail")
GATEWAY = Names.key_control("gateway")


@pytest.fixture
def store(bus: Bus) -> ControlStore:
    return ControlStore(bus)


@contextlib.asynccontextmanager
async def stores(url: str, names: Names, n: int) -> AsyncIterator[list[ControlStore]]:
    """``n`` stores, each on a connection of its own (as separate services would be)."""
    async with contextlib.AsyncExitStack() as stack:
        buses = [
            await stack.enter_async_context(connect(url, name=f"ctl-{i}", names=names))
            for i in range(n)
        ]
        yield [ControlStore(b) for b in buses]


def traces_plus_one(state: ControlState) -> ControlState:
    assert isinstance(state, RailState)
    return msgspec.structs.replace(state, traces_seen=state.traces_seen + 1)


async def test_a_missing_key_loads_as_none_at_revision_zero(store: ControlStore) -> None:
    assert await store.load(RAIL) == (None, 0)
    assert await store.history(RAIL) == []


async def test_save_is_compare_and_set_and_counts_versions(store: ControlStore) -> None:
    spec = CampaignSpec(campaign_id="c1", epochs=5)
    key = Names.key_control("campaign", "c1")
    first, rev1 = await store.save(ControlSnapshot(key=key, state=CampaignState(spec=spec)), 0)
    assert first.version == 1 and first.updated_at > 0 and rev1 > 0
    with pytest.raises(StaleControlError):  # it exists now: "never written" is stale
        await store.save(ControlSnapshot(key=key, state=CampaignState(spec=spec)), 0)

    loaded, revision = await store.load(key)
    assert (loaded, revision) == (first, rev1)
    assert isinstance(loaded.state, CampaignState) and loaded.state.spec == spec
    moved = msgspec.structs.replace(loaded, state=CampaignState(spec=spec, epoch=1))
    second, rev2 = await store.save(moved, revision)
    assert second.version == 2 and rev2 > rev1

    with pytest.raises(StaleControlError) as info:  # based on revision 1 again
        await store.save(msgspec.structs.replace(loaded, state=RailState()), rev1)
    assert info.value.key == key
    assert await store.load(key) == (second, rev2)


async def test_concurrent_load_or_init_ends_with_one_snapshot(
    nats_url: str, names: Names, bus: Bus
) -> None:
    async with stores(nats_url, names, 6) as racers:
        results = await asyncio.gather(
            *(
                s.load_or_init(GATEWAY, lambda i=i: GatewaySettings(backend=f"backend-{i}"))
                for i, s in enumerate(racers)
            )
        )
    assert all(r == results[0] for r in results)
    assert results[0].version == 1
    assert await ControlStore(bus).history(GATEWAY) == [results[0]]


async def test_load_or_init_returns_what_is_there(store: ControlStore) -> None:
    created = await store.load_or_init(RAIL, lambda: RailState(eta=0.5))
    assert await store.load_or_init(RAIL, lambda: RailState(eta=9.0)) == created


async def test_update_retries_when_another_writer_wins(
    bus: Bus, store: ControlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.load_or_init(RAIL, RailState)
    other = ControlStore(bus)
    seen: list[RailState] = []

    def fn(state: ControlState) -> ControlState:
        assert isinstance(state, RailState)
        seen.append(state)
        return msgspec.structs.replace(state, mode="live")

    async def competing_write() -> None:
        snap, rev = await other.load(RAIL)
        assert snap is not None
        await other.save(msgspec.structs.replace(snap, state=RailState(traces_seen=7)), rev)

    kv = store._kv  # the store's handle on its bucket: its reads
    original_latest = kv.latest
    loads = 0

    async def load_then_compete(key: str):  # type: ignore[no-untyped-def]
        nonlocal loads
        result = await original_latest(key)
        loads += 1
        if loads == 1:  # another writer saves between our read and our write
            await competing_write()
        return result

    monkeypatch.setattr(kv, "latest", load_then_compete)
    updated = await store.update(RAIL, fn)
    assert [s.traces_seen for s in seen] == [0, 7]  # re-applied on the winner's state
    assert isinstance(updated.state, RailState)
    assert (updated.state.mode, updated.state.traces_seen, updated.version) == ("live", 7, 3)
    assert [s.version for s in await other.history(RAIL)] == [1, 2, 3]


async def test_concurrent_updates_lose_nothing(nats_url: str, names: Names, bus: Bus) -> None:
    async with stores(nats_url, names, 6) as racers:

        async def bump(s: ControlStore) -> None:
            for _ in range(4):
                await s.update(RAIL, traces_plus_one, init=RailState)

        await asyncio.gather(*(bump(s) for s in racers))
    final, _ = await ControlStore(bus).load(RAIL)
    assert final is not None and isinstance(final.state, RailState)
    assert (final.state.traces_seen, final.version) == (24, 24)
    assert [s.version for s in await ControlStore(bus).history(RAIL)] == list(range(1, 25))


async def test_update_of_a_missing_key_needs_init(store: ControlStore) -> None:
    with pytest.raises(ControlNotFoundError):
        await store.update(RAIL, traces_plus_one)
    created = await store.update(RAIL, traces_plus_one, init=RailState)
    assert isinstance(created.state, RailState) and created.state.traces_seen == 1
    assert created.version == 1


async def test_an_update_that_changes_nothing_writes_nothing(store: ControlStore) -> None:
    snap = await store.load_or_init(RAIL, RailState)
    assert await store.update(RAIL, lambda s: s) == snap
    assert len(await store.history(RAIL)) == 1


async def test_history_keeps_the_last_32_writes_oldest_first(store: ControlStore) -> None:
    for _ in range(35):
        await store.update(RAIL, traces_plus_one, init=RailState)
    history = await store.history(RAIL)
    assert [s.version for s in history] == list(range(4, 36))
    assert [s.state.traces_seen for s in history] == list(range(4, 36))  # type: ignore[union-attr]


async def test_watch_yields_the_snapshot_then_every_write(store: ControlStore) -> None:
    await store.load_or_init(GATEWAY, GatewaySettings)
    async with store.watch(GATEWAY) as updates:
        assert (await asyncio.wait_for(anext(updates), 1.0)).version == 1
        await store.update(GATEWAY, lambda s: GatewaySettings(backend="claude"))
        snap = await asyncio.wait_for(anext(updates), 1.0)
        assert snap.version == 2 and snap.state == GatewaySettings(backend="claude")


async def test_a_value_that_is_not_a_snapshot_raises(
    bus: Bus, store: ControlStore, names: Names
) -> None:
    kv = await bus.js.key_value(names.bucket(BUCKET_CONTROL))
    await kv.put(RAIL, b'{"not": "a snapshot"}')
    with pytest.raises(CorruptControlError, match="not a snapshot"):
        await store.load(RAIL)


async def test_a_watch_skips_a_value_that_is_not_a_snapshot_and_keeps_watching(
    bus: Bus, store: ControlStore, names: Names
) -> None:
    """Garbage under a control key once ended the watch with an error (and crash-looped the
    teacher gateway): it is logged, counted and skipped; the next snapshot comes through."""
    kv = await bus.js.key_value(names.bucket(BUCKET_CONTROL))

    def snapshot(version: int, backend: str) -> bytes:
        state = GatewaySettings(backend=backend)
        return msgspec.json.encode(ControlSnapshot(key=GATEWAY, state=state, version=version))

    await kv.put(GATEWAY, b"\x00\x01 not json")
    async with store.watch(GATEWAY) as updates:
        await kv.put(GATEWAY, snapshot(1, "claude"))
        snap = await asyncio.wait_for(anext(updates), 2.0)
        assert snap.state == GatewaySettings(backend="claude")
        await kv.put(GATEWAY, b'{"not": "a snapshot"}')
        await kv.put(GATEWAY, snapshot(2, "oracle"))
        snap = await asyncio.wait_for(anext(updates), 2.0)
        assert snap.version == 2 and snap.state == GatewaySettings(backend="oracle")
        assert updates.skipped == 2 and "not a snapshot" in updates.last_skipped


async def test_all_lists_the_newest_snapshot_of_every_key_of_an_owner(bus) -> None:
    from aios_rl.state.control import ControlStore
    from contracts import GatewaySettings, Names, RailState

    store = ControlStore(bus)
    for ident in ("b", "a"):
        await store.update(Names.key_control("rail", ident), lambda s: s, init=lambda: RailState())
    await store.update(Names.key_control("rail", "a"), lambda s: RailState(mode="live"))
    await store.update(Names.key_control("gateway"), lambda s: s, init=lambda: GatewaySettings())
    snaps = await store.all("rail")
    assert [s.key for s in snaps] == ["rail.a", "rail.b"]
    assert snaps[0].state == RailState(mode="live") and snaps[0].version == 2
    assert [s.key for s in await store.all("gateway")] == ["gateway.default"]
    assert await store.all("campaign") == []


async def test_listing_leaves_out_a_garbage_key_instead_of_failing(
    bus: Bus, store: ControlStore, names: Names
) -> None:
    await store.load_or_init(RAIL, RailState)
    kv = await bus.js.key_value(names.bucket(BUCKET_CONTROL))
    await kv.put(Names.key_control("rail", "garbage"), b"\x00not json{")
    listed = await store.all("rail")
    assert [s.key for s in listed] == [RAIL]
    await kv.put(RAIL, b"[]")  # a later revision of a good key goes bad too
    assert [s.state for s in await store.history(RAIL)] == [RailState()]


async def test_a_campaign_service_starts_past_a_garbage_campaign_key(
    bus: Bus, nats_url: str, names: Names
) -> None:
    """Garbage under a ``campaign.*`` key once crash-looped the campaign service at start-up."""
    from contracts import CampaignStatus, StatusCampaign
    from services.campaign.main import build as build_campaign
    from services.campaign.settings import CampaignSettings

    from .support import running

    kv = await bus.js.key_value(names.bucket(BUCKET_CONTROL))
    await kv.put(Names.key_control("campaign", "junk"), b"\x00garbage{")
    svc, campaigns = build_campaign(
        bus, CampaignSettings(nats_url=nats_url, namespace=names.namespace)
    )
    async with running(svc):
        status = await bus.request(
            names.campaign_cmd("status"),
            StatusCampaign(campaign_id="other"),
            CampaignStatus,
            timeout=10,
        )
        assert status.state == "unknown" and not svc.stopping
    await campaigns.close()
