"""Entry point: ``python -m services.trainer``."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aios_rl.bus import Bus, Service, load_settings, run_service
from contracts import TrainerUpdate, TrainerUpdateResult

from . import __version__
from .handlers import Trainer
from .settings import TrainerServiceSettings


def build(bus: Bus, settings: TrainerServiceSettings) -> tuple[Service, Trainer]:
    """The trainer service on ``bus`` (not yet running) and its state."""
    torch.set_num_threads(settings.torch_threads)
    trainer = Trainer(bus, settings)
    svc = Service(
        bus,
        name="trainer",
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description="PPO / GRPO updates of the student, written through the checkpoint registry.",
    )
    svc.endpoint(
        "update",
        bus.names.trainer_update(),
        TrainerUpdate,
        trainer.update,
        reply=TrainerUpdateResult,
    )
    svc.stats(lambda: {"updates": float(trainer.updates)})
    return svc, trainer


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(TrainerServiceSettings, argv, prog="aios-rl-trainer")

    async def serve(bus: Bus) -> None:
        svc, trainer = build(bus, settings)
        await trainer.ensure_initial()
        await svc.run()

    run_service("trainer", settings, serve)
