"""The orchestrator environment behind the ``Environment`` protocol: one decision per episode
(dispatch, preflight or clarity), judged by :func:`~.tasks.outcome_of`."""

from __future__ import annotations

from contracts import OrchestratorTask

from ...state.tasks import TaskKind
from ..base import EnvResult, EnvSpec
from ..runner import RunnerSettings
from .tasks import outcome_of, task_id_of

__all__ = ["SPEC", "OrchestratorEnv", "OrchestratorHost"]


class OrchestratorEnv:
    """One decision on one task."""

    def __init__(self, task: OrchestratorTask) -> None:
        self.task = task
        self.decision: str | None = None

    @property
    def observation(self) -> str:
        return self.task.observation

    @property
    def candidates(self) -> list[str]:
        return [] if self.done else list(self.task.candidates)

    @property
    def done(self) -> bool:
        return self.decision is not None

    async def step(self, action: str) -> None:
        if self.done:
            raise RuntimeError("the episode is over")
        self.decision = action

    def result(self) -> EnvResult:
        assert self.decision is not None, "result() before the episode ended"
        outcome, reward = outcome_of(self.task, self.decision)
        return EnvResult(outcome, reward, {"decision": self.decision})

    async def close(self) -> None:
        pass


class OrchestratorHost:
    """Nothing to hold: every episode is a pure function of its task and decision."""

    def __init__(self, settings: RunnerSettings) -> None:
        self.settings = settings

    async def open(self, task: OrchestratorTask, *, seed: int, max_steps: int) -> OrchestratorEnv:
        return OrchestratorEnv(task)

    def task_info(self, task: OrchestratorTask) -> dict[str, str]:
        return {"kind": task.kind}

    async def aclose(self) -> None:
        pass


SPEC = EnvSpec(
    name="orchestrator",
    tasks=TaskKind("orchestrator", OrchestratorTask, task_id_of),
    host=OrchestratorHost,
    settings=RunnerSettings,
    description="Runs orchestrator decision episodes (dispatch, preflight, clarity).",
)
