"""The orchestrator environment behind the ``Environment`` protocol: an orchestrated run
simulated by :mod:`.sim` (preflight, dispatch, a blocked checkpoint, quality review), one
decision per step. Steps are pure functions of the task and the decisions, so the default
prefix replay is exact."""

from __future__ import annotations

from contracts import OrchestratorTask

from ...state.tasks import TaskKind
from ..base import EnvResult, EnvSpec
from ..runner import RunnerSettings
from . import sim
from .tasks import task_id_of

__all__ = ["SPEC", "OrchestratorEnv", "OrchestratorHost"]


class OrchestratorEnv:
    """One run of one task."""

    def __init__(self, task: OrchestratorTask, *, max_steps: int) -> None:
        self.task = task
        self.max_steps = max_steps
        self.state = sim.start(task)
        self.steps = 0

    @property
    def observation(self) -> str:
        return sim.observe(self.task, self.state)

    @property
    def candidates(self) -> list[str]:
        return list(sim.offered(self.task, self.state))

    @property
    def done(self) -> bool:
        return self.state.done or self.steps >= self.max_steps

    async def step(self, action: str) -> None:
        if self.done:
            raise RuntimeError("the episode is over")
        self.state = sim.step(self.task, self.state, action)
        self.steps += 1

    def result(self) -> EnvResult:
        assert self.done, "result() before the episode ended"
        outcome, reward = sim.reward_of(self.task, self.state)
        s = self.state
        info = {
            "stage": s.stage,
            "human_minutes": str(s.human_minutes),
            "compute_units": str(s.compute),
            "incidents": str(s.incidents),
        }
        if not s.done:
            info["cut_off"] = f"no end within {self.max_steps} decisions"
        if s.history:
            info["last"] = s.history[-1][:200]
        return EnvResult(outcome, reward, info)

    async def close(self) -> None:
        pass


class OrchestratorHost:
    """Nothing to hold: every run is a pure function of its task and decisions."""

    def __init__(self, settings: RunnerSettings) -> None:
        self.settings = settings

    async def open(self, task: OrchestratorTask, *, seed: int, max_steps: int) -> OrchestratorEnv:
        return OrchestratorEnv(task, max_steps=min(max_steps, task.max_steps))

    def task_info(self, task: OrchestratorTask) -> dict[str, str]:
        info = {"kind": task.kind, "split": task.split, "template": task.template}
        if task.checkpoint is not None:
            info["checkpoint_source"] = task.checkpoint.source.split(":", 1)[0]
        return info

    async def aclose(self) -> None:
        pass


SPEC = EnvSpec(
    name="orchestrator",
    tasks=TaskKind("orchestrator", OrchestratorTask, task_id_of),
    host=OrchestratorHost,
    settings=RunnerSettings,
    description=(
        "Runs orchestrated-run episodes (preflight, dispatch, blocked-checkpoint clarity gate, "
        "quality review) simulated from hidden work-item attributes."
    ),
)
