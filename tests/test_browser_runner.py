"""The browser runner on a real nats-server with real Chromium: two replicas split the jobs with
none lost or run twice, and a browser killed in the middle of an episode makes that episode
blocked while the runner relaunches Chromium and carries on."""

from __future__ import annotations

import asyncio
import contextlib
import os

import psutil
import pytest

from aios_rl.bus import Bus, Service
from aios_rl.envs import registry
from aios_rl.envs.browser.adapter import BrowserRunnerSettings
from aios_rl.envs.browser.store import BrowserTaskStore, browser_task_id
from contracts import ActRequest, ActResponse, BrowserTask, Episode, Names, RolloutJob
from services.runner.main import build as build_runner

from .support import running

pytestmark = pytest.mark.slow

EASY = ("click-button", "click-link", "focus-text", "click-dialog")


def tasks() -> list[BrowserTask]:
    out = []
    for name in EASY:
        for seed in range(3):
            t = BrowserTask(task_id="", kind="miniwob", flow=name, seed=seed, max_steps=4)
            out.append(BrowserTask(**{**_fields(t), "task_id": browser_task_id(t)}))
    return out


def _fields(t: BrowserTask) -> dict[str, object]:
    return {f: getattr(t, f) for f in t.__struct_fields__}


def first_candidate_policy(bus: Bus, on_act=None) -> Service:  # type: ignore[no-untyped-def]
    svc = Service(bus, name="scripted-policy", version="0.0.1")

    async def act(req: ActRequest) -> ActResponse:
        if on_act is not None:
            await on_act(req)
        action = req.candidates[0]
        return ActResponse(action=action, action_index=0, checkpoint_id="scripted")

    svc.endpoint("act", bus.names.policy_act(), ActRequest, act, concurrency=8)
    return svc


def runner(bus: Bus, names: Names, concurrency: int = 2):  # type: ignore[no-untyped-def]
    settings = BrowserRunnerSettings(
        nats_url="", namespace=names.namespace, concurrency=concurrency, screenshots=False
    )
    return build_runner(bus, registry.get("browser"), settings)


async def run(
    bus: Bus, names: Names, jobs: list[RolloutJob], services: list[Service]
) -> list[Episode]:
    got: list[Episode] = []
    done = asyncio.Event()

    async def on_completed(msg: object, _raw: object) -> None:
        if isinstance(msg, Episode):
            got.append(msg)
            if len({e.episode_id for e in got}) >= len(jobs):
                done.set()

    sub = await bus.subscribe(names.episode("completed", "browser"), on_completed)
    try:
        async with contextlib.AsyncExitStack() as stack:
            for svc in services:
                svc.fetch_timeout_s = 0.2
                await stack.enter_async_context(running(svc))
            for j in jobs:
                await bus.publish_durable(names.rollout_job("browser"), j, msg_id=j.job_id)
            await asyncio.wait_for(done.wait(), 240)
    finally:
        await sub.unsubscribe()
    return got


def job(t: BrowserTask, i: int) -> RolloutJob:
    return RolloutJob(
        job_id=f"job-{i}", episode_id=f"ep-{i}", environment="browser", task_id=t.task_id,
        seed=t.seed,
    )  # fmt: skip


async def test_two_replicas_split_the_jobs_with_none_lost_or_run_twice(
    bus: Bus, names: Names
) -> None:
    ts = tasks()
    await BrowserTaskStore(bus).put_all(ts)
    (svc_a, a), (svc_b, b) = runner(bus, names), runner(bus, names)
    try:
        jobs = [job(t, i) for i, t in enumerate(ts)]
        got = await run(bus, names, jobs, [first_candidate_policy(bus), svc_a, svc_b])
    finally:
        await a.host.aclose()
        await b.host.aclose()
    assert sorted(e.episode_id for e in got) == sorted(j.episode_id for j in jobs)  # once each
    assert a.episodes + b.episodes == len(jobs) and a.episodes > 0 and b.episodes > 0
    assert all(e.outcome != "blocked" for e in got)


def _chromium_children() -> list[psutil.Process]:
    me = psutil.Process(os.getpid())
    return [p for p in me.children(recursive=True) if "chrom" in p.name().lower()]


async def test_a_browser_killed_mid_episode_blocks_that_episode_and_the_runner_carries_on(
    bus: Bus, names: Names
) -> None:
    ts = tasks()[:3]
    await BrowserTaskStore(bus).put_all(ts)
    svc, r = runner(bus, names, concurrency=1)  # one episode at a time: ep-0 first
    killed: list[str] = []

    async def on_act(req: ActRequest) -> None:
        if req.episode_id == "ep-0" and not killed:
            for p in _chromium_children():
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.kill()
            killed.append(req.episode_id)

    try:
        jobs = [job(t, i) for i, t in enumerate(ts)]
        got = {
            e.episode_id: e
            for e in await run(bus, names, jobs, [first_candidate_policy(bus, on_act), svc])
        }
    finally:
        await r.host.aclose()
    assert killed == ["ep-0"]
    assert got["ep-0"].outcome == "blocked" and "environment" in got["ep-0"].info.get("error", "")
    assert all(got[f"ep-{i}"].outcome != "blocked" for i in (1, 2))  # the runner carried on
    assert r.host.launches == 2  # Chromium relaunched for the next episode
