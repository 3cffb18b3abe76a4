"""The ``shell-runner`` service against a real nats-server and the real sandbox: a scripted oracle
policy solves verified tasks of both splits through it, a random policy mostly does not, two
replicas split one job stream without running a job twice or losing one, prefixes are replayed
and a job that cannot run becomes a ``blocked`` episode."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import subprocess
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from aios_rl.bus import Bus, Service, connect
from aios_rl.envs import registry
from aios_rl.envs.shell.adapter import ShellRunnerSettings, work_root
from aios_rl.envs.shell.episode import SUBMIT
from aios_rl.envs.shell.generate import generate
from aios_rl.envs.shell.store import ShellTaskStore as TaskStore
from aios_rl.envs.shell.verify import RunCache, default_cache_dir, task_id_of
from contracts import ActRequest, ActResponse, Episode, Names, RolloutJob, ShellTask
from contracts.subjects import STREAM_ROLLOUTS
from services.runner.main import build as build_runner

from .support import running, settled_consumer

Answer = Callable[[ActRequest], str]


def policy_service(bus: Bus, answer: Answer) -> Service:
    """A scripted policy on ``policy.act`` (what the sampler serves for a real student)."""
    svc = Service(bus, name="scripted-policy", version="0.0.1")

    async def act(req: ActRequest) -> ActResponse:
        action = answer(req)
        index = req.candidates.index(action) if action in req.candidates else None
        return ActResponse(action=action, action_index=index, checkpoint_id="scripted")

    svc.endpoint("act", bus.names.policy_act(), ActRequest, act, concurrency=8)
    return svc


def oracle(tasks: list[ShellTask]) -> Answer:
    fixes = {e.label for t in tasks for e in t.candidate_edits if e.is_fix}

    def answer(req: ActRequest) -> str:
        return next((c for c in req.candidates if c in fixes), SUBMIT)

    return answer


def uniform(req: ActRequest) -> str:
    return random.Random(req.seed).choice(req.candidates)


def job(task_id: str, n: int, **kw: object) -> RolloutJob:
    return RolloutJob(
        job_id=f"job-{n}",
        episode_id=f"ep-{n}",
        environment="shell",
        task_id=task_id,
        seed=n,
        **kw,  # type: ignore[arg-type]
    )


async def run_jobs(
    bus: Bus,
    names: Names,
    jobs: list[RolloutJob],
    services: list[Service],
    within: float,
    env: str = "shell",
) -> dict[str, Episode]:
    got: dict[str, Episode] = {}
    done = asyncio.Event()

    async def on_completed(msg: object, _raw: object) -> None:
        if isinstance(msg, Episode):
            got[msg.episode_id] = msg
            if len(got) >= len(jobs):
                done.set()

    sub = await bus.subscribe(names.episode("completed", env), on_completed)
    try:
        for svc in services:
            svc.fetch_timeout_s = 0.2
        async with contextlib.AsyncExitStack() as stack:
            for svc in services:
                await stack.enter_async_context(running(svc))
            for j in jobs:
                await bus.publish_durable(names.rollout_job(env), j, msg_id=j.job_id)
            await asyncio.wait_for(done.wait(), within)
    finally:
        await sub.unsubscribe()
    return got


@pytest.fixture(scope="module")
def tasks() -> dict[str, list[ShellTask]]:
    """50 verified tasks of each split: generation runs every task's tests on the original, the
    mutant, the fix and each distractor, and keeps only tasks that pass that check (test runs
    are cached on disk across runs; ``test_shell_tasks`` re-verifies generated tasks)."""
    cache = RunCache(default_cache_dir())
    return {split: generate(50, 11, split, cache=cache) for split in ("train", "heldout")}


def build(bus: Bus, settings: ShellRunnerSettings):  # type: ignore[no-untyped-def]
    """The one runner service, run for the shell environment."""
    return build_runner(bus, registry.get("shell"), settings)


def settings(bus: Bus, **kw: object) -> ShellRunnerSettings:
    return ShellRunnerSettings(
        nats_url="",
        namespace=bus.names.namespace,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.slow
async def test_oracle_policy_through_the_runner(
    bus: Bus, names: Names, tasks: dict[str, list[ShellTask]]
) -> None:
    every = tasks["train"] + tasks["heldout"]
    await TaskStore(bus).put_all(every)
    runner_svc, runner = build(bus, settings(bus))
    jobs = [job(t.task_id, i) for i, t in enumerate(every)]
    got = await run_jobs(bus, names, jobs, [policy_service(bus, oracle(every)), runner_svc], 240)
    successes = sum(ep.outcome == "success" for ep in got.values())
    assert successes >= 0.95 * len(jobs), f"oracle: {successes}/{len(jobs)}"
    by_id = {t.task_id: t for t in every}
    for ep in got.values():
        task = by_id[ep.task_id]
        assert ep.environment == "shell" and ep.info["task_statement"] == task.statement
        assert ep.info["family"] == task.family and ep.checkpoint_id == "scripted"
        assert ep.trajectory[-1].step_reward == ep.env_reward
        assert [s.index for s in ep.trajectory] == list(range(len(ep.trajectory)))
    info = await settled_consumer(bus, names.stream(STREAM_ROLLOUTS), "shell-runner")
    assert info.num_ack_pending == 0 and info.num_pending == 0
    assert runner.episodes == len(jobs)


@pytest.mark.slow
async def test_random_policy_is_far_below_the_oracle(
    bus: Bus, names: Names, tasks: dict[str, list[ShellTask]]
) -> None:
    sample = tasks["heldout"][:40]
    await TaskStore(bus).put_all(sample)
    runner_svc, _ = build(bus, settings(bus))
    jobs = [job(t.task_id, i) for i, t in enumerate(sample)]
    got = await run_jobs(bus, names, jobs, [policy_service(bus, uniform), runner_svc], 240)
    rate = sum(ep.outcome == "success" for ep in got.values()) / len(jobs)
    assert rate <= 0.4, f"random policy solved {rate:.0%}"
    assert {ep.outcome for ep in got.values()} <= {"success", "partial", "failure", "blocked"}


async def test_two_replicas_split_the_jobs_without_repeats_or_losses(
    bus: Bus, nats_url: str, names: Names, tasks: dict[str, list[ShellTask]]
) -> None:
    sample = tasks["train"][:24]
    await TaskStore(bus).put_all(sample)
    async with connect(nats_url, name="replica-2", names=names) as other:
        one, r1 = build(bus, settings(bus))
        two, r2 = build(other, settings(other))
        jobs = [job(t.task_id, i) for i, t in enumerate(sample)]
        got = await run_jobs(bus, names, jobs, [policy_service(bus, oracle(sample)), one, two], 120)
    assert set(got) == {j.episode_id for j in jobs}
    assert r1.episodes + r2.episodes == len(jobs)  # each job ran exactly once
    assert r1.episodes > 0 and r2.episodes > 0


async def test_prefix_is_replayed_then_the_policy_continues(
    bus: Bus, names: Names, tasks: dict[str, list[ShellTask]]
) -> None:
    task = tasks["train"][0]
    fix = next(e.label for e in task.candidate_edits if e.is_fix)
    await TaskStore(bus).put_all([task])
    runner_svc, _ = build(bus, settings(bus))
    asked: list[int] = []

    def submit(req: ActRequest) -> str:
        asked.append(req.step)
        return SUBMIT

    got = await run_jobs(
        bus,
        names,
        [job(task.task_id, 0, prefix=["run the tests", fix])],
        [policy_service(bus, submit), runner_svc],
        60,
    )
    ep = got["ep-0"]
    assert [s.replayed for s in ep.trajectory] == [True, True, False]
    assert [s.action for s in ep.trajectory] == ["run the tests", fix, SUBMIT]
    assert asked == [2] and ep.outcome == "success"


async def test_jobs_that_cannot_run_are_blocked_and_the_runner_goes_on(
    bus: Bus, names: Names, tasks: dict[str, list[ShellTask]]
) -> None:
    task = tasks["train"][1]
    # A task the environment cannot even set up: a file path that leaves the task directory.
    files = {**task.files, "../escape.py": "x = 1\n"}
    broken = msgspec.structs.replace(
        task, files=files, task_id=task_id_of(files, task.test_command)
    )
    await TaskStore(bus).put_all([task, broken])
    runner_svc, _ = build(bus, settings(bus, command_timeout_s=2.0, cpu_seconds=2))

    def answer(req: ActRequest) -> str:
        if req.episode_id == "ep-1":
            return "while :; do :; done"  # the policy's command never ends
        return oracle([task])(req)

    jobs = [job("f" * 16, 0), job(task.task_id, 1), job(task.task_id, 2)]
    jobs.append(job(broken.task_id, 3))
    got = await run_jobs(bus, names, jobs, [policy_service(bus, answer), runner_svc], 60)
    assert got["ep-0"].outcome == "blocked" and "task" in got["ep-0"].info["error"]
    assert got["ep-3"].outcome == "blocked"
    assert got["ep-3"].info["error"].startswith("environment: UnsafePath")
    assert got["ep-1"].outcome == "blocked" and got["ep-1"].info["ended"] == "limit"
    assert got["ep-2"].outcome == "success"


def test_a_runner_removes_the_task_dirs_of_dead_runners(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()  # reaped: its pid names no process now
    (tmp_path / str(dead.pid) / "aios-shell-ep-x").mkdir(parents=True)
    (tmp_path / "1").mkdir()  # init: alive
    (tmp_path / "notes").mkdir()
    mine = work_root(str(tmp_path))
    assert mine == tmp_path / str(os.getpid()) and mine.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["1", "notes", str(os.getpid())])
