"""RAIL's scorer ``Delta_hat(z, b)``: a small MLP over the context and an embedding of the
action, fitted with a recency-weighted Huber loss; and the promotion rule. No NATS."""

from __future__ import annotations

import io
from collections.abc import Sequence

import torch
from torch import nn

from contracts import DecodingRegime
from contracts.rail import CONTEXT_DIM

from ..stats import wilson

__all__ = [
    "GAIN_SCALE",
    "Scorer",
    "action_features",
    "agreement",
    "demote",
    "fit",
    "gate",
    "promote",
    "recency_weights",
    "weighted_huber",
]

GAIN_SCALE = 10.0
"""Gains (variances of rewards in [0, 1], at most 0.25) are fitted times this: the network sees
targets of order 0.1 to 1."""
HUBER_DELTA = 0.5
"""Huber's delta on the scaled gain: squared below, linear above."""
POSITIVE = 0.005
"""A gain (realized or predicted) above this counts as positive for the sign agreement: a change
in the group's reward variance (at most 0.25) smaller than that teaches nothing, and a scorer
fitted to many zero gains predicts small numbers of either sign around zero."""


def action_features(budget: int, regime: DecodingRegime) -> list[float]:
    """What the scorer's action embedding reads of ``b``: the budget (over 4), the temperature
    and the top-p."""
    return [budget / 4.0, regime.temperature, regime.top_p]


class Scorer(nn.Module):
    """``Delta_hat(z, b)``: ``z`` (``CONTEXT_DIM``) and an 8-wide embedding of ``b`` through two
    tanh layers of 32 to one number, the predicted gain in reward contrast."""

    def __init__(self, seed: int = 0, hidden: int = 32, embed: int = 8) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.embed = nn.Linear(3, embed)
            self.net = nn.Sequential(
                nn.Linear(CONTEXT_DIM + embed, hidden),
                nn.Tanh(),
                nn.Linear(hidden, hidden),
                nn.Tanh(),
                nn.Linear(hidden, 1),
            )

    def forward(self, z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """Scaled predicted gains ``[N]`` of ``z [N, CONTEXT_DIM]`` under ``a [N, 3]``."""
        return self.net(torch.cat([z, torch.tanh(self.embed(a))], dim=-1)).squeeze(-1)

    @torch.no_grad()
    def predict(self, z: Sequence[Sequence[float]], a: Sequence[Sequence[float]]) -> list[float]:
        """Predicted gains (unscaled) for each pair."""
        if not z:
            return []
        out = self(torch.tensor(z, dtype=torch.float32), torch.tensor(a, dtype=torch.float32))
        return [float(x) / GAIN_SCALE for x in out]

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        torch.save(self.state_dict(), buf)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> Scorer:
        s = cls()
        s.load_state_dict(torch.load(io.BytesIO(data), weights_only=True))
        return s

    def copy(self) -> Scorer:
        return Scorer.from_bytes(self.to_bytes())


def recency_weights(n: int, half_life: float) -> torch.Tensor:
    """Weight of each of ``n`` traces, oldest first: the newest weighs 1, one ``half_life``
    traces older weighs 1/2."""
    age = torch.arange(n - 1, -1, -1, dtype=torch.float32)
    return torch.pow(torch.tensor(0.5), age / max(half_life, 1e-9))


def weighted_huber(
    pred: torch.Tensor, target: torch.Tensor, weights: torch.Tensor, delta: float = HUBER_DELTA
) -> torch.Tensor:
    """``sum(w * huber(pred - target)) / sum(w)``, Huber's loss ``0.5 e^2`` below ``delta`` and
    ``delta (|e| - delta / 2)`` above."""
    err = (pred - target).abs()
    loss = torch.where(err <= delta, 0.5 * err**2, delta * (err - 0.5 * delta))
    return (weights * loss).sum() / weights.sum().clamp(min=1e-12)


def fit(
    scorer: Scorer,
    z: Sequence[Sequence[float]],
    a: Sequence[Sequence[float]],
    gains: Sequence[float],
    *,
    half_life: float,
    steps: int,
    seed: int = 0,
    learning_rate: float = 1e-2,
    weight_decay: float = 0.0,
) -> float:
    """Fit ``scorer`` to the traces (oldest first) with the recency-weighted Huber loss; full
    batch Adam (AdamW with ``weight_decay`` above 0), seeded; returns the final loss."""
    if not gains:
        return 0.0
    zt = torch.tensor(z, dtype=torch.float32)
    at = torch.tensor(a, dtype=torch.float32)
    yt = torch.tensor(gains, dtype=torch.float32) * GAIN_SCALE
    w = recency_weights(len(gains), half_life)
    opt = (
        torch.optim.AdamW(scorer.parameters(), lr=learning_rate, weight_decay=weight_decay)
        if weight_decay > 0
        else torch.optim.Adam(scorer.parameters(), lr=learning_rate)
    )
    loss = torch.zeros(())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(steps):
            opt.zero_grad()
            loss = weighted_huber(scorer(zt, at), yt, w)
            loss.backward()
            opt.step()
    return float(loss.detach())


def agreement(predicted: Sequence[float], realized: Sequence[float]) -> tuple[int, int]:
    """(agreeing, total): a prediction agrees when it and the realized gain are both positive
    (above ``POSITIVE``) or both not."""
    k = sum((p > POSITIVE) == (y > POSITIVE) for p, y in zip(predicted, realized, strict=True))
    return k, len(realized)


def promote(k: int, n: int, *, min_traces: int, margin: float, z: float) -> bool:
    """Shadow -> live: at least ``min_traces`` out-of-sample predictions, and the lower Wilson
    bound of their sign agreement above ``0.5 + margin`` (a bar that tightens the fewer traces
    there are). Never without a prediction."""
    return n > 0 and n >= min_traces and wilson(k, n, z).low > 0.5 + margin


def demote(k: int, n: int, *, min_traces: int, margin: float, z: float) -> bool:
    """Live -> shadow: at least ``min_traces`` live predictions, and the upper Wilson bound of
    their sign agreement below ``0.5 + margin`` (confidently under the bar it was promoted
    over). Never without a prediction."""
    return n > 0 and n >= min_traces and wilson(k, n, z).high < 0.5 + margin


def gate(predicted_gain: float, eta: float) -> bool:
    """Live: branch only when the best predicted gain clears the utility gate ``eta``."""
    return predicted_gain > eta
