"""The ``Environment`` protocol, the step loop and the registry, and a third environment defined
only in this file, run through the real runner service, sampler and pipeline.

The third environment ("beacon") is the proof that adding an environment is an adapter and one
``register`` call: nothing under ``aios_rl/`` or ``services/`` knows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from dataclasses import dataclass
from typing import ClassVar

import pytest

from aios_rl.bus import Bus
from aios_rl.envs import registry
from aios_rl.envs.base import Environment, EnvResult, EnvSpec, replay_prefix
from aios_rl.envs.loop import StepLimitError, run_steps, step_seed
from aios_rl.envs.runner import ERROR_CHARS, RunnerSettings, blocked_error
from aios_rl.state.tasks import TaskKind
from contracts import (
    ActRequest,
    ActResponse,
    DecodingRegime,
    Episode,
    Message,
    Names,
    RolloutJob,
)
from services.comparison.main import build as build_comparison
from services.comparison.settings import ComparisonSettings
from services.replay.main import build as build_replay
from services.replay.settings import ReplaySettings
from services.reward.main import build as build_reward
from services.reward.settings import RewardSettings
from services.runner.main import build as build_runner
from services.runner.main import provision_runner
from services.sampler.main import build as build_sampler
from services.sampler.settings import SamplerSettings
from services.teacher_gateway.main import build as build_gateway
from services.teacher_gateway.settings import GatewayServiceSettings
from services.teacher_oracle.main import build as build_oracle
from services.teacher_oracle.settings import OracleSettings
from services.trainer.main import build as build_trainer
from services.trainer.settings import TrainerServiceSettings

from .support import running

# -- the third environment, defined here and nowhere else -----------------------------------------

COLOURS = ("red", "green", "blue")


class BeaconTask(Message, frozen=True, kw_only=True):
    """Two decisions: pick the colour the beacon shows, then confirm or retract the pick."""

    SCHEMA: ClassVar[str] = "beacon_task.test"
    task_id: str
    split: str = "train"
    colour: str


def beacon_id(task: BeaconTask) -> str:
    return hashlib.sha256(task.colour.encode()).hexdigest()[:16]


def beacon(colour: str) -> BeaconTask:
    return BeaconTask(task_id=hashlib.sha256(colour.encode()).hexdigest()[:16], colour=colour)


class BeaconEnv:
    def __init__(self, task: BeaconTask) -> None:
        self.task = task
        self.actions: list[str] = []

    @property
    def observation(self) -> str:
        if not self.actions:
            return f"the beacon shows {self.task.colour}"
        return f"you picked {self.actions[0]}: confirm or retract?"

    @property
    def candidates(self) -> list[str]:
        if self.done:
            return []
        return list(COLOURS) if not self.actions else ["confirm", "retract"]

    @property
    def done(self) -> bool:
        return len(self.actions) >= 2

    async def step(self, action: str) -> None:
        self.actions.append(action)

    def result(self) -> EnvResult:
        right = self.actions[0] == self.task.colour
        confirmed = self.actions[1] == "confirm"
        if right and confirmed:
            return EnvResult("success", 1.0, {"picked": self.actions[0]})
        if not right and not confirmed:
            return EnvResult("partial", 0.5, {"picked": self.actions[0]})
        return EnvResult("failure", 0.0, {"picked": self.actions[0]})

    async def close(self) -> None:
        pass


class BeaconHost:
    def __init__(self, settings: RunnerSettings) -> None:
        self.opened = 0

    async def open(self, task: BeaconTask, *, seed: int, max_steps: int) -> BeaconEnv:
        self.opened += 1
        return BeaconEnv(task)

    def task_info(self, task: BeaconTask) -> dict[str, str]:
        return {"colour": task.colour}

    async def aclose(self) -> None:
        pass


BEACON = EnvSpec(
    name="beacon",
    tasks=TaskKind("beacon", BeaconTask, beacon_id),
    host=BeaconHost,
    settings=RunnerSettings,
    description="a test environment: pick the beacon's colour, then confirm",
    ack_wait_s=30.0,
)
registry.register(BEACON)  # the one line that adds an environment


# -- pure: the loop and the registry ----------------------------------------------------------------


def test_the_adapters_satisfy_the_protocol() -> None:
    assert isinstance(BeaconEnv(beacon("red")), Environment)
    from aios_rl.envs.orchestrator.adapter import OrchestratorEnv
    from aios_rl.envs.orchestrator.tasks import generate

    assert isinstance(OrchestratorEnv(generate(1)[0], max_steps=12), Environment)
    assert {"shell", "orchestrator", "beacon"} <= set(registry.names())
    assert registry.get("shell").tasks.type.SCHEMA == "shell_task.v1"


def test_registry_refuses_unknown_and_conflicting_names() -> None:
    with pytest.raises(registry.UnknownEnvironmentError, match=r"known are .*beacon"):
        registry.get("nope")
    assert registry.register(BEACON) is BEACON  # the same spec again: a no-op
    other = EnvSpec(name="beacon", tasks=BEACON.tasks, host=BeaconHost, settings=RunnerSettings)
    with pytest.raises(ValueError, match="already registered"):
        registry.register(other)
    with pytest.raises(ValueError, match="same name"):
        EnvSpec(name="other", tasks=BEACON.tasks, host=BeaconHost, settings=RunnerSettings)


@dataclass
class FakePolicy:
    """Answers ``pick`` first, then ``then``; records what it was asked."""

    pick: str
    then: str = "confirm"
    checkpoint: str = "ckpt-a"

    def __post_init__(self) -> None:
        self.asked: list[ActRequest] = []

    async def __call__(self, req: ActRequest) -> ActResponse:
        self.asked.append(req)
        action = self.pick if req.step == 0 else self.then
        return ActResponse(
            action=action,
            action_index=req.candidates.index(action),
            logprob=-0.5,
            entropy=0.7,
            checkpoint_id=self.checkpoint,
            hidden=[0.25, -1.0] if req.want_hidden else [],
            top1_prob=0.6,
            margin=0.25,
        )


def job(**kw: object) -> RolloutJob:
    base = {"job_id": "j", "episode_id": "e", "environment": "beacon", "task_id": "t"}
    return RolloutJob(**{**base, **kw})  # type: ignore[arg-type]


async def test_loop_asks_the_policy_each_step_pinned_to_the_first_checkpoint() -> None:
    env, policy = BeaconEnv(beacon("green")), FakePolicy("green")
    regime = DecodingRegime(temperature=0.7, top_p=0.9)
    steps: list = []
    ckpt = await run_steps(
        env, job(seed=5, regime=regime, want_hidden=True), policy, steps, max_steps=4
    )
    assert ckpt == "ckpt-a" and env.result().outcome == "success"
    assert [s.action for s in steps] == ["green", "confirm"]
    assert [r.checkpoint_id for r in policy.asked] == ["active", "ckpt-a"]
    assert [r.seed for r in policy.asked] == [step_seed(5, 0), step_seed(5, 1)]
    assert all(r.regime == regime and r.want_hidden for r in policy.asked)
    assert steps[0].hidden == [0.25, -1.0] and steps[0].entropy == 0.7
    assert (steps[1].top1_prob, steps[1].margin) == (0.6, 0.25)
    assert steps[0].candidates == list(COLOURS) and steps[1].observation.startswith("you picked")
    assert not any(s.replayed for s in steps)


async def test_loop_replays_the_prefix_then_samples() -> None:
    env, policy = BeaconEnv(beacon("blue")), FakePolicy("red", then="retract")
    steps: list = []
    ckpt = await run_steps(env, job(prefix=["red"], checkpoint_id="c9"), policy, steps, max_steps=4)
    assert [s.replayed for s in steps] == [True, False]
    assert [r.step for r in policy.asked] == [1]
    assert steps[0].action_index == COLOURS.index("red") and steps[0].logprob == 0.0
    assert env.result().outcome == "partial" and ckpt == "ckpt-a"
    # The same prefix replayed on a fresh episode reaches the same state.
    fresh = BeaconEnv(beacon("blue"))
    seen = await replay_prefix(fresh, ["red"])
    assert seen == [(steps[0].observation, steps[0].candidates)]
    assert fresh.observation == steps[1].observation


async def test_loop_keeps_the_progress_an_environment_measures() -> None:
    class Measured(BeaconEnv):
        """Progress: +1 for picking the beacon's colour, -1 for retracting a right pick."""

        progress = 0.0

        async def step(self, action: str) -> None:
            if not self.actions:
                self.progress = 1.0 if action == self.task.colour else 0.0
            else:
                right = self.actions[0] == self.task.colour
                self.progress = -1.0 if right and action == "retract" else 0.0
            await super().step(action)

    steps: list = []
    await run_steps(
        Measured(beacon("red")), job(), FakePolicy("red", "retract"), steps, max_steps=4
    )
    assert [s.progress for s in steps] == [1.0, -1.0]
    plain: list = []  # an environment that measures none: every step 0
    await run_steps(
        BeaconEnv(beacon("red")), job(), FakePolicy("red", "retract"), plain, max_steps=4
    )
    assert [s.progress for s in plain] == [0.0, 0.0]


async def test_loop_stops_an_environment_that_never_ends() -> None:
    class Endless(BeaconEnv):
        @property
        def done(self) -> bool:
            return False

        @property
        def candidates(self) -> list[str]:
            return ["red"]

    steps: list = []
    with pytest.raises(StepLimitError, match="3 steps"):
        await run_steps(Endless(beacon("red")), job(), FakePolicy("red", "red"), steps, max_steps=3)
    assert len(steps) == 3  # what was done is kept


# -- through the real runner, sampler and pipeline ---------------------------------------------------


async def test_a_third_environment_runs_through_the_runner_sampler_and_pipeline(
    bus: Bus, nats_url: str, names: Names
) -> None:
    common = {"nats_url": nats_url, "namespace": names.namespace}
    trainer_svc, trainer = build_trainer(bus, TrainerServiceSettings(**common))
    await trainer.ensure_initial()
    await provision_runner(bus, BEACON)  # its consumer: the stack's topology does not know it
    runner_svc, runner = build_runner(bus, BEACON, RunnerSettings(env="beacon", **common))
    services = [
        build_sampler(bus, SamplerSettings(**common))[0],
        runner_svc,
        build_gateway(bus, GatewayServiceSettings(**common))[0],
        build_oracle(bus, OracleSettings(**common))[0],
        build_reward(bus, RewardSettings(**common)),
        build_comparison(bus, ComparisonSettings(**common)),
        build_replay(bus, ReplaySettings(**common)),
    ]
    tasks = [beacon(c) for c in COLOURS]
    await registry.task_store(bus, "beacon").put_all(tasks)

    compared: dict[str, Episode] = {}
    done = asyncio.Event()
    jobs = [
        RolloutJob(
            job_id=f"j{i}",
            episode_id=f"b{i}",
            environment="beacon",
            task_id=tasks[i % 3].task_id,
            seed=i,
            prefix=["red"] if i == 5 else [],
            want_hidden=True,
        )
        for i in range(6)
    ]
    jobs.append(RolloutJob(job_id="jx", episode_id="bx", environment="beacon", task_id="f" * 16))

    async def on_compared(msg, raw) -> None:
        if isinstance(msg, Episode):
            compared[msg.episode_id] = msg
            if len(compared) == len(jobs):
                done.set()

    await bus.subscribe(names.episode("compared", "beacon"), on_compared)
    async with contextlib.AsyncExitStack() as stack:
        for svc in services:
            svc.fetch_timeout_s = 0.2
            await stack.enter_async_context(running(svc))
        for j in jobs:
            await bus.publish_durable(names.rollout_job("beacon"), j, msg_id=j.job_id)
        await asyncio.wait_for(done.wait(), 60)
    del trainer_svc

    by_id = {t.task_id: t for t in tasks}
    for j in jobs[:-1]:
        ep = compared[j.episode_id]
        assert ep.environment == "beacon" and len(ep.trajectory) == 2
        picked, answer = (s.action for s in ep.trajectory)
        expected = BeaconEnv(by_id[j.task_id])
        expected.actions = [picked, answer]
        assert (ep.outcome, ep.env_reward) == (expected.result().outcome, expected.result().reward)
        assert ep.info["colour"] == by_id[j.task_id].colour and ep.info["picked"] == picked
        assert ep.reward is not None and ep.comparison is not None  # rewarded, then compared
        assert set(ep.timings.stages) >= {"completed", "taught", "rewarded", "compared"}
        sampled = [s for s in ep.trajectory if not s.replayed]
        assert all(s.hidden for s in sampled), "want_hidden: the sampler's projection is kept"
        assert all(0 < s.margin <= s.top1_prob <= 1 for s in sampled), "the sampler's confidence"
        assert ep.trajectory[-1].step_reward == ep.env_reward
    assert [s.replayed for s in compared["b5"].trajectory] == [True, False]
    assert compared["b5"].trajectory[0].action == "red"
    assert compared["bx"].outcome == "blocked"
    assert "no beacon task" in compared["bx"].info["error"]
    assert runner.episodes == len(jobs)


def test_a_blocked_episodes_error_names_its_kind_and_is_cut() -> None:
    """One wording for every blocked episode (the runner's loop and a driven session): the kind,
    the exception's type for an environment's crash, at most ``ERROR_CHARS`` characters."""
    assert blocked_error("environment", ValueError("bad")) == "environment: ValueError: bad"
    assert blocked_error("policy", RuntimeError("refused")) == "policy: refused"
    long = blocked_error("task", KeyError("x" * 2000))
    assert len(long) == ERROR_CHARS and long.startswith("task: 'xxx")
