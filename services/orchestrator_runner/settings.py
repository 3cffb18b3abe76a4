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
    ack_wait_s: float = 0.0
    """Seconds before the jobs a dead replica held go to another (0: the contract's ack wait,
    120 s). Running episodes send heartbeats, so a short wait (e.g. 10) only speeds recovery.
    Give every replica the same value (env ``AIOS_ACK_WAIT_S``): the runner sets it on the shared
    consumer at start and other services' start-ups keep it; at 0 the runner restores the
    contract's. At least 1 s."""

    def __post_init__(self) -> None:
        if self.ack_wait_s != 0 and not self.ack_wait_s >= 1.0:
            raise ValueError(
                f"ack_wait_s must be 0 (the contract's) or at least 1 second, got {self.ack_wait_s}."
            )
