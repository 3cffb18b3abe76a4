"""Settings of the campaign service."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.bus import ServiceSettings


@dataclass(frozen=True, kw_only=True)
class CampaignSettings(ServiceSettings):
    """Drive campaigns: epochs of rollouts, verdicts, pointer decisions and training."""

    verdict_timeout_s: float = 60.0
    """Deadline for the comparison service's epoch verdict (past it: comparison_failed, a hold)."""
    train_timeout_s: float = 900.0
    """Deadline for one attempt at a trainer update."""
    train_attempts: int = 5
    """Attempts at an update when the trainer is unavailable (it is idempotent)."""
    train_retry_s: float = 2.0
    """Pause between attempts."""
    recheck_s: float = 1.0
    """How often a collecting epoch re-reads its arrivals when no episode wakes it."""
    concurrency: int = 8
    """Compared episodes counted at once."""
    rail_timeout_s: float = 30.0
    """Deadline for the RAIL service's decision on one group (past it, or with no RAIL service
    answering, the round is retried with back-off: the campaign waits for RAIL)."""
    retry_initial_s: float = 1.0
    """First pause after a transient error (a NATS outage, a service restarting); doubles up to
    ``retry_max_s``."""
    retry_max_s: float = 30.0
    """Longest pause between retries of a campaign step."""
    retry_limit: int = 200
    """Transient errors in a row after which the campaign fails (at the longest pause, about
    1.5 hours of an outage); 0: retry for ever."""

    def __post_init__(self) -> None:
        if not 0 < self.retry_initial_s <= self.retry_max_s:
            raise ValueError(
                "retry_initial_s must be above 0 and at most retry_max_s, got "
                f"{self.retry_initial_s} and {self.retry_max_s}."
            )
        if self.retry_limit < 0:
            raise ValueError(f"retry_limit must be 0 or more, got {self.retry_limit}.")
