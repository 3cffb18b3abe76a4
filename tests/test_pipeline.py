"""The RL core end to end on a real nats-server: taught episodes come out rewarded, compared
and in the right replay lanes, with counts matching; duplicates change nothing."""

from __future__ import annotations

import asyncio
import contextlib

from aios_rl.bus import Bus
from contracts import Episode, Names, ReplayBatch, ReplaySampleRequest, ServiceStatus, TeacherSignal
from services.comparison.main import build as build_comparison
from services.comparison.settings import ComparisonSettings
from services.replay.main import build as build_replay
from services.replay.settings import ReplaySettings
from services.reward.main import build as build_reward
from services.reward.settings import RewardSettings

from .support import running

REF, CAND = "ref0000000000000", "cand000000000000"


def _episodes() -> tuple[list[Episode], dict[str, str]]:
    """Reference runs (reward 0.5) and rollouts whose rewards put them in known lanes."""
    eps: list[Episode] = []
    expected: dict[str, str] = {}
    for t in range(4):
        for k in range(2):
            eps.append(
                Episode(
                    episode_id=f"ref-{t}-{k}",
                    environment="shell",
                    task_id=f"task-{t}",
                    role="reference",
                    checkpoint_id=REF,
                    outcome="partial",
                    env_reward=0.5,
                )
            )
        for k, (reward, outcome, lane) in enumerate(
            [
                (1.0, "success", "positive"),
                (0.5, "partial", "neutral"),
                (0.0, "failure", "negative"),
            ]
        ):
            eid = f"roll-{t}-{k}"
            eps.append(
                Episode(
                    episode_id=eid,
                    environment="shell",
                    task_id=f"task-{t}",
                    checkpoint_id=CAND,
                    reference_checkpoint=REF,
                    outcome=outcome,
                    env_reward=reward,
                )
            )  # type: ignore[arg-type]
            expected[eid] = lane
        boundary = f"roll-{t}-b"
        eps.append(
            Episode(
                episode_id=boundary,
                environment="shell",
                task_id=f"task-{t}",
                checkpoint_id=CAND,
                reference_checkpoint=REF,
                outcome="success",
                env_reward=1.0,
                teacher_signal=TeacherSignal(backend="oracle", score=0.2, boundary=True),
            )
        )
        expected[boundary] = "diagnostic_only"
    return eps, expected


async def _count(bus: Bus, stream: str, subject: str) -> int:
    info = await bus.js.stream_info(stream, subjects_filter=subject)
    return sum((info.state.subjects or {}).values())


async def test_taught_episodes_come_out_rewarded_compared_and_in_lanes(
    bus: Bus, nats_url: str, names: Names
) -> None:
    common = {"nats_url": nats_url, "namespace": names.namespace}
    services = [
        build_reward(bus, RewardSettings(**common)),
        build_comparison(bus, ComparisonSettings(**common, reference_deadline_s=30)),
        build_replay(bus, ReplaySettings(**common)),
    ]
    episodes, expected = _episodes()
    lanes_seen: dict[str, str] = {}
    all_routed = asyncio.Event()

    async def on_replay(msg, raw) -> None:
        if isinstance(msg, Episode):
            lanes_seen[msg.episode_id] = msg.lane or ""
            if len(lanes_seen) >= len(expected):
                all_routed.set()

    await bus.subscribe(names.replay("*", "*"), on_replay)
    async with contextlib.AsyncExitStack() as stack:
        for svc in services:
            await stack.enter_async_context(running(svc))
        # Rollouts first: comparison must wait for their references, not fail them.
        for ep in sorted(episodes, key=lambda e: e.role != "rollout"):
            await bus.publish_durable(
                names.episode("taught", "shell"), ep, msg_id=f"{ep.episode_id}:taught"
            )
        await asyncio.wait_for(all_routed.wait(), 30)
        # Duplicates of every taught message (new message ids) change nothing downstream.
        for ep in episodes:
            await bus.publish_durable(
                names.episode("taught", "shell"), ep, msg_id=f"{ep.episode_id}:taught-again"
            )
        async with asyncio.timeout(30):
            while True:
                status = await bus.request(
                    names.status("reward"),
                    ServiceStatus(service="", instance="", version=""),
                    ServiceStatus,
                    timeout=5,
                )
                if status.consumers[0].processed >= 2 * len(episodes):
                    break
        batch = await bus.request(
            names.replay_sample(), ReplaySampleRequest(size=100), ReplayBatch, timeout=10
        )

    assert lanes_seen == expected
    stream = names.stream("EPISODES")
    assert await _count(bus, stream, names.episode("rewarded", "shell")) == len(episodes)
    assert await _count(bus, stream, names.episode("compared", "shell")) == len(episodes)
    assert await _count(bus, names.stream("REPLAY"), names.replay("*", "*")) == len(expected)
    for lane in ("positive", "neutral", "negative", "diagnostic_only"):
        want = sum(1 for v in expected.values() if v == lane)
        assert await _count(bus, names.stream("REPLAY"), names.replay(lane, "*")) == want  # type: ignore[arg-type]
    assert batch.lane_counts.get("diagnostic_only", 0) == 0
    assert {e.lane for e in batch.episodes} == {"positive", "neutral", "negative"}
    assert len(batch.episodes) == 12
