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
    accuracy: float = 1.0
    """Below 1: the ``noisy-oracle`` backend, a fallible teacher: each hint and each verdict is
    wrong with probability ``1 - accuracy`` (``logic.garble``); it then answers
    ``teacher.request.noisy-oracle`` as the service ``teacher-noisy-oracle``."""
    noise_seed: int = 0
    """Fixes which hints and verdicts the noisy oracle gets wrong."""

    def __post_init__(self) -> None:
        for name in ("concurrency", "task_cache_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if not 0.0 <= self.accuracy <= 1.0:
            raise ValueError(f"accuracy must be within [0, 1], got {self.accuracy}.")

    @property
    def backend(self) -> str:
        """The backend name this oracle answers as: ``oracle``, or ``noisy-oracle`` below full
        accuracy."""
        return "oracle" if self.accuracy == 1.0 else "noisy-oracle"
