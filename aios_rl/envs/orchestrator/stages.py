"""Where an orchestrated run stands, and the decisions each stage offers: what the simulator
(:mod:`.sim`) moves and the renderer (:mod:`.render`) shows. Pure."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from contracts import OrchestratorTask

__all__ = ["DECISIONS", "State", "offered"]

DECISIONS: dict[str, tuple[str, ...]] = {
    "preflight": ("pass", "block", "fix first", "ask for information"),
    "dispatch": ("send to a subagent", "dry-run first", "ask a human to approve"),
    "clarity": ("needs a human", "retry", "proceed on a stated assumption", "re-plan"),
    "quality": ("accept", "request rework", "escalate", "roll back"),
}
"""The decisions offered at each stage (the candidates, in this order)."""


@dataclass(frozen=True)
class State:
    """Where a run stands (immutable: :func:`.sim.step` returns a new one)."""

    stage: str
    tests: str  # green / broken / flaky, as the branch is now
    ambiguous: bool
    secret: bool
    mode: str = ""  # how it was dispatched: subagent / dry-run / gated
    blocked: bool = False  # the checkpoint is still in the way
    block_tries: int = 0
    bugs: int = 0  # real test failures left in the result
    wrong: bool = False  # the result misread the request
    harm: bool = False  # a live change is breaking production
    preview: bool = False  # an irreversible dry-run preview waits for a human
    human_minutes: int = 0
    compute: int = 0
    incidents: int = 0
    invalid: int = 0
    done: bool = False
    outcome: str = ""
    history: tuple[str, ...] = field(default=())

    def cost(self, *, minutes: int = 0, units: int = 0, incidents: int = 0) -> State:
        return dataclasses.replace(
            self,
            human_minutes=self.human_minutes + minutes,
            compute=self.compute + units,
            incidents=self.incidents + incidents,
        )

    def then(self, note: str, **changes: object) -> State:
        return dataclasses.replace(self, history=(*self.history, note), invalid=0, **changes)  # type: ignore[arg-type]

    def end(self, outcome: str, note: str) -> State:
        return self.then(note, done=True, outcome=outcome)


def offered(task: OrchestratorTask, s: State) -> tuple[str, ...]:
    """The decisions offered in ``s`` (none once the run is over)."""
    if s.done:
        return ()
    if task.kind == "imported" and task.logged is not None:
        return tuple(task.logged.candidates) or DECISIONS[task.logged.stage]
    return DECISIONS[s.stage]
