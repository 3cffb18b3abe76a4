"""Entry point: ``python -m services.runner --env <name>`` (deployed as ``<name>-runner``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aios_rl.bus import Bus, Service, provision, run_service
from aios_rl.envs.base import EnvironmentHost, EnvSpec
from aios_rl.envs.runner import RunnerSettings
from contracts import EnvClose, EnvOpen, EnvState, EnvStep, RolloutJob, Topology
from contracts.subjects import runner_consumer, runner_name

from . import __version__
from .agent import AgentDriver
from .handlers import Runner
from .sessions import SessionHandlers, Sessions
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
    if settings.max_sessions > 0:  # episodes agents drive from outside
        sessions = runner.sessions = SessionHandlers(
            host,
            runner.task,
            runner.store.list,
            max_steps=settings.max_steps,
            sessions=Sessions(max_open=settings.max_sessions, idle_s=settings.session_idle_s),
        )
        env, instance = spec.name, sessions.instance
        for verb, subject, request, handler in (
            ("env-open", bus.names.env_open(env), EnvOpen, sessions.open),
            ("env-step", bus.names.env_step(env, instance), EnvStep, sessions.step),
            ("env-close", bus.names.env_close(env, instance), EnvClose, sessions.close),
        ):
            svc.endpoint(
                verb,
                subject,
                request,
                handler,  # type: ignore[arg-type]
                concurrency=settings.max_sessions,
                reply=EnvState,
            )
        svc.task(sessions.expire_idle)
        if settings.agent_cmd:
            runner.agent = AgentDriver(bus, spec.name, settings, sessions)
    svc.stats(runner.stats)
    return svc, runner


def main(argv: Sequence[str] | None = None) -> None:
    spec, settings = settings_for(argv)

    async def serve(bus: Bus) -> None:
        await provision_runner(bus, spec)
        svc, runner = build(bus, spec, settings)
        if runner.agent is not None:
            await runner.agent.check()  # the agent's sandbox works here, or the runner stops
        try:
            await svc.run()
        finally:
            if runner.sessions is not None:
                await runner.sessions.close_all()
            await runner.host.aclose()

    run_service(runner_name(spec.name), settings, serve)
