"""Comparison, pure: the episode rule, the running statistics and the epoch verdict are
:mod:`aios_rl.comparison` (shared with the in-process kernel, which compares an epoch's episodes
without the bus); this service applies them to what it stores in KV."""

from aios_rl.comparison import (
    MAX_ABS_REWARD,
    OUTCOME_RANK,
    ComparedMark,
    CompareRule,
    PendingComparison,
    TaskStats,
    add_episode,
    check_pending,
    check_stats,
    checked_reward,
    decide,
    epoch_verdict,
    expire,
    mark_compared,
    reference_for,
    with_comparison,
)

__all__ = [
    "MAX_ABS_REWARD",
    "OUTCOME_RANK",
    "CompareRule",
    "ComparedMark",
    "PendingComparison",
    "TaskStats",
    "add_episode",
    "check_pending",
    "check_stats",
    "checked_reward",
    "decide",
    "epoch_verdict",
    "expire",
    "mark_compared",
    "reference_for",
    "with_comparison",
]
