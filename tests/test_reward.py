"""The reward service: properties of the pure fusion, then the service on a real nats-server."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aios_rl.bus import Bus
from contracts import SCHEMA_HEADER, DeadLetter, Episode, Names, TeacherSignal, Timings, decode
from contracts.subjects import STREAM_EPISODES
from services.reward.logic import fuse, reward_episode, usable
from services.reward.main import build
from services.reward.settings import RewardSettings
from tests.support import next_item, running, settled_consumer, stored

# -- pure logic ------------------------------------------------------------------------------------

env_rewards = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
scores = st.floats(min_value=-3.0, max_value=3.0, allow_nan=False, allow_infinity=False)
weights = st.floats(min_value=0.0, max_value=10.0, allow_nan=False, allow_infinity=False)
clips = st.floats(min_value=0.0, max_value=5.0, allow_nan=False, allow_infinity=False)


def signal(score: float, **kw: Any) -> TeacherSignal:
    return TeacherSignal(backend="oracle", score=score, **kw)


def ulp_slack(x: float) -> float:
    """Rounding room for ``(env + shaping) - env`` in floating point."""
    return 4 * math.ulp(max(1.0, abs(x)))


@given(env=env_rewards, score=scores, weight=weights, clip=clips)
def test_total_stays_within_clip_of_env_reward(
    env: float, score: float, weight: float, clip: float
) -> None:
    b = fuse(env, signal(score), weight=weight, clip=clip)
    assert abs(b.total - env) <= clip + ulp_slack(env)
    assert abs(b.shaping) <= clip
    assert b.env_reward == env and b.clip == clip and b.total == env + b.shaping


@given(a=env_rewards, b=env_rewards, score=st.none() | scores, weight=weights, clip=clips)
def test_total_is_monotone_in_env_reward(
    a: float, b: float, score: float | None, weight: float, clip: float
) -> None:
    lo, hi = sorted((a, b))
    sig = None if score is None else signal(score)
    assert (
        fuse(lo, sig, weight=weight, clip=clip).total
        <= fuse(hi, sig, weight=weight, clip=clip).total
    )


@given(env=env_rewards, s1=scores, s2=scores, weight=weights, clip=clips)
def test_total_is_monotone_in_teacher_score(
    env: float, s1: float, s2: float, weight: float, clip: float
) -> None:
    lo, hi = sorted((s1, s2))
    assert (
        fuse(env, signal(lo), weight=weight, clip=clip).total
        <= fuse(env, signal(hi), weight=weight, clip=clip).total
    )


@given(env=env_rewards, score=scores, weight=weights, clip=clips)
def test_score_is_clamped_to_unit_interval(
    env: float, score: float, weight: float, clip: float
) -> None:
    b = fuse(env, signal(score), weight=weight, clip=clip)
    assert b.teacher_score == max(-1.0, min(1.0, score))
    assert b.teacher_weight == weight


def unusable_signal(which: str, score: float) -> TeacherSignal | None:
    match which:
        case "none":
            return None
        case "boundary":
            return signal(score, boundary=True)
        case "nan":
            return signal(math.nan)
        case "inf":
            return signal(math.inf)
        case status:
            return signal(score, status=status)


@given(
    env=env_rewards,
    score=scores,
    weight=weights,
    clip=clips,
    which=st.sampled_from(
        ["none", "skipped", "timeout", "unparseable", "error", "boundary", "nan", "inf"]
    ),
)
def test_identity_without_a_usable_teacher(
    env: float, score: float, weight: float, clip: float, which: str
) -> None:
    sig = unusable_signal(which, score)
    assert not usable(sig)
    b = fuse(env, sig, weight=weight, clip=clip)
    assert b.total == env  # exactly, not approximately
    assert (b.shaping, b.teacher_weight, b.teacher_score) == (0.0, 0.0, None)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("sig", [None, signal(0.5)], ids=["no-teacher", "teacher"])
def test_non_finite_env_reward_is_rejected(bad: float, sig: TeacherSignal | None) -> None:
    with pytest.raises(ValueError, match="finite"):
        fuse(bad, sig, weight=0.3, clip=0.5)


def test_fuse_example() -> None:
    b = fuse(1.0, signal(0.5), weight=0.3, clip=0.1)
    assert (b.total, b.shaping, b.teacher_score) == (1.1, 0.1, 0.5)
    b = fuse(1.0, signal(-0.5), weight=0.3, clip=0.5)
    assert b.total == pytest.approx(0.85) and b.shaping == pytest.approx(-0.15)


def test_reward_episode_sets_reward_breakdown_and_stage_stamp() -> None:
    ep = Episode(
        episode_id="e1",
        environment="shell",
        task_id="t",
        env_reward=1.0,
        teacher_signal=signal(1.0),
        timings=Timings(started_at=1.0, stages={"completed": 1.0}),
    )
    out = reward_episode(ep, weight=0.2, clip=0.5, now=42.0)
    assert out.reward == pytest.approx(1.2)
    assert out.reward_breakdown is not None and out.reward_breakdown.total == out.reward
    assert out.timings.stages == {"completed": 1.0, "rewarded": 42.0}
    assert ep.timings.stages == {"completed": 1.0}, "the input episode must not change"
    assert (
        msgspec.structs.replace(out, reward=None, reward_breakdown=None, timings=ep.timings) == ep
    )


# -- the service on the bus ----------------------------------------------------------------------------

SETTINGS = dict(teacher_weight=0.5, shaping_clip=0.25)


def taught_episode(i: int, env: str, score: float | None) -> Episode:
    return Episode(
        episode_id=f"ep-{i}",
        environment=env,  # type: ignore[arg-type]
        task_id=f"task-{i % 3}",
        env_reward=float(i % 2),
        outcome="success" if i % 2 else "failure",
        teacher_status=None if score is None else "ok",
        teacher_signal=None if score is None else signal(score),
    )


def expected_total(ep: Episode) -> float:
    if ep.teacher_signal is None:
        return ep.env_reward
    return ep.env_reward + max(-0.25, min(0.25, 0.5 * ep.teacher_signal.score))


async def subject_counts(bus: Bus, names: Names, stage: str) -> dict[str, int]:
    info = await bus.js.stream_info(
        names.stream(STREAM_EPISODES), subjects_filter=names.episode(stage, "*")
    )
    return dict(info.state.subjects or {})


def reward_service(bus: Bus, names: Names, **kw: Any):
    svc = build(bus, RewardSettings(namespace=names.namespace, **{**SETTINGS, **kw}))
    svc.fetch_timeout_s = 0.2  # idle pull loops notice stop() quickly
    return svc


async def test_reward_service_rewards_each_taught_episode_exactly_once(
    bus: Bus, names: Names
) -> None:
    envs = ["shell", "browser", "orchestrator"]
    batch = [taught_episode(i, envs[i % 3], None if i % 4 == 0 else (i - 6) / 6) for i in range(12)]
    svc = reward_service(bus, names, concurrency=4)
    async with stored(bus, names.episode("rewarded", "*")) as rewarded, running(svc):
        for ep in batch:
            await bus.publish_durable(
                names.episode("taught", ep.environment), ep, msg_id=f"{ep.episode_id}:taught"
            )
        got = []
        for _ in batch:
            msg = await next_item(rewarded)
            got.append((msg.subject, msg.headers, decode(msg.data, msg.headers, Episode)))
    by_id = {ep.episode_id: (subject, headers, ep) for subject, headers, ep in got}
    assert len(by_id) == len(batch), "an episode was rewarded twice"
    for sent in batch:
        subject, headers, ep = by_id[sent.episode_id]
        assert subject == names.episode("rewarded", sent.environment)
        assert headers is not None and headers[SCHEMA_HEADER] == "episode.v1"
        assert headers["Nats-Msg-Id"] == f"{sent.episode_id}:rewarded"
        assert ep.reward == pytest.approx(expected_total(sent))
        assert ep.reward_breakdown is not None and ep.reward_breakdown.total == ep.reward
        assert "rewarded" in ep.timings.stages
        assert (
            msgspec.structs.replace(ep, reward=None, reward_breakdown=None, timings=sent.timings)
            == sent
        )
    assert await subject_counts(bus, names, "rewarded") == {
        names.episode("rewarded", env): 4 for env in envs
    }
    info = await settled_consumer(bus, names.stream(STREAM_EPISODES), "reward")
    assert info.num_ack_pending == 0 and info.num_pending == 0
    assert info.delivered is not None and info.delivered.consumer_seq == len(batch)
    assert svc.status().consumers[0].processed == len(batch)


async def test_republished_episode_is_not_rewarded_twice(bus: Bus, names: Names) -> None:
    """Same ``Nats-Msg-Id``: the stream drops the copy. A copy under another id (a stage that ran
    twice) is processed again, but the rewarded stream still holds one message for the episode."""
    svc = reward_service(
        bus, names, concurrency=1
    )  # one at a time: stream order is processing order
    first = taught_episode(1, "browser", 0.5)
    sentinel = taught_episode(2, "shell", None)
    taught = names.episode("taught", "browser")
    async with stored(bus, names.episode("rewarded", "*")) as rewarded, running(svc):
        seq = await bus.publish_durable(taught, first, msg_id="ep-1:taught")
        assert await bus.publish_durable(taught, first, msg_id="ep-1:taught") == seq
        await bus.publish_durable(taught, first, msg_id="ep-1:taught:again")
        await bus.publish_durable(names.episode("taught", "shell"), sentinel, msg_id="ep-2:taught")
        ids = [
            decode((m := await next_item(rewarded)).data, m.headers, Episode).episode_id
            for _ in range(2)
        ]
        assert ids == ["ep-1", "ep-2"]
    # The sentinel came after the copy and processing is in order, so the copy was handled.
    assert svc.status().consumers[0].processed == 3
    assert await subject_counts(bus, names, "taught") == {
        taught: 2,
        names.episode("taught", "shell"): 1,
    }
    assert await subject_counts(bus, names, "rewarded") == {
        names.episode("rewarded", "browser"): 1,
        names.episode("rewarded", "shell"): 1,
    }
    assert rewarded.empty()


async def test_non_finite_env_reward_cannot_reach_the_service(bus: Bus, names: Names) -> None:
    """JSON has no NaN: msgspec writes null, which an ``Episode`` rejects, so such an episode is
    dead-lettered as undecodable and the service keeps going."""
    svc = reward_service(bus, names)
    bad = taught_episode(1, "shell", 0.5)
    bad = msgspec.structs.replace(bad, env_reward=math.nan)
    good = taught_episode(2, "shell", 0.5)
    async with (
        stored(bus, names.dlq(STREAM_EPISODES)) as dead,
        stored(bus, names.episode("rewarded", "*")) as out,
        running(svc),
    ):
        await bus.publish_durable(names.episode("taught", "shell"), bad)
        await bus.publish_durable(names.episode("taught", "shell"), good)
        letter_msg = await next_item(dead)
        rewarded_msg = await next_item(out)
    letter = decode(letter_msg.data, letter_msg.headers, DeadLetter)
    assert (letter.reason, letter.service, letter.consumer) == ("undecodable", "reward", "reward")
    assert b'"env_reward":null' in letter.payload
    assert decode(rewarded_msg.data, rewarded_msg.headers, Episode).episode_id == "ep-2"
