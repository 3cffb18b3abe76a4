"""Statistics, once for the whole repository: standard library only, deterministic for a seed.

**Intervals.** Every function that estimates something returns an :class:`Interval`: the point
estimate and the bounds of its (by default 95 %) confidence interval.

**Binomial proportions** (:func:`wilson`): the Wilson score interval.

**Bootstrap.** One rule for every bootstrap here (:func:`bootstrap_ci` and the functions built on
it): ``resamples`` times, draw ``len(values)`` items with replacement
(``random.Random(seed).choices``) and apply the statistic to the draw; the interval at
``confidence`` is the percentile interval of those ``resamples`` estimates, i.e. their
:func:`quantile` at ``alpha / 2`` and ``1 - alpha / 2`` with ``alpha = 1 - confidence``. The
point estimate is the statistic of the values themselves, never a bootstrap average. The draws
depend only on the seed and the order of the values, so the same inputs give the same interval.

**Quantile rule** (:func:`quantile`, the only one in the repository: bootstrap bounds and the
benches' latency percentiles alike): linear interpolation between the closest ranks, Hyndman &
Fan's type 7 (numpy's and R's default; ``statistics.quantiles`` with ``method="inclusive"``). For
sorted ``x_0 <= ... <= x_{n-1}`` and ``q`` in [0, 1], with ``h = (n - 1) * q`` and
``i = floor(h)``: ``Q(q) = x_i + (h - i) * (x_{i+1} - x_i)``. So ``Q(0)`` is the minimum,
``Q(1)`` the maximum and ``Q(0.5)`` the median.

**Sign test** (:func:`sign_test_p`): the exact two-sided binomial test of wins against losses
(ties dropped before calling).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "CONFIDENCE",
    "RESAMPLES",
    "Z95",
    "Interval",
    "bootstrap_ci",
    "bootstrap_mean",
    "paired_difference",
    "quantile",
    "sign_test_p",
    "stratified_mean",
    "wilson",
]

T = TypeVar("T")

Z95 = 1.959963984540054
"""The standard normal quantile of 0.975: ``z`` of a two-sided 95 % interval."""

CONFIDENCE = 0.95
"""Default confidence of every interval."""

RESAMPLES = 4000
"""Default number of bootstrap resamples."""


@dataclass(frozen=True)
class Interval:
    """A point estimate ``value`` with the bounds ``low <= high`` of its confidence interval.
    Unpacks as ``value, low, high``."""

    value: float
    low: float
    high: float

    def __iter__(self) -> Iterator[float]:
        return iter((self.value, self.low, self.high))

    def pct(self) -> str:
        """As percentages: ``80.0% [49.0, 94.3]``."""
        return f"{100 * self.value:.1f}% [{100 * self.low:.1f}, {100 * self.high:.1f}]"

    def num(self) -> str:
        """As numbers: ``0.250 [0.125, 0.400]``."""
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}]"


def wilson(successes: int, n: int, z: float = Z95) -> Interval:
    """The proportion ``successes / n`` with its Wilson score interval at ``z`` standard normal
    quantiles (default :data:`Z95`, 95 %):
    ``(p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)``, clipped to [0, 1].
    Raises ``ValueError`` for ``n <= 0`` or ``successes`` outside ``0..n``."""
    if n <= 0:
        raise ValueError(f"a Wilson interval needs at least one trial, got n={n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..{n}, got {successes}")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half))


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (``q`` in [0, 1]) of ``values`` by the module's one rule: linear
    interpolation between the closest ranks (Hyndman & Fan type 7, numpy's default). Raises
    ``ValueError`` for no values or ``q`` outside [0, 1]."""
    if not values:
        raise ValueError("the quantile of no values is undefined")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q={q} is outside [0, 1]")
    return _sorted_quantile(sorted(values), q)


def _sorted_quantile(ordered: Sequence[float], q: float) -> float:
    h = (len(ordered) - 1) * q
    lo = math.floor(h)
    frac = h - lo
    if frac == 0.0:
        return ordered[lo]
    return ordered[lo] + frac * (ordered[lo + 1] - ordered[lo])


def _check(confidence: float, resamples: int) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")


def _percentile_interval(value: float, estimates: list[float], confidence: float) -> Interval:
    """``value`` with the :func:`quantile` ``alpha/2`` and ``1 - alpha/2`` of ``estimates``."""
    estimates.sort()
    alpha = 1.0 - confidence
    return Interval(
        value, _sorted_quantile(estimates, alpha / 2), _sorted_quantile(estimates, 1 - alpha / 2)
    )


def bootstrap_ci(
    values: Sequence[T],
    statistic: Callable[[Sequence[T]], float],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Interval:
    """``statistic(values)`` with its percentile bootstrap interval: ``statistic`` of
    ``resamples`` draws of ``len(values)`` items with replacement (``random.Random(seed)``),
    bounded by their :func:`quantile` ``alpha/2`` and ``1 - alpha/2`` (``alpha = 1 -
    confidence``). Deterministic for a seed and an order of the values. Raises ``ValueError``
    for no values, a confidence outside (0, 1) or no resamples."""
    if not values:
        raise ValueError("a bootstrap needs at least one value")
    _check(confidence, resamples)
    rng = random.Random(seed)
    n = len(values)
    estimates = [statistic(rng.choices(values, k=n)) for _ in range(resamples)]
    return _percentile_interval(statistic(values), estimates, confidence)


def bootstrap_mean(
    values: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Interval:
    """The mean of ``values`` (``statistics.fmean``) with its percentile bootstrap interval:
    :func:`bootstrap_ci` with the mean as the statistic."""
    return bootstrap_ci(
        values, statistics.fmean, confidence=confidence, resamples=resamples, seed=seed
    )


def paired_difference(
    before: Sequence[float],
    after: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Interval:
    """The mean of ``after[i] - before[i]`` with its percentile bootstrap interval over the pairs
    (:func:`bootstrap_mean` of the differences: a pair is resampled whole). Raises
    ``ValueError`` for sequences of different lengths or none."""
    if len(before) != len(after):
        raise ValueError(f"paired samples differ in length: {len(before)} vs {len(after)}")
    diffs = [a - b for b, a in zip(before, after, strict=True)]
    return bootstrap_mean(diffs, confidence=confidence, resamples=resamples, seed=seed)


def stratified_mean(
    strata: Sequence[Sequence[float]],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Interval:
    """The mean over strata of each stratum's mean (every stratum weighs the same, whatever its
    size) with a stratified percentile bootstrap interval: each resample draws every stratum's
    own size with replacement from that stratum alone (strata in order, one
    ``random.Random(seed)``), so the strata's sizes never change. One stratum is
    :func:`bootstrap_mean`. Raises ``ValueError`` for no strata or an empty one."""
    if not strata or any(not s for s in strata):
        raise ValueError("a stratified bootstrap needs strata, none of them empty")
    _check(confidence, resamples)
    rng = random.Random(seed)
    fmean = statistics.fmean
    estimates = [fmean(fmean(rng.choices(s, k=len(s))) for s in strata) for _ in range(resamples)]
    return _percentile_interval(fmean(fmean(s) for s in strata), estimates, confidence)


def sign_test_p(wins: int, losses: int) -> float:
    """The exact two-sided sign test: the probability, under a fair coin, of a split of
    ``wins + losses`` at least as lopsided as this one,
    ``min(1, 2 * sum_{i <= min(wins, losses)} C(n, i) / 2^n)``; 1.0 when ``n = 0``. Raises
    ``ValueError`` for negative counts."""
    if wins < 0 or losses < 0:
        raise ValueError(f"counts cannot be negative: {wins} wins, {losses} losses")
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1))
    return min(1.0, 2 * tail / 2**n)
