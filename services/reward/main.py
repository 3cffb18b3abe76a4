"""Entry point: ``python -m services.reward``."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aios_rl.bus import Service, configure_logging, connect, load_settings, provision
from contracts import Episode, Names

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


async def serve(settings: RewardSettings) -> None:
    async with connect(settings.nats_url, name="reward", names=Names(settings.namespace)) as bus:
        await provision(bus)
        await build(bus, settings).run()


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(RewardSettings, argv, prog="aios-rl-reward")
    configure_logging("reward", fmt=settings.log_format, level=settings.log_level)
    asyncio.run(serve(settings))
