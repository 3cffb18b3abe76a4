"""Entry point: ``python -m services.teacher_gateway``.

Replicas share the durable consumer ``teacher-gateway``; each keeps its own answer cache and
follows the same control key.
"""

from __future__ import annotations

from collections.abc import Sequence

from aios_rl.bus import Bus, Service, load_settings, run_service
from contracts import Episode

from . import __version__
from .handlers import Gateway
from .settings import GatewayServiceSettings

NAME = "teacher-gateway"


def build(bus: Bus, settings: GatewayServiceSettings) -> tuple[Service, Gateway]:
    """The gateway service on ``bus`` (not yet running) and its state."""
    gateway = Gateway(bus, settings)
    svc = Service(
        bus,
        name=NAME,
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description="Decides which episodes get a teacher; normalises its answer; publishes taught.",
    )
    svc.consume(NAME, Episode, gateway.on_completed, concurrency=settings.concurrency)
    svc.task(gateway.follow_control)
    svc.stats(gateway.stats)
    return svc, gateway


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(GatewayServiceSettings, argv, prog="aios-rl-teacher-gateway")
    run_service(NAME, settings, lambda bus: build(bus, settings)[0].run())
