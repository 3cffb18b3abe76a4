"""aios_rl.stats: the Wilson interval, the quantile rule, the bootstrap (mean, any statistic,
paired, stratified) and the exact sign test, against values worked out by hand."""

from __future__ import annotations

import itertools
import math
import random
import statistics
from dataclasses import asdict

import pytest

from aios_rl.stats import (
    Z95,
    Interval,
    bootstrap_ci,
    bootstrap_mean,
    paired_difference,
    quantile,
    sign_test_p,
    stratified_mean,
    wilson,
)

# -- Wilson ------------------------------------------------------------------------------------


def test_wilson_hand_computed_at_z_1_96() -> None:
    z2 = 1.96**2  # 3.8416
    # 0/10: p = 0, so centre = half = (z^2/2n) / (1 + z^2/n); the upper bound is z^2 / (n + z^2).
    none = wilson(0, 10, 1.96)
    assert (none.value, none.low) == (0.0, 0.0)
    assert none.high == pytest.approx(z2 / (10 + z2)) == pytest.approx(0.277540, abs=1e-6)
    # 10/10 mirrors it: the lower bound is n / (n + z^2).
    every = wilson(10, 10, 1.96)
    assert (every.value, every.high) == (1.0, 1.0)
    assert every.low == pytest.approx(10 / (10 + z2)) == pytest.approx(0.722460, abs=1e-6)
    # 5/10: centre 0.5, half = 1.96 * sqrt(0.025 + 3.8416/400) / 1.38416 = 0.263410.
    half = wilson(5, 10, 1.96)
    assert half.value == 0.5
    assert half.low == pytest.approx(0.236590, abs=1e-6)
    assert half.high == pytest.approx(0.763410, abs=1e-6)


def test_wilson_default_is_95_percent() -> None:
    assert Z95 == pytest.approx(statistics.NormalDist().inv_cdf(0.975), abs=1e-15)
    iv = wilson(8, 10)
    assert iv.value == 0.8
    # Reference values of the Wilson score interval for 8/10 at 95 %.
    assert iv.low == pytest.approx(0.4902, abs=1e-4) and iv.high == pytest.approx(0.9433, abs=1e-4)
    # A wider z gives a wider interval around the same proportion.
    wide = wilson(8, 10, 2.58)
    assert wide.low < iv.low and wide.high > iv.high


@pytest.mark.parametrize(("k", "n"), [(0, 0), (1, 0), (-1, 10), (11, 10)])
def test_wilson_refuses_impossible_counts(k: int, n: int) -> None:
    with pytest.raises(ValueError):
        wilson(k, n)


def test_interval_shape() -> None:
    iv = Interval(0.25, 0.125, 0.4)
    value, low, high = iv
    assert (value, low, high) == (0.25, 0.125, 0.4)
    assert Interval(**asdict(iv)) == iv
    assert iv.pct() == "25.0% [12.5, 40.0]" and iv.num() == "0.250 [0.125, 0.400]"


# -- the quantile rule -------------------------------------------------------------------------


def test_quantile_interpolates_linearly_between_closest_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]  # sorted: 1 2 3 4, h = 3q
    assert quantile(values, 0.0) == 1.0 and quantile(values, 1.0) == 4.0
    assert quantile(values, 0.25) == 1.75  # h = 0.75: 1 + 0.75 * (2 - 1)
    assert quantile(values, 0.5) == 2.5  # the median
    assert quantile(values, 2 / 3) == pytest.approx(3.0)  # h = 2: a rank exactly
    assert quantile([10.0, 20.0], 0.1) == pytest.approx(11.0)
    assert quantile([7.0], 0.3) == 7.0
    rng = random.Random(5)
    data = [rng.random() for _ in range(17)]
    assert [quantile(data, i / 4) for i in (1, 2, 3)] == pytest.approx(
        statistics.quantiles(data, n=4, method="inclusive")
    )


@pytest.mark.parametrize("q", [-0.01, 1.01])
def test_quantile_refuses_bad_input(q: float) -> None:
    with pytest.raises(ValueError):
        quantile([1.0], q)
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_bootstrap_bounds_are_the_quantile_rule_of_the_resampled_means() -> None:
    values = [0.0, 1.0, 5.0]
    # By hand: the same draws, sorted; three estimates and alpha = 0.5, so the bounds sit at
    # h = 2 * 0.25 = 0.5 and h = 2 * 0.75 = 1.5, halfway between neighbouring ranks.
    rng = random.Random(11)
    means = sorted(statistics.fmean(rng.choices(values, k=3)) for _ in range(3))
    iv = bootstrap_mean(values, confidence=0.5, resamples=3, seed=11)
    assert iv.value == 2.0
    assert iv.low == pytest.approx((means[0] + means[1]) / 2)
    assert iv.high == pytest.approx((means[1] + means[2]) / 2)
    # Five estimates: h = 1 and h = 3 are ranks exactly.
    rng = random.Random(11)
    means = sorted(statistics.fmean(rng.choices(values, k=3)) for _ in range(5))
    iv = bootstrap_mean(values, confidence=0.5, resamples=5, seed=11)
    assert (iv.low, iv.high) == (means[1], means[3])


# -- the bootstrap -----------------------------------------------------------------------------


def test_bootstrap_is_deterministic_for_a_seed() -> None:
    rng = random.Random(1)
    values = [rng.gauss(0, 1) for _ in range(25)]
    a, b = bootstrap_mean(values, seed=3), bootstrap_mean(values, seed=3)
    assert a == b
    assert (bootstrap_mean(values, seed=4).low, bootstrap_mean(values, seed=4).high) != (
        a.low,
        a.high,
    )
    assert a.value == statistics.fmean(values) and a.low < a.value < a.high


def test_bootstrap_mean_brackets_the_mean() -> None:
    values = [0.0] * 30 + [1.0] * 10
    iv = bootstrap_mean(values, seed=3)
    assert iv.value == 0.25
    assert 0.1 < iv.low < 0.25 < iv.high < 0.45
    assert tuple(bootstrap_mean([0.5] * 5))[1:] == (0.5, 0.5)
    assert tuple(bootstrap_mean([0.3], resamples=50))[1:] == (0.3, 0.3)


def test_bootstrap_ci_of_any_statistic() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 100.0]
    median = bootstrap_ci(values, statistics.median, resamples=500, seed=2)
    assert median.value == 3.0 and median.low <= 3.0 <= median.high <= 100.0
    assert median == bootstrap_ci(values, statistics.median, resamples=500, seed=2)
    # The mean as the statistic is bootstrap_mean.
    assert bootstrap_ci(values, statistics.fmean, seed=9) == bootstrap_mean(values, seed=9)
    # Items need not be numbers: a success rate of labelled outcomes.
    outcomes = ["success"] * 6 + ["failure"] * 4
    rate = bootstrap_ci(outcomes, lambda d: d.count("success") / len(d), seed=0)
    assert rate.value == 0.6 and 0.0 <= rate.low < 0.6 < rate.high <= 1.0


@pytest.mark.parametrize(
    "bad", [dict(values=[]), dict(confidence=1.0), dict(confidence=0.0), dict(resamples=0)]
)
def test_bootstrap_refuses_bad_parameters(bad: dict) -> None:
    kw: dict = {"values": [1.0, 2.0], **bad}
    with pytest.raises(ValueError):
        bootstrap_mean(kw.pop("values"), **kw)


def test_paired_difference_sees_a_clear_shift_and_not_noise() -> None:
    rng = random.Random(0)
    before = [rng.random() for _ in range(30)]
    shifted = [b + 0.3 + rng.uniform(-0.05, 0.05) for b in before]
    up = paired_difference(before, shifted)
    assert 0.25 < up.value < 0.35 and up.low > 0, up
    down = paired_difference(shifted, before)
    assert down.high < 0 and down.value == pytest.approx(-up.value)
    # Differences of +-0.1 in equal numbers: mean 0, the interval straddles it.
    noise = [b + (0.1 if i % 2 else -0.1) for i, b in enumerate(before)]
    flat = paired_difference(before, noise)
    assert flat.value == pytest.approx(0.0, abs=1e-12)
    assert flat.low < 0 < flat.high, flat
    # The pairs are what is resampled: the interval is that of the differences' mean.
    diffs = [a - b for b, a in zip(before, shifted, strict=True)]
    assert up == bootstrap_mean(diffs)
    with pytest.raises(ValueError):
        paired_difference([1.0, 2.0], [1.0])


def test_stratified_mean_weighs_strata_equally_and_resamples_within_each() -> None:
    small, large = [1.0, 1.0], [0.0] * 8
    iv = stratified_mean([small, large], resamples=300)
    assert iv.value == 0.5  # not the pooled 0.2
    # Constant strata never vary whatever is drawn from them.
    assert (iv.low, iv.high) == (0.5, 0.5)
    mixed = [[0.0, 1.0, 1.0, 0.0, 1.0], [0.2, 0.4, 0.9]]
    a = stratified_mean(mixed, seed=4)
    assert a == stratified_mean(mixed, seed=4)
    assert a.low < a.value < a.high
    # One stratum is the plain bootstrap of the mean (the same draws).
    assert stratified_mean([mixed[0]], seed=4) == bootstrap_mean(mixed[0], seed=4)
    with pytest.raises(ValueError):
        stratified_mean([])
    with pytest.raises(ValueError):
        stratified_mean([[1.0], []])


# -- the sign test -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wins", "losses", "p"),
    [
        (0, 0, 1.0),
        (1, 0, 1.0),  # 2 * 1/2
        (1, 1, 1.0),
        (3, 0, 0.25),  # 2 * 1/8
        (5, 0, 0.0625),  # 2 * 1/32
        (0, 5, 0.0625),
        (6, 0, 0.03125),  # 2 * 1/64: the fewest tasks that clear 0.95
        (8, 0, 0.0078125),  # 2 * 1/256
        (6, 2, 0.2890625),  # 2 * (1 + 8 + 28) / 256
        (9, 1, 22 / 1024),  # 2 * (1 + 10) / 1024
        (1, 9, 22 / 1024),
        (10, 5, 0.3017578125),  # 2 * (1 + 15 + 105 + 455 + 1365 + 3003) / 32768
    ],
)
def test_sign_test_hand_computed(wins: int, losses: int, p: float) -> None:
    assert sign_test_p(wins, losses) == p


def test_sign_test_matches_enumeration() -> None:
    for n in range(1, 11):
        for wins in range(n + 1):
            observed = abs(wins - n / 2)
            extreme = sum(
                abs(sum(bits) - n / 2) >= observed for bits in itertools.product((0, 1), repeat=n)
            )
            assert sign_test_p(wins, n - wins) == pytest.approx(extreme / 2**n), (wins, n)


def test_sign_test_refuses_negative_counts() -> None:
    with pytest.raises(ValueError):
        sign_test_p(-1, 3)
    assert math.isclose(sign_test_p(100, 100), 1.0)
