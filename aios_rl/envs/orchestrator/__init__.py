"""The orchestrator environment: control decisions with hidden ground truth."""

from .tasks import generate, outcome_of

__all__ = ["generate", "outcome_of"]
