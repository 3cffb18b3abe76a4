"""Closed vocabularies shared by several contracts."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

import msgspec

__all__ = [
    "ENVIRONMENTS",
    "LANES",
    "OUTCOMES",
    "STAGES",
    "Algorithm",
    "Decision",
    "Environment",
    "EpisodeRole",
    "EpochPhase",
    "Lane",
    "Outcome",
    "PointerName",
    "RolloutStrategy",
    "Stage",
    "TeacherStatus",
    "TeacherVerdict",
    "Verdict",
]

Environment = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
"""The name of an environment (``shell``, ``orchestrator``, a user's own): a lower-case token,
since it is a subject token (``rollout.job.<env>``) and a task-store folder. Which names exist is
the environment registry's business (``aios_rl.envs.registry``), not the contracts'."""

Outcome = Literal["success", "partial", "failure", "blocked"]
"""How an episode ended, as its environment judged it."""

Stage = Literal["completed", "taught", "rewarded", "compared"]
"""The pipeline stages an episode passes, in order: ``episode.<stage>.<env>``."""

Verdict = Literal["better", "same", "worse", "comparison_failed"]
"""An episode (or an epoch) measured against the reference policy."""

Lane = Literal["positive", "neutral", "negative", "diagnostic_only"]
"""Replay lanes; ``diagnostic_only`` is never trained on."""

EpisodeRole = Literal["rollout", "reference", "eval"]
"""Why an episode ran: a training rollout, a reference run for comparison, or an evaluation."""

TeacherStatus = Literal["ok", "skipped", "timeout", "unparseable", "error"]
"""What became of the teacher request for an episode."""

TeacherVerdict = Literal["correct", "partially_correct", "incorrect", "unsure"]
"""A teacher's judgement of a trajectory."""

Algorithm = Literal["grpo", "ppo"]
"""Policy-gradient update rules the trainer offers."""

RolloutStrategy = Literal[
    "uniform",
    "entropy",
    "dapo-filter",
    "heuristic",
    "variance",
    "rail",
    "rail-budget-only",
    "rail-frozen",
]
"""How an epoch spends its rollouts: fixed groups (``uniform`` GRPO), ARPO's entropy trigger for
branching (``entropy``), uniform groups with tied groups dropped and resampled (``dapo-filter``,
DAPO's dynamic sampling), iterative branching from the highest-entropy states with growing
budgets (``heuristic``, RAIL's warm-up), half the budget then the rest where the predicted
reward variance ``p (1 - p)`` is highest (``variance``, a non-learned allocator), or the learned
RAIL controller (``rail``; its ablations ``rail-budget-only``, the regime fixed to neutral, and
``rail-frozen``, no refits once live)."""

EpochPhase = Literal["collect", "compare", "decide", "train", "done", "failed", "stopped"]
"""Where an epoch of a campaign stands."""

Decision = Literal["promote", "hold", "rollback_pre_update", "rollback_last_stable"]
"""The one decision an epoch takes for the whole student."""

PointerName = Literal["active", "pre_update_ref", "last_stable"]
"""The three checkpoint pointers kept in KV ``checkpoints``."""

ENVIRONMENTS: tuple[str, ...] = ("shell", "orchestrator", "browser")
"""The built-in environments the stack deploys a runner for (``<env>-runner``)."""
OUTCOMES: tuple[str, ...] = get_args(Outcome)
STAGES: tuple[str, ...] = get_args(Stage)
LANES: tuple[str, ...] = get_args(Lane)
