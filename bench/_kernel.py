"""What the training benchmarks share on top of the in-process kernel (``aios_rl.local``): the
oracle teacher as the stand-in for the teacher stage (``taught``), held-out scoring
(``score``), a student's rollouts on a shell host of its own or on a host the caller keeps
(``shell_rollouts``, ``on_host``), a learning run (``Settings``, ``train_one``), and one strategy
arm's training run (``train_run``). The loop itself -- episodes, epochs, updates -- is the
kernel's; nothing here runs an episode."""

from __future__ import annotations

import contextlib
import random
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import torch

from aios_rl.bus import connect, provision
from aios_rl.envs.agentbench.db import load_db_tasks
from aios_rl.envs.agentbench.db_adapter import DbHost, DbRunnerSettings
from aios_rl.envs.base import EnvironmentHost
from aios_rl.envs.browser import generate as browser_split
from aios_rl.envs.browser.adapter import BrowserHost, BrowserRunnerSettings
from aios_rl.envs.orchestrator import generate as orchestrator_split
from aios_rl.envs.orchestrator.adapter import OrchestratorHost
from aios_rl.envs.shell.adapter import ShellHost
from aios_rl.envs.shell.episode import ShellEnvConfig
from aios_rl.envs.shell.generate import generate
from aios_rl.envs.shell.verify import RunCache, default_cache_dir
from aios_rl.local import (
    Gate,
    LocalPolicy,
    LocalRail,
    Rollouts,
    collect_epoch,
    credit_by_kind,
    eval_jobs,
    runner_settings,
    train_epoch,
    train_epochs,
)
from aios_rl.rollouts import account_add
from aios_rl.student import load_student, new_student
from aios_rl.student.base import StudentBackend
from bench import _common
from contracts import (
    AgentBenchDbTask,
    BrowserTask,
    CampaignSpec,
    DecodingRegime,
    Episode,
    GroupContrast,
    Names,
    OrchestratorTask,
    RolloutAccount,
    ShellTask,
    StepDigest,
    TeacherRequest,
    TrainerSettings,
    topology,
)
from services.reward.logic import reward_episode
from services.sites.main import build as build_sites
from services.sites.settings import SitesSettings
from services.teacher_oracle.logic import garble, judge, judge_browser, judge_orchestrator

__all__ = [
    "LM_BENCH_ENVS",
    "LM_TRAINER",
    "ORACLE",
    "ORACLE_DISTILL",
    "RolloutsFor",
    "Settings",
    "Task",
    "Teacher",
    "agentbench_db_file",
    "agentbench_db_splits",
    "environment_of",
    "on_host",
    "score",
    "shell_rollouts",
    "shell_splits",
    "spec_for",
    "taught",
    "train_one",
    "train_run",
]

Task = ShellTask | BrowserTask | OrchestratorTask | AgentBenchDbTask
RolloutsFor = Callable[[LocalPolicy], contextlib.AbstractAsyncContextManager[Rollouts]]
"""Rollouts (the kernel's) of one student on its environment's host, for the length of a run."""


def environment_of(task: Task) -> str:
    """The environment a built-in task belongs to."""
    match task:
        case ShellTask():
            return "shell"
        case BrowserTask():
            return "browser"
        case OrchestratorTask():
            return "orchestrator"
        case AgentBenchDbTask():
            return "agentbench_db"
    raise TypeError(f"not a built-in task: {type(task).__name__}")


def request_for(ep: Episode, task: Task) -> TeacherRequest:
    """The request the teacher gateway would send for ``ep`` (an orchestrator task's statement
    is its work item's request)."""
    return TeacherRequest(
        request_id=ep.episode_id,
        episode_id=ep.episode_id,
        environment=ep.environment,
        task_id=task.task_id,
        task_statement=task.request if isinstance(task, OrchestratorTask) else task.statement,
        steps=[
            StepDigest(
                index=s.index, observation=s.observation, action=s.action, candidates=s.candidates
            )
            for s in ep.trajectory
        ],
        outcome=ep.outcome,
    )


def taught(ep: Episode, task: Task, *, accuracy: float = 1.0, seed: int = 0) -> Episode:
    """``ep`` with the oracle teacher's signal (hints), as the teacher gateway would add it:
    ``judge`` for shell, ``judge_browser`` for the browser (by the task's path: a MiniWoB++
    task has one once ``BrowserHost.solve`` computed it),
    ``judge_orchestrator`` for the orchestrator; below ``accuracy`` 1, the ``noisy-oracle``'s
    (each hint and verdict wrong with probability ``1 - accuracy``, fixed by ``seed``)."""
    req = request_for(ep, task)
    match task:
        case ShellTask():
            signal = judge(req, task)
        case BrowserTask():
            signal = judge_browser(req, task)
        case OrchestratorTask():
            signal = judge_orchestrator(req, task)
    if accuracy < 1.0:
        signal = garble(signal, req, accuracy=accuracy, seed=seed)
    return msgspec.structs.replace(ep, teacher_signal=signal)


@dataclass(frozen=True)
class Teacher:
    """What a training run's teacher contributes (each signal named, as the stack names it)."""

    accuracy: float | None = 1.0
    """The oracle's accuracy (1: it knows every answer; below: the noisy oracle); ``None``: no
    teacher judges at all."""
    shaping: float = 0.0
    """Weight of the teacher's score fused into the reward (the reward service's
    ``teacher_weight``, clipped at 0.5); 0: the reward is the environment's."""
    seed: int = 0
    """Fixes the noisy oracle's mistakes."""

    def __call__(self, ep: Episode, task: Task) -> Episode:
        if self.accuracy is None:
            return ep
        out = taught(ep, task, accuracy=self.accuracy, seed=self.seed)
        if self.shaping > 0:
            out = reward_episode(out, weight=self.shaping, clip=0.5, now=0.0)
        return out


ORACLE = Teacher()
"""The oracle's hints, reward unshaped: how the benchmarks on main were measured."""


async def score(
    rollouts: Rollouts, tasks: Sequence[Task], tag: str, profile: dict | None = None
) -> tuple[list[float], list[float]]:
    """Near-greedy success (1/0) and reward per held-out task, one episode each seeded by the
    task's position (the kernel's ``eval_jobs``); ``profile``, when given, receives what the
    episodes did (steps per episode, the share of each kind of action: ``credit_by_kind``; on
    site flows ``potential_mean``, how far along its flow an episode got)."""
    episodes = await rollouts.run(eval_jobs(tasks, environment_of, tag))
    if profile is not None:
        profile.update(
            {k: v for k, v in credit_by_kind(episodes).items() if not k.startswith("credit:")}
        )
        reached = [float(ep.info["potential"]) for ep in episodes if "potential" in ep.info]
        if reached:  # site flows: how far along its flow each episode got, on average
            profile["potential_mean"] = sum(reached) / len(reached)
    return (
        [1.0 if ep.outcome == "success" else 0.0 for ep in episodes],
        [ep.env_reward for ep in episodes],
    )


def shell_rollouts(
    tasks: Sequence[ShellTask], workers: int, config: ShellEnvConfig | None = None
) -> RolloutsFor:
    """Rollouts of a student on a shell host of its own (the runner's sandbox; ``config``: the
    episodes' configuration when an ablation changes it), closed after the run."""

    @contextlib.asynccontextmanager
    async def rollouts_for(policy: LocalPolicy) -> AsyncIterator[Rollouts]:
        host = ShellHost(runner_settings("shell"), config=config)
        try:
            yield Rollouts({"shell": host}, {t.task_id: t for t in tasks}, policy, workers=workers)
        finally:
            await host.aclose()

    return rollouts_for


def on_host(
    host: EnvironmentHost[Any], env: str, tasks: Sequence[Task], workers: int
) -> RolloutsFor:
    """Rollouts of a student on a host the caller keeps open (Chromium, the orchestrator)."""

    @contextlib.asynccontextmanager
    async def rollouts_for(policy: LocalPolicy) -> AsyncIterator[Rollouts]:
        yield Rollouts({env: host}, {t.task_id: t for t in tasks}, policy, workers=workers)

    return rollouts_for


async def train_run(
    spec: CampaignSpec,
    weights: bytes,
    rollouts_for: RolloutsFor,
    tasks: Mapping[str, Task],
    heldout: Sequence[Task],
    log: Callable[[str], None],
    *,
    name: str,
    mid_epoch: int,
    rail: LocalRail | None = None,
    teacher: bool = True,
) -> dict:
    """One training run of ``spec.epochs`` epochs from ``weights`` (a strategy benchmark's arm):
    each epoch collected by the kernel as the campaign collects it (``collect_epoch``: round 0,
    then the strategy's rounds -- ``rail``'s for the RAIL strategies -- until it plans none),
    every kept rollout taught by the oracle (``teacher`` off: by none), one trainer update
    (``train_epoch``; none when every group of a ``dapo-filter`` epoch tied); held-out success
    after ``mid_epoch`` epochs and at the end, the rollout accounting and the groups'
    contrasts."""
    torch.manual_seed(spec.seed)
    model = load_student(weights)
    available = {
        env: sorted(
            t
            for t, task in tasks.items()
            if environment_of(task) == env and task.split == spec.split
        )
        for env in spec.environments
    }
    account = RolloutAccount(strategy=spec.rollout_strategy)
    contrasts: list[GroupContrast] = []
    mid: list[float] = []
    rollouts_mid = 0
    curve: list[float] = []
    rounds = updates = new_tasks = 0
    wall = 0.0
    policy = LocalPolicy(model)
    async with rollouts_for(policy) as rollouts:
        for epoch in range(spec.epochs):
            started = time.perf_counter()
            got = await collect_epoch(
                spec, epoch, available, rollouts.run, candidate=policy.active, rail=rail
            )
            contrasts += got.contrasts()
            for ep in got.rollouts:
                account = account_add(account, ep)
            if got.kept:  # dapo-filter: no update when every group tied
                train_epoch(
                    model,
                    got.kept,
                    spec.trainer,
                    teach=(lambda ep: taught(ep, tasks[ep.task_id])) if teacher else None,
                )
                updates += 1
            wall += time.perf_counter() - started
            rounds += got.state.round
            new_tasks += len(got.state.tasks) - got.state.base_tasks
            episodes = got.rollouts
            rate = sum(ep.outcome == "success" for ep in episodes) / len(episodes)
            curve.append(rate)
            mode = f", controller {rail.controller.mode}" if rail is not None else ""
            log(
                f"seed {spec.seed} {name} epoch {epoch}: {len(episodes)} rollouts in "
                f"{got.state.round + 1} round(s), {rate:.0%} succeeded, "
                f"{len(got.dropped)} group(s) dropped{mode}"
            )
            if epoch + 1 == mid_epoch:
                mid, _ = await score(rollouts, heldout, f"mid-{name}-")
                rollouts_mid = account.base + account.continuations
        after, _ = await score(rollouts, heldout, f"after-{name}-")
    log(
        f"seed {spec.seed} {name}: held-out success mid {statistics.fmean(mid):.0%}, "
        f"after {statistics.fmean(after):.0%}"
    )
    return {
        "mid": mid,
        "after": after,
        "mid_epoch": mid_epoch,
        "rollouts_mid": rollouts_mid,
        "rollouts": account.base + account.continuations,
        "base": account.base,
        "continuations": account.continuations,
        "steps_sampled": account.steps_sampled,
        "steps_replayed": account.steps_replayed,
        "policy_calls": account.policy_calls,
        "contrast_before": statistics.fmean(c.before for c in contrasts),
        "contrast_after": statistics.fmean(c.after for c in contrasts),
        "groups": len(contrasts),
        "dropped": sum(c.dropped for c in contrasts),
        "new_tasks": new_tasks,
        "rounds": rounds,
        "updates": updates,
        "train_curve": curve,
        "wall_s": wall,
    }


@dataclass(frozen=True)
class Settings:
    """One learning benchmark run: a fresh student per seed trained on uniform GRPO groups."""

    seeds: tuple[int, ...]
    """Initial weights, task draws and update order of each run (one run per seed)."""
    epochs: int
    """Updates per run."""
    tasks_per_epoch: int
    """Train tasks an epoch draws (the campaign's ``sample_tasks``)."""
    group_size: int
    """Rollouts per task (one GRPO group)."""
    train_tasks: int
    """Size of the train split generated."""
    heldout_tasks: int
    """Size of the held-out split generated (one scoring episode each)."""
    learning_rate: float
    """Adam step size of every update."""
    workers: int = 2
    """Episodes run at once (the environments' work overlaps; the student's calls serialised)."""
    temperature: float = 1.0
    """Sampling temperature of the training rollouts (the campaign's regime); held-out
    scoring is near-greedy (0.1) whatever this is."""


LM_TRAINER = {"distill_coef": 0.0, "update_epochs": 1, "minibatch_size": 16}
"""The lm student's reward-only trainer (``bench/learning.py --student lm``, ``bench/rail.py
--student lm``). Reward only: no distillation toward teacher hints. One pass over each epoch's
samples in minibatches of 16 (proximal log-probs recomputed first): a decision's forward and
backward pass takes ~2.7 s on two cores at SmolLM2's ~180-token orchestrator prompts, so the
trainer's default four passes in minibatches of 64 took ~25 min an epoch and 20 GB. A step's 16
decisions pass through the model 4 at a time, gradients accumulated (the lm student's
``micro_batch_size``): a shell decision, a ~430-token prompt and a dozen candidate edits, holds
over a gigabyte of activations through its backward pass; 16 at once outgrew the machine's 24 GB
and the first shell run was OOM-killed."""

ORACLE_DISTILL = {"distill_coef": 0.5}
"""How the learning benchmarks on main were measured: the oracle's hints distilled at weight 0.5
(the trainer's default until distillation became opt-in). The oracle knows every answer, so a
gain under it is imitation of the answer key, not learning from reward."""


def spec_for(
    env: str, seed: int, s: Settings, trainer: dict | None = None, *, reference_runs: int = 0
) -> CampaignSpec:
    """The campaign a seed's training is: uniform GRPO groups of ``group_size`` at
    ``s.temperature`` on ``tasks_per_epoch`` train tasks an epoch (the campaign's ``sample_tasks``, seeded by
    (seed, epoch)), no reference runs, the trainer settings with ``s.learning_rate`` and
    :data:`ORACLE_DISTILL` unless ``trainer`` sets ``distill_coef``."""
    return CampaignSpec(
        campaign_id=f"learning-{env}-s{seed}",
        environments={env: 1.0},
        tasks_per_epoch=s.tasks_per_epoch,
        group_size=s.group_size,
        epochs=s.epochs,
        rollout_strategy="uniform",
        regime=DecodingRegime(temperature=s.temperature),
        trainer=TrainerSettings(
            learning_rate=s.learning_rate, seed=seed, **{**ORACLE_DISTILL, **(trainer or {})}
        ),
        split="train",
        seed=seed,
        reference_runs=reference_runs,
    )


async def train_one(
    seed: int,
    s: Settings,
    train: Sequence[Task],
    heldout: Sequence[Task],
    rollouts_for: RolloutsFor,
    log: Callable[[str], None],
    backend: str = "tiny",
    *,
    student: Callable[[int], StudentBackend] | None = None,
    trainer: dict | None = None,
    teacher: Teacher = ORACLE,
    gate: bool = False,
) -> dict:
    """Train a fresh student of ``backend`` (or ``student(seed)``) from scratch through the
    kernel -- each epoch collected as the campaign collects it (``collect_epoch``), every
    rollout passed through ``teacher`` (the oracle's hints by default; a noisy one, reward
    shaping, or none), one trainer update (``train_epoch``) -- and score it on ``heldout``
    before and after; ``trainer`` overrides fields of the campaign's ``TrainerSettings`` (the
    learning rate is ``s.learning_rate``).

    ``gate``: the campaign's comparison gate, as the stack runs it: each epoch also runs 2
    reference runs of every task under the weights before the last update, the epoch verdict
    (``EpochRollouts.verdict``: the task-level test and the per-environment degradation veto)
    and the campaign's decision (``decide_epoch``) follow; a rollback restores the weights
    before the update (or the last stable ones) and skips that epoch's update."""
    torch.manual_seed(seed)
    model = student(seed) if student is not None else new_student(backend, seed=seed)
    env = environment_of(train[0])
    spec = spec_for(env, seed, s, trainer, reference_runs=2 if gate else 0)
    by_id = {t.task_id: t for t in train}
    available = {env: sorted(by_id)}
    n = len(heldout)
    clock = {"rollouts_s": 0.0, "updates_s": 0.0}
    curve: list[float] = []
    updates: list[dict[str, float]] = []
    teach = None if teacher.accuracy is None else (lambda ep: teacher(ep, by_id[ep.task_id]))
    policy = LocalPolicy(model)
    judge = Gate(spec, policy) if gate else None
    async with rollouts_for(policy) as rollouts:
        started = time.perf_counter()
        profile: dict[str, dict[str, float]] = {"before": {}, "after": {}}
        before, reward_before = await score(rollouts, heldout, "before", profile["before"])
        clock["eval_before_s"] = time.perf_counter() - started
        log(f"seed {seed}: untrained held-out success {sum(before) / n:.0%}")
        reports = train_epochs(
            spec, policy, available, rollouts.run, s.epochs, gate=judge, seed=seed, teach=teach
        )
        async for r in reports:
            clock["rollouts_s"] += r.rollouts_s
            clock["updates_s"] += r.update_s
            curve.append(r.success)
            if r.metrics is None:
                assert r.decision is not None
                log(
                    f"seed {seed} epoch {r.epoch}: {r.decision['verdict']}, {r.decision['decision']}"
                )
                continue
            updates.append({"epoch": float(r.epoch), "train_success": r.success, **r.metrics})
            log(f"seed {seed} epoch {r.epoch}: train rollouts succeeded {r.success:.0%}")
        started = time.perf_counter()
        after, reward_after = await score(rollouts, heldout, "after", profile["after"])
        clock["eval_after_s"] = time.perf_counter() - started
    log(f"seed {seed}: trained held-out success {sum(after) / n:.0%}")
    return {
        "before": before,
        "after": after,
        "reward_before": reward_before,
        "reward_after": reward_after,
        "train_curve": curve,
        "heldout_profile": profile,
        "updates": updates,
        "gate": judge.decisions if judge else [],
        "seconds": clock,
    }


def shell_splits(
    train_tasks: int, heldout_tasks: int, log: Callable[[str], None]
) -> tuple[list[ShellTask], list[ShellTask]]:
    """The generated shell train and held-out splits (seed 0; verified test runs cached)."""
    cache = RunCache(default_cache_dir())
    log(f"generating {train_tasks} train and {heldout_tasks} held-out tasks (cached)")
    return (
        list(generate(train_tasks, 0, "train", cache=cache)),
        list(generate(heldout_tasks, 0, "heldout", cache=cache)),
    )


BENCH_ENVS = ("shell", "orchestrator", "browser-sites", "browser-miniwob")
"""The environments the learning benchmarks train on (the browser's two kinds apart)."""
LM_BENCH_ENVS = ("agentbench_db",)
"""Environments only a student that writes text acts on (free-text actions, no candidates):
AgentBench's DB bench, its dev split (``$AGENTBENCH_DIR``; see :func:`agentbench_db_splits`)."""


def agentbench_db_file() -> Path:
    """AgentBench DB's dev split, ``dbbench/dev.jsonl`` under :func:`_common.agentbench_dir`.
    Raises ``ValueError`` (one line) when it is not there."""
    path = _common.agentbench_dir() / "dbbench" / "dev.jsonl"
    if not path.is_file():
        raise ValueError(
            f"no AgentBench DB tasks at {path}: set AGENTBENCH_DIR to AgentBench's data folder"
        )
    return path


def agentbench_db_splits(
    train_tasks: int, heldout_tasks: int, log: Callable[[str], None]
) -> tuple[list[AgentBenchDbTask], list[AgentBenchDbTask]]:
    """AgentBench DB's dev split (the only one on this machine) cut in two disjoint parts: a
    seeded shuffle (seed 0) of its tasks, the first ``train_tasks`` labelled ``train``, the next
    ``heldout_tasks`` ``heldout``. Raises ``ValueError`` when the data is missing or too small."""
    path = agentbench_db_file()
    tasks = sorted(load_db_tasks(path, "dev"), key=lambda t: t.task_id)
    if train_tasks + heldout_tasks > len(tasks):
        raise ValueError(
            f"{path} holds {len(tasks)} tasks, fewer than {train_tasks} train + "
            f"{heldout_tasks} held-out"
        )
    random.Random(0).shuffle(tasks)
    train = [msgspec.structs.replace(t, split="train") for t in tasks[:train_tasks]]
    held = tasks[train_tasks : train_tasks + heldout_tasks]
    log(f"AgentBench DB dev: {len(train)} train and {len(held)} held-out of {len(tasks)} tasks")
    return train, [msgspec.structs.replace(t, split="heldout") for t in held]


async def env_splits(
    env: str, train_tasks: int, heldout_tasks: int, log: Callable[[str], None]
) -> tuple[list, list]:
    """The train and held-out tasks of ``env`` (seed 0): ``shell``, ``orchestrator``,
    ``browser-sites`` or ``browser-miniwob`` (a browser kind's alone; MiniWoB++'s train tasks with
    the oracle's paths, :func:`solved`), ``agentbench_db`` (:func:`agentbench_db_splits`).
    Raises ``ValueError`` for another name."""
    if env not in (*BENCH_ENVS, *LM_BENCH_ENVS):
        known = ", ".join((*BENCH_ENVS, *LM_BENCH_ENVS))
        raise ValueError(f"unknown environment {env!r} (known: {known})")
    if env == "agentbench_db":
        return agentbench_db_splits(train_tasks, heldout_tasks, log)
    if env == "shell":
        return shell_splits(train_tasks, heldout_tasks, log)
    if env == "orchestrator":
        return (
            orchestrator_split(train_tasks, seed=0, split="train"),
            orchestrator_split(heldout_tasks, seed=0, split="heldout"),
        )
    kind = "site" if env == "browser-sites" else "miniwob"
    # The browser splits are half of each kind: ask for twice as many, keep one kind.
    train = [t for t in browser_split.generate(2 * train_tasks, 0, "train") if t.kind == kind]
    held = [t for t in browser_split.generate(2 * heldout_tasks, 0, "heldout") if t.kind == kind]
    train = train[:train_tasks]
    if kind == "miniwob":  # the oracle teachers' answer key, train split only
        train = await solved(train, log)
    return train, held[:heldout_tasks]


async def solved(tasks: Sequence[BrowserTask], log: Callable[[str], None]) -> list[BrowserTask]:
    """``tasks`` (MiniWoB++) with the oracle's path of each one's page computed in Chromium
    (``BrowserHost.solve``): what the oracle and the noisy oracle judge the train rollouts by. A
    task the oracle cannot solve keeps an empty path (the teacher does not judge it)."""
    host = BrowserHost(BrowserRunnerSettings(nats_url="", screenshots=False))
    out: list[BrowserTask] = []
    try:
        for t in tasks:
            try:
                path = await host.solve(t)
            except Exception as exc:  # no oracle for it: the teacher leaves it alone
                log(f"no oracle path for {t.task_id}: {str(exc)[:120]}")
                path = []
            out.append(msgspec.structs.replace(t, solution=path))
    finally:
        await host.aclose()
    log(f"oracle paths computed for {sum(bool(t.solution) for t in out)} of {len(out)} tasks")
    return out


@contextlib.asynccontextmanager
async def env_hosts(
    env: str, tasks: Sequence[Task], workers: int, browser: tuple[tuple[str, Any], ...] = ()
) -> AsyncIterator[RolloutsFor]:
    """Rollouts for ``env``'s tasks: the shell sandbox, the orchestrator, or real Chromium with
    the sites service on an embedded nats-server (``browser``: other runner settings)."""
    if env == "shell":
        yield shell_rollouts(tasks, workers)  # type: ignore[arg-type]
        return
    if env == "orchestrator":
        yield on_host(OrchestratorHost(runner_settings("orchestrator")), env, tasks, workers)
        return
    if env == "agentbench_db":  # one MariaDB server, a database of its own per episode
        db = DbHost(DbRunnerSettings(nats_url=""))
        try:
            yield on_host(db, env, tasks, workers)
        finally:
            await db.aclose()
        return
    async with browser_host("aios-learning-rl-", browser) as host:
        yield on_host(host, "browser", tasks, workers)


@contextlib.asynccontextmanager
async def browser_host(
    prefix: str, browser: tuple[tuple[str, Any], ...] = ()
) -> AsyncIterator[BrowserHost]:
    """Real Chromium with the sites service on an embedded nats-server (its store under a
    temporary folder named ``prefix``...): a ``BrowserHost`` for MiniWoB++ pages and site flows
    alike, closed on the way out. ``browser``: other runner settings. A short action timeout (1
    s): a click under a cookie banner waits for it."""
    names = Names(f"bench{uuid.uuid4().hex[:10]}")
    with _common.nats_server(prefix) as server:
        async with connect(server.url, name=f"bench-{prefix.strip('-')}", names=names) as bus:
            await provision(bus, topology(names))
            sites, _ = build_sites(bus, SitesSettings(port=0))
            host = BrowserHost(
                BrowserRunnerSettings(
                    nats_url="", screenshots=False, action_timeout_s=1, **dict(browser)
                )
            )
            host.attach(bus)
            async with _common.running(sites):
                try:
                    yield host
                finally:
                    await host.aclose()
