"""Entry point: ``python -m services.sampler``."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aios_rl.bus import Bus, Service, load_settings, run_service
from aios_rl.state.checkpoints import CheckpointRegistry
from aios_rl.student.engine import LMEngine
from contracts import ActRequest, ActResponse, CompletionRequest, CompletionResponse

from . import __version__
from .handlers import Sampler
from .settings import SamplerSettings


def build(
    bus: Bus, settings: SamplerSettings, *, engine: LMEngine | None = None
) -> tuple[Service, Sampler]:
    """The sampler service on ``bus`` (not yet running) and its state; ``engine``: a started
    inference engine to serve with (its owner closes it), instead of one of its own."""
    torch.set_num_threads(settings.torch_threads)
    sampler = Sampler(CheckpointRegistry(bus), settings, engine=engine, bus=bus)
    svc = Service(
        bus,
        name="sampler",
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description=(
            "Serves the student policy: policy.act with dynamic batching and hot reload; "
            "policy.complete, chat completions of a language-model student."
        ),
        # A request with no candidates needs a student that writes free text: the status
        # endpoint's extra.active_free_text says whether the served one does (1, 0; -1: none yet).
        metadata={"free_text": "status.extra.active_free_text"},
    )
    svc.endpoint(
        "act",
        bus.names.policy_act(),
        ActRequest,
        sampler.act,
        concurrency=settings.concurrency,
        reply=ActResponse,
    )
    svc.endpoint(
        "complete",
        bus.names.policy_complete(),
        CompletionRequest,
        sampler.complete,
        concurrency=settings.concurrency,
        reply=CompletionResponse,
    )
    svc.task(sampler.follow_active)
    svc.stats(sampler.stats)
    return svc, sampler


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(SamplerSettings, argv, prog="aios-rl-sampler")

    async def serve(bus: Bus) -> None:
        svc, sampler = build(bus, settings)
        try:
            await svc.run()
        finally:
            await sampler.batcher.close()
            if sampler.engine is not None and sampler.owns_engine:
                await sampler.engine.close()

    run_service("sampler", settings, serve)
