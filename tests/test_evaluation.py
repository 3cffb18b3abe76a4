"""Evaluation statistics: Wilson intervals, the bootstrap mean, the summary of episodes."""

from __future__ import annotations

import pytest

from aios_rl.cli.evaluation import bootstrap_mean, summarize, wilson
from contracts import Episode


def test_wilson_interval_matches_the_formula() -> None:
    iv = wilson(8, 10)
    assert iv.value == 0.8
    # Reference values of the Wilson score interval for 8/10 at 95 %.
    assert iv.low == pytest.approx(0.4902, abs=1e-4) and iv.high == pytest.approx(0.9433, abs=1e-4)
    none, every = wilson(0, 20), wilson(20, 20)
    assert none.low == 0.0 and 0 < none.high < 0.2
    assert every.high == 1.0 and 0.8 < every.low < 1.0
    with pytest.raises(ValueError):
        wilson(0, 0)


def test_bootstrap_mean_is_seeded_and_brackets_the_mean() -> None:
    values = [0.0] * 30 + [1.0] * 10
    a, b = bootstrap_mean(values, seed=3), bootstrap_mean(values, seed=3)
    assert a == b and a.value == 0.25
    assert 0.1 < a.low < 0.25 < a.high < 0.45
    constant = bootstrap_mean([0.5] * 5)
    assert (constant.low, constant.high) == (0.5, 0.5)
    with pytest.raises(ValueError):
        bootstrap_mean([])


def _ep(i: int, outcome: str, reward: float) -> Episode:
    return Episode(
        episode_id=f"e{i}", environment="shell", task_id="t", outcome=outcome, env_reward=reward
    )  # type: ignore[arg-type]


def test_summary_counts_outcomes() -> None:
    eps = [_ep(0, "success", 1.0), _ep(1, "success", 0.9), _ep(2, "partial", 0.25)]
    eps += [_ep(3, "failure", 0.0), _ep(4, "blocked", 0.0)]
    s = summarize(eps)
    assert s.episodes == 5 and s.blocked == 1
    assert s.success.value == 0.4 and s.partial.value == 0.2
    assert s.reward.value == pytest.approx(0.43)
    assert s.outcomes == {"success": 2, "partial": 1, "failure": 1, "blocked": 1}
    assert dict(s.rows())["success rate"].startswith("40.0% [")
    with pytest.raises(ValueError):
        summarize([])
