"""Settings of the oracle teacher."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.bus import ServiceSettings


@dataclass(frozen=True, kw_only=True)
class OracleSettings(ServiceSettings):
    """The oracle teacher: judges shell episodes from their task's ground truth."""

    concurrency: int = 16
    """Requests answered at once by one process."""
    task_cache_size: int = 512
    """Shell tasks kept decoded in memory (tasks are content-addressed, so never stale)."""

    def __post_init__(self) -> None:
        for name in ("concurrency", "task_cache_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
