"""Entry point: ``python -m services.runner --env <name>`` (deployed as ``<name>-runner``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aios_rl.bus import Bus, Service, provision, run_service
from aios_rl.envs.base import EnvironmentHost, EnvSpec
from aios_rl.envs.runner import RunnerSettings
from contracts import RolloutJob, Topology
from contracts.subjects import runner_consumer, runner_name

from . import __version__
from .handlers import Runner
from .settings import settings_for

__all__ = ["build", "main", "provision_runner", "runner_topology"]


def runner_topology(bus: Bus, spec: EnvSpec[Any]) -> Topology:
    """The one durable consumer ``<env>-runner`` every replica of this environment shares."""
    return Topology(
        streams=[],
        consumers=[runner_consumer(bus.names, spec.name, spec.ack_wait_s)],
        buckets=[],
        object_stores=[],
    )


async def provision_runner(bus: Bus, spec: EnvSpec[Any]) -> None:
    """Create the environment's consumer if the stack's topology does not declare it (an
    environment of the user's own); keeps it as it is otherwise."""
    await provision(bus, runner_topology(bus, spec))


def build(
    bus: Bus,
    spec: EnvSpec[Any],
    settings: RunnerSettings,
    host: EnvironmentHost[Any] | None = None,
) -> tuple[Service, Runner]:
    """The runner service of ``spec`` (its host made from ``settings`` unless given)."""
    host = host if host is not None else spec.host(settings)
    attach = getattr(host, "attach", None)
    if callable(attach):  # a host that needs the bus (a service to ask, evidence to keep)
        attach(bus)
    runner = Runner(bus, spec, settings, host)
    name = runner_name(spec.name)
    svc = Service(
        bus,
        name=name,
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description=spec.description or f"Runs {spec.name} episodes.",
        topology=runner_topology(bus, spec),
    )
    svc.consume(
        name,
        RolloutJob,
        runner.run,
        concurrency=settings.concurrency,
        ack_wait_s=settings.ack_wait_s or None,
    )
    svc.stats(runner.stats)
    return svc, runner


def main(argv: Sequence[str] | None = None) -> None:
    spec, settings = settings_for(argv)

    async def serve(bus: Bus) -> None:
        await provision_runner(bus, spec)
        svc, runner = build(bus, spec, settings)
        try:
            await svc.run()
        finally:
            await runner.host.aclose()

    run_service(runner_name(spec.name), settings, serve)
