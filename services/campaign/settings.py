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
