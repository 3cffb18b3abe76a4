"""The ``Environment`` protocol: what every environment is to the one runner.

In the spirit of gym's and SkyRL-Gym's ``reset`` / ``step``, made async and fitted to our
contracts. An environment is two objects:

- an :class:`EnvironmentHost`, one per runner process, holding what episodes share (a sandbox,
  a browser, a work folder) and opening episodes: ``await host.open(task, seed=..., max_steps=...)``;
- an :class:`Environment`, one per episode: the current :attr:`~Environment.observation` and
  :attr:`~Environment.candidates` (empty: free text), ``await step(action)``, :attr:`done`,
  :meth:`result` once done, ``await close()``.

Optionally, an environment measures step-level progress: a float attribute ``progress``, what
the last step did toward solving the task (read after each ``step``; absent or 0: none). The
runner keeps it on the step (``TrajectoryStep.progress``) and the trainer can give each step
that credit on top of the episode's (``TrainerSettings.progress_coef``). Make it the change of a
potential of the state (what the final judgement would say of the state now), so the steps'
progress adds up to the final state's and cannot reward going round in circles.

Replaying an action prefix must reproduce the state exactly (branching depends on it): by
default the runner replays by stepping, so an environment's ``step`` must be deterministic given
the task, the seed and the actions so far. An environment whose steps are costly may override
:meth:`Environment.replay`.

The registry (:mod:`aios_rl.envs.registry`) maps a name to an :class:`EnvSpec`: the task type
(with its content address, for the task store), the host factory, the runner settings the
environment adds, and its defaults. Adding an environment is writing one adapter and one
``register(EnvSpec(...))`` call: the runner, the campaign and the pipeline need no change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from contracts import EvidenceRef, Message, Outcome

from ..state.tasks import TaskKind

__all__ = [
    "EnvResult",
    "EnvSpec",
    "Environment",
    "EnvironmentHost",
    "replay_prefix",
]

T = TypeVar("T", bound=Message)
T_contra = TypeVar("T_contra", bound=Message, contravariant=True)


@dataclass(frozen=True)
class EnvResult:
    """How an episode ended, as its environment judged it."""

    outcome: Outcome
    reward: float
    """The environment's reward (before teacher shaping)."""
    info: dict[str, str] = field(default_factory=dict)
    """Facts worth keeping on the episode (tests passed, pages visited, ...)."""
    evidence: list[EvidenceRef] = field(default_factory=list)
    """Big things already stored in the Object Store (screenshots, long logs)."""


@runtime_checkable
class Environment(Protocol):
    """One episode of one task (see the module docstring)."""

    @property
    def observation(self) -> str:
        """What the policy sees now."""
        ...

    @property
    def candidates(self) -> list[str]:
        """The actions offered now; empty means the policy writes free text."""
        ...

    @property
    def done(self) -> bool:
        """Whether the episode has ended (then :meth:`result` says how)."""
        ...

    async def step(self, action: str) -> None:
        """Take ``action``. Raises only for a crash of the environment itself (the runner
        makes that a ``blocked`` episode); an invalid action is the environment's to judge."""
        ...

    def result(self) -> EnvResult:
        """The outcome, reward and evidence. Only called once :attr:`done`."""
        ...

    async def close(self) -> None:
        """Release what the episode holds (idempotent)."""
        ...


async def replay_prefix(env: Environment, prefix: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Step ``env`` through ``prefix`` (until it ends); returns (observation, candidates) seen
    before each replayed action. The default replay: exact because steps are deterministic."""
    seen: list[tuple[str, list[str]]] = []
    for action in prefix:
        if env.done:
            break
        seen.append((env.observation, list(env.candidates)))
        await env.step(action)
    return seen


class EnvironmentHost(Protocol[T_contra]):
    """What one runner process holds for an environment; opens its episodes. A host that needs
    the bus (to ask a service, to keep evidence in the Object Store) may also define
    ``attach(bus)``: the runner calls it once, before any episode."""

    async def open(self, task: T_contra, *, seed: int, max_steps: int) -> Environment:
        """A new episode of ``task``. Raises for a task the environment cannot set up (the
        runner makes that a ``blocked`` episode)."""
        ...

    def task_info(self, task: T_contra) -> dict[str, str]:
        """Facts about the task to keep on every episode of it (family, kind, split, ...)."""
        ...

    async def aclose(self) -> None:
        """Release what the host holds (at the runner's shutdown)."""
        ...


@dataclass(frozen=True)
class EnvSpec(Generic[T]):
    """An environment as the registry knows it."""

    name: str
    """The environment's name: subjects ``rollout.job.<name>``, the deployment ``<name>-runner``."""
    tasks: TaskKind[T]
    """Its task type and content address (``tasks.environment`` must be ``name``)."""
    host: Callable[[Any], EnvironmentHost[T]]
    """Makes the per-process host from the runner's settings (an instance of ``settings``)."""
    settings: type
    """The runner settings class for this environment: ``RunnerSettings`` or a subclass adding
    the environment's own fields (each a ``--flag`` and ``AIOS_<FIELD>``)."""
    description: str = ""
    ack_wait_s: float | None = None
    """The shared consumer's ack wait (``None``: the contract's for this name, see
    ``contracts.subjects.RUNNER_ACK_WAIT_S``); heartbeats keep a running episode's job, so it
    only says how soon a killed runner's jobs go to another replica."""

    def __post_init__(self) -> None:
        if self.tasks.environment != self.name:
            raise ValueError(
                f"environment {self.name!r} stores its tasks under {self.tasks.environment!r}: "
                "they must be the same name."
            )
