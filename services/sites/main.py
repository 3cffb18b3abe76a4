"""Entry point: ``python -m services.sites``.

One instance: a session's state lives in the process that opened it, and the browser reaches
that process by its URL, so replicas could not share sessions.
"""

from __future__ import annotations

from collections.abc import Sequence

from aios_rl.bus import Bus, Service, load_settings, run_service
from contracts import SiteClose, SiteOpen, SiteResult, SiteResultRequest, SiteSession

from . import __version__
from .handlers import SitesState, close_session, open_session, result, stats
from .logic import Sessions
from .settings import SitesSettings
from .web import build_app, http_server


def build(bus: Bus, settings: SitesSettings) -> tuple[Service, SitesState]:
    """The sites service on ``bus`` and its state, not yet running (the HTTP server starts with
    the service)."""
    svc = Service(
        bus,
        name="sites",
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description="The local web sites browser episodes run against; judges their sessions.",
    )
    state = SitesState(Sessions(limit=settings.max_sessions, idle_s=settings.idle_expiry_s))
    names, n = bus.names, settings.concurrency
    svc.endpoint(
        "open",
        names.sites("open"),
        SiteOpen,
        open_session(settings, state),
        concurrency=n,
        reply=SiteSession,
    )
    svc.endpoint(
        "result",
        names.sites("result"),
        SiteResultRequest,
        result(state),
        concurrency=n,
        reply=SiteResult,
    )
    svc.endpoint(
        "close",
        names.sites("close"),
        SiteClose,
        close_session(state),
        concurrency=n,
        reply=SiteResult,
    )
    svc.task(http_server(build_app(state), settings, state))
    svc.stats(lambda: stats(state))
    return svc, state


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(SitesSettings, argv, prog="aios-rl-sites")
    run_service("sites", settings, lambda bus: build(bus, settings)[0].run())
