"""RAIL: the branching decision request/reply, its settings, and the traces it learns from.

The context ``z`` of a candidate state is ``CONTEXT_DIM`` numbers laid out as ``CONTEXT_LAYOUT``
(built by ``aios_rl.rail.context.build_context``, one pure function):

====  ==================  ======================================================================
 i    name                what
====  ==================  ======================================================================
 0    entropy             the policy's entropy at the state, divided by its largest (``log K``
                          over K candidates; nats / 4 for free text), in [0, 1]
 1    entropy_rise        ``(H_t - H_0) / scale``: the change since the rollout's first step
 2    top1                probability of the most likely candidate
 3    margin              its lead over the second
 4    group_mean          mean reward of the task's group so far (``Y_0``)
 5    group_var           ``I(Y_0)``: the population variance of those rewards
 6    group_success       share of the group's rollouts that succeeded
 7    group_tied          1 when every reward of the group ties, else 0
 8    source_reward       the reward of the rollout the state is on (0 with ``hindsight`` off)
 9    progress            step / max steps
 10   steps_left          (the rollout's length - step) / max steps (0 with ``hindsight`` off)
 11   group_size          rollouts of the task so far / budget M
 12   budget_left         (M - rollouts so far) / M
 13   env_shell           environment one-hot: shell
 14   env_browser         ... browser
 15   env_orchestrator    ... orchestrator
 16   env_other           ... any other environment
 17   policy_age          epoch / (epoch + 10): how far the policy has moved from its start
 18   hidden_0..hidden_7  the policy's hidden-state projection at the state (fixed per lineage;
 ..                       docs/branching.md)
 25
====  ==================  ======================================================================
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ._base import Message
from .episode import DecodingRegime
from .vocab import Environment

__all__ = [
    "CONTEXT_DIM",
    "CONTEXT_LAYOUT",
    "RailCandidate",
    "RailDecideRequest",
    "RailDecision",
    "RailDecisions",
    "RailSettings",
    "RailTrace",
]

HIDDEN_DIM = 8
"""Length of the policy's hidden-state projection in the context."""

CONTEXT_LAYOUT: tuple[str, ...] = (
    "entropy",
    "entropy_rise",
    "top1",
    "margin",
    "group_mean",
    "group_var",
    "group_success",
    "group_tied",
    "source_reward",
    "progress",
    "steps_left",
    "group_size",
    "budget_left",
    "env_shell",
    "env_browser",
    "env_orchestrator",
    "env_other",
    "policy_age",
    *(f"hidden_{i}" for i in range(HIDDEN_DIM)),
)
"""The name of each number of ``z``, in order."""

CONTEXT_DIM = len(CONTEXT_LAYOUT)
"""Length of the context vector ``z`` (26)."""

RailMode = Literal["shadow", "live"]

COOL = DecodingRegime(temperature=0.7, top_p=0.9)
NEUTRAL = DecodingRegime(temperature=1.0, top_p=1.0)
HOT = DecodingRegime(temperature=1.3, top_p=1.0)


class RailSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The controller's action set and learning schedule, per campaign."""

    budgets: list[int] = msgspec.field(default_factory=lambda: [0, 1, 2, 4])
    """Extra continuations it may choose at a state (0: no intervention)."""
    regimes: list[DecodingRegime] = msgspec.field(default_factory=lambda: [COOL, NEUTRAL, HOT])
    """Decoding regimes of the continuations (cool, neutral, hot)."""
    eta: float = 0.005
    """Live: branch only where the best predicted gain exceeds this utility gate (by default
    the gain that counts as positive: a branch must be predicted to help)."""
    exploration: float = 0.1
    """Live: share of decisions that take a random feasible action (keeps traces of others)."""
    half_life: float = 256.0
    """Recency weighting of the Huber loss: a trace this many traces old weighs half."""
    refit_every: int = 16
    """Refit the scorer after this many new traces."""
    fit_steps: int = 200
    """Full-batch Adam steps of each refit."""
    weight_decay: float = 1.0
    """Decoupled weight decay of the scorer's fit (AdamW's; 0: plain Adam, the default until
    2026-12). Realized gains are small and noisy: an unregularized scorer fits their noise and
    predicts gains far larger than any it sees (``bench/rail_scorer.py`` measures that on
    recorded traces). Trained with RAIL, weight decay 1 reached held-out success at or above
    plain Adam's on the four runs ``bench/rail.py`` had made (orchestrator, shell seeds 0 and 1,
    MiniWoB++; beyond noise on MiniWoB++), hence the default; on three fresh orchestrator seeds
    after the change it was 1.3 points below plain Adam at 24 epochs and 6.0 below at 34, within
    noise both times (README, RAIL)."""
    window: int = 64
    """Promotion and demotion read the sign agreement of this many most recent traces."""
    min_traces: int = 16
    """No promotion before this many out-of-sample predictions in the window."""
    margin: float = 0.05
    """Promote when the agreement's lower confidence bound exceeds 0.5 + margin."""
    z: float = 1.28
    """Width of that bound (standard normal quantile; 1.28: one-sided 90 %)."""
    candidates: int = 16
    """Most states of a group offered per decision (highest entropy first)."""
    freeze_after_promotion: bool = False
    """``rail-frozen``: no refits once live."""
    hindsight: bool = True
    """The context carries ``source_reward`` and ``steps_left``: what is known of the rollout a
    state is on only once it has finished (the branch decision here is made after a round, so
    it can read them; a controller deciding while the rollout runs cannot). Off: both are 0,
    the context of a decision made at the branch point."""


class RailCandidate(msgspec.Struct, frozen=True, kw_only=True):
    """One state a branch could start from: a rollout and a step of it."""

    episode_id: str
    step: int
    context: list[float]
    """The ``CONTEXT_DIM`` numbers of ``z``."""


class RailDecideRequest(Message, frozen=True, kw_only=True):
    """The campaign asks, for one task's group, whether and where to branch this round."""

    SCHEMA = "rail_decide_request.v1"

    campaign_id: str
    epoch: int = 0
    round: int = 1
    group_id: str
    environment: Environment
    budget_left: int
    """Continuations the task may still get."""
    candidates: list[RailCandidate] = []
    settings: RailSettings = RailSettings()
    budget_only: bool = False
    """``rail-budget-only``: the regime is fixed to neutral."""


class RailDecision(msgspec.Struct, frozen=True, kw_only=True):
    """Whether to branch, from which state, how many continuations under which regime."""

    decision_id: str
    branch: bool = False
    episode_id: str = ""
    step: int = 0
    budget: int = 0
    regime: DecodingRegime = DecodingRegime()
    context: list[float] = []
    predicted_gain: float = 0.0
    """The online scorer's ``Delta_hat(z, b)`` for the action taken (0 before its first fit)."""
    frozen_gain: float | None = None
    """The copy frozen at promotion's prediction (``None`` before a promotion)."""
    fitted: bool = False
    """Whether ``predicted_gain`` came from a fitted scorer (an out-of-sample prediction)."""
    mode: RailMode = "shadow"
    decided_by: Literal["rail", "heuristic"] = "heuristic"
    scorer_version: int = 0


class RailDecisions(Message, frozen=True, kw_only=True):
    """The answer to a ``RailDecideRequest``: at most one decision per group and round."""

    SCHEMA = "rail_decisions.v1"

    decisions: list[RailDecision] = []
    mode: RailMode = "shadow"


class RailTrace(Message, frozen=True, kw_only=True):
    """One ``(z, b, y)`` example: the context, the branch taken and its realized gain in reward
    contrast ``y = I(Y_b) - I(Y_0)``, with what the scorers predicted for it."""

    SCHEMA = "rail_trace.v1"

    decision_id: str
    campaign_id: str = ""
    epoch: int = 0
    environment: Environment
    context: list[float]
    budget: int
    regime: DecodingRegime = DecodingRegime()
    realized_gain: float
    predicted_gain: float = 0.0
    frozen_gain: float | None = None
    fitted: bool = False
    mode: RailMode = "shadow"
    scorer_version: int = 0
    task_id: str = ""
    at: float = 0.0
