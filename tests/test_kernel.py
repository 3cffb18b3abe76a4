"""The in-process kernel (``aios_rl.local``) against the real stack: the same task, seed and
checkpoint give the same episode (same actions, rewards, outcome) through the runner and sampler
services on a real nats-server as through the kernel in this process; and the kernel's epoch is
the campaign's plan (its jobs are the jobs ``plan_jobs`` makes, its branching rounds run
continuations that replay their parents' prefixes)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
import pytest_asyncio
import torch

from aios_rl.bus import Bus, connect, provision
from aios_rl.envs import registry
from aios_rl.envs.orchestrator import generate as orchestrator_tasks
from aios_rl.envs.shell.generate import generate as shell_tasks
from aios_rl.envs.shell.verify import RunCache, default_cache_dir
from aios_rl.local import (
    EpochRollouts,
    Gate,
    LocalPolicy,
    Rollouts,
    collect_epoch,
    eval_jobs,
    train_epoch,
    train_epochs,
)
from aios_rl.rollouts import variance_shares
from aios_rl.rollouts.epoch import plan_jobs, sample_tasks
from aios_rl.stack.natsd import NatsServer
from aios_rl.state.checkpoints import CheckpointRegistry
from aios_rl.student import load_student, new_student
from contracts import (
    BranchingSettings,
    CampaignSpec,
    CampaignState,
    DecodingRegime,
    Episode,
    Names,
    RolloutJob,
    TrainerSettings,
)
from services.runner.main import build as build_runner
from services.sampler.main import build as build_sampler
from services.sampler.settings import SamplerSettings

from .support import running

ASYNC = pytest.mark.asyncio(loop_scope="module")
"""The async tests share the module's event loop (and its stack); the sync one needs none."""

ORCHESTRATOR = orchestrator_tasks(6, seed=5, split="heldout")
SHELL = shell_tasks(4, 11, "heldout", cache=RunCache(default_cache_dir()))
TASKS: dict[str, list[Any]] = {"orchestrator": ORCHESTRATOR, "shell": SHELL}


def host(env: str) -> Any:
    spec = registry.get(env)
    return spec.host(spec.settings(env=env, nats_url=""))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(nats_server: NatsServer) -> AsyncIterator[tuple[Bus, str, bytes]]:
    """A namespace with the real sampler serving a stored tiny student and a real runner per
    environment; yields the bus, the student's checkpoint id and its weights."""
    names = Names(f"t{uuid.uuid4().hex[:10]}")
    weights = new_student("tiny", seed=3).to_bytes()
    async with connect(nats_server.url, name="test", names=names) as bus:
        await provision(bus)
        registry_ = CheckpointRegistry(bus)
        meta = await registry_.store(
            weights, parent_id=None, created_by="init", algorithm="init", backend="tiny"
        )
        await registry_.init(meta.checkpoint_id)
        async with contextlib.AsyncExitStack() as services:
            sampler, _ = build_sampler(bus, SamplerSettings(nats_url="", namespace=names.namespace))
            await services.enter_async_context(running(sampler))
            for env, tasks in TASKS.items():
                await registry.task_store(bus, env).put_all(tasks)
                spec = registry.get(env)
                svc, _ = build_runner(
                    bus, spec, spec.settings(env=env, nats_url="", namespace=names.namespace)
                )
                svc.fetch_timeout_s = 0.2
                await services.enter_async_context(running(svc))
            yield bus, meta.checkpoint_id, weights


async def through_the_stack(bus: Bus, jobs: list[RolloutJob]) -> dict[str, Episode]:
    """Publish ``jobs``; the completed episodes by episode id."""
    got: dict[str, Episode] = {}
    done = asyncio.Event()
    wanted = {j.episode_id for j in jobs}

    async def on_completed(msg: object, raw: object) -> None:
        if isinstance(msg, Episode) and msg.episode_id in wanted:
            got[msg.episode_id] = msg
            if len(got) == len(wanted):
                done.set()

    subs = [await bus.subscribe(bus.names.episode("completed", env), on_completed) for env in TASKS]
    try:
        for j in jobs:
            await bus.publish_durable(bus.names.rollout_job(j.environment), j, msg_id=j.job_id)
        await asyncio.wait_for(done.wait(), 120)
    finally:
        for sub in subs:
            await sub.unsubscribe()
    return got


def jobs_for(checkpoint: str, tag: str) -> list[RolloutJob]:
    """Two sampled episodes (temperature 1: the seed decides) of every task of both
    environments."""
    return [
        j
        for env, tasks in TASKS.items()
        for k in range(2)
        for j in eval_jobs(
            tasks,
            env,
            f"{tag}-{env}-{k}-",
            checkpoint_id=checkpoint,
            seed_base=100 * k,
            regime=DecodingRegime(temperature=1.0),
        )
    ]


@ASYNC
async def test_the_kernel_and_the_stack_make_the_same_episodes(
    stack: tuple[Bus, str, bytes],
) -> None:
    bus, checkpoint, weights = stack
    jobs = jobs_for(checkpoint, f"same{uuid.uuid4().hex[:6]}")
    on_stack = await through_the_stack(bus, jobs)

    async with Rollouts.open(
        list(TASKS),
        {t.task_id: t for tasks in TASKS.values() for t in tasks},
        LocalPolicy(load_student(weights), checkpoint_id=checkpoint),
    ) as local:
        in_process = {ep.episode_id: ep for ep in await local.run(jobs)}

    assert set(in_process) == set(on_stack) == {j.episode_id for j in jobs}
    distinct_paths = set()
    for eid, a in in_process.items():
        b = on_stack[eid]
        assert a.outcome == b.outcome, eid
        assert a.env_reward == pytest.approx(b.env_reward), eid
        assert a.checkpoint_id == b.checkpoint_id == checkpoint
        assert [s.action for s in a.trajectory] == [s.action for s in b.trajectory], eid
        assert [s.observation for s in a.trajectory] == [s.observation for s in b.trajectory]
        assert [s.step_reward for s in a.trajectory] == pytest.approx(
            [s.step_reward for s in b.trajectory]
        )
        assert [s.logprob for s in a.trajectory] == pytest.approx(
            [s.logprob for s in b.trajectory], abs=1e-5
        )
        distinct_paths.add((a.task_id, tuple(s.action for s in a.trajectory)))
    # The comparison means something only if the episodes differ: the seeds decide actions.
    assert len(distinct_paths) > len(ORCHESTRATOR) + len(SHELL)
    assert {ep.outcome for ep in in_process.values()} - {"blocked"}, "every episode blocked"


@ASYNC
async def test_a_continuation_replays_its_parent_here_as_on_the_stack(
    stack: tuple[Bus, str, bytes],
) -> None:
    bus, checkpoint, weights = stack
    tag = f"cont{uuid.uuid4().hex[:6]}"
    parent = eval_jobs(
        ORCHESTRATOR[:1],
        "orchestrator",
        f"{tag}-p",
        checkpoint_id=checkpoint,
        regime=DecodingRegime(temperature=1.0),
    )[0]
    hosts = {"orchestrator": host("orchestrator")}
    local = Rollouts(
        hosts,
        {t.task_id: t for t in ORCHESTRATOR},
        LocalPolicy(load_student(weights), checkpoint_id=checkpoint),
    )
    (first,) = await local.run([parent])
    assert len(first.trajectory) >= 2
    prefix = [s.action for s in first.trajectory[:1]]
    child = RolloutJob(
        job_id=f"{tag}-c",
        episode_id=f"{tag}-c",
        environment="orchestrator",
        task_id=parent.task_id,
        checkpoint_id=checkpoint,
        seed=parent.seed,
        sampling_seed=991,
        prefix=prefix,
        regime=DecodingRegime(temperature=1.0),
    )
    (here,) = await local.run([child])
    there = (await through_the_stack(bus, [child]))[child.episode_id]
    assert [s.action for s in here.trajectory] == [s.action for s in there.trajectory]
    assert here.trajectory[0].replayed and there.trajectory[0].replayed
    assert here.trajectory[0].action == prefix[0]
    assert (here.outcome, here.env_reward) == (there.outcome, pytest.approx(there.env_reward))


@ASYNC
async def test_an_epoch_is_the_campaigns_plan_and_an_update_moves_the_student() -> None:
    torch.manual_seed(0)
    model = new_student("tiny", seed=4)
    before = model.to_bytes()
    policy = LocalPolicy(model)
    hosts = {"orchestrator": host("orchestrator")}
    local = Rollouts(hosts, {t.task_id: t for t in ORCHESTRATOR}, policy)
    available = {"orchestrator": [t.task_id for t in ORCHESTRATOR]}
    ran: list[RolloutJob] = []

    async def run(jobs: list[RolloutJob]) -> list[Episode]:
        ran.extend(jobs)
        return await local.run(jobs)

    spec = CampaignSpec(
        campaign_id="k",
        environments={"orchestrator": 1.0},
        tasks_per_epoch=2,
        group_size=4,
        rollout_strategy="entropy",
        branching=BranchingSettings(initial=2, tau=-1.0),
        reference_runs=0,
        seed=2,
    )
    got = await collect_epoch(spec, 0, available, run, candidate=policy.active)
    state0 = CampaignState(
        spec=spec,
        epoch=0,
        tasks=sample_tasks(spec, 0, available),
        base_tasks=2,
        candidate=policy.active,
        reference=policy.active,
    )
    # Round 0 is exactly the campaign's jobs; later rounds are continuations and fresh runs.
    assert ran[:4] == plan_jobs(spec, state0, deadline=0.0)
    assert got.state.round >= 1 and len(ran) == 8
    continuations = [e for e in got.rollouts if e.branch is not None]
    assert continuations and all(e.trajectory[0].replayed for e in continuations)
    assert len({e.group_id for e in got.rollouts}) == 2

    metrics = train_epoch(model, got.kept, TrainerSettings(learning_rate=3e-3, seed=0))
    assert metrics["samples"] > 0
    assert model.to_bytes() != before


@ASYNC
async def test_the_variance_allocator_spends_uniforms_budget_in_one_more_round() -> None:
    policy = LocalPolicy(new_student("tiny", seed=4))
    local = Rollouts(
        {"orchestrator": host("orchestrator")}, {t.task_id: t for t in ORCHESTRATOR}, policy
    )
    available = {"orchestrator": [t.task_id for t in ORCHESTRATOR]}
    spec = CampaignSpec(
        campaign_id="v",
        environments={"orchestrator": 1.0},
        tasks_per_epoch=3,
        group_size=4,
        rollout_strategy="variance",
        reference_runs=0,
        seed=3,
    )
    got = await collect_epoch(spec, 0, available, local.run, candidate=policy.active)
    assert got.state.round == 1 and len(got.rollouts) == 3 * 4  # uniform-4's rollouts
    base = {
        g: [e for e in got.rollouts if e.group_id == g] for g in {e.group_id for e in got.rollouts}
    }
    firsts = {
        g: [e.env_reward for e in eps if int(e.episode_id.rsplit("-r", 1)[1]) < 2]
        for g, eps in base.items()
    }
    order = sorted(firsts)
    shares = variance_shares([firsts[g] for g in order], pool=3 * 2, cap=2 * 4 - 2)
    assert [len(base[g]) - 2 for g in order] == shares
    assert all(e.branch is None for e in got.rollouts)  # fresh rollouts, no continuation


@ASYNC
async def test_an_episode_blocked_before_the_policy_answered_is_judged_with_its_task() -> None:
    """A task that cannot be set up after its first episode (as Chromium failing to load a page
    under load): the epoch is planned under a concrete checkpoint id, as the campaign service
    plans it, so its blocked episodes carry the checkpoint that would have answered and the
    epoch's verdict counts them with the task's other episodes instead of failing."""

    class Forgetful(dict):  # type: ignore[type-arg]
        """The task store, failing the second read of a task (one episode of the group)."""

        reads = 0

        def __getitem__(self, key: str) -> object:
            self.reads += 1
            if self.reads == 2:
                raise KeyError(key)
            return super().__getitem__(key)

    policy = LocalPolicy(new_student("tiny", seed=4))
    task = ORCHESTRATOR[0]
    local = Rollouts({"orchestrator": host("orchestrator")}, {task.task_id: task}, policy)
    local.tasks = Forgetful(local.tasks)
    spec = CampaignSpec(
        campaign_id="b",
        environments={"orchestrator": 1.0},
        tasks_per_epoch=1,
        group_size=3,
        reference_runs=1,
        seed=1,
    )
    got = await collect_epoch(
        spec, 0, {"orchestrator": [task.task_id]}, local.run, candidate=policy.active
    )
    (blocked,) = [e for e in got.episodes if e.outcome == "blocked"]
    assert blocked.info["error"].startswith("task:") and len(got.episodes) == 4
    assert {e.checkpoint_id for e in got.episodes} == {policy.active}
    assert got.verdict().verdict in ("better", "same", "worse")  # the others are compared


def made(task: str, role: str, k: int, reward: float) -> Episode:
    return Episode(
        episode_id=f"{task}-{role}-{k}",
        environment="orchestrator",
        task_id=task,
        checkpoint_id="cand" if role == "rollout" else "ref",
        group_id=f"g-{task}" if role == "rollout" else "",
        role=role,  # type: ignore[arg-type]
        outcome="success" if reward > 0.5 else "failure",
        env_reward=reward,
    )


@pytest.mark.parametrize(("cand", "ref", "verdict"), [(1.0, 0.0, "better"), (0.0, 1.0, "worse")])
def test_the_kernels_epoch_verdict_is_the_comparisons_rule(
    cand: float, ref: float, verdict: str
) -> None:
    spec = CampaignSpec(campaign_id="v", environments={"orchestrator": 1.0}, tasks_per_epoch=8)
    tasks = [f"t{i}" for i in range(8)]
    state = CampaignState(
        spec=spec,
        epoch=0,
        tasks=[f"orchestrator/{t}" for t in tasks],
        base_tasks=8,
        candidate="cand",
        reference="ref",
    )
    episodes = [made(t, "rollout", k, cand) for t in tasks for k in range(2)]
    episodes += [made(t, "reference", k, ref) for t in tasks for k in range(2)]
    got = EpochRollouts(state=state, episodes=episodes, dropped=set())
    v = got.verdict()
    assert (v.verdict, v.tasks, v.wins + v.losses) == (verdict, 8, 8)
    # Six tasks is the least the task-level test can decide on at 95 %; five one-sided tasks
    # cannot, but five tasks of clear loss are enough for the degradation veto.
    few = EpochRollouts(
        state=state, episodes=[e for e in episodes if e.task_id in tasks[:5]], dropped=set()
    )
    v = few.verdict()
    assert v.per_env["orchestrator"].verdict == "same"
    assert (v.verdict, v.vetoed_by) == (("worse", ["orchestrator"]) if ref > cand else ("same", []))


def test_the_gate_rolls_a_worse_update_back_and_keeps_a_good_one() -> None:
    """The campaign's gate in the kernel: an update whose epoch says worse is undone (the
    weights before it come back, no update that epoch); one that holds stays and is promoted."""
    spec = CampaignSpec(
        campaign_id="g", environments={"orchestrator": 1.0}, tasks_per_epoch=8, reference_runs=2
    )
    policy = LocalPolicy(new_student("tiny", seed=1), checkpoint_id="cand")
    gate = Gate(spec, policy)
    tasks = [f"t{i}" for i in range(8)]

    def epoch(n: int, cand: float, ref: float) -> EpochRollouts:
        state = CampaignState(
            spec=spec,
            epoch=n,
            tasks=[f"orchestrator/{t}" for t in tasks],
            base_tasks=8,
            candidate="cand",
            reference="ref",
        )
        episodes = [made(t, "rollout", k, cand) for t in tasks for k in range(2)]
        episodes += [made(t, "reference", k, ref) for t in tasks for k in range(2)]
        return EpochRollouts(state=state, episodes=episodes, dropped=set())

    assert gate.reference() is None  # nothing to judge yet: the candidate is its own reference
    assert gate.judge(epoch(0, 0.0, 1.0))  # the first epoch always trains
    start = policy.model.to_bytes()
    gate.before_update()
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(1.0)  # "the update"
    assert gate.reference() == Gate.PRE and policy.models[Gate.PRE].to_bytes() == start
    assert not gate.judge(epoch(1, 0.0, 1.0))  # worse: rolled back, no update
    assert policy.model.to_bytes() == start and policy.active == "cand"
    assert gate.decisions[-1]["decision"] == "rollback_pre_update"
    assert gate.decisions[-1]["vetoed_by"] == ["orchestrator"]
    gate.before_update()
    assert gate.judge(epoch(2, 1.0, 0.0))  # better: kept, promoted (one stable epoch)
    assert gate.decisions[-1]["decision"] == "promote" and gate.stable == start


@ASYNC
async def test_an_epoch_with_reference_runs_gets_a_verdict() -> None:
    model = new_student("tiny", seed=6)
    policy = LocalPolicy(model, checkpoint_id="cand")
    policy.add("ref", load_student(new_student("tiny", seed=7).to_bytes()))
    local = Rollouts(
        {"orchestrator": host("orchestrator")}, {t.task_id: t for t in ORCHESTRATOR}, policy
    )
    spec = CampaignSpec(
        campaign_id="kv",
        environments={"orchestrator": 1.0},
        tasks_per_epoch=3,
        group_size=2,
        reference_runs=2,
        seed=1,
    )
    got = await collect_epoch(
        spec,
        0,
        {"orchestrator": [t.task_id for t in ORCHESTRATOR]},
        local.run,
        candidate="cand",
        reference="ref",
    )
    assert {e.checkpoint_id for e in got.rollouts} == {"cand"}
    assert {e.checkpoint_id for e in got.episodes if e.role == "reference"} == {"ref"}
    v = got.verdict()
    assert v.verdict in ("better", "same", "worse") and v.tasks == 3
    assert (v.candidate, v.reference) == ("cand", "ref")


@ASYNC
async def test_the_loop_collects_judges_and_updates_and_a_rollback_skips_the_update() -> None:
    """``train_epochs`` is the campaign's loop: every epoch collected, judged by the gate, then
    one update; an epoch judged worse (here its reference runs all succeed, its rollouts all
    fail) brings back the weights before the last update and trains on nothing."""
    torch.manual_seed(0)
    policy = LocalPolicy(new_student("tiny", seed=8), checkpoint_id="cand")
    start = policy.model.to_bytes()
    local = Rollouts(
        {"orchestrator": host("orchestrator")}, {t.task_id: t for t in ORCHESTRATOR}, policy
    )

    async def run(jobs: list[RolloutJob]) -> list[Episode]:
        got = await local.run(jobs)
        if jobs[0].epoch != 1:
            return got
        return [
            msgspec.structs.replace(
                ep,
                env_reward=float(ep.role == "reference"),
                reward=float(ep.role == "reference"),
                outcome="success" if ep.role == "reference" else "failure",
            )
            for ep in got
        ]

    spec = CampaignSpec(
        campaign_id="loop",
        environments={"orchestrator": 1.0},
        tasks_per_epoch=6,
        group_size=2,
        reference_runs=2,
        seed=3,
        trainer=TrainerSettings(learning_rate=3e-3, seed=0),
    )
    gate = Gate(spec, policy)
    available = {"orchestrator": [t.task_id for t in ORCHESTRATOR]}
    reports, weights = [], []
    async for r in train_epochs(spec, policy, available, run, 3, gate=gate, seed=1):
        reports.append(r)
        weights.append(policy.model.to_bytes())

    assert [r.epoch for r in reports] == [0, 1, 2]
    assert [r.decision for r in reports] == gate.decisions
    assert [r.trained for r in reports] == [True, False, True]
    assert reports[0].metrics is not None and reports[0].metrics["samples"] > 0
    assert reports[1].decision is not None
    assert reports[1].decision["decision"] == "rollback_pre_update"
    assert reports[1].update_s == 0.0 and reports[1].success == 0.0
    # Epoch 0's update moved the weights, epoch 1's rollback put the untrained ones back, and
    # epoch 2 trained from them.
    assert weights[0] != start and weights[1] == start and weights[2] != start
