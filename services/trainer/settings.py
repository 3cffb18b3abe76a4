"""Settings of the trainer service."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.bus import ServiceSettings


@dataclass(frozen=True, kw_only=True)
class TrainerServiceSettings(ServiceSettings):
    """Run policy updates on ``trainer.cmd.update``."""

    backend: str = "tiny"
    """Student backend of the initial checkpoint."""
    init_seed: int = 0
    """Seed of the initial checkpoint stored at start-up when none is active."""
    max_episodes: int = 4096
    """Most fresh episodes one online update reads."""
    read_timeout_s: float = 30.0
    """Deadline for reading an update's episodes from the stream."""
    torch_threads: int = 1
    """Threads torch may use (services share 2 cores)."""
