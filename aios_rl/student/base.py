"""The one interface every student backend offers.

A backend acts on observations (with candidate actions when the environment offers them, free
text otherwise) under a decoding regime, reports log-probs and entropy of what it chose, a short
hidden-state summary for RAIL and a value estimate for PPO, and re-evaluates chosen actions with
gradients for training. Weights travel as bytes (through the checkpoint registry).

Log-probs are always those of the raw policy (temperature 1, no top-p): that is the distribution
the trainer optimises, so PPO/GRPO ratios compare like with like whatever regime sampled.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

from aios_rl.errors import AiosError

__all__ = [
    "ActOutput",
    "Decision",
    "Evaluation",
    "Regime",
    "StudentBackend",
    "StudentError",
    "confidence",
]


class StudentError(AiosError):
    """Root of the student package's errors (bad input, unloadable weights)."""


@dataclass(frozen=True)
class Regime:
    """Decoding regime: softmax temperature and nucleus mass."""

    temperature: float = 1.0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise StudentError(f"temperature must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise StudentError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass(frozen=True)
class Decision:
    """One observation to act on."""

    observation: str
    candidates: tuple[str, ...] = ()
    seed: int | None = None
    """Seeds this decision's sampling; the same seed, weights and input give the same action."""
    prompt_ids: tuple[int, ...] = ()
    """The prompt's token ids as given, for a language-model student: read as they are instead
    of the prompt the student renders from ``observation`` (an agent's own conversation, as an
    inference engine read it). Students that read text (``tiny``, ``minilm``) read the
    observation."""


@dataclass(frozen=True)
class ActOutput:
    """What the policy did on one decision."""

    action: str
    action_index: int | None
    logprob: float
    entropy: float
    value: float
    hidden: list[float] = field(default_factory=list)
    top1_prob: float = 0.0
    """Probability of the most likely candidate (under the policy, temperature 1); 0 for free
    text."""
    margin: float = 0.0
    """Its lead over the second most likely candidate (the top-1 probability with one
    candidate); 0 for free text."""
    token_entropies: list[float] = field(default_factory=list)
    """Text students: the entropy of the next-token distribution at each token of the chosen
    action (for free text ``entropy`` is their mean); empty for students without tokens."""
    token_ids: list[int] = field(default_factory=list)
    """Free text: the action's token ids as written (empty for a chosen candidate)."""
    token_logprobs: list[float] = field(default_factory=list)
    """Free text: each of ``token_ids``' log-prob under the model that wrote them."""


@dataclass
class Evaluation:
    """Chosen actions re-evaluated under the current weights, with gradients.

    Token-shaped so language models fit: ``logprobs`` and ``mask`` are ``[N, T]`` (for a
    candidate-scoring model ``T == 1``); ``entropy`` and ``values`` are ``[N]``; ``ref_logits`` are
    the full candidate log-prob rows where the backend has them (for KL and distillation)."""

    logprobs: torch.Tensor
    mask: torch.Tensor
    entropy: torch.Tensor
    values: torch.Tensor
    candidate_logprobs: list[torch.Tensor] = field(default_factory=list)


@runtime_checkable
class StudentBackend(Protocol):
    """A policy the sampler serves and the trainer updates."""

    name: str
    supports_free_text: bool
    """Whether it can act on an observation without candidates (by writing the action)."""

    def act(
        self,
        decisions: list[Decision],
        regime: Regime | Sequence[Regime],
        *,
        want_hidden: bool = False,
    ) -> list[ActOutput]:
        """Sample one action per decision (one batched forward pass); ``regime`` is shared or
        given per decision."""
        ...

    def evaluate(self, decisions: list[Decision], actions: list[int | str]) -> Evaluation:
        """Log-probs (with gradients) of the given actions, entropy and values."""
        ...

    def parameters(self): ...

    def to_bytes(self) -> bytes:
        """Weights and configuration, deterministic for equal weights."""
        ...


def confidence(logp: torch.Tensor) -> tuple[float, float]:
    """(top-1 probability, margin to the second) of a distribution given by its log-probs
    over candidates; (0, 0) for none. Pure."""
    if logp.numel() == 0:
        return 0.0, 0.0
    probs = torch.sort(logp.detach().exp(), descending=True).values
    top = float(probs[0])
    return top, top - (float(probs[1]) if probs.numel() > 1 else 0.0)


def candidate_index(decision: Decision, action: int | str) -> int:
    """The index of ``action`` (a candidate's text or index) among the decision's candidates.

    Raises ``StudentError`` when it is not one of them."""
    if isinstance(action, str):
        if action not in decision.candidates:
            raise StudentError(f"action {action[:60]!r} is not among the observation's candidates")
        action = decision.candidates.index(action)
    if not 0 <= action < len(decision.candidates):
        raise StudentError(
            f"action index {action} out of range for {len(decision.candidates)} candidates"
        )
    return action


def package_dir(module: str) -> Path | None:
    """The directory of the installed package ``module``, found without importing it (a model
    wheel's ``__init__`` may need tools this project does not install); ``None`` when it is not
    installed."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))
