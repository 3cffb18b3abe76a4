"""The orchestrator environment through the real stack, on a real nats-server: the runner service
(``services/runner`` with env ``orchestrator``) asks a policy on ``policy.act`` for every
decision. An oracle policy answering on the bus reaches the simulator's best reward on held-out
tasks, a random one through the same path falls far below it, and a short campaign of the real
services (campaign, sampler, trainer, runner, teacher gateway, oracle teacher, reward, comparison,
replay) gives the student's failed runs teacher shaping and hints."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from statistics import fmean

import pytest
import pytest_asyncio

from aios_rl.bus import Bus, Service, connect, provision
from aios_rl.envs import registry
from aios_rl.envs.orchestrator import baselines, generate, sim
from aios_rl.envs.runner import RunnerSettings
from aios_rl.stack.natsd import NatsServer
from aios_rl.state.ledger import Ledger
from contracts import (
    ActRequest,
    ActResponse,
    CampaignEvent,
    CampaignSpec,
    CampaignStatus,
    Episode,
    Names,
    OrchestratorTask,
    RolloutJob,
    StartCampaign,
    TrainerSettings,
)
from services.campaign.main import build as build_campaign
from services.campaign.settings import CampaignSettings
from services.comparison.main import build as build_comparison
from services.comparison.settings import ComparisonSettings
from services.replay.main import build as build_replay
from services.replay.settings import ReplaySettings
from services.reward.main import build as build_reward
from services.reward.settings import RewardSettings
from services.runner.main import build as build_runner
from services.sampler.main import build as build_sampler
from services.sampler.settings import SamplerSettings
from services.teacher_gateway.main import build as build_gateway
from services.teacher_gateway.settings import GatewayServiceSettings
from services.teacher_oracle.main import build as build_oracle
from services.teacher_oracle.settings import OracleSettings
from services.trainer.main import build as build_trainer
from services.trainer.settings import TrainerServiceSettings

from .support import running

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

HELDOUT = generate(40, seed=11, split="heldout")
"""The held-out tasks the policies on the bus are measured on (runs and clarity gates)."""

Answer = Callable[[OrchestratorTask, sim.State, ActRequest], str]


@dataclass
class RunnerStack:
    """A namespace of its own with the real orchestrator runner serving its job stream."""

    bus: Bus
    names: Names
    url: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runner_stack(nats_server: NatsServer) -> AsyncIterator[RunnerStack]:
    names = Names(f"t{uuid.uuid4().hex[:10]}")
    async with connect(nats_server.url, name="test", names=names) as bus:
        await provision(bus)
        await registry.task_store(bus, "orchestrator").put_all(HELDOUT)
        svc, _ = build_runner(
            bus,
            registry.get("orchestrator"),
            RunnerSettings(env="orchestrator", nats_url=nats_server.url, namespace=names.namespace),
        )
        svc.fetch_timeout_s = 0.2
        async with running(svc):
            yield RunnerStack(bus, names, nats_server.url)


@dataclass
class BusPolicy:
    """A policy answering ``policy.act`` (what the sampler serves for the student): it holds
    the tasks of the jobs it was told about and, per episode, the decisions it answered, so it
    knows the simulator's state at every step it is asked about (a redelivered step replays the
    decisions before it)."""

    answer: Answer
    tasks: dict[str, OrchestratorTask] = field(default_factory=dict)
    taken: dict[str, list[str]] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)

    async def act(self, req: ActRequest) -> ActResponse:
        task = self.tasks[req.episode_id]
        taken = self.taken.setdefault(req.episode_id, [])
        del taken[req.step :]
        s = sim.start(task)
        for d in taken:
            s = sim.step(task, s, d)
        if (req.observation, req.candidates) != (sim.observe(task, s), list(sim.offered(task, s))):
            self.mismatches.append(f"{req.episode_id} step {req.step}")
        action = self.answer(task, s, req)
        taken.append(action)
        return ActResponse(
            action=action, action_index=req.candidates.index(action), checkpoint_id="scripted"
        )

    def service(self, bus: Bus) -> Service:
        svc = Service(bus, name="scripted-policy", version="0.0.1")
        svc.endpoint("act", bus.names.policy_act(), ActRequest, self.act, concurrency=16)
        return svc


def oracle(task: OrchestratorTask, s: sim.State, req: ActRequest) -> str:
    return sim.best_decision(task, s)[0]


def uniform(task: OrchestratorTask, s: sim.State, req: ActRequest) -> str:
    return random.Random(req.seed).choice(req.candidates)


async def run_through_the_stack(
    stack: RunnerStack, policy: BusPolicy, tasks: list[OrchestratorTask], tag: str
) -> dict[str, Episode]:
    """One job per task on ``rollout.job.orchestrator``; the completed episodes by task id."""
    bus, names = stack.bus, stack.names
    jobs = [
        RolloutJob(
            job_id=f"{tag}-j{i}",
            episode_id=f"{tag}-e{i}",
            environment="orchestrator",
            task_id=t.task_id,
            seed=i,
        )
        for i, t in enumerate(tasks)
    ]
    policy.tasks.update({j.episode_id: t for j, t in zip(jobs, tasks, strict=True)})
    got: dict[str, Episode] = {}
    done = asyncio.Event()

    async def on_completed(msg, raw) -> None:
        if isinstance(msg, Episode) and msg.episode_id.startswith(f"{tag}-"):
            got[msg.task_id] = msg
            if len(got) == len(jobs):
                done.set()

    sub = await bus.subscribe(names.episode("completed", "orchestrator"), on_completed)
    try:
        async with running(policy.service(bus)):
            for j in jobs:
                await bus.publish_durable(names.rollout_job("orchestrator"), j, msg_id=j.job_id)
            await asyncio.wait_for(done.wait(), 60)
    finally:
        await sub.unsubscribe()
    assert not policy.mismatches, "the runner showed another state than the simulator's"
    return got


async def test_an_oracle_policy_on_the_bus_reaches_the_best_reward(
    runner_stack: RunnerStack,
) -> None:
    best = {t.task_id: baselines.rollout(t, baselines.oracle) for t in HELDOUT}
    started = time.monotonic()
    got = await run_through_the_stack(runner_stack, BusPolicy(oracle), HELDOUT, "oracle")
    took = time.monotonic() - started
    for t in HELDOUT:
        ep = got[t.task_id]
        outcome, reward, states = best[t.task_id]
        assert (ep.outcome, ep.env_reward) == (outcome, pytest.approx(reward)), t.task_id
        assert len(ep.trajectory) == len(states)
    through_stack = fmean([got[t.task_id].env_reward for t in HELDOUT])
    in_process = fmean([best[t.task_id][1] for t in HELDOUT])
    print(
        f"oracle through the stack: {through_stack:.3f} (in process {in_process:.3f}), {took:.1f} s"
    )
    assert through_stack >= 0.95 * in_process
    assert sum(got[t.task_id].outcome == "success" for t in HELDOUT) >= 0.95 * len(HELDOUT)


async def test_a_random_policy_through_the_same_path_is_far_below_it(
    runner_stack: RunnerStack,
) -> None:
    got = await run_through_the_stack(runner_stack, BusPolicy(uniform), HELDOUT, "random")
    through_stack = fmean([got[t.task_id].env_reward for t in HELDOUT])
    best = baselines.evaluate(HELDOUT, baselines.oracle)
    print(f"random through the stack: {through_stack:.3f} (oracle {best:.3f})")
    assert through_stack < 0.5 * best
    assert all(ep.outcome != "blocked" for ep in got.values())


# -- a campaign with teacher shaping ------------------------------------------------------------


async def test_a_campaign_gives_failed_runs_teacher_shaping_and_hints(
    nats_server: NatsServer,
) -> None:
    names = Names(f"t{uuid.uuid4().hex[:10]}")
    train = generate(8, seed=5, split="train")
    by_id = {t.task_id: t for t in train}
    cid = "orchestrator-taught"
    async with connect(nats_server.url, name="test", names=names) as bus:
        await provision(bus)
        await registry.task_store(bus, "orchestrator").put_all(train)
        common = {"nats_url": nats_server.url, "namespace": names.namespace}
        trainer_svc, trainer = build_trainer(bus, TrainerServiceSettings(**common))
        await trainer.ensure_initial()
        campaign_svc, campaigns = build_campaign(bus, CampaignSettings(**common, recheck_s=0.5))
        services = [
            trainer_svc,
            build_sampler(bus, SamplerSettings(**common))[0],
            build_runner(
                bus, registry.get("orchestrator"), RunnerSettings(env="orchestrator", **common)
            )[0],
            build_gateway(bus, GatewayServiceSettings(**common))[0],
            build_oracle(bus, OracleSettings(**common))[0],
            build_reward(bus, RewardSettings(**common)),
            build_comparison(bus, ComparisonSettings(**common, reference_deadline_s=60)),
            build_replay(bus, ReplaySettings(**common)),
            campaign_svc,
        ]
        rewarded: dict[str, Episode] = {}
        finished = asyncio.Event()

        async def on_rewarded(msg, raw) -> None:
            if isinstance(msg, Episode) and msg.campaign_id == cid:
                rewarded[msg.episode_id] = msg

        async def on_event(msg, raw) -> None:
            if isinstance(msg, CampaignEvent) and msg.campaign_id == cid:
                if msg.kind in ("finished", "failed"):
                    finished.set()

        await bus.subscribe(names.episode("rewarded", "orchestrator"), on_rewarded)
        await bus.subscribe(names.campaign_event("*"), on_event)
        spec = CampaignSpec(
            campaign_id=cid,
            environments={"orchestrator": 1.0},
            epochs=1,
            tasks_per_epoch=4,
            group_size=4,
            trainer=TrainerSettings(seed=1),
            episode_deadline_s=60,
        )
        async with contextlib.AsyncExitStack() as es:
            for svc in services:
                svc.fetch_timeout_s = 0.2
                await es.enter_async_context(running(svc))
            try:
                status = await bus.request(
                    names.campaign_cmd("start"),
                    StartCampaign(spec=spec),
                    CampaignStatus,
                    timeout=10,
                )
                assert status.state == "running"
                await asyncio.wait_for(finished.wait(), 120)
                records = await Ledger(bus).records(cid)
            finally:
                await campaigns.close()

    assert [(r.epoch, r.phase, r.missing) for r in records] == [(0, "done", 0)]
    assert records[0].per_env["orchestrator"].episodes == 16
    rollouts = [ep for ep in rewarded.values() if ep.role == "rollout"]
    assert len(rollouts) == 16, sorted(rewarded)
    failed = [ep for ep in rollouts if ep.outcome == "failure"]
    assert failed, "the untrained student failed no run: nothing to teach"
    print(
        f"campaign: {len(failed)} of {len(rollouts)} runs failed, shaping "
        f"{sorted({ep.reward_breakdown.shaping for ep in failed if ep.reward_breakdown})}, "
        f"{sum(len(ep.teacher_signal.hints) for ep in failed if ep.teacher_signal)} hints"
    )
    for ep in failed:
        assert ep.teacher_status == "ok" and ep.teacher_signal is not None
        assert ep.teacher_signal.backend == "oracle" and ep.teacher_signal.score < 0
        b = ep.reward_breakdown
        assert b is not None and b.shaping != 0 and b.teacher_score == ep.teacher_signal.score
        assert ep.reward == pytest.approx(ep.env_reward + b.shaping)
        # Every hint is at a decision that was not the best there, and names the best one.
        task = by_id[ep.task_id]
        hints = {h.step: h for h in ep.teacher_signal.hints}
        assert hints, ep.episode_id
        s = sim.start(task)
        for step in ep.trajectory:
            best, why = sim.best_decision(task, s)
            if step.action == best:
                assert step.index not in hints
            else:
                assert hints[step.index].better_action == best
                assert hints[step.index].note == f"{s.stage}: {why}"
            s = sim.step(task, s, step.action)
