"""The summary of an evaluation's episodes (the intervals themselves: tests/test_stats.py)."""

from __future__ import annotations

import pytest

from aios_rl.cli.evaluation import summarize
from aios_rl.stats import bootstrap_mean, wilson
from contracts import Episode


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
    assert s.success == wilson(2, 5) and s.partial == wilson(1, 5)
    assert s.reward == bootstrap_mean([1.0, 0.9, 0.25, 0.0, 0.0])
    with pytest.raises(ValueError):
        summarize([])
