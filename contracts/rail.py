"""RAIL: the branching decision request/reply and the traces it learns from."""

from __future__ import annotations

from typing import Literal

from ._base import Message
from .episode import DecodingRegime
from .vocab import Environment

__all__ = ["CONTEXT_DIM", "RailDecideRequest", "RailDecision", "RailTrace"]

CONTEXT_DIM = 26
"""Length of the context vector ``z``: rollout statistics, progress, environment one-hot and a
projection of the policy's hidden state."""

RailMode = Literal["shadow", "live", "uniform", "entropy"]


class RailDecideRequest(Message, frozen=True, kw_only=True):
    """A runner asks, at an intermediate state, whether and how to branch."""

    SCHEMA = "rail_decide_request.v1"

    episode_id: str
    environment: Environment
    step: int
    context: list[float]
    """The ``CONTEXT_DIM`` numbers of ``z``."""
    campaign_id: str = ""
    group_id: str = ""
    max_budget: int = 4


class RailDecision(Message, frozen=True, kw_only=True):
    """Whether to branch here, how many continuations and under which decoding regime."""

    SCHEMA = "rail_decision.v1"

    episode_id: str
    step: int
    branch: bool = False
    budget: int = 0
    regime: DecodingRegime = DecodingRegime()
    predicted_gain: float = 0.0
    mode: RailMode = "shadow"
    decision_id: str = ""


class RailTrace(Message, frozen=True, kw_only=True):
    """One ``(z, b, y)`` example: the context, the branch taken and its realized gain in reward
    contrast ``y = I(Y_b) - I(Y_0)``."""

    SCHEMA = "rail_trace.v1"

    decision_id: str
    campaign_id: str = ""
    environment: Environment
    context: list[float]
    budget: int
    regime: DecodingRegime = DecodingRegime()
    realized_gain: float
    predicted_gain: float = 0.0
    mode: RailMode = "shadow"
    at: float = 0.0
