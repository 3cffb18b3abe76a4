"""Entry point: ``python -m services.orchestrator_runner``."""

from __future__ import annotations

from collections.abc import Sequence

from aios_rl.bus import Bus, Service, load_settings, run_service
from aios_rl.envs.runner import runner_service

from . import __version__
from .handlers import Runner
from .settings import OrchestratorRunnerSettings


def build(bus: Bus, settings: OrchestratorRunnerSettings) -> tuple[Service, Runner]:
    runner = Runner(bus, settings)
    svc = runner_service(
        bus,
        settings,
        name="orchestrator-runner",
        version=__version__,
        description="Runs orchestrator decision episodes (dispatch, preflight, clarity).",
        run=runner.run,
        stats=lambda: {
            "episodes": float(runner.episodes),
            "tasks_cached": float(len(runner.tasks)),
        },
    )
    return svc, runner


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(OrchestratorRunnerSettings, argv, prog="aios-rl-orchestrator-runner")
    run_service("orchestrator-runner", settings, lambda bus: build(bus, settings)[0].run())
