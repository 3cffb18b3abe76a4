"""The epoch verdict: one paired comparison of a candidate checkpoint with its reference."""

from __future__ import annotations

import msgspec

from ._base import Message
from .vocab import Verdict

__all__ = ["EnvVerdict", "EpochVerdict", "EpochVerdictRequest", "TaskDelta"]


class EpochVerdictRequest(Message, frozen=True, kw_only=True):
    """Compare ``candidate`` with ``reference`` over the tasks both ran (``tasks``; all shared
    tasks when empty)."""

    SCHEMA = "epoch_verdict_request.v1"

    campaign_id: str = ""
    epoch: int = 0
    candidate: str
    reference: str
    tasks: list[str] = []
    margin: float = 0.05
    """Per-task mean-reward differences within this margin count as ties."""
    confidence: float = 0.95
    environments: dict[str, str] = {}
    """Task id -> its environment, for the per-environment tests and the veto (a mixed
    campaign); empty: one pooled test only."""
    veto_margin: float = 0.1
    """An environment whose degradation test fires with a mean delta below ``-veto_margin``
    vetoes the pooled verdict: the whole student is ``worse``."""
    veto_confidence: float = 0.95
    """Confidence of the degradation test (one-sided, Bonferroni over the environments tested):
    about the share of epochs in which a student that did not change is rolled back for
    nothing is ``1 - veto_confidence``."""


class TaskDelta(msgspec.Struct, frozen=True, kw_only=True):
    """One task's paired numbers: mean reward of each policy and their difference."""

    task_id: str
    candidate_mean: float
    reference_mean: float
    candidate_runs: int
    reference_runs: int
    delta: float


class EnvVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """The same paired test on one environment's tasks only."""

    verdict: Verdict
    tasks: int = 0
    wins: int = 0
    losses: int = 0
    ties: int = 0
    mean_delta: float = 0.0
    ci_low: float = 0.0
    ci_high: float = 0.0
    sign_test_p: float = 1.0
    degradation_z: float = 0.0
    """The episode-level degradation test's statistic (stratified by task; negative: the
    candidate's rewards are lower)."""
    degraded: bool = False
    """The test fired (beyond the Bonferroni-corrected bar and the veto margin): this environment
    vetoes the whole student."""


class EpochVerdict(Message, frozen=True, kw_only=True):
    """The verdict for the whole student, with the numbers behind it."""

    SCHEMA = "epoch_verdict.v1"

    verdict: Verdict
    candidate: str
    reference: str
    tasks: int = 0
    wins: int = 0
    losses: int = 0
    ties: int = 0
    mean_delta: float = 0.0
    ci_low: float = 0.0
    ci_high: float = 0.0
    sign_test_p: float = 1.0
    reason: str = ""
    deltas: list[TaskDelta] = []
    per_env: dict[str, EnvVerdict] = {}
    """Each environment's own test (when the request named environments)."""
    vetoed_by: list[str] = []
    """Environments whose degradation turned the pooled verdict into ``worse``."""
    pooled: Verdict | None = None
    """The pooled verdict before any veto (``None``: no environments named)."""
