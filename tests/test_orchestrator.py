"""The orchestrator environment: hidden-truth rules, generation, and the runner service."""

from __future__ import annotations

import asyncio

import pytest

from aios_rl.bus import Bus
from aios_rl.envs.orchestrator.tasks import (
    CLARITY,
    DISPATCH,
    PREFLIGHT,
    all_tasks,
    generate,
    outcome_of,
)
from aios_rl.envs.registry import task_store
from aios_rl.state.tasks import UnknownTaskError as TaskNotFound
from contracts import Episode, Names, OrchestratorTask, RolloutJob

from .support import running


def _find(kind: str, *needles: str) -> OrchestratorTask:
    return next(
        t for t in all_tasks() if t.kind == kind and all(n in t.observation for n in needles)
    )


def test_dispatch_rules() -> None:
    assert (
        _find("dispatch", "summarise the README", "production", "backup: none").best == DISPATCH[0]
    )
    assert _find("dispatch", "drop the main table", "a local sandbox").best == DISPATCH[0]
    reversible = _find("dispatch", "drop the main table", "production", "backup: yes")
    assert (reversible.best, reversible.acceptable) == (DISPATCH[1], [DISPATCH[2]])
    assert (
        _find("dispatch", "wipe the cache cluster", "staging", "backup: none").best == DISPATCH[2]
    )


def test_preflight_and_clarity_rules() -> None:
    assert (
        _find("preflight", "all tests pass", "clean", "docs only", "no reviewer").best
        == PREFLIGHT[0]
    )
    assert (
        _find("preflight", "all tests pass", "found an AWS key", "docs only", "approved").best
        == PREFLIGHT[1]
    )
    assert (
        _find("preflight", "all tests pass", "clean", "infrastructure", "no reviewer").best
        == PREFLIGHT[1]
    )
    assert _find("preflight", "flaky", "clean", "application code", "approved").best == PREFLIGHT[1]
    assert _find("clarity", "production deploy password").best == CLARITY[0]
    assert _find("clarity", "standup moved").best == CLARITY[1]


def test_outcomes_and_generation() -> None:
    t = _find("dispatch", "drop the main table", "production", "backup: yes")
    assert outcome_of(t, t.best) == ("success", 1.0)
    assert outcome_of(t, DISPATCH[2]) == ("partial", 0.5)
    assert outcome_of(t, DISPATCH[0]) == ("failure", 0.0)
    train, held = generate(1000, split="train"), generate(1000, split="heldout")
    assert {t.task_id for t in train}.isdisjoint({t.task_id for t in held})
    assert len(train) + len(held) == len(all_tasks())
    assert generate(30, seed=4) == generate(30, seed=4) != generate(30, seed=5)
    assert {t.kind for t in generate(9)} == {
        "dispatch",
        "preflight",
        "clarity",
    }  # balanced across kinds
    assert len({t.task_id for t in all_tasks()}) == len(all_tasks())
    with pytest.raises(ValueError):
        generate(3, split="real")


async def test_task_store_round_trip(bus: Bus) -> None:
    tasks = generate(12)
    store = task_store(bus, "orchestrator")
    await store.put_all(tasks)
    index = await store.index("train")
    assert sorted(index.task_ids) == sorted(t.task_id for t in tasks)
    await store.put_all(generate(14))
    again = await store.index("train")
    assert len(again.task_ids) == 14
    assert await store.list("train") == again.task_ids
    assert again.task_ids[:12] == [t.task_id for t in tasks]  # in the order they were added
    assert await store.get(tasks[3].task_id) == tasks[3]
    with pytest.raises(TaskNotFound):
        await store.get("0" * 16)
    assert await store.list("heldout") == []


async def test_runner_runs_jobs_and_a_broken_job_is_blocked_not_lost(
    bus: Bus, nats_url: str, names: Names
) -> None:
    from aios_rl.envs import registry
    from aios_rl.envs.runner import RunnerSettings
    from services.runner.main import build as build_runner
    from services.sampler.main import build as build_sampler
    from services.sampler.settings import SamplerSettings
    from services.trainer.main import build as build_trainer
    from services.trainer.settings import TrainerServiceSettings

    common = {"nats_url": nats_url, "namespace": names.namespace}
    trainer_svc, trainer = build_trainer(bus, TrainerServiceSettings(**common))
    await trainer.ensure_initial()
    sampler_svc, _ = build_sampler(bus, SamplerSettings(**common))
    spec = registry.get("orchestrator")
    runner_svc, _ = build_runner(bus, spec, RunnerSettings(env="orchestrator", **common))
    tasks = generate(3)
    await task_store(bus, "orchestrator").put_all(tasks)
    got: dict[str, Episode] = {}
    done = asyncio.Event()

    async def on_completed(msg, raw) -> None:
        if isinstance(msg, Episode):
            got[msg.episode_id] = msg
            if len(got) == 4:
                done.set()

    await bus.subscribe(names.episode("completed", "orchestrator"), on_completed)
    for svc in (sampler_svc, runner_svc):
        svc.fetch_timeout_s = 0.2
    async with running(sampler_svc), running(runner_svc):
        for i, t in enumerate(tasks):
            job = RolloutJob(
                job_id=f"j{i}",
                episode_id=f"e{i}",
                environment="orchestrator",
                task_id=t.task_id,
                seed=i,
            )
            await bus.publish_durable(names.rollout_job("orchestrator"), job, msg_id=job.job_id)
        broken = RolloutJob(
            job_id="jx", episode_id="ex", environment="orchestrator", task_id="f" * 16
        )
        await bus.publish_durable(names.rollout_job("orchestrator"), broken, msg_id="jx")
        await asyncio.wait_for(done.wait(), 30)
    for i, t in enumerate(tasks):
        ep = got[f"e{i}"]
        step = ep.trajectory[0]
        assert step.action in t.candidates and step.observation == t.observation
        assert (ep.outcome, ep.env_reward) == outcome_of(t, step.action)
        assert ep.info["kind"] == t.kind
    assert got["ex"].outcome == "blocked" and "no orchestrator task" in got["ex"].info["error"]
    del trainer_svc
