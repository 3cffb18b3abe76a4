"""Entry point: ``python -m services.comparison``.

All state is in the KV bucket ``comparison``, so replicas may share the durable consumer and a
restarted process carries on where the last one stopped.
"""

from __future__ import annotations

from collections.abc import Sequence

from aios_rl.bus import Bus, Service, load_settings, run_service
from contracts import Episode, EpochVerdict, EpochVerdictRequest

from . import __version__
from .handlers import ComparisonState, on_rewarded, stats, sweep, verdict
from .settings import ComparisonSettings
from .store import Store


def build(bus: Bus, settings: ComparisonSettings) -> Service:
    """The comparison service on ``bus``, not yet running."""
    svc = Service(
        bus,
        name="comparison",
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description="Compares each episode with the reference policy; epoch verdicts.",
    )
    state = ComparisonState(Store(bus, cas_attempts=settings.cas_attempts))
    svc.consume(
        "comparison", Episode, on_rewarded(bus, settings, state), concurrency=settings.concurrency
    )
    svc.endpoint(
        "verdict",
        bus.names.comparison_verdict(),
        EpochVerdictRequest,
        verdict(bus, settings, state),
        concurrency=settings.verdict_concurrency,
        reply=EpochVerdict,
    )
    svc.task(sweep(bus, settings, state))
    svc.stats(lambda: stats(state))
    return svc


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(ComparisonSettings, argv, prog="aios-rl-comparison")
    run_service("comparison", settings, lambda bus: build(bus, settings).run())
