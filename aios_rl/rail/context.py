"""RAIL's context ``z`` of a candidate state, its actions, and the realized gain of a branch.
Pure: no NATS, no torch. The layout is ``contracts.rail.CONTEXT_LAYOUT``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from aios_rl.rollouts.accounting import reward_contrast
from contracts import DecodingRegime, RolloutSummary
from contracts.rail import CONTEXT_DIM, HIDDEN_DIM, NEUTRAL, RailSettings

__all__ = [
    "ENV_SLOTS",
    "Action",
    "actions",
    "build_context",
    "candidate_states",
    "label",
    "realized_gain",
]

ENV_SLOTS = ("shell", "browser", "orchestrator")
"""Environments with a one-hot slot of their own; any other shares ``env_other``."""

FREE_TEXT_SCALE = 4.0
"""Nats an entropy over free text is divided by (a text student's mean token entropy)."""


def _scale(width: int) -> float:
    return math.log(width) if width > 1 else FREE_TEXT_SCALE


def _root(s: RolloutSummary, by_id: Mapping[str, RolloutSummary]) -> RolloutSummary:
    seen = 0
    while s.parent_episode_id and s.parent_episode_id in by_id and seen < 64:
        s, seen = by_id[s.parent_episode_id], seen + 1
    return s


def _at(values: Sequence[float], i: int) -> float:
    return float(values[i]) if i < len(values) else 0.0


def build_context(
    source: RolloutSummary,
    step: int,
    group: Sequence[RolloutSummary],
    *,
    budget: int,
    max_steps: int,
    epoch: int,
    hindsight: bool = True,
) -> list[float]:
    """``z`` for branching ``source`` at ``step``, given the task's ``group`` as it stands
    (``Y_0``), the task's budget ``M`` and the runner's step limit. ``CONTEXT_DIM`` finite
    numbers, laid out as ``contracts.rail.CONTEXT_LAYOUT``. ``hindsight`` off: what only a
    finished rollout tells (its reward, the steps it took after ``step``) reads 0."""
    by_id = {g.episode_id: g for g in group}
    width = source.widths[step] if step < len(source.widths) else 0
    scale = _scale(width)
    h_t = _at(source.entropies, step)
    h_0 = _at(_root(source, by_id).entropies, 0)
    rewards = [g.reward for g in group]
    n = len(rewards)
    limit = max(1, max_steps)
    env = source.environment
    hidden = source.hidden[step] if step < len(source.hidden) else []
    z = [
        min(1.0, max(0.0, h_t / scale)),
        max(-1.0, min(1.0, (h_t - h_0) / scale)),
        _at(source.top1, step),
        _at(source.margins, step),
        sum(rewards) / n if n else 0.0,
        reward_contrast(rewards),
        sum(g.outcome == "success" for g in group) / n if n else 0.0,
        1.0 if n and reward_contrast(rewards) < 1e-12 else 0.0,
        source.reward if hindsight else 0.0,
        min(1.0, step / limit),
        min(1.0, max(0, len(source.actions) - step) / limit) if hindsight else 0.0,
        min(1.0, n / max(1, budget)),
        max(0.0, (budget - n) / max(1, budget)),
        *(1.0 if env == slot else 0.0 for slot in ENV_SLOTS),
        0.0 if env in ENV_SLOTS else 1.0,
        epoch / (epoch + 10.0),
        *(float(x) for x in list(hidden)[:HIDDEN_DIM]),
        *([0.0] * (HIDDEN_DIM - min(HIDDEN_DIM, len(hidden)))),
    ]
    assert len(z) == CONTEXT_DIM
    return [x if math.isfinite(x) else 0.0 for x in z]


def candidate_states(
    group: Sequence[RolloutSummary], taken: set[tuple[str, int]], limit: int
) -> list[tuple[RolloutSummary, int]]:
    """The states a branch could start from: steps ``t >= 1`` of the group's rollouts after
    their own branch point, with a choice to make and not branched from yet; the ``limit`` with
    the highest normalised entropy first (ties by episode and step)."""
    states = []
    for s in group:
        if not s.actions:
            continue  # kept without its actions: cannot be branched from
        first = s.branch_step + 1 if s.parent_episode_id else 1
        for t in range(max(1, first), len(s.actions)):
            width = s.widths[t] if t < len(s.widths) else 0
            if width == 1 or (s.episode_id, t) in taken:
                continue
            states.append((_at(s.entropies, t) / _scale(width), s, t))
    states.sort(key=lambda x: (-x[0], x[1].episode_id, x[2]))
    return [(s, t) for _, s, t in states[: max(0, limit)]]


class Action:
    """An intervention ``b = (budget, regime)``."""

    __slots__ = ("budget", "regime")

    def __init__(self, budget: int, regime: DecodingRegime) -> None:
        self.budget = budget
        self.regime = regime

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Action) and (self.budget, self.regime) == (
            other.budget,
            other.regime,
        )

    def __hash__(self) -> int:
        return hash((self.budget, self.regime.temperature, self.regime.top_p))

    def __repr__(self) -> str:
        return f"Action({label(self.budget, self.regime)})"


def label(budget: int, regime: DecodingRegime) -> str:
    """``<budget>@<temperature>`` (with ``/p<top_p>`` when top-p is below 1)."""
    t = f"{budget}@{regime.temperature:g}"
    return t if regime.top_p >= 1.0 else f"{t}/p{regime.top_p:g}"


def actions(settings: RailSettings, budget_left: int, *, budget_only: bool) -> list[Action]:
    """The feasible interventions (budget above 0 and within what the task has left), budget
    first; with ``budget_only`` the regime is neutral."""
    regimes = [NEUTRAL] if budget_only else list(settings.regimes)
    return [
        Action(b, r) for b in sorted(set(settings.budgets)) if 0 < b <= budget_left for r in regimes
    ]


def realized_gain(before: Sequence[float], added: Sequence[float]) -> float:
    """``y = I(Y_b) - I(Y_0)``: the change in the group's reward contrast that the branch's
    continuations (``added``) brought to the group as it was (``before``)."""
    return reward_contrast([*before, *added]) - reward_contrast(list(before))
