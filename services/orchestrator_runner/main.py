"""Entry point: ``python -m services.orchestrator_runner``."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aios_rl.bus import Bus, Service, configure_logging, connect, load_settings, provision
from contracts import Names, RolloutJob

from . import __version__
from .handlers import Runner
from .settings import OrchestratorRunnerSettings


def build(bus: Bus, settings: OrchestratorRunnerSettings) -> tuple[Service, Runner]:
    runner = Runner(bus, settings)
    svc = Service(
        bus,
        name="orchestrator-runner",
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description="Runs orchestrator decision episodes (dispatch, preflight, clarity).",
    )
    svc.consume("orchestrator-runner", RolloutJob, runner.run, concurrency=settings.concurrency)
    svc.stats(
        lambda: {"episodes": float(runner.episodes), "tasks_cached": float(len(runner.tasks))}
    )
    return svc, runner


async def serve(settings: OrchestratorRunnerSettings) -> None:
    async with connect(
        settings.nats_url, name="orchestrator-runner", names=Names(settings.namespace)
    ) as bus:
        await provision(bus)
        svc, _ = build(bus, settings)
        await svc.run()


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(OrchestratorRunnerSettings, argv, prog="aios-rl-orchestrator-runner")
    configure_logging("orchestrator-runner", fmt=settings.log_format, level=settings.log_level)
    asyncio.run(serve(settings))
