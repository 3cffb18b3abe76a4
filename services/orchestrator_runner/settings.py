"""Settings of the orchestrator runner."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.envs.runner import RunnerSettings


@dataclass(frozen=True, kw_only=True)
class OrchestratorRunnerSettings(RunnerSettings):
    """Run orchestrator episodes: one decision each, asked of the sampler. ``ack_wait_s`` 0 keeps
    the contract's 120 s."""
