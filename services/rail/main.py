"""Entry point: ``python -m services.rail``.

One instance: a campaign's controller lives in the process (its state and weights are stored
after every change, so a restarted instance resumes from the last stored version)."""

from __future__ import annotations

from aios_rl.bus import Bus, Service, load_settings, run_service
from contracts import RailDecisions
from contracts.rail import RailDecideRequest, RailTrace

from . import __version__
from .handlers import Rail
from .settings import RailServiceSettings


def build(bus: Bus, settings: RailServiceSettings) -> tuple[Service, Rail]:
    """The rail service on ``bus`` (not yet running) and its controllers."""
    rail = Rail(bus, settings)
    svc = Service(
        bus,
        name="rail",
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description="RAIL: decides where and how to branch rollouts, learns from the traces.",
    )
    svc.endpoint(
        "decide", bus.names.rail_decide(), RailDecideRequest, rail.decide, reply=RailDecisions
    )
    svc.consume("rail", RailTrace, rail.on_trace, concurrency=1)
    svc.stats(rail.stats)
    return svc, rail


def main(argv: list[str] | None = None) -> None:
    settings = load_settings(RailServiceSettings, argv, prog="aios-rl-rail")

    async def serve(bus: Bus) -> None:
        svc, _ = build(bus, settings)
        await svc.run()

    run_service("rail", settings, serve)
