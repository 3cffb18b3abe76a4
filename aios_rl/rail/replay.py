"""RAIL's scorer refitted offline on recorded traces, as a controller would have fitted it, and
how well it predicted: what a change to the scorer's settings would have done, measured without a
new training run. Pure: no NATS.

:func:`replay` walks the traces in the order a controller saw them; before each one, the scorer
fitted so far predicts it (out of sample: fitted only on earlier traces); after it, the scorer
refits on schedule (every ``refit_every`` traces, on every earlier trace, recency-weighted, the
controller's seeds). :func:`prior_mean` is the reference any scorer has to beat: the
recency-weighted mean of the earlier gains. :func:`quality` says how the predictions did."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from contracts.rail import RailSettings, RailTrace

from .controller import MAX_TRACES
from .scorer import Scorer, action_features, agreement, fit, recency_weights

__all__ = ["Quality", "prior_mean", "quality", "replay"]


def replay(
    traces: Sequence[RailTrace], settings: RailSettings, *, seed: int = 0
) -> list[tuple[float, float]]:
    """(predicted, realized) gain of every trace after the first fit, each prediction made by
    the scorer fitted on the traces before it under ``settings`` (``refit_every``,
    ``fit_steps``, ``half_life``, ``weight_decay``)."""
    scorer = Scorer(seed=seed)
    out: list[tuple[float, float]] = []
    version, fitted_at = 0, 0
    for i, t in enumerate(traces):
        if version:
            (p,) = scorer.predict([t.context], [action_features(t.budget, t.regime)])
            out.append((p, t.realized_gain))
        if i + 1 - fitted_at >= settings.refit_every:
            version += 1
            kept = traces[max(0, i + 1 - MAX_TRACES) : i + 1]
            fit(
                scorer,
                [k.context for k in kept],
                [action_features(k.budget, k.regime) for k in kept],
                [k.realized_gain for k in kept],
                half_life=settings.half_life,
                steps=settings.fit_steps,
                seed=seed * 1000 + version,
                weight_decay=settings.weight_decay,
            )
            fitted_at = i + 1
    return out


def prior_mean(traces: Sequence[RailTrace], settings: RailSettings) -> list[tuple[float, float]]:
    """(predicted, realized) for the same traces as :func:`replay`: the prediction is the
    recency-weighted mean gain of the traces before the last refit (a scorer that reads
    nothing of the context)."""
    out: list[tuple[float, float]] = []
    mean: float | None = None
    fitted_at = 0
    for i, t in enumerate(traces):
        if mean is not None:
            out.append((mean, t.realized_gain))
        if i + 1 - fitted_at >= settings.refit_every:
            kept = traces[max(0, i + 1 - MAX_TRACES) : i + 1]
            w = recency_weights(len(kept), settings.half_life).tolist()
            mean = sum(wi * k.realized_gain for wi, k in zip(w, kept, strict=True)) / sum(w)
            fitted_at = i + 1
    return out


@dataclass(frozen=True)
class Quality:
    """How predictions of realized gains did."""

    n: int
    mae: float
    """Mean absolute error."""
    agreement: float
    """Share of predictions on the realized gain's side of ``POSITIVE`` (the promotion rule's)."""
    slope: float
    """Least-squares slope of realized on predicted: 1 calibrated, near 0 overconfident (the
    predictions spread far more than what they predict moves), negative: ordered backwards."""
    rank: float
    """Spearman's rank correlation of predicted and realized (ties averaged)."""
    spread: float
    """Standard deviation of the predictions."""
    realized_spread: float
    """Standard deviation of the realized gains."""
    top_lift: float
    """Mean realized gain of the quarter of traces predicted highest, minus the mean of all: what
    following the scorer's ranking would have bought."""


def _ranks(xs: Sequence[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def _corr(a: Sequence[float], b: Sequence[float]) -> float:
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    va = sum((x - ma) ** 2 for x in a)
    vb = sum((y - mb) ** 2 for y in b)
    if va <= 0 or vb <= 0:
        return 0.0
    return sum((x - ma) * (y - mb) for x, y in zip(a, b, strict=True)) / math.sqrt(va * vb)


def quality(pairs: Sequence[tuple[float, float]]) -> Quality:
    """:class:`Quality` of (predicted, realized) pairs. Raises ``ValueError`` on none."""
    if not pairs:
        raise ValueError("no predictions to judge")
    ps = [p for p, _ in pairs]
    ys = [y for _, y in pairs]
    mp, my = statistics.fmean(ps), statistics.fmean(ys)
    vp = sum((p - mp) ** 2 for p in ps)
    slope = sum((p - mp) * (y - my) for p, y in pairs) / vp if vp > 0 else 0.0
    top = sorted(pairs, key=lambda py: -py[0])[: max(1, len(pairs) // 4)]
    return Quality(
        n=len(pairs),
        mae=statistics.fmean(abs(p - y) for p, y in pairs),
        agreement=agreement(ps, ys)[0] / len(pairs),
        slope=slope,
        rank=_corr(_ranks(ps), _ranks(ys)),
        spread=statistics.pstdev(ps),
        realized_spread=statistics.pstdev(ys),
        top_lift=statistics.fmean(y for _, y in top) - my,
    )
