"""Settings of the rail service."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.bus import ServiceSettings


@dataclass(frozen=True, kw_only=True)
class RailServiceSettings(ServiceSettings):
    """Answer ``rail.decide`` for each campaign's controller; learn from ``rail.trace``."""

    seed: int = 0
    """Seeds every controller's scorer initialisation, fits and exploration."""
    restore_timeout_s: float = 120.0
    """Deadline for reading a campaign's traces back from the stream after a restart."""

    def __post_init__(self) -> None:
        if self.restore_timeout_s <= 0:
            raise ValueError(f"restore_timeout_s must be > 0, got {self.restore_timeout_s}.")
