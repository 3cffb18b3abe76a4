"""The campaign's arrivals count on a real nats-server: concurrent arrivals of one epoch are
counted once each (their adds share compare-and-sets), duplicates and redeliveries are not, and
a replica's own writer racing another one loses nothing."""

from __future__ import annotations

import asyncio

from aios_rl.bus import Bus, connect
from contracts import Episode, Names
from services.campaign.store import Arrivals


def episode(i: int, *, role: str = "rollout") -> Episode:
    return Episode(
        episode_id=f"e{i}",
        environment="orchestrator",
        task_id=f"t{i % 4}",
        campaign_id="arrivals",
        role=role,  # type: ignore[arg-type]
        env_reward=1.0 if i % 2 else 0.0,
        outcome="success" if i % 2 else "failure",
    )


async def test_concurrent_arrivals_are_counted_once_each_in_few_writes(bus: Bus) -> None:
    arrivals = Arrivals(bus)
    eps = [episode(i) for i in range(40)] + [episode(i, role="reference") for i in range(40, 44)]
    added = await asyncio.gather(*(arrivals.add(ep) for ep in [*eps, eps[3], eps[41]]))
    assert added[:44] == [True] * 44 and added[44:] == [False, False]
    assert await arrivals.add(eps[7]) is False  # a redelivery, later
    counted, revision = await arrivals.get("arrivals", 0)
    assert sorted(counted.episode_ids) == sorted(ep.episode_id for ep in eps)
    stats = counted.per_env["orchestrator"]
    assert (stats.episodes, stats.success, counted.references) == (40, 20, 4)
    assert revision < 10  # the adds that queued behind a write went together


async def test_two_writers_of_one_epoch_lose_nothing(bus: Bus, nats_url: str, names: Names) -> None:
    async with connect(nats_url, name="other-replica", names=names) as other:
        mine, theirs = Arrivals(bus), Arrivals(other)
        eps = [episode(i) for i in range(30)]
        added = await asyncio.gather(
            *(mine.add(ep) for ep in eps), *(theirs.add(ep) for ep in eps[::2])
        )
    assert sum(added) == 30  # each episode counted by exactly one of the two
    counted, _ = await mine.get("arrivals", 0)
    assert sorted(counted.episode_ids) == sorted(ep.episode_id for ep in eps)
    assert counted.per_env["orchestrator"].episodes == 30
