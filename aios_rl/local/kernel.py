"""The product's loop in one process: rollout jobs through the runner's episode function,
epochs planned by the campaign's planner, updates by the trainer's step.

Nothing here is a copy: :func:`run_jobs` runs each job with
:func:`aios_rl.envs.runner.run_episode` (the runner service's body) on the environments' real
hosts; :func:`collect_epoch` plans rounds with :mod:`aios_rl.rollouts.epoch` (the campaign
service's planner) and, for the RAIL strategies, a :class:`LocalRail` controller driven as the
RAIL service drives it (:mod:`aios_rl.rail.plan`); :func:`train_epoch` is
:func:`aios_rl.student.train.train_step` (the trainer service's update). What the bus adds on
the stack -- durability, de-duplication, the teacher, reward and comparison stages -- is left
out; a ``teach`` function stands in for the teacher when a benchmark wants hints.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from contracts import (
    BranchOrder,
    CampaignSpec,
    CampaignState,
    DecodingRegime,
    Episode,
    EpochVerdict,
    GroupContrast,
    RailDecisions,
    RailTrace,
    RolloutAccount,
    RolloutJob,
    RolloutSummary,
    TrainerSettings,
    job_max_steps,
)

from ..comparison import TaskStats, add_episode, decide_epoch, epoch_verdict, verdict_request
from ..envs import registry
from ..envs.base import EnvironmentHost
from ..envs.runner import RunnerSettings, run_episode
from ..rail.controller import Controller
from ..rail.plan import decision_orders, realized_traces, round_asks
from ..rollouts import RAIL, account_add, group_contrasts, summarize, tied
from ..rollouts.epoch import (
    epoch_groups,
    next_round,
    plan_jobs,
    plan_next,
    rollouts_before,
    sample_tasks,
)
from ..state.tasks import UnknownTaskError
from ..student import load_student
from ..student.base import StudentBackend
from ..student.train import OptimizerMemory, train_step, update_config
from .policy import LocalPolicy

__all__ = [
    "EVAL_REGIME",
    "EpochReport",
    "EpochRollouts",
    "Gate",
    "LocalRail",
    "Rollouts",
    "collect_epoch",
    "eval_jobs",
    "runner_settings",
    "train_epoch",
    "train_epochs",
]

EVAL_REGIME = DecodingRegime(temperature=0.1)
"""Near-greedy: how held-out tasks are scored (one seeded episode per task)."""


class Rollouts:
    """Runs rollout jobs in this process: per environment a host, every task by id, one
    policy; ``workers`` episodes of each environment at a time (one number for all, or one per
    environment; the student's calls are serialised by the event loop, the environments' work
    overlaps). Each environment's step limit is its runner's (``settings``, else the host's own
    settings, else the registry's defaults).

    ``attempts``: how many times an episode runs when its environment crashed (a ``blocked``
    episode whose error is the environment's, e.g. a page that did not load in time under
    load); the same job again gives the same decisions, so a retry only replaces a crash.
    Retried jobs are listed in ``retries``.

    :meth:`open` makes the hosts from the environment registry and closes them at exit."""

    def __init__(
        self,
        hosts: Mapping[str, EnvironmentHost[Any]],
        tasks: Mapping[str, Any],
        policy: LocalPolicy,
        *,
        workers: int | Mapping[str, int] = 2,
        settings: Mapping[str, RunnerSettings] | None = None,
        attempts: int = 1,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}.")
        self.hosts = dict(hosts)
        self.tasks = dict(tasks)
        self.policy = policy
        self.slots = {
            env: asyncio.Semaphore(workers if isinstance(workers, int) else workers.get(env, 2))
            for env in self.hosts
        }
        self.attempts = attempts
        self.retries: list[str] = []
        self.settings: dict[str, RunnerSettings] = {
            env: (settings or {}).get(env)
            or getattr(host, "settings", None)
            or runner_settings(env)
            for env, host in self.hosts.items()
        }
        """Per environment, the runner settings whose step limit applies (given, the host's,
        or the registry's defaults)."""
        self.episodes = 0

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        environments: Mapping[str, RunnerSettings | None] | Sequence[str],
        tasks: Mapping[str, Any],
        policy: LocalPolicy,
        *,
        workers: int | Mapping[str, int] = 2,
    ) -> AsyncIterator[Rollouts]:
        """Rollouts on a host per environment, each made from its runner settings (the
        registry's defaults for a name alone), closed at exit."""
        wanted = (
            dict(environments) if isinstance(environments, Mapping) else dict.fromkeys(environments)
        )
        settings = {env: s or runner_settings(env) for env, s in wanted.items()}
        hosts: dict[str, EnvironmentHost[Any]] = {}
        try:
            for env, s in settings.items():
                hosts[env] = registry.get(env).host(s)
            yield cls(hosts, tasks, policy, workers=workers, settings=settings)
        finally:
            for host in hosts.values():
                await host.aclose()

    async def task(self, task_id: str, environment: str = "kernel") -> Any:
        """The task of ``task_id``. Raises ``UnknownTaskError`` when the kernel was not given it."""
        try:
            return self.tasks[task_id]
        except KeyError:
            raise UnknownTaskError(environment, task_id) from None

    async def run_one(self, job: RolloutJob) -> Episode:
        """One job's episode (``run_episode``: blocked when it cannot run)."""
        host = self.hosts.get(job.environment)
        if host is None:
            raise KeyError(f"no {job.environment} host in this kernel (has {sorted(self.hosts)})")
        for attempt in range(1, self.attempts + 1):
            async with self.slots[job.environment]:
                ep = await run_episode(
                    host,
                    job,
                    functools.partial(self.task, environment=job.environment),
                    self.policy.act,
                    max_steps=self.settings[job.environment].max_steps,
                )
            crashed = ep.outcome == "blocked" and ep.info.get("error", "").startswith(
                "environment:"
            )
            if not crashed or attempt == self.attempts:
                break
            self.retries.append(f"{job.episode_id}: {ep.info['error'][:120]}")
        self.episodes += 1
        return ep

    async def run(self, jobs: Sequence[RolloutJob]) -> list[Episode]:
        """Every job's episode, in the jobs' order."""
        return list(await asyncio.gather(*(self.run_one(j) for j in jobs)))


def runner_settings(env: str, **fields: Any) -> RunnerSettings:
    """The runner settings of ``env`` (its registry entry's class) with its defaults, no NATS."""
    return registry.get(env).settings(env=env, nats_url="", **fields)  # type: ignore[no-any-return]


def eval_jobs(
    tasks: Sequence[Any],
    environment: str | Callable[[Any], str],
    tag: str,
    *,
    checkpoint_id: str = "active",
    seed_base: int = 7_000,
    regime: DecodingRegime = EVAL_REGIME,
    split: str = "heldout",
) -> list[RolloutJob]:
    """One near-greedy job per task, seeded by the task's position (``seed_base + i``): the
    same tasks and tag give the same jobs, so two students are scored on the same episodes'
    seeds."""
    env_of = environment if callable(environment) else (lambda _t: environment)
    return [
        RolloutJob(
            job_id=f"{tag}{i}",
            episode_id=f"{tag}{i}",
            environment=env_of(t),  # type: ignore[arg-type]
            task_id=t.task_id,
            checkpoint_id=checkpoint_id,
            seed=seed_base + i,
            regime=regime,
            split=split,
            max_steps=job_max_steps(env_of(t)),
        )
        for i, t in enumerate(tasks)
    ]


@dataclass
class LocalRail:
    """A RAIL controller driven in this process as the RAIL service drives it: it decides each
    round's branches and learns from the traces each round realizes."""

    controller: Controller
    traces: list[RailTrace] = field(default_factory=list)
    """Every trace it learned from, in order."""
    decided: list[tuple[CampaignState, list[Any], list[RailDecisions]]] = field(
        default_factory=list
    )
    """(state, requests, answers) of every round it decided."""
    seconds: float = 0.0
    """Spent deciding and learning (refits included)."""

    def observe(self, traces: Sequence[RailTrace]) -> None:
        started = time.perf_counter()
        for t in traces:
            self.controller.observe(t)
            self.traces.append(t)
        self.seconds += time.perf_counter() - started

    def plan(
        self, state: CampaignState, summaries: Mapping[str, RolloutSummary]
    ) -> tuple[list[BranchOrder], list[str]] | None:
        """The next round's orders (the campaign's ``_plan_rail`` with the controller asked
        directly), ``None`` when it branches nowhere or the rounds are used up."""
        asks = round_asks(state, summaries)
        if asks is None:
            return None
        started = time.perf_counter()
        answers = [self.controller.decide(req) for _, _, req in asks]
        self.seconds += time.perf_counter() - started
        self.decided.append((state, list(asks), answers))
        orders = decision_orders(state.round + 1, asks, answers, state.orders)
        return (orders, []) if orders else None


@dataclass
class EpochRollouts:
    """What one epoch's collection produced."""

    state: CampaignState
    """The epoch's final state: its tasks, rounds and orders."""
    episodes: list[Episode]
    """Every episode, rollouts and reference runs, in the order they ran."""
    dropped: set[str]
    """Groups left out of the update (``dapo-filter``: every reward tied)."""

    @property
    def rollouts(self) -> list[Episode]:
        return [e for e in self.episodes if e.role == "rollout"]

    @property
    def kept(self) -> list[Episode]:
        """The rollouts the update learns from."""
        return [e for e in self.rollouts if e.group_id not in self.dropped]

    def contrasts(self) -> list[GroupContrast]:
        """Each group's reward contrast before and after its branches (``group_contrasts``)."""
        return group_contrasts((summarize(e) for e in self.rollouts), dropped=self.dropped)

    def verdict(self, *, resamples: int = 2000, seed: int = 0) -> EpochVerdict:
        """The comparison service's epoch verdict on these episodes: the rollouts (candidate)
        against the reference runs on the same tasks, per task mean reward, sign test and
        bootstrap, the per-environment veto (:func:`aios_rl.comparison.epoch_verdict`). The
        reward compared is the episode's (the environment's when no stage fused another)."""
        req = verdict_request(self.state)
        sides: dict[str, dict[str, TaskStats]] = {"rollout": {}, "reference": {}}
        for ep in self.episodes:
            side = sides.get(ep.role)
            if side is None:
                continue
            if ep.reward is None:
                ep = msgspec.structs.replace(ep, reward=ep.env_reward)
            side[ep.task_id] = add_episode(side.get(ep.task_id), ep, now=0.0)
        return epoch_verdict(
            req,
            sides["rollout"].values(),
            sides["reference"].values(),
            resamples=resamples,
            seed=seed,
        )

    def account(self, strategy: str) -> RolloutAccount:
        """The epoch's rollout accounting (base rollouts, continuations, steps, calls)."""
        acc = RolloutAccount(strategy=strategy)
        for ep in self.rollouts:
            acc = account_add(acc, ep)
        return acc


@dataclass
class Gate:
    """The campaign's comparison gate in this process, around ``policy``'s active student: each
    epoch's reference runs play the weights before the last update (``reference()``), the
    epoch's verdict and the campaign's decision (``decide_epoch``) follow (``judge``), and a
    rollback puts the weights before the update (or the last stable ones, after
    ``degradation_streak_limit`` degradations in a row) back in the policy, as the campaign
    moves its pointers. Needs ``spec.reference_runs`` > 0 to judge anything."""

    spec: CampaignSpec
    policy: LocalPolicy
    pre: bytes | None = None
    """The weights before the last update, while that update is being judged."""
    stable: bytes = b""
    """The last stable weights (``last_stable``); the policy's at the start."""
    degradation_streak: int = 0
    stable_streak: int = 0
    decisions: list[dict[str, Any]] = field(default_factory=list)
    """Every epoch's verdict and decision, in order."""

    PRE = "pre_update_ref"

    def __post_init__(self) -> None:
        if not self.stable:
            self.stable = self.policy.model.to_bytes()

    def reference(self) -> str | None:
        """The checkpoint this epoch's reference runs play (``None``: the candidate itself,
        when no update is being judged)."""
        if self.pre is None:
            return None
        self.policy.add(self.PRE, load_student(self.pre))
        return self.PRE

    def judge(self, got: EpochRollouts, *, seed: int = 0) -> bool:
        """Decide on the epoch ``got`` collected; returns whether to train on it. A rollback
        replaces the policy's active student (read ``policy.model`` again)."""
        verdict = got.verdict(seed=seed)
        plan = decide_epoch(
            verdict.verdict,
            degradation_streak=self.degradation_streak,
            stable_streak=self.stable_streak,
            spec=self.spec,
            first=self.pre is None,  # the candidate is its own reference: nothing to judge
        )
        self.degradation_streak, self.stable_streak = plan.degradation_streak, plan.stable_streak
        self.decisions.append(
            {
                "epoch": got.state.epoch,
                "verdict": verdict.verdict,
                "decision": plan.decision,
                "vetoed_by": list(verdict.vetoed_by),
                "mean_delta": verdict.mean_delta,
            }
        )
        if plan.decision.startswith("rollback"):
            back = self.pre if plan.decision == "rollback_pre_update" else self.stable
            assert back is not None
            self.policy.add(self.policy.active, load_student(back), active=True)
        elif plan.decision == "promote":
            self.stable = self.policy.model.to_bytes()
        self.pre = None
        return plan.train

    def before_update(self) -> None:
        """Keep the weights the coming update starts from (the next epoch's reference)."""
        self.pre = self.policy.model.to_bytes()


async def collect_epoch(
    spec: CampaignSpec,
    epoch: int,
    available: Mapping[str, Sequence[str]],
    run: Callable[[list[RolloutJob]], Awaitable[list[Episode]]],
    *,
    candidate: str,
    reference: str | None = None,
    rail: LocalRail | None = None,
    sample: Callable[[CampaignSpec, int, Mapping[str, Sequence[str]]], list[str]] | None = None,
) -> EpochRollouts:
    """Every episode of one epoch, round by round, as the campaign service collects it: round 0
    runs the sampled tasks' base rollouts (and ``reference_runs`` under ``reference``), then the
    strategy plans round after round from what came back until it plans nothing. ``available``:
    the split's task ids per environment; ``run``: runs a round's jobs (e.g.
    :meth:`Rollouts.run`). ``candidate``: the checkpoint id the rollouts run, a concrete one (as
    the campaign service's jobs carry), so an episode blocked before the policy answered is
    named like its task's other episodes and the epoch's verdict compares them. A RAIL strategy
    needs ``rail``. ``sample`` draws the epoch's tasks (``None``: the campaign's
    ``sample_tasks``; a diagnostic may draw them otherwise). Raises ``ValueError`` for a RAIL
    strategy without one."""
    if spec.rollout_strategy in RAIL and rail is None:
        raise ValueError(f"strategy {spec.rollout_strategy!r} needs a RAIL controller (rail=)")
    tasks = (sample or sample_tasks)(spec, epoch, available)
    state = CampaignState(
        spec=spec,
        epoch=epoch,
        tasks=tasks,
        base_tasks=len(tasks),
        candidate=candidate,
        reference=reference or candidate,
    )
    arrived: dict[str, Episode] = {}
    summaries: dict[str, RolloutSummary] = {}
    while True:
        jobs = plan_jobs(spec, state, deadline=0.0, parents=summaries)
        for ep in await run(jobs):
            arrived[ep.episode_id] = ep
            if ep.role == "rollout":
                summaries[ep.episode_id] = summarize(ep)
        if rail is not None:
            if state.round:
                rail.observe(
                    realized_traces(
                        spec,
                        epoch=epoch,
                        rnd=state.round,
                        orders=state.orders,
                        tasks=state.tasks,
                        before=rollouts_before(spec, state, state.round),
                        summaries=summaries,
                        at=time.time(),
                    )
                )
            nxt = rail.plan(state, summaries)
        else:
            nxt = plan_next(state, summaries, available)
        if nxt is None:
            break
        orders, new_tasks = nxt
        state = next_round(state, orders=orders, tasks=new_tasks, at=time.time())
    groups = epoch_groups(state, summaries)
    dropped = (
        {g.group_id for g in groups if tied(g)} if spec.rollout_strategy == "dapo-filter" else set()
    )
    return EpochRollouts(state=state, episodes=list(arrived.values()), dropped=dropped)


def train_epoch(
    model: StudentBackend,
    episodes: Sequence[Episode],
    settings: TrainerSettings,
    *,
    reference: StudentBackend | None = None,
    teach: Callable[[Episode], Episode] | None = None,
    memory: OptimizerMemory | None = None,
) -> dict[str, float]:
    """One trainer update of ``model`` in place on an epoch's fresh rollouts (the trainer
    service's ``train_step`` with the campaign's trainer settings), each first passed through
    ``teach`` (hints, as the teacher gateway adds them) when given. ``reference`` (default: a
    copy of the weights before the update) is the KL target. ``memory`` keeps Adam's moments
    across updates when the settings ask for it (``warm_optimizer``), as the trainer service
    does. Returns the update's metrics with
    ``samples``. Raises what ``train_step`` raises (``EmptyBatchError``, ``DivergedError``)."""
    taught = [teach(e) for e in episodes] if teach is not None else list(episodes)
    ref = reference if reference is not None else load_student(model.to_bytes())
    metrics, samples = train_step(
        model,
        ref,
        taught,
        update_config(settings),
        memory=memory if settings.warm_optimizer else None,
    )
    return {**metrics, "samples": float(samples)}


@dataclass
class EpochReport:
    """One epoch of :func:`train_epochs`: what was collected, what the gate said, what the update
    did."""

    epoch: int
    collected: EpochRollouts
    success: float
    """The share of the epoch's kept rollouts that succeeded (the environment's outcome)."""
    decision: dict[str, Any] | None
    """The gate's verdict and decision (:attr:`Gate.decisions`); ``None`` without a gate."""
    metrics: dict[str, float] | None
    """The update's metrics; ``None`` when the gate rolled the last update back (no update)."""
    rollouts_s: float
    update_s: float

    @property
    def trained(self) -> bool:
        return self.metrics is not None


async def train_epochs(
    spec: CampaignSpec,
    policy: LocalPolicy,
    available: Mapping[str, Sequence[str]],
    run: Callable[[list[RolloutJob]], Awaitable[list[Episode]]],
    epochs: int,
    *,
    gate: Gate | None = None,
    seed: int = 0,
    teach: Callable[[Episode], Episode] | None = None,
    memory: OptimizerMemory | None = None,
) -> AsyncIterator[EpochReport]:
    """The campaign's loop for ``epochs`` epochs, one :class:`EpochReport` yielded per epoch:
    each epoch collected (:func:`collect_epoch`; its reference runs play ``gate.reference()``),
    judged by ``gate`` when given (a rollback skips the epoch's update), then one update of
    ``policy``'s active student on the kept rollouts (:func:`train_epoch`, each passed through
    ``teach`` when given; ``memory`` keeps Adam's moments when ``spec.trainer`` asks for it, a
    fresh one when ``None``). The gate's verdict is seeded ``seed * 1000 + epoch``."""
    memory = memory if memory is not None else OptimizerMemory()
    for epoch in range(epochs):
        started = time.perf_counter()
        reference = gate.reference() if gate is not None else None
        got = await collect_epoch(
            spec, epoch, available, run, candidate=policy.active, reference=reference
        )
        rollouts_s = time.perf_counter() - started
        kept = got.kept
        rate = sum(ep.outcome == "success" for ep in kept) / len(kept) if kept else 0.0
        decision = None
        if gate is not None:
            train = gate.judge(got, seed=seed * 1000 + epoch)
            decision = gate.decisions[-1]
            if not train:
                yield EpochReport(epoch, got, rate, decision, None, rollouts_s, 0.0)
                continue
            gate.before_update()
        # No episode runs now: the update has the student to itself.
        started = time.perf_counter()
        metrics = train_epoch(policy.model, kept, spec.trainer, teach=teach, memory=memory)
        yield EpochReport(
            epoch, got, rate, decision, metrics, rollouts_s, time.perf_counter() - started
        )
