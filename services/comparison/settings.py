"""Settings of the comparison service."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.bus import ServiceSettings


@dataclass(frozen=True, kw_only=True)
class ComparisonSettings(ServiceSettings):
    """Comparison: each rollout against the reference policy on its task, and epoch verdicts."""

    margin: float = 0.05
    """Reward difference from the reference mean within which a rollout is a tie (then outcome
    rank decides)."""
    min_reference_runs: int = 1
    """Scored (not blocked) reference runs a task needs before rollouts on it are compared."""
    reference_deadline_s: float = 600.0
    """How long a rollout waits for usable reference results before it is resolved as
    ``comparison_failed``."""
    sweep_interval_s: float = 1.0
    """How often the background sweep resolves pending rollouts (expired, or whose reference
    became usable without waking them)."""
    bootstrap_resamples: int = 2000
    """Bootstrap resamples for the confidence interval of an epoch's mean delta."""
    bootstrap_seed: int = 0
    """Seed of the bootstrap: the same statistics always give the same interval."""
    concurrency: int = 8
    """Rewarded episodes handled at once by one process."""
    verdict_concurrency: int = 2
    """Epoch verdict requests answered at once by one process."""
    cas_attempts: int = 64
    """Compare-and-set attempts on a statistics key before the episode is retried later."""

    def __post_init__(self) -> None:
        if not self.margin >= 0:
            raise ValueError(f"margin must be >= 0, got {self.margin}.")
        if self.min_reference_runs < 1:
            raise ValueError(f"min_reference_runs must be >= 1, got {self.min_reference_runs}.")
        if not self.reference_deadline_s > 0:
            raise ValueError(f"reference_deadline_s must be > 0, got {self.reference_deadline_s}.")
        if not self.sweep_interval_s > 0:
            raise ValueError(f"sweep_interval_s must be > 0, got {self.sweep_interval_s}.")
        if self.bootstrap_resamples < 1:
            raise ValueError(f"bootstrap_resamples must be >= 1, got {self.bootstrap_resamples}.")
        for name in ("concurrency", "verdict_concurrency", "cas_attempts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
