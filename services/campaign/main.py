"""Entry point: ``python -m services.campaign``."""

from __future__ import annotations

from collections.abc import Sequence

from aios_rl.bus import Bus, Service, load_settings, run_service
from contracts import (
    CampaignStatus,
    Episode,
    ResumeCampaign,
    StartCampaign,
    StatusCampaign,
    StopCampaign,
)

from . import __version__
from .handlers import Campaigns
from .settings import CampaignSettings


def build(bus: Bus, settings: CampaignSettings) -> tuple[Service, Campaigns]:
    """The campaign service on ``bus`` (not yet running) and its state."""
    campaigns = Campaigns(bus, settings)
    svc = Service(
        bus,
        name="campaign",
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description="Runs campaigns: collect, compare, decide (promote / hold / roll back), train.",
    )
    names = bus.names
    svc.endpoint(
        "start", names.campaign_cmd("start"), StartCampaign, campaigns.start, reply=CampaignStatus
    )
    svc.endpoint(
        "stop", names.campaign_cmd("stop"), StopCampaign, campaigns.stop, reply=CampaignStatus
    )
    svc.endpoint(
        "campaign-status",
        names.campaign_cmd("status"),
        StatusCampaign,
        campaigns.status,
        reply=CampaignStatus,
    )
    svc.endpoint(
        "resume",
        names.campaign_cmd("resume"),
        ResumeCampaign,
        campaigns.resume,
        reply=CampaignStatus,
    )
    svc.consume("campaign", Episode, campaigns.on_compared, concurrency=settings.concurrency)
    svc.task(campaigns.resume_all)
    svc.stats(
        lambda: {"campaigns_driven": float(sum(not t.done() for t in campaigns.drivers.values()))}
    )
    return svc, campaigns


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(CampaignSettings, argv, prog="aios-rl-campaign")

    async def serve(bus: Bus) -> None:
        svc, campaigns = build(bus, settings)
        try:
            await svc.run()
        finally:
            await campaigns.close()

    run_service("campaign", settings, serve)
