"""Entry point: ``python -m services.shell_runner``."""

from __future__ import annotations

from collections.abc import Sequence

from aios_rl.bus import Bus, Service, load_settings, run_service
from aios_rl.envs.runner import runner_service
from aios_rl.envs.shell.sandbox import Executor, SandboxConfig, policy_executor

from . import __version__
from .handlers import Runner
from .settings import ShellRunnerSettings


def executor_for(settings: ShellRunnerSettings) -> Executor:
    """The sandbox for policy commands, checked (raises ``SandboxUnavailable`` otherwise)."""
    return policy_executor(
        SandboxConfig(
            cpu_seconds=settings.cpu_seconds,
            memory_bytes=settings.memory_mb << 20,
            max_processes=settings.max_processes,
            wall_timeout_s=settings.command_timeout_s,
        )
    )


def build(
    bus: Bus, settings: ShellRunnerSettings, executor: Executor | None = None
) -> tuple[Service, Runner]:
    runner = Runner(bus, settings, executor or executor_for(settings))
    svc = runner_service(
        bus,
        settings,
        name="shell-runner",
        version=__version__,
        description="Runs shell bug-fix episodes in the sandbox.",
        run=runner.run,
        stats=lambda: {
            "episodes": float(runner.episodes),
            "tasks_cached": float(len(runner.tasks)),
            **{f"outcome_{k}": float(v) for k, v in runner.outcomes.items()},
        },
    )
    return svc, runner


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(ShellRunnerSettings, argv, prog="aios-rl-shell-runner")
    run_service("shell-runner", settings, lambda bus: build(bus, settings)[0].run())


__all__ = ["build", "executor_for", "main"]
