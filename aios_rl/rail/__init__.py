"""RAIL, recoverability-aware intervention learning: the context of a candidate state, the
interventions, the scorer that predicts their gain in reward contrast, the promotion rule, and
the controller that ties them together. No NATS: the ``rail`` service stores and serves it, the
campaign builds contexts and realizes gains with it, the benchmarks run it in one process."""

from .context import (
    Action,
    actions,
    build_context,
    candidate_states,
    label,
    realized_gain,
)
from .controller import Controller

__all__ = [
    "Action",
    "Controller",
    "actions",
    "build_context",
    "candidate_states",
    "label",
    "realized_gain",
]
