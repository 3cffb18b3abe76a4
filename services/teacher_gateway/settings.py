"""Settings of the teacher gateway (its run-time settings live in KV ``control``)."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.bus import ServiceSettings


@dataclass(frozen=True, kw_only=True)
class GatewayServiceSettings(ServiceSettings):
    """Teacher gateway: which episodes get a teacher, and the compact request it is sent.

    The backend, the request timeout and the success sample rate are read from KV ``control``
    (``GatewaySettings`` under ``gateway.<control_id>``) and followed live; the ``default_*``
    values below only seed that key when it does not exist yet."""

    control_id: str = "default"
    """Which ``gateway.<id>`` control key this gateway follows."""
    default_backend: str = "oracle"
    """Backend written into a missing control key (``none`` turns teaching off)."""
    default_timeout_s: float = 30.0
    """Request timeout written into a missing control key."""
    default_success_sample_rate: float = 0.1
    """Share of successful episodes sent to the teacher (calibration), for a missing key."""
    sample_seed: int = 0
    """Seed of the success sample: the same seed picks the same successes, on every replica."""
    concurrency: int = 32
    """Episodes handled at once by one process (a slow teacher holds one slot per episode)."""
    cache_size: int = 4096
    """Teacher answers kept for identical requests (least recently used dropped first)."""
    max_steps: int = 40
    """Most steps of a trajectory shown to the teacher (the first quarter and the rest from the
    end are kept)."""
    max_observation_chars: int = 600
    """Longest observation shown (head and tail kept around a marker)."""
    max_candidates: int = 16
    """Most candidate actions shown per step."""
    max_action_chars: int = 300
    """Longest action or candidate label shown (a longer one is cut and ends with ``…``)."""
    max_statement_chars: int = 2000
    """Longest task statement shown."""
    max_report_chars: int = 2000
    """Longest environment report shown."""

    def __post_init__(self) -> None:
        for name in (
            "concurrency",
            "cache_size",
            "max_steps",
            "max_observation_chars",
            "max_candidates",
            "max_action_chars",
            "max_statement_chars",
            "max_report_chars",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if not self.default_timeout_s > 0:
            raise ValueError(f"default_timeout_s must be > 0, got {self.default_timeout_s}.")
        if not 0.0 <= self.default_success_sample_rate <= 1.0:
            raise ValueError(
                "default_success_sample_rate must be within [0, 1], "
                f"got {self.default_success_sample_rate}."
            )
