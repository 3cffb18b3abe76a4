"""The replay service: the pure lane rule, sampling plan and retention, then the service on a real
nats-server (routing, idempotence, sampling, stats, retention, restart) and a subprocess run."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats.aio.msg import Msg

from aios_rl.bus import Bus, RemoteError, discover
from contracts import (
    LANES,
    CheckpointMeta,
    ComparisonResult,
    Episode,
    Names,
    ReplayBatch,
    ReplaySampleRequest,
    ServiceStatus,
    TeacherSignal,
    decode,
    encode,
)
from contracts.subjects import BUCKET_CHECKPOINTS, STREAM_EPISODES, STREAM_REPLAY
from services.replay.logic import (
    TRAINABLE_LANES,
    IndexEntry,
    ReplayIndex,
    lane_for,
    plan_sample,
    purge_points,
    retention_excess,
    split_quota,
    validate_request,
)
from services.replay.main import build
from services.replay.settings import ReplaySettings
from tests.conftest import REPO
from tests.support import next_item, running, stored

ENVS = ("shell", "browser", "orchestrator")

# -- the lane rule -----------------------------------------------------------------------------------


def episode(
    ident: str,
    *,
    env: str = "shell",
    verdict: str | None = "better",
    role: str = "rollout",
    boundary: bool | None = None,
    task: str = "t0",
    checkpoint: str = "c1",
) -> Episode:
    return Episode(
        episode_id=ident,
        environment=env,  # type: ignore[arg-type]
        task_id=task,
        checkpoint_id=checkpoint,
        role=role,  # type: ignore[arg-type]
        env_reward=1.0,
        reward=1.0,
        teacher_signal=None
        if boundary is None
        else TeacherSignal(backend="oracle", boundary=boundary),
        comparison=None if verdict is None else ComparisonResult(verdict=verdict),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("role", "verdict", "boundary", "lane"),
    [
        ("rollout", "better", None, "positive"),
        ("rollout", "same", None, "neutral"),
        ("rollout", "worse", None, "negative"),
        ("rollout", "comparison_failed", None, "diagnostic_only"),
        ("rollout", None, None, "diagnostic_only"),
        ("rollout", "better", False, "positive"),
        ("rollout", "worse", False, "negative"),
        ("rollout", "better", True, "diagnostic_only"),
        ("rollout", "same", True, "diagnostic_only"),
        ("rollout", "worse", True, "diagnostic_only"),
        ("rollout", "comparison_failed", True, "diagnostic_only"),
        ("rollout", None, True, "diagnostic_only"),
        ("reference", "better", None, None),
        ("reference", "worse", True, None),
        ("eval", "same", None, None),
        ("eval", None, False, None),
    ],
)
def test_lane_rule(role: str, verdict: str | None, boundary: bool | None, lane: str | None) -> None:
    assert lane_for(episode("e", role=role, verdict=verdict, boundary=boundary)) == lane


def test_lane_rule_ignores_a_lane_already_set() -> None:
    ep = msgspec.structs.replace(episode("e", verdict="worse"), lane="positive")
    assert lane_for(ep) == "negative"


# -- the index -------------------------------------------------------------------------------------


def entry(seq: int, lane: str = "positive", env: str = "shell", task: str = "t0", ckpt: str = "c1"):
    return IndexEntry(
        seq=seq,
        episode_id=f"e{seq}",
        lane=lane,  # type: ignore[arg-type]
        environment=env,
        task_id=task,
        checkpoint_id=ckpt,
    )


def index_of(*entries: IndexEntry) -> ReplayIndex:
    idx = ReplayIndex()
    for e in entries:
        assert idx.add(e)
    return idx


def test_index_keeps_stream_order_and_one_entry_per_episode() -> None:
    idx = index_of(entry(5), entry(2, env="browser"), entry(9), entry(3), entry(4, "neutral"))
    assert [e.seq for e in idx.entries("positive")] == [2, 3, 5, 9]
    assert [e.seq for e in idx.entries("positive", ["shell"])] == [3, 5, 9]
    assert not idx.add(dataclasses.replace(entry(7), episode_id="e5")), "same episode id"
    assert not idx.add(dataclasses.replace(entry(5), episode_id="other")), "same seq"
    assert idx.counts() == {"positive": 4, "neutral": 1, "negative": 0, "diagnostic_only": 0}
    assert idx.remove(3) == entry(3) and idx.remove(3) is None
    assert "e3" not in idx and "e5" in idx
    assert [e.seq for e in idx.entries("positive")] == [2, 5, 9]
    assert idx.checkpoint_ids() == ["c1"]


# -- retention --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seqs", "limit", "victims"),
    [
        ([], 3, []),
        ([4, 1, 9], 3, []),
        ([4, 1, 9, 7], 3, [1]),
        ([10, 2, 8, 4, 6], 2, [2, 4, 6]),
        ([3, 1, 2], 0, [1, 2, 3]),
    ],
)
def test_retention_takes_the_oldest_beyond_the_limit(
    seqs: list[int], limit: int, victims: list[int]
) -> None:
    assert retention_excess(seqs, limit) == victims


def test_purge_points_remove_exactly_the_victims() -> None:
    lane = [entry(1), entry(2, env="browser"), entry(4), entry(6, env="browser"), entry(7)]
    lane += [entry(9, env="orchestrator")]
    victims = [e for e in lane if e.seq in retention_excess([e.seq for e in lane], 3)]
    assert [e.seq for e in victims] == [1, 2, 4]
    points = purge_points(victims)
    assert points == {"browser": 3, "shell": 5}
    kept = [e for e in lane if e.seq >= points.get(e.environment, 0)]
    assert [e.seq for e in kept] == [6, 7, 9]
    assert purge_points([]) == {}


# -- the sampling plan --------------------------------------------------------------------------------

MIX = {"positive": 0.5, "neutral": 0.25, "negative": 0.25}


def request(size: int, **kw: Any) -> ReplaySampleRequest:
    return ReplaySampleRequest(size=size, **{"lane_mix": MIX, **kw})


def big_index() -> ReplayIndex:
    """20 per trainable lane and 20 diagnostic, spread over environments, tasks and checkpoints."""
    idx = ReplayIndex()
    seq = 0
    for lane in LANES:
        for i in range(20):
            seq += 1
            idx.add(entry(seq, lane, ENVS[i % 3], f"t{i % 4}", f"c{i % 2}"))
    return idx


def lanes_of(plan: list[IndexEntry]) -> dict[str, int]:
    return dict(Counter(e.lane for e in plan))


@pytest.mark.parametrize(
    ("size", "weights", "available", "quota"),
    [
        (8, MIX, {"positive": 9, "neutral": 9, "negative": 9}, (4, 2, 2)),
        (10, MIX, {"positive": 9, "neutral": 9, "negative": 9}, (5, 3, 2)),  # tie: lane order
        (6, MIX, {"positive": 9, "neutral": 0, "negative": 9}, (4, 0, 2)),  # renormalised
        (8, MIX, {"positive": 1, "neutral": 9, "negative": 9}, (1, 4, 3)),  # short lane
        (30, MIX, {"positive": 3, "neutral": 4, "negative": 5}, (3, 4, 5)),  # all there is
        (8, {"positive": 1.0}, {"positive": 2, "neutral": 9, "negative": 9}, (2, 0, 0)),
        (8, {"diagnostic_only": 1.0}, {"positive": 9, "neutral": 9, "negative": 9}, (0, 0, 0)),
        (0, MIX, {"positive": 9, "neutral": 9, "negative": 9}, (0, 0, 0)),
    ],
)
def test_split_quota(
    size: int, weights: dict[str, float], available: dict[str, int], quota: tuple[int, ...]
) -> None:
    assert tuple(split_quota(size, weights, available).values()) == quota


def test_plan_follows_the_mix_and_never_serves_diagnostic() -> None:
    idx = big_index()
    plan = plan_sample(idx, request(8, lane_mix={**MIX, "diagnostic_only": 100.0}), {})
    assert lanes_of(plan) == {"positive": 4, "neutral": 2, "negative": 2}
    assert len({e.episode_id for e in plan}) == 8
    assert plan_sample(idx, request(8, lane_mix={"diagnostic_only": 1.0}), {}) == []
    everything = plan_sample(idx, request(100), {})
    assert lanes_of(everything) == {"positive": 20, "neutral": 20, "negative": 20}


def test_plan_renormalises_over_lanes_with_data() -> None:
    idx = index_of(*(entry(i, "positive") for i in range(1, 10)))
    idx.add(entry(50, "negative"))
    idx.add(entry(51, "diagnostic_only"))
    assert lanes_of(plan_sample(idx, request(6), {})) == {"positive": 5, "negative": 1}
    empty = ReplayIndex()
    empty.add(entry(1, "diagnostic_only"))
    assert plan_sample(empty, request(6), {}) == []


def test_plan_filters_environments_and_checkpoint_depth() -> None:
    idx = big_index()
    plan = plan_sample(idx, request(100, environments=["browser", "orchestrator"]), {})
    assert plan and {e.environment for e in plan} == {"browser", "orchestrator"}
    assert len(plan) == 3 * 13  # 7 of each 20 are shell
    seqs = {"c1": 3}  # c0 unknown: depth 0
    deep = plan_sample(idx, request(100, min_checkpoint_seq=2), seqs)
    assert deep and {e.checkpoint_id for e in deep} == {"c1"} and len(deep) == 30
    assert plan_sample(idx, request(100, min_checkpoint_seq=4), seqs) == []
    assert len(plan_sample(idx, request(100, min_checkpoint_seq=0), {})) == 60


def test_neutral_draws_every_task_before_repeating_one() -> None:
    # Task "big" has 10 episodes, four others one each: a uniform draw of 5 would rarely take
    # all five tasks; round-robin always does.
    idx = index_of(
        *(entry(i, "neutral", task="big") for i in range(1, 11)),
        *(entry(20 + i, "neutral", task=f"t{i}") for i in range(4)),
    )
    for seed in range(20):
        plan = plan_sample(idx, request(5, lane_mix={"neutral": 1.0}, seed=seed), {})
        assert len({e.task_id for e in plan}) == 5, seed
        plan = plan_sample(idx, request(7, lane_mix={"neutral": 1.0}, seed=seed), {})
        assert Counter(e.task_id for e in plan)["big"] == 3, seed


def test_plan_is_deterministic_by_seed() -> None:
    idx = big_index()
    again = big_index()
    plans = {
        seed: [e.episode_id for e in plan_sample(idx, request(9, seed=seed), {})]
        for seed in range(5)
    }
    for seed, ids in plans.items():
        assert [e.episode_id for e in plan_sample(again, request(9, seed=seed), {})] == ids
    assert len({tuple(ids) for ids in plans.values()}) > 1, "the seed changes nothing"


@pytest.mark.parametrize(
    ("req", "match"),
    [
        (ReplaySampleRequest(size=-1), "size"),
        (ReplaySampleRequest(size=65), "largest batch"),
        (ReplaySampleRequest(size=4, lane_mix={"postive": 1.0}), "unknown lanes"),
        (ReplaySampleRequest(size=4, lane_mix={"positive": -1.0}), "finite and >= 0"),
        (ReplaySampleRequest(size=4, lane_mix={"positive": float("inf")}), "finite"),
    ],
)
def test_invalid_requests_are_refused(req: ReplaySampleRequest, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        validate_request(req, max_size=64)


entries_st = st.lists(
    st.tuples(
        st.sampled_from(LANES),
        st.sampled_from(ENVS),
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["c0", "c1", "c2"]),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(
    rows=entries_st,
    size=st.integers(0, 50),
    weights=st.dictionaries(st.sampled_from(LANES), st.floats(0, 5), max_size=4),
    envs=st.lists(st.sampled_from(ENVS), unique=True, max_size=2),
    min_seq=st.integers(0, 3),
    seed=st.integers(0, 2**32),
)
def test_plan_properties(
    rows: list[tuple[str, str, str, str]],
    size: int,
    weights: dict[str, float],
    envs: list[str],
    min_seq: int,
    seed: int,
) -> None:
    idx = index_of(*(entry(i + 1, *row) for i, row in enumerate(rows)))
    depth = {"c1": 1, "c2": 2}
    req = ReplaySampleRequest(
        size=size, lane_mix=weights, environments=envs, min_checkpoint_seq=min_seq, seed=seed
    )
    plan = plan_sample(idx, req, depth)
    eligible = [
        e
        for i, row in enumerate(rows)
        if (e := entry(i + 1, *row)).lane in TRAINABLE_LANES
        and weights.get(e.lane, 0) > 0
        and (not envs or e.environment in envs)
        and depth.get(e.checkpoint_id, 0) >= min_seq
    ]
    assert len(plan) == min(size, len(eligible))
    assert len({e.seq for e in plan}) == len(plan)
    assert set(plan) <= set(eligible)
    assert plan == plan_sample(idx, req, depth)


# -- the service on the bus -------------------------------------------------------------------------


def replay_service(bus: Bus, names: Names, **kw: Any):
    svc = build(bus, ReplaySettings(namespace=names.namespace, **kw))
    svc.fetch_timeout_s = 0.2  # idle pull loops notice stop() quickly
    return svc


async def publish(bus: Bus, names: Names, ep: Episode, msg_id: str | None = None) -> int:
    """Publish ``ep`` as the comparison service would; the EPISODES stream sequence."""
    return await bus.publish_durable(
        names.episode("compared", ep.environment),
        ep,
        msg_id=msg_id or f"{ep.episode_id}:compared",
    )


async def processed_through(bus: Bus, names: Names, seq: int, within: float = 10.0) -> None:
    """Return once the ``replay`` consumer has acked every EPISODES message up to ``seq`` (its
    handler finished with each: routed, trimmed). Each check is a server round trip."""

    async def poll() -> None:
        while True:
            await bus.nc.flush()
            info = await bus.js.consumer_info(names.stream(STREAM_EPISODES), "replay")
            if info.ack_floor is not None and (info.ack_floor.stream_seq or 0) >= seq:
                return

    await asyncio.wait_for(poll(), within)


async def lane_subjects(bus: Bus, names: Names) -> dict[str, int]:
    """``<lane>.<env>`` -> messages the REPLAY stream holds there."""
    info = await bus.js.stream_info(
        names.stream(STREAM_REPLAY), subjects_filter=names.replay("*", "*")
    )
    return {
        names.strip(subject).split(".", 1)[1]: n
        for subject, n in (info.state.subjects or {}).items()
    }


async def status(bus: Bus, names: Names) -> ServiceStatus:
    raw = await bus.nc.request(names.status("replay"), b"", timeout=5)
    return decode(raw.data, raw.headers, ServiceStatus)


async def sample(bus: Bus, names: Names, req: ReplaySampleRequest) -> ReplayBatch:
    return await bus.request(names.replay_sample(), req, ReplayBatch, timeout=10)


def lane_stats(st: ServiceStatus) -> dict[str, float]:
    return {k: v for k, v in st.extra.items() if k.startswith("lane.")}


async def test_compared_episodes_land_in_their_lanes(bus: Bus, names: Names) -> None:
    batch = [
        episode("e0", env="shell", verdict="better"),
        episode("e1", env="browser", verdict="better"),
        episode("e2", env="shell", verdict="same"),
        episode("e3", env="orchestrator", verdict="worse"),
        episode("e4", env="shell", verdict="worse", boundary=True),
        episode("e5", env="browser", verdict="comparison_failed"),
        episode("e6", env="shell", verdict=None),
        episode("e7", env="shell", verdict="better", role="reference"),
        episode("e8", env="browser", verdict="same", role="eval"),
        episode("e9", env="shell", verdict="better", boundary=False),
    ]
    expected = {
        "e0": "positive",
        "e1": "positive",
        "e2": "neutral",
        "e3": "negative",
        "e4": "diagnostic_only",
        "e5": "diagnostic_only",
        "e6": "diagnostic_only",
        "e9": "positive",
    }
    svc = replay_service(bus, names, concurrency=3)
    async with stored(bus, names.replay("*", "*")) as lanes, running(svc):
        for ep in batch:
            last = await publish(bus, names, ep)
        got = [await next_item(lanes) for _ in expected]
        await processed_through(bus, names, last)
        st = await status(bus, names)
        views = await discover(bus.nc, namespace=names.namespace)
    sent = {ep.episode_id: ep for ep in batch}
    for msg in got:
        ep = decode(msg.data, msg.headers, Episode)
        lane = expected[ep.episode_id]
        assert msg.subject == names.replay(lane, ep.environment)  # type: ignore[arg-type]
        assert msg.headers is not None and msg.headers["Nats-Msg-Id"] == f"{ep.episode_id}:replay"
        assert ep.lane == lane and "replay" in ep.timings.stages
        assert (
            msgspec.structs.replace(ep, lane=None, timings=sent[ep.episode_id].timings)
            == (sent[ep.episode_id])
        )
    assert sorted(decode(m.data, m.headers, Episode).episode_id for m in got) == sorted(expected)
    assert await lane_subjects(bus, names) == {
        "positive.shell": 2,
        "positive.browser": 1,
        "neutral.shell": 1,
        "negative.orchestrator": 1,
        "diagnostic_only.shell": 2,
        "diagnostic_only.browser": 1,
    }
    counts = {"lane.positive": 3.0, "lane.neutral": 1.0, "lane.negative": 1.0}
    counts["lane.diagnostic_only"] = 3.0
    assert lane_stats(st) == counts
    assert (st.extra["skipped"], st.extra["duplicates"], st.extra["index_ready"]) == (2, 0, 1)
    assert st.consumers[0].processed == len(batch)
    (view,) = views  # what `aios-rl services` shows, from $SRV.STATS
    assert view.name == "replay" and {k: view.extra[k] for k in counts} == counts
    assert view.extra["skipped"] == 2


@contextlib.asynccontextmanager
async def publish_attempts(bus: Bus, names: Names) -> AsyncIterator[list[str]]:
    """Episode ids of every publish on ``replay.*.*``, stored or not (a core subscription sees
    the copies that the stream's de-duplication drops)."""
    seen: list[str] = []

    async def on_msg(msg: Msg) -> None:
        seen.append(decode(msg.data, msg.headers, Episode).episode_id)

    sub = await bus.nc.subscribe(names.replay("*", "*"), cb=on_msg)
    try:
        yield seen
    finally:
        await sub.unsubscribe()


async def test_a_duplicated_episode_never_lands_twice(bus: Bus, names: Names) -> None:
    """Copies under the same ``Nats-Msg-Id`` are dropped by EPISODES; copies under other ids (a
    stage that ran twice, a redelivery past the window) reach the service, which does not even
    publish an episode already in a lane. An episode another writer published to REPLAY after the
    index was built is kept single by the stream's de-duplication (``<id>:replay``)."""
    svc = replay_service(bus, names, concurrency=1)
    first = episode("dup", verdict="better")
    late = episode("late", verdict="worse")
    async with running(svc), publish_attempts(bus, names) as attempts:
        assert (await sample(bus, names, request(4))).episodes == []  # the index is built
        late_seq = await bus.publish_durable(
            names.replay("negative", "shell"),
            msgspec.structs.replace(late, lane="negative"),
            msg_id="late:replay",
        )
        s1 = await publish(bus, names, first)
        assert await publish(bus, names, first) == s1
        await publish(bus, names, first, msg_id="dup:compared:again")
        await publish(bus, names, first, msg_id="dup:compared:third")
        last = await publish(bus, names, late)
        await processed_through(bus, names, last)
        await bus.nc.flush()
        st = await status(bus, names)
        batch = await sample(bus, names, request(10, lane_mix={"negative": 1.0}))
    # ours, the service's "dup" once, the service's "late" (dropped by the stream)
    assert attempts == ["late", "dup", "late"]
    assert await lane_subjects(bus, names) == {"positive.shell": 1, "negative.shell": 1}
    info = await bus.js.stream_info(names.stream(STREAM_REPLAY))
    assert (info.state.messages, info.state.last_seq) == (2, late_seq + 1)
    assert st.consumers[0].processed == 4
    assert st.extra["duplicates"] == 2
    assert lane_stats(st)["lane.positive"] == 1 and lane_stats(st)["lane.negative"] == 1
    # The service indexed "late" at the sequence the stream's de-duplication answered with.
    assert [ep.episode_id for ep in batch.episodes] == ["late"]


async def test_concurrent_copies_still_land_once(bus: Bus, names: Names) -> None:
    """Four copies in flight at once: whichever catches each (the index before publishing, or the
    stream's de-duplication then the index refusing a second entry), one lands."""
    svc = replay_service(bus, names, concurrency=4)
    async with running(svc):
        for i in range(4):
            last = await publish(bus, names, episode("same"), msg_id=f"same:compared:{i}")
        await processed_through(bus, names, last)
        st = await status(bus, names)
    assert await lane_subjects(bus, names) == {"positive.shell": 1}
    assert (st.extra["duplicates"], st.extra["lane.positive"]) == (3, 1)


async def put_checkpoint(bus: Bus, names: Names, cid: str, seq: int) -> None:
    kv = await bus.js.key_value(names.bucket(BUCKET_CHECKPOINTS))
    data, _ = encode(CheckpointMeta(checkpoint_id=cid, seq=seq))
    await kv.put(Names.key_checkpoint_meta(cid), data)


def sample_corpus() -> list[Episode]:
    """8 positive (6 shell on c2, 2 browser on c1), 6 neutral shell over 3 tasks (4 on one),
    4 negative orchestrator (2 on an unknown checkpoint), 5 diagnostic."""
    eps = [episode(f"p{i}", task=f"pt{i}", checkpoint="c2") for i in range(6)]
    eps += [episode(f"pb{i}", env="browser", task=f"pb{i}") for i in range(2)]
    eps += [
        episode(f"n{i}", verdict="same", task=["a", "a", "a", "a", "b", "c"][i], checkpoint="c2")
        for i in range(6)
    ]
    eps += [
        episode(f"w{i}", env="orchestrator", verdict="worse", checkpoint=["c2", "cX"][i % 2])
        for i in range(4)
    ]
    eps += [episode(f"d{i}", boundary=True, checkpoint="c2") for i in range(5)]
    return eps


async def test_sample_serves_the_mix(bus: Bus, names: Names) -> None:
    await put_checkpoint(bus, names, "c1", 1)
    await put_checkpoint(bus, names, "c2", 2)
    svc = replay_service(bus, names)
    async with running(svc):
        for ep in sample_corpus():
            last = await publish(bus, names, ep)
        await processed_through(bus, names, last)

        mixed = await sample(bus, names, request(8, lane_mix={**MIX, "diagnostic_only": 50.0}))
        browser = await sample(bus, names, request(8, environments=["browser"]))
        deep = await sample(bus, names, request(40, min_checkpoint_seq=2))
        everything = await sample(bus, names, request(64))
        neutral = await sample(bus, names, request(3, lane_mix={"neutral": 1.0}, seed=7))
        seeded = [
            [e.episode_id for e in (await sample(bus, names, request(6, seed=s))).episodes]
            for s in (1, 2, 3, 1, 2, 3)
        ]
        with pytest.raises(RemoteError) as refused:
            await sample(bus, names, request(4, lane_mix={"postive": 1.0}))
        too_big = ReplaySampleRequest(size=10_000)
        with pytest.raises(RemoteError, match="largest batch"):
            await sample(bus, names, too_big)

    assert mixed.lane_counts == {"positive": 4, "neutral": 2, "negative": 2}
    assert Counter(ep.lane for ep in mixed.episodes) == {"positive": 4, "neutral": 2, "negative": 2}
    assert len({ep.episode_id for ep in mixed.episodes}) == 8
    assert all(ep.lane != "diagnostic_only" for ep in everything.episodes)

    # Only positive has browser data: it takes the whole batch, as much as it has.
    assert sorted(ep.episode_id for ep in browser.episodes) == ["pb0", "pb1"]
    assert browser.lane_counts == {"positive": 2, "neutral": 0, "negative": 0}

    # c1 is depth 1 and cX unknown (depth 0): only c2's episodes are deep enough.
    assert {ep.checkpoint_id for ep in deep.episodes} == {"c2"}
    assert deep.lane_counts == {"positive": 6, "neutral": 6, "negative": 2}

    assert everything.lane_counts == {"positive": 8, "neutral": 6, "negative": 4}
    assert len({ep.episode_id for ep in everything.episodes}) == 18

    assert sorted(ep.task_id for ep in neutral.episodes) == ["a", "b", "c"]

    assert seeded[:3] == seeded[3:] and len(set(map(tuple, seeded[:3]))) > 1
    assert refused.value.code == "422" and "unknown lanes" in refused.value.description


async def test_retention_trims_the_oldest_of_a_lane(bus: Bus, names: Names) -> None:
    svc = replay_service(bus, names, limit_positive=3, concurrency=1)
    order = [("s0", "shell"), ("s1", "shell"), ("s2", "shell"), ("b0", "browser")]
    order += [("s3", "shell"), ("b1", "browser"), ("s4", "shell")]
    async with running(svc):
        for ident, env in order:
            last = await publish(bus, names, episode(ident, env=env))
        last = await publish(bus, names, episode("w0", verdict="worse"))  # another lane: kept
        await processed_through(bus, names, last)
        st = await status(bus, names)
        batch = await sample(bus, names, request(10, lane_mix={"positive": 1, "negative": 1}))
        # A message deleted behind the service's back is skipped, then forgotten.
        await bus.js.delete_msg(names.stream(STREAM_REPLAY), 5)
        partial = await sample(bus, names, request(10, lane_mix={"positive": 1}))
        st_after = await status(bus, names)
    assert sorted(ep.episode_id for ep in partial.episodes) == ["b1", "s4"]
    assert partial.lane_counts["positive"] == 2 and st_after.extra["lane.positive"] == 2
    assert await lane_subjects(bus, names) == {
        "positive.shell": 1,
        "positive.browser": 1,
        "negative.shell": 1,
    }
    assert sorted(ep.episode_id for ep in batch.episodes) == ["b1", "s3", "s4", "w0"]
    assert (st.extra["lane.positive"], st.extra["lane.negative"], st.extra["trimmed"]) == (3, 1, 4)
    info = await bus.js.stream_info(names.stream(STREAM_REPLAY))
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (3, 6, 8)


async def test_a_restarted_service_rebuilds_its_index(bus: Bus, names: Names) -> None:
    await put_checkpoint(bus, names, "c2", 2)
    corpus = sample_corpus()
    asks = [
        request(10, seed=3),
        request(10, seed=4, environments=["shell", "orchestrator"]),
        request(10, seed=5, min_checkpoint_seq=2),
    ]
    first = replay_service(bus, names)
    async with running(first):
        for ep in corpus:
            last = await publish(bus, names, ep)
        await processed_through(bus, names, last)
        before = [await sample(bus, names, ask) for ask in asks]
        st_before = await status(bus, names)
    assert first.stopping

    second = replay_service(bus, names)
    async with running(second):
        after = [await sample(bus, names, ask) for ask in asks]  # waits for the rebuild
        st_after = await status(bus, names)
        # A redelivery past the de-dup window: the rebuilt index still knows the episode, so
        # nothing is even published.
        async with publish_attempts(bus, names) as attempts:
            last = await publish(bus, names, corpus[0], msg_id="p0:compared:late")
            sentinel = episode("after-restart", verdict="same")
            last = await publish(bus, names, sentinel)
            await processed_through(bus, names, last)
            await bus.nc.flush()
        assert attempts == ["after-restart"]
        st_late = await status(bus, names)
    assert [[e.episode_id for e in b.episodes] for b in before] == [
        [e.episode_id for e in b.episodes] for b in after
    ]
    assert before == after and all(b.episodes for b in before)
    assert lane_stats(st_after) == lane_stats(st_before)
    assert lane_stats(st_before) == {
        "lane.positive": 8,
        "lane.neutral": 6,
        "lane.negative": 4,
        "lane.diagnostic_only": 5,
    }
    assert st_late.extra["duplicates"] == 1
    assert lane_stats(st_late) == {**lane_stats(st_before), "lane.neutral": 7}
    assert sum((await lane_subjects(bus, names)).values()) == len(corpus) + 1

    # A third instance with a smaller limit trims at start-up, oldest first.
    third = replay_service(bus, names, limit_neutral=2)
    async with running(third):
        neutral = await sample(bus, names, request(10, lane_mix={"neutral": 1}))
        st_third = await status(bus, names)
    assert sorted(e.episode_id for e in neutral.episodes) == ["after-restart", "n5"]
    assert st_third.extra["lane.neutral"] == 2 and st_third.extra["trimmed"] == 5
    assert (await lane_subjects(bus, names))["neutral.shell"] == 2


async def test_python_m_services_replay_runs(nats_url: str, bus: Bus, names: Names) -> None:
    """The entry point serves, answers a sample, and exits cleanly on SIGTERM."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.replay",
        "--nats-url",
        nats_url,
        "--namespace",
        names.namespace,
        "--log-format",
        "json",
        cwd=REPO,
        env={**os.environ, "AIOS_LIMIT_POSITIVE": "7"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        lanes = await bus.js.subscribe(names.replay("*", "*"), ordered_consumer=True)
        seq = await publish(bus, names, episode("x1"))
        routed = await lanes.next_msg(timeout=20)  # the process starts, indexes, routes
        assert decode(routed.data, routed.headers, Episode).lane == "positive"
        await processed_through(bus, names, seq)  # indexed once the handler returns
        batch = await sample(bus, names, request(4))
        assert [e.episode_id for e in batch.episodes] == ["x1"]
        await lanes.unsubscribe()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 0, out.decode()
    assert b"index.rebuilt" in out and b"service.stopped" in out
