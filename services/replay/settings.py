"""Settings of the replay service."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.bus import ServiceSettings


@dataclass(frozen=True, kw_only=True)
class ReplaySettings(ServiceSettings):
    """Replay lanes: routes compared episodes into lanes, serves seeded batches to the trainer."""

    limit_positive: int = 20_000
    """Most episodes the positive lane keeps (all environments together); the oldest go first."""
    limit_neutral: int = 20_000
    """Most episodes the neutral lane keeps; the oldest go first."""
    limit_negative: int = 20_000
    """Most episodes the negative lane keeps; the oldest go first."""
    limit_diagnostic_only: int = 5_000
    """Most episodes the diagnostic_only lane keeps; the oldest go first."""
    concurrency: int = 4
    """Compared episodes routed at once by one process."""
    sample_concurrency: int = 4
    """Sample requests answered at once by one process."""
    max_sample_size: int = 512
    """Largest batch one sample request may ask for (a reply must stay under NATS max_payload)."""
    sample_timeout_s: float = 10.0
    """Deadline of one sample request, index rebuild wait included."""
    rebuild_timeout_s: float = 120.0
    """Deadline for reading the whole REPLAY stream into the index at start-up."""

    def __post_init__(self) -> None:
        for lane, limit in self.lane_limits().items():
            if limit < 1:
                raise ValueError(f"limit_{lane} must be >= 1, got {limit}.")
        for name in ("concurrency", "sample_concurrency", "max_sample_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        for name in ("sample_timeout_s", "rebuild_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}.")

    def lane_limits(self) -> dict[str, int]:
        """Lane -> the most episodes it keeps."""
        return {
            "positive": self.limit_positive,
            "neutral": self.limit_neutral,
            "negative": self.limit_negative,
            "diagnostic_only": self.limit_diagnostic_only,
        }
