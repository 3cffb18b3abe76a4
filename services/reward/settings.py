"""Settings of the reward service."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.bus import ServiceSettings


@dataclass(frozen=True, kw_only=True)
class RewardSettings(ServiceSettings):
    """Reward fusion: environment reward plus clipped, weighted teacher shaping."""

    teacher_weight: float = 0.3
    """Weight of the teacher's score (in [-1, 1]) added to the environment reward."""
    shaping_clip: float = 0.5
    """Largest absolute shaping a teacher can add or remove."""
    concurrency: int = 8
    """Episodes fused at once by one process."""

    def __post_init__(self) -> None:
        if self.teacher_weight < 0:
            raise ValueError(f"teacher_weight must be >= 0, got {self.teacher_weight}.")
        if self.shaping_clip < 0:
            raise ValueError(f"shaping_clip must be >= 0, got {self.shaping_clip}.")
