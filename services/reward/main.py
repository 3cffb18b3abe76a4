"""Entry point: ``python -m services.reward``."""

from __future__ import annotations

from collections.abc import Sequence

from aios_rl.bus import Service, load_settings, run_service
from contracts import Episode

from . import __version__
from .handlers import on_taught
from .settings import RewardSettings


def build(bus, settings: RewardSettings) -> Service:
    """The reward service on ``bus``, not yet running."""
    svc = Service(
        bus,
        name="reward",
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description="Fuses environment reward with teacher shaping.",
    )
    svc.consume("reward", Episode, on_taught(bus, settings), concurrency=settings.concurrency)
    return svc


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(RewardSettings, argv, prog="aios-rl-reward")
    run_service("reward", settings, lambda bus: build(bus, settings).run())
