"""Entry point: ``python -m services.replay``.

One instance: the lane index lives in the process (rebuilt from the ``REPLAY`` stream at start-up),
so replicas sharing the durable consumer would each index only part of the lanes.
"""

from __future__ import annotations

from collections.abc import Sequence

from aios_rl.bus import Bus, Service, load_settings, run_service
from contracts import Episode, ReplayBatch, ReplaySampleRequest

from . import __version__
from .handlers import ReplayState, on_compared, rebuild, sample, stats
from .settings import ReplaySettings


def build(bus: Bus, settings: ReplaySettings) -> Service:
    """The replay service on ``bus``, not yet running; it indexes the stream once it runs."""
    svc = Service(
        bus,
        name="replay",
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description="Routes compared episodes into replay lanes; serves seeded batches.",
    )
    state = ReplayState()
    svc.consume(
        "replay", Episode, on_compared(bus, settings, state), concurrency=settings.concurrency
    )
    svc.endpoint(
        "sample",
        bus.names.replay_sample(),
        ReplaySampleRequest,
        sample(bus, settings, state),
        concurrency=settings.sample_concurrency,
        reply=ReplayBatch,
    )
    svc.task(rebuild(bus, settings, state))
    svc.stats(lambda: stats(state))
    return svc


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(ReplaySettings, argv, prog="aios-rl-replay")
    run_service("replay", settings, lambda bus: build(bus, settings).run())
