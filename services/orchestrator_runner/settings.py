"""Settings of the orchestrator runner."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.bus import ServiceSettings


@dataclass(frozen=True, kw_only=True)
class OrchestratorRunnerSettings(ServiceSettings):
    """Run orchestrator episodes: one decision each, asked of the sampler."""

    concurrency: int = 8
    """Episodes run at once by one replica."""
    act_timeout_s: float = 30.0
    """Deadline for the sampler's answer."""
