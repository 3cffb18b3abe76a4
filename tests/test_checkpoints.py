"""The checkpoint registry: pure move rules and tree drawing, then against a real nats-server
(unique namespace per test), then with several OS processes racing on the pointers."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import os
import random
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import msgspec
import nats
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aios_rl.bus import Bus, connect, provision
from aios_rl.stack.natsd import NatsServer, free_port
from aios_rl.state import _kv
from aios_rl.state.checkpoints import (
    CheckpointRegistry,
    CorruptCheckpointError,
    EventNotPublishedError,
    InvalidMoveError,
    Moved,
    PointerContentionError,
    RegistryUnavailableError,
    StalePointersError,
    UnknownCheckpointError,
    checkpoint_id_of,
    render_tree,
)
from aios_rl.state.lineage import POINTER_NAMES, plan_advance, plan_promote, plan_rollback
from contracts import CheckpointEvent, CheckpointMeta, CheckpointPointers, Names, decode
from contracts.subjects import BUCKET_CHECKPOINTS, OBJECTS_WEIGHTS, STREAM_EVENTS
from tests.support import next_item, stored

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(60)

P = CheckpointPointers
MIB = 1 << 20


# -- pure: the move rules ----------------------------------------------------------------------


def test_first_advance_sets_active_and_last_stable() -> None:
    moved = plan_advance(P(), "a", reason="init", now=5.0)
    assert moved.pointers == P(active="a", last_stable="a", updated_at=5.0, reason="init")
    assert [(m.pointer, m.old, m.new, m.reason) for m in moved.moves] == [
        ("active", None, "a", "init"),
        ("last_stable", None, "a", "init"),
    ]


def test_advance_keeps_the_previous_active_as_pre_update_ref() -> None:
    moved = plan_advance(P(active="a", last_stable="a"), "b", reason="u1", now=1.0)
    assert (moved.pointers.active, moved.pointers.pre_update_ref, moved.pointers.last_stable) == (
        "b",
        "a",
        "a",
    )
    assert [(m.pointer, m.old, m.new) for m in moved.moves] == [
        ("active", "a", "b"),
        ("pre_update_ref", None, "a"),
    ]


def test_advance_to_the_active_checkpoint_is_a_no_op() -> None:
    p = P(active="a", pre_update_ref="z", last_stable="a", updated_at=1.0)
    assert plan_advance(p, "a", reason="again", now=9.0) == (p, [])


def test_rollback_to_pre_update_ref_makes_it_active_and_leaves_last_stable() -> None:
    p = P(active="c", pre_update_ref="b", last_stable="a")
    moved = plan_rollback(p, "pre_update_ref", reason="worse", now=2.0)
    assert (moved.pointers.active, moved.pointers.pre_update_ref, moved.pointers.last_stable) == (
        "b",
        "b",
        "a",
    )
    assert [(m.pointer, m.old, m.new) for m in moved.moves] == [("active", "c", "b")]
    with pytest.raises(InvalidMoveError, match="nothing to roll back to"):
        plan_rollback(moved.pointers, "pre_update_ref", reason="again", now=3.0)


def test_rollback_to_last_stable_resets_the_reference_too() -> None:
    moved = plan_rollback(
        P(active="c", pre_update_ref="b", last_stable="a"), "last_stable", reason="streak", now=1.0
    )
    assert (moved.pointers.active, moved.pointers.pre_update_ref, moved.pointers.last_stable) == (
        "a",
        "a",
        "a",
    )
    assert [(m.pointer, m.old, m.new) for m in moved.moves] == [
        ("active", "c", "a"),
        ("pre_update_ref", "b", "a"),
    ]


@pytest.mark.parametrize(
    ("p", "to"),
    [
        (P(), "pre_update_ref"),
        (P(), "last_stable"),
        (P(active="a", last_stable="a"), "pre_update_ref"),
        (P(active="a", last_stable="a"), "last_stable"),
        (P(active="b", pre_update_ref="a", last_stable="a"), "active"),
    ],
)
def test_rollback_with_nothing_to_roll_back_to_raises(p: P, to: str) -> None:
    with pytest.raises(InvalidMoveError):
        plan_rollback(p, to, reason="", now=0.0)  # type: ignore[arg-type]


def test_promote_makes_active_last_stable() -> None:
    moved = plan_promote(P(active="b", pre_update_ref="a", last_stable="a"), reason="ok", now=1.0)
    assert moved.pointers.last_stable == "b" and moved.pointers.pre_update_ref == "a"
    assert [(m.pointer, m.old, m.new) for m in moved.moves] == [("last_stable", "a", "b")]
    assert plan_promote(moved.pointers, reason="again", now=2.0) == (moved.pointers, [])
    with pytest.raises(InvalidMoveError, match="nothing to promote"):
        plan_promote(P(), reason="", now=0.0)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.sampled_from("abcdef")),
        st.tuples(st.just("rollback"), st.sampled_from(["pre_update_ref", "last_stable"])),
        st.tuples(st.just("promote"), st.just("")),
    ),
    max_size=40,
)


@settings(max_examples=100, deadline=None)
@given(OPS)
def test_any_sequence_of_moves_keeps_the_invariants(ops: list[tuple[str, str]]) -> None:
    p = P()
    for op, arg in ops:
        try:
            if op == "advance":
                moved = plan_advance(p, arg, reason=op, now=1.0)
            elif op == "rollback":
                moved = plan_rollback(p, arg, reason=op, now=1.0)  # type: ignore[arg-type]
            else:
                moved = plan_promote(p, reason=op, now=1.0)
        except InvalidMoveError:
            continue
        new = moved.pointers
        # The moves describe exactly what changed.
        applied = msgspec.structs.replace(p, **{m.pointer: m.new for m in moved.moves})
        assert all(getattr(applied, n) == getattr(new, n) for n in POINTER_NAMES)
        assert all(m.old == getattr(p, m.pointer) != m.new for m in moved.moves)
        if op == "advance" and moved.moves:
            assert (new.active, new.pre_update_ref) == (arg, p.active)
            assert new.last_stable == (p.last_stable or arg)
        if op == "rollback":
            assert new.active == new.pre_update_ref == getattr(p, arg)
            assert new.last_stable == p.last_stable
        if op == "promote":
            assert new.last_stable == p.active and new.active == p.active
        if p.active is not None:  # once something is active, it stays so, and stable too
            assert new.active is not None and new.last_stable is not None
        p = new


# -- pure: the tree ------------------------------------------------------------------------------


def meta(cid: str, parent: str | None, seq: int, **kw: object) -> CheckpointMeta:
    return CheckpointMeta(checkpoint_id=cid, parent_id=parent, seq=seq, **kw)  # type: ignore[arg-type]


def test_render_tree_draws_branches_markers_and_metrics() -> None:
    metas = {
        m.checkpoint_id: m
        for m in [
            meta("c", "a", 1, algorithm="ppo", created_by="u2", created_at=3.0),
            meta("a", None, 0, created_by="init", created_at=1.0),
            meta(
                "d",
                "b",
                2,
                algorithm="grpo",
                created_by="u3",
                created_at=4.0,
                metrics={"reward": 0.7, "kl": 0.0123456, "loss": 1.5, "zeta": 9.0},
            ),
            meta(
                "b",
                "a",
                1,
                algorithm="grpo",
                created_by="u1",
                created_at=2.0,
                metrics={"reward": 0.5},
            ),
        ]
    }
    pointers = P(active="d", pre_update_ref="b", last_stable="a")
    assert render_tree(pointers, metas) == "\n".join(
        [
            "a  seq=0  init  by=init  [last_stable]",
            "├── b  seq=1  grpo  by=u1  reward=0.5  [pre_update_ref]",
            "│   d  seq=2  grpo  by=u3  kl=0.01235 loss=1.5 reward=0.7  [active]",
            "└── c  seq=1  ppo  by=u2",
        ]
    )


def test_render_tree_shows_orphans_unknown_pointers_and_nothing() -> None:
    metas = {"x": meta("x", "gone", 4, algorithm="ppo", created_by="u9")}
    out = render_tree(P(active="x", last_stable="y"), metas).splitlines()
    assert out == [
        "x  seq=4  ppo  by=u9  (parent gone missing)  [active]",
        "[last_stable] -> y (no metadata)",
    ]
    assert render_tree(P(), {}) == "(no checkpoints)"


def test_render_tree_keeps_a_long_linear_lineage_flat() -> None:
    n = 3000  # deeper than the recursion limit
    metas = {f"k{i}": meta(f"k{i}", f"k{i - 1}" if i else None, i) for i in range(n)}
    lines = render_tree(P(active=f"k{n - 1}", last_stable="k0"), metas).splitlines()
    assert len(lines) == n
    assert [line.split()[0] for line in lines] == [f"k{i}" for i in range(n)]
    assert lines[-1].endswith("[active]") and lines[0].endswith("[last_stable]")


# -- against nats-server --------------------------------------------------------------------------


@pytest.fixture
def registry(bus: Bus) -> CheckpointRegistry:
    return CheckpointRegistry(bus)


async def put(registry: CheckpointRegistry, tag: str, parent: str | None = None) -> str:
    m = await registry.store(
        f"weights {tag}".encode(), parent_id=parent, created_by=tag, algorithm="grpo"
    )
    return m.checkpoint_id


def event(msg: object) -> CheckpointEvent:
    return decode(msg.data, msg.headers, CheckpointEvent)  # type: ignore[attr-defined]


async def stream_count(bus: Bus, subject: str) -> int:
    """How many messages the EVENTS stream holds on ``subject``."""
    info = await bus.js.stream_info(bus.names.stream(STREAM_EVENTS), subjects_filter=subject)
    return sum((info.state.subjects or {}).values())


async def test_store_and_load_a_multi_mib_blob_through_the_object_store(
    bus: Bus, registry: CheckpointRegistry, names: Names
) -> None:
    blob = random.Random(7).randbytes(3 * MIB + 12345)
    async with stored(bus, names.checkpoint_event(">")) as events:
        m = await registry.store(
            blob, parent_id=None, created_by="init", algorithm="init", metrics={"reward": 0.25}
        )
        ev = event(await next_item(events))
    digest = hashlib.sha256(blob).hexdigest()
    assert m.checkpoint_id == digest[:16] == checkpoint_id_of(blob)
    assert (m.sha256, m.size_bytes, m.seq, m.parent_id) == (digest, len(blob), 0, None)
    assert m.object_name == Names.object_weights(m.checkpoint_id)
    assert (ev.kind, ev.checkpoint_id, ev.metrics) == ("stored", m.checkpoint_id, {"reward": 0.25})

    assert await registry.load(m.checkpoint_id) == blob
    assert await registry.meta(m.checkpoint_id) == m
    obs = await bus.js.object_store(names.bucket(OBJECTS_WEIGHTS))
    assert (await obs.get_info(m.object_name)).size == len(blob)
    # The weights are nowhere in KV: the meta value is small, and so is the whole bucket.
    kv = await bus.js.key_value(names.bucket(BUCKET_CHECKPOINTS))
    entry = await kv.get(Names.key_checkpoint_meta(m.checkpoint_id))
    assert entry.value is not None and len(entry.value) < 1024
    assert (await kv.status()).stream_info.state.bytes < 4096


async def test_storing_the_same_bytes_twice_is_idempotent(
    bus: Bus, registry: CheckpointRegistry, names: Names
) -> None:
    first = await registry.store(b"same bytes", parent_id=None, created_by="a", algorithm="init")
    again = await registry.store(
        b"same bytes", parent_id=None, created_by="b", algorithm="ppo", metrics={"x": 1.0}
    )
    assert again == first
    meta_key = Names.key_checkpoint_meta(first.checkpoint_id)
    assert (
        len(await _kv.read(bus.js, names.bucket(BUCKET_CHECKPOINTS), meta_key, history=True)) == 1
    )
    obs = await bus.js.object_store(names.bucket(OBJECTS_WEIGHTS))
    assert [o.name for o in await obs.list()] == [first.object_name]
    assert await stream_count(bus, names.checkpoint_event("stored")) == 1


async def test_seq_and_lineage_follow_the_parents(registry: CheckpointRegistry) -> None:
    root = await put(registry, "root")
    child = await put(registry, "child", root)
    grandchild = await put(registry, "grandchild", child)
    side = await put(registry, "side", root)
    lineage = await registry.lineage(grandchild)
    assert [(m.checkpoint_id, m.seq) for m in lineage] == [(grandchild, 2), (child, 1), (root, 0)]
    assert [m.checkpoint_id for m in await registry.lineage(side)] == [side, root]
    snap = await registry.snapshot()
    assert set(snap.metas) == {root, child, grandchild, side}
    assert snap.revision == 0 and snap.pointers == P()


async def test_unknown_ids_raise(registry: CheckpointRegistry) -> None:
    ghost = checkpoint_id_of(b"never stored")
    for call in (registry.meta, registry.load, registry.lineage, registry.advance, registry.init):
        with pytest.raises(UnknownCheckpointError) as info:
            await call(ghost)
        assert info.value.checkpoint_id == ghost
    with pytest.raises(UnknownCheckpointError):
        await registry.meta("not a valid id!")
    with pytest.raises(UnknownCheckpointError):
        await registry.store(b"orphan", parent_id=ghost, created_by="x", algorithm="grpo")
    assert checkpoint_id_of(b"orphan") not in (await registry.snapshot()).metas
    assert (await registry.pointers())[1] == 0


async def test_load_detects_weights_that_do_not_match_the_meta(
    bus: Bus, registry: CheckpointRegistry, names: Names
) -> None:
    m = await registry.store(b"A" * 1000, parent_id=None, created_by="x", algorithm="init")
    obs = await bus.js.object_store(names.bucket(OBJECTS_WEIGHTS))
    await obs.put(m.object_name, b"B" * 1000)
    with pytest.raises(CorruptCheckpointError, match="sha256"):
        await registry.load(m.checkpoint_id)
    await obs.delete(m.object_name)
    with pytest.raises(CorruptCheckpointError, match="missing"):
        await registry.load(m.checkpoint_id)


async def test_pointer_moves_follow_the_architecture_and_publish_events(
    bus: Bus, registry: CheckpointRegistry, names: Names
) -> None:
    a, b, c = [await put(registry, t) for t in "abc"]
    async with stored(bus, names.checkpoint_event(">")) as events:
        for _ in range(3):
            assert event(await next_item(events)).kind == "stored"

        steps = []

        async def step(kind: str, call: Awaitable[object]) -> P:
            moved = await call
            pointers, revision = await registry.pointers()
            assert moved.pointers == pointers  # type: ignore[attr-defined]
            ev = event(await next_item(events))
            assert (ev.kind, ev.pointers, ev.moves) == (kind, pointers, moved.moves)  # type: ignore[attr-defined]
            steps.append(revision)
            return pointers

        p = await step("advanced", registry.advance(a, "first"))
        assert (p.active, p.pre_update_ref, p.last_stable) == (a, None, a)
        p = await step("advanced", registry.advance(b, "update 1"))
        assert (p.active, p.pre_update_ref, p.last_stable) == (b, a, a)
        assert p.reason == "update 1" and p.updated_at > 0
        p = await step("rolled_back", registry.rollback("pre_update_ref", "worse"))
        assert (p.active, p.pre_update_ref, p.last_stable) == (a, a, a)
        with pytest.raises(InvalidMoveError):
            await registry.rollback("pre_update_ref", "again")
        p = await step("advanced", registry.advance(b, "update 2"))
        p = await step("promoted", registry.promote("stable"))
        assert (p.active, p.pre_update_ref, p.last_stable) == (b, a, b)
        p = await step("advanced", registry.advance(c, "update 3"))
        assert (p.active, p.pre_update_ref, p.last_stable) == (c, b, b)
        p = await step("rolled_back", registry.rollback("last_stable", "streak"))
        assert (p.active, p.pre_update_ref, p.last_stable) == (b, b, b)
        assert steps == sorted(steps) and len(set(steps)) == len(steps)

        # No-ops write nothing and publish nothing.
        revision = (await registry.pointers())[1]
        assert (await registry.advance(b, "same")).moves == []
        assert (await registry.promote("same")).moves == []
        assert (await registry.init(a)).moves == []
        assert (await registry.pointers())[1] == revision
    assert await stream_count(bus, names.checkpoint_event("*")) == 3 + len(steps)
    history = await registry.pointer_history()
    assert [h.active for h, _ in history] == [a, b, a, b, b, c, b]


async def test_init_sets_the_first_pointers_only(registry: CheckpointRegistry) -> None:
    a, b = await put(registry, "a"), await put(registry, "b")
    first = await registry.init(a)
    assert (first.pointers.active, first.pointers.last_stable) == (a, a)
    assert (await registry.init(b)).moves == []
    assert (await registry.pointers())[0].active == a


async def test_a_stale_expectation_raises_and_writes_nothing(
    registry: CheckpointRegistry, bus: Bus
) -> None:
    a, b, c = [await put(registry, t) for t in "abc"]
    await registry.advance(a, expect_active=None)
    with pytest.raises(StalePointersError):
        await registry.advance(b, expect_active=None)
    other = CheckpointRegistry(bus)
    await other.advance(b, "other writer", expect_active=a)
    _, revision = await registry.pointers()
    with pytest.raises(StalePointersError) as info:
        await registry.advance(c, "based on a", expect_active=a)
    assert info.value.current.active == b
    # Advancing to what is already active is done, whatever the expectation (a safe retry).
    assert (await registry.advance(b, "retry", expect_active=a)).moves == []
    for move in (
        registry.rollback("pre_update_ref", expect_active=a),
        registry.promote(expect_active=a),
    ):
        with pytest.raises(StalePointersError):
            await move
    assert (await registry.pointers())[1] == revision


async def test_a_move_whose_event_fails_is_still_durable_and_says_so(
    bus: Bus, registry: CheckpointRegistry, names: Names
) -> None:
    a = await put(registry, "a")
    await bus.js.delete_stream(names.stream(STREAM_EVENTS))
    with pytest.raises(EventNotPublishedError) as info:
        await registry.advance(a, "no events stream")
    assert isinstance(info.value.result, Moved) and info.value.result.pointers.active == a
    assert (await registry.pointers())[0].active == a


async def test_an_unprovisioned_namespace_is_unavailable_not_unknown(
    nats_url: str, names: Names
) -> None:
    async with connect(nats_url, name="test", names=names) as bare:
        registry = CheckpointRegistry(bare)
        with pytest.raises(RegistryUnavailableError):
            await registry.pointers()
        with pytest.raises(RegistryUnavailableError):
            await registry.meta(checkpoint_id_of(b"x"))
        with pytest.raises(RegistryUnavailableError):
            await registry.store(b"x", parent_id=None, created_by="x", algorithm="init")


def interfere(
    monkeypatch: pytest.MonkeyPatch,
    registry: CheckpointRegistry,
    action: Callable[[], Awaitable[object]],
    times: int = 1,
) -> None:
    """Make another writer move the pointers right after ``registry`` reads them (the first
    ``times`` reads): ``registry``'s compare-and-set then fails on a stale revision."""
    kv = registry._kv  # the registry's handle on its bucket: its reads of the pointers
    original = kv.latest
    left = times

    async def latest(key: str):  # type: ignore[no-untyped-def]
        nonlocal left
        result = await original(key)
        if left and key == Names.key_pointers():
            left -= 1
            await action()
        return result

    monkeypatch.setattr(kv, "latest", latest)


async def two_advanced(registry: CheckpointRegistry) -> tuple[str, str, str, str]:
    a, b, c, d = [await put(registry, t) for t in "abcd"]
    await registry.advance(a)
    await registry.advance(b)
    return a, b, c, d


async def test_a_lost_cas_retries_while_the_expectation_holds(
    bus: Bus, registry: CheckpointRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, c, _ = await two_advanced(registry)
    other = CheckpointRegistry(bus)
    interfere(monkeypatch, registry, lambda: other.promote("meanwhile"))
    moved = await registry.advance(c, "update", expect_active=b)
    assert (moved.pointers.active, moved.pointers.pre_update_ref) == (c, b)
    assert moved.pointers.last_stable == b  # the promote that won the race is kept
    history = [(h.active, h.last_stable) for h, _ in await registry.pointer_history()]
    assert history == [(a, a), (b, a), (b, b), (c, b)]


async def test_a_lost_cas_raises_stale_when_the_active_moved(
    bus: Bus, registry: CheckpointRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, b, _c, d = await two_advanced(registry)
    other = CheckpointRegistry(bus)
    interfere(monkeypatch, registry, lambda: other.advance(d, "meanwhile"))
    with pytest.raises(StalePointersError) as info:
        await registry.rollback("pre_update_ref", "worse", expect_active=b)
    assert info.value.current.active == d
    assert (await other.pointers())[0].active == d


async def test_a_lost_cas_without_expectation_applies_on_top_of_the_winner(
    bus: Bus, registry: CheckpointRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, c, d = await two_advanced(registry)
    other = CheckpointRegistry(bus)
    interfere(monkeypatch, registry, lambda: other.advance(d, "meanwhile"))
    moved = await registry.advance(c, "update")
    assert (moved.pointers.active, moved.pointers.pre_update_ref) == (c, d)


async def test_contention_gives_up_after_max_attempts(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = CheckpointRegistry(bus, max_attempts=3)
    ids = [await put(registry, f"x{i}") for i in range(5)]
    await registry.advance(ids[0])
    other = CheckpointRegistry(bus)
    queue = iter(ids[1:4])
    interfere(monkeypatch, registry, lambda: other.advance(next(queue)), times=3)
    with pytest.raises(PointerContentionError, match="3 times") as info:
        await registry.advance(ids[4])
    assert isinstance(info.value, StalePointersError)
    assert info.value.current.active == ids[3]


async def test_watch_yields_a_move_within_a_second(registry: CheckpointRegistry) -> None:
    a, b = await put(registry, "a"), await put(registry, "b")
    async with registry.watch() as updates:
        await registry.advance(a)
        assert (await asyncio.wait_for(anext(updates), 1.0)).active == a
        await registry.advance(b)
        p = await asyncio.wait_for(anext(updates), 1.0)
        assert (p.active, p.pre_update_ref) == (b, a)
    # A new watch starts from the pointers as they are.
    async with registry.watch() as updates:
        assert (await asyncio.wait_for(anext(updates), 1.0)).active == b


async def test_watch_skips_pointers_that_do_not_decode_and_keeps_watching(
    bus: Bus, registry: CheckpointRegistry, names: Names
) -> None:
    """Garbage under ``pointers`` once ended the watch with an error (and crash-looped the
    sampler): it is logged, counted and skipped, and the next valid value comes through."""
    a, b = await put(registry, "a"), await put(registry, "b")
    kv = await bus.js.key_value(names.bucket(BUCKET_CHECKPOINTS))
    await kv.put(Names.key_pointers(), b"\xff garbage")
    async with registry.watch() as updates:
        await kv.put(Names.key_pointers(), msgspec.json.encode(P(active=a)))
        assert (await asyncio.wait_for(anext(updates), 2.0)).active == a
        await kv.put(Names.key_pointers(), b'{"active": 7}')
        await kv.put(Names.key_pointers(), msgspec.json.encode(P(active=b)))
        assert (await asyncio.wait_for(anext(updates), 2.0)).active == b
        assert updates.skipped == 2
        assert "checkpoint pointers" in updates.last_skipped


async def test_watch_resumes_after_a_server_restart(tmp_path: Path) -> None:
    """KV watchers can stall after a server restart: the watch re-creates its consumer."""
    port = free_port()

    def server() -> NatsServer:
        return NatsServer(tmp_path / "nats", port=port)

    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    nats_server = server().start()
    nc = await nats.connect(
        f"nats://127.0.0.1:{port}",
        reconnected_cb=on_reconnect,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.1,
    )
    try:
        bus = Bus(nc, Names("restart"))
        await provision(bus)
        registry = CheckpointRegistry(bus)
        a, b = await put(registry, "a"), await put(registry, "b")
        await registry.advance(a)
        async with registry.watch(check_every=0.2) as updates:
            assert (await asyncio.wait_for(anext(updates), 1.0)).active == a
            nats_server.stop()
            nats_server = server().start()
            await asyncio.wait_for(reconnected.wait(), 10.0)
            await registry.advance(b, "after restart")
            assert (await asyncio.wait_for(anext(updates), 3.0)).active == b
    finally:
        await nc.close()
        nats_server.stop()


# -- real processes racing --------------------------------------------------------------------------

WORKERS = 4
ADVANCES_EACH = 15  # 60 moves: all fit in the 64 revisions the bucket keeps


@contextlib.asynccontextmanager
async def workers(url: str, names: Names) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.checkpoint_worker",
            url,
            names.namespace,
            str(w),
            str(ADVANCES_EACH),
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for w in range(WORKERS)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_concurrent_advances_from_several_processes_are_all_applied_in_one_chain(
    bus: Bus, registry: CheckpointRegistry, nats_url: str, names: Names
) -> None:
    async with workers(nats_url, names) as procs:
        for proc in procs:
            assert proc.stdout is not None
            assert (await asyncio.wait_for(proc.stdout.readline(), 20.0)).strip() == b"ready"
        for proc in procs:  # all advance at once
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        reports = []
        for proc in procs:
            assert proc.stdout is not None
            reports.append(json.loads(await asyncio.wait_for(proc.stdout.readline(), 20.0)))
            assert await asyncio.wait_for(proc.wait(), 10.0) == 0

    assert all(r["failed"] == [] for r in reports), reports
    applied = [cid for r in reports for cid in r["applied"]]
    assert len(applied) == WORKERS * ADVANCES_EACH

    history = [p for p, _ in await registry.pointer_history()]
    assert len(history) == len(applied)  # no advance lost, none written twice
    assert history[0].pre_update_ref is None and history[0].last_stable == history[0].active
    for prev, cur in itertools.pairwise(history):
        assert cur.pre_update_ref == prev.active  # every advance built on the one before
        assert cur.last_stable == history[0].active
    actives = [p.active for p in history]
    assert len(set(actives)) == len(actives)  # no checkpoint applied twice
    assert set(actives) == set(applied)
    for r in reports:  # each process's advances landed in the order it made them
        assert [cid for cid in actives if cid in set(r["applied"])] == r["applied"]
    assert await stream_count(bus, names.checkpoint_event("advanced")) == len(applied)


async def test_the_cli_resolves_a_checkpoint_by_a_unique_prefix(bus: Bus) -> None:
    from aios_rl.cli.engine import resolve
    from aios_rl.stack.embedded import StackError

    registry = CheckpointRegistry(bus)
    a = await registry.store(b"weights a", parent_id=None, created_by="a", algorithm="init")
    b = await registry.store(b"weights b", parent_id=None, created_by="b", algorithm="init")
    assert await resolve(bus, a.checkpoint_id) == a.checkpoint_id
    assert await resolve(bus, a.checkpoint_id[:12]) == a.checkpoint_id  # as the tables print it
    assert await resolve(bus, b.checkpoint_id[:8]) == b.checkpoint_id
    with pytest.raises(StackError, match="no checkpoint"):
        await resolve(bus, "zzzzzzzz")
    with pytest.raises(StackError, match="no checkpoint"):
        await resolve(bus, a.checkpoint_id[:3])  # too short to name one
