"""Entry point: ``python -m services.dashboard``.

Read-only: it watches and reads the bus, never publishes to a pipeline subject, never moves a
pointer. Any number of instances may run (each keeps its own view).
"""

from __future__ import annotations

from collections.abc import Sequence

from aios_rl.bus import Bus, Service, load_settings, run_service
from aios_rl.httpserve import base_url_of, listen, serve_state
from aios_rl.state import Objects
from contracts.subjects import OBJECTS_EVIDENCE

from . import __version__
from .handlers import DashboardState, watchers
from .logic import View
from .settings import DashboardSettings
from .web import build_app


def build(bus: Bus, settings: DashboardSettings) -> tuple[Service, DashboardState]:
    """The dashboard service on ``bus`` and its state, not yet running: its port is bound
    already, and its URL is in its ``$SRV.INFO`` metadata (``url``), so ``aios-rl
    dashboard`` and tests find it. Raises ``OSError`` when the port cannot be bound."""
    sock = listen(
        settings.host, settings.port, service="dashboard", fallback=settings.port_fallback
    )
    url = base_url_of(sock, settings.host, settings.public_url)
    svc = Service(
        bus,
        name="dashboard",
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description="Read-only live view of the bus (HTTP) and Prometheus metrics.",
        metadata={"url": url},
    )
    state = DashboardState(View(feed_size=settings.feed_size))
    evidence = Objects(bus, bus.names.bucket(OBJECTS_EVIDENCE))
    app = build_app(state, evidence.get)

    svc.task(
        serve_state(
            app,
            state,
            service="dashboard",
            host=settings.host,
            port=settings.port,
            public_url=settings.public_url,
            sock=sock,
        )
    )
    for task in watchers(bus, state, refresh_s=settings.refresh_s, history_s=settings.history_s):
        svc.task(task)
    svc.stats(
        lambda: {
            "episodes": float(len(state.view.feed)),
            "campaigns": float(len(state.view.records)),
            "checkpoints": float(len(state.view.metas)),
            "skipped": float(state.skipped),
        }
    )
    return svc, state


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(DashboardSettings, argv, prog="aios-rl-dashboard")
    run_service("dashboard", settings, lambda bus: build(bus, settings)[0].run())
