"""Policy-gradient pieces as flat functions over tensors (CleanRL style): advantages, the
clipped surrogate, KL estimators, GAE and the clipped value loss. No model, no NATS."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from aios_rl.rollouts.accounting import reward_contrast

__all__ = [
    "aggregate",
    "clipped_surrogate",
    "clipped_value_loss",
    "gae",
    "group_advantages",
    "kl_penalty",
    "reward_contrast",
]

KlEstimator = Literal["k1", "k2", "k3"]

MAX_LOG_RATIO = 20.0
"""Log-ratios are clamped to +-this before exponentiating (exp(20) ~ 5e8: finite in float32)."""
Aggregation = Literal["token", "action"]


def group_advantages(
    rewards: torch.Tensor, groups: Sequence[str], *, std_normalize: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO: each reward minus its group's mean, divided by the group's std when ``std_normalize``
    (Dr. GRPO leaves it out). A group of one, or of equal rewards, gets advantage 0."""
    out = torch.zeros_like(rewards)
    index: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        index.setdefault(g, []).append(i)
    for members in index.values():
        idx = torch.tensor(members)
        r = rewards[idx]
        centred = r - r.mean()
        if std_normalize and len(members) > 1:
            centred = centred / (r.std(unbiased=True) + eps)
        out[idx] = centred
    return out


def aggregate_part(
    per_token: torch.Tensor, mask: torch.Tensor, how: Aggregation, tokens: int, actions: int
) -> torch.Tensor:
    """These rows' share of :func:`aggregate` over a larger batch of ``tokens`` valid tokens and
    ``actions`` actions: summed over the rows, divided by the whole batch's count, so the parts
    of a batch add up to its aggregate (micro-batches, gradients accumulated)."""
    m = mask.to(per_token.dtype)
    if how == "token":
        return (per_token * m).sum() / max(tokens, 1)
    if how == "action":
        return ((per_token * m).sum(-1) / m.sum(-1).clamp(min=1)).sum() / max(actions, 1)
    raise ValueError(f"aggregation must be 'token' or 'action', not {how!r}")


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, how: Aggregation) -> torch.Tensor:
    """Reduce a ``[N, T]`` per-token loss to a scalar: ``token`` averages over every valid token
    of the batch (long actions weigh more), ``action`` averages each action's tokens first, then
    the actions (every action weighs the same)."""
    m = mask.to(per_token.dtype)
    if how == "token":
        return (per_token * m).sum() / m.sum().clamp(min=1)
    if how == "action":
        per_action = (per_token * m).sum(-1) / m.sum(-1).clamp(min=1)
        return per_action.mean()
    raise ValueError(f"aggregation must be 'token' or 'action', not {how!r}")


def clipped_surrogate(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO/GRPO loss ``-min(r A, clip(r, 1-clip_low, 1+clip_high) A)`` and whether each
    token was clipped. ``advantages`` broadcast over tokens (``[N, 1]`` for ``[N, T]``)."""
    # Clamping the log-ratio keeps exp() finite when the policy has moved far (the clipped
    # objective has no gradient out there anyway).
    ratio = torch.exp(torch.clamp(logp - logp_old, -MAX_LOG_RATIO, MAX_LOG_RATIO))
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -torch.minimum(unclipped, clipped)
    was_clipped = (unclipped != clipped) & (clipped < unclipped)
    return loss, was_clipped


def kl_penalty(logp: torch.Tensor, logp_ref: torch.Tensor, estimator: KlEstimator) -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) from log-probs of actions sampled from pi (Schulman's
    k1, k2, k3). ``k3`` is unbiased and always >= 0."""
    log_ratio = torch.clamp(logp - logp_ref, -MAX_LOG_RATIO, MAX_LOG_RATIO)
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        return torch.exp(-log_ratio) - 1.0 + log_ratio
    raise ValueError(f"KL estimator must be k1, k2 or k3, not {estimator!r}")


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    *,
    gamma: float,
    lam: float,
    last_value: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over one finished episode: advantages and returns.

    ``rewards[t]`` is the reward after step ``t``; ``values[t]`` the critic's estimate at ``t``;
    ``last_value`` bootstraps after the last step (0 for a terminal episode)."""
    T = rewards.shape[0]
    adv = torch.zeros(T, dtype=rewards.dtype)
    running = 0.0
    for t in reversed(range(T)):
        next_value = values[t + 1] if t + 1 < T else torch.tensor(last_value, dtype=rewards.dtype)
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        adv[t] = running
    return adv, adv + values


def clipped_value_loss(
    values: torch.Tensor, values_old: torch.Tensor, returns: torch.Tensor, *, clip: float
) -> torch.Tensor:
    """PPO's clipped value loss: ``0.5 * max((v - R)^2, (v_old + clip(v - v_old, -c, c) - R)^2)``."""
    unclipped = (values - returns) ** 2
    clipped_values = values_old + torch.clamp(values - values_old, -clip, clip)
    return 0.5 * torch.maximum(unclipped, (clipped_values - returns) ** 2).mean()
