"""``aios-rl up``: every service of the stack as its own OS process, logs merged with coloured
name prefixes, crashed processes restarted with back-off, everything stopped cleanly on Ctrl-C.
The embedded ``nats-server`` (or each node of an embedded cluster) is kept too: one that exits
(killed, out of memory) is started again on the same port, store and configuration, so the
services' reconnects find it and nothing the store holds is lost.

The planning (which processes, how many, restart delays) is pure and unit-tested; the process
handling is a thin loop per replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TextIO

from aios_rl.errors import AiosError
from aios_rl.proc import die_with_parent

from .services import SERVICES, ServiceEntry

__all__ = [
    "CHILD_DEFAULTS",
    "Broker",
    "PlanError",
    "Replica",
    "Supervisor",
    "child_env",
    "parse_scale",
    "plan",
    "restart_delay",
]

_COLOURS = (36, 32, 33, 35, 34, 91, 92, 93, 94, 95, 96)


class PlanError(AiosError, ValueError):
    """A ``--scale`` or ``--only`` argument names no service, or is malformed."""


@dataclass(frozen=True)
class Replica:
    """One process to run: a service and its replica number (1-based)."""

    service: ServiceEntry
    index: int

    @property
    def label(self) -> str:
        return f"{self.service.name}.{self.index}"


def parse_scale(items: Iterable[str], known: Iterable[str]) -> dict[str, int]:
    """``["browser-runner=4"]`` -> ``{"browser-runner": 4}``; raises ``PlanError``."""
    names = set(known)
    out: dict[str, int] = {}
    for item in items:
        name, sep, count = item.partition("=")
        if not sep or not count.strip().isdigit():
            raise PlanError(f"--scale takes NAME=N (e.g. reward=2), not {item!r}")
        if name not in names:
            raise PlanError(
                f"--scale names unknown service {name!r}; known: {', '.join(sorted(names))}"
            )
        out[name] = int(count)
    return out


def plan(
    services: Sequence[ServiceEntry] = SERVICES,
    *,
    scale: Mapping[str, int] | None = None,
    only: Iterable[str] | None = None,
) -> list[Replica]:
    """The processes to run. Raises ``PlanError`` for an unknown ``only`` name or for scaling a
    service that cannot share its work."""
    scale = dict(scale or {})
    known = {s.name for s in services}
    selected = set(only) if only else known
    unknown = selected - known
    if unknown:
        raise PlanError(
            f"--only names unknown service(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}"
        )
    replicas: list[Replica] = []
    for s in services:
        if s.name not in selected:
            continue
        n = scale.get(s.name, s.replicas)
        if n > 1 and not s.scalable:
            raise PlanError(f"{s.name} cannot be scaled: it keeps state that replicas cannot share")
        replicas.extend(Replica(s, i) for i in range(1, n + 1))
    return replicas


def restart_delay(failures: int, *, base: float = 0.5, cap: float = 30.0) -> float:
    """Back-off before restart number ``failures`` (1-based): 0.5 s, 1 s, 2 s, ... up to ``cap``."""
    if failures < 1:
        return 0.0
    return min(cap, base * 2 ** (failures - 1))


CHILD_DEFAULTS = {"OMP_WAIT_POLICY": "passive"}
"""Environment every service starts with unless the supervisor's own environment sets it.
``OMP_WAIT_POLICY=passive``: torch's OpenMP workers sleep at barriers instead of spinning, which
on cores shared with the other services made 2 torch threads 4-10x slower than 1
(``bench/results/threads.md``); with one thread (the default) it changes nothing."""


def child_env(
    base: Mapping[str, str],
    env: Mapping[str, str],
    service_env: Mapping[str, str],
    replica: Replica,
) -> dict[str, str]:
    """The environment of one replica's process: ``CHILD_DEFAULTS``, then ``base`` (the
    supervisor's own), the stack's ``env``, the service's own (its credentials), its replica
    number and unbuffered output."""
    return {
        **CHILD_DEFAULTS,
        **base,
        **env,
        **service_env,
        "AIOS_REPLICA": str(replica.index),
        "PYTHONUNBUFFERED": "1",
    }


class Broker(Protocol):
    """A server the supervisor keeps running (``stack.natsd.NatsServer``)."""

    @property
    def url(self) -> str: ...

    def exit_code(self) -> int | None: ...

    def start(self, timeout: float = ...) -> object: ...


class Supervisor:
    """Runs replicas as child processes until :meth:`stop`; restarts the ones that die, and the
    ``brokers`` (the embedded NATS servers) when they exit."""

    def __init__(
        self,
        replicas: Sequence[Replica],
        *,
        env: Mapping[str, str],
        service_env: Mapping[str, Mapping[str, str]] | None = None,
        out: TextIO = sys.stdout,
        colour: bool | None = None,
        grace_s: float = 15.0,
        healthy_after_s: float = 30.0,
        brokers: Sequence[Broker] = (),
        broker_check_s: float = 0.5,
    ) -> None:
        self.replicas = list(replicas)
        self.brokers = list(brokers)
        self.broker_check_s = broker_check_s
        """How often the brokers' processes are looked at."""
        self.broker_restarts = [0 for _ in self.brokers]
        self.env = dict(env)
        self.service_env = {name: dict(e) for name, e in (service_env or {}).items()}
        """Environment of one service's replicas on top of ``env`` (its NATS credentials)."""
        self.out = out
        self.colour = out.isatty() if colour is None else colour
        self.grace_s = grace_s
        self.healthy_after_s = healthy_after_s
        self._stop = asyncio.Event()
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.restarts: dict[str, int] = {r.label: 0 for r in self.replicas}
        width = max((len(r.label) for r in self.replicas), default=8)
        self._prefix = {
            r.label: (
                f"\x1b[{_COLOURS[i % len(_COLOURS)]}m{r.label:<{width}} |\x1b[0m "
                if self.colour
                else f"{r.label:<{width}} | "
            )
            for i, r in enumerate(self.replicas)
        }
        self._own_prefix = "\x1b[1maios-rl\x1b[0m | " if self.colour else "aios-rl | "

    def say(self, text: str) -> None:
        self.out.write(self._own_prefix + text + "\n")
        self.out.flush()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Run until :meth:`stop`, then SIGTERM every child, SIGKILL the ones still alive after
        the grace period."""
        async with asyncio.TaskGroup() as tg:
            for r in self.replicas:
                tg.create_task(self._keep_running(r))
            for b in self.brokers:
                tg.create_task(self._keep_serving(b))
        self.say("all services stopped")

    async def _keep_serving(self, broker: Broker, start_timeout_s: float = 30.0) -> None:
        """Start ``broker`` again (same port, store and configuration) whenever its process has
        exited, with back-off while it fails to start, until :meth:`stop`."""
        index = self.brokers.index(broker)
        failures = 0
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.broker_check_s):
                    await self._stop.wait()
            code = broker.exit_code()
            if code is None or self._stop.is_set():
                continue
            self.broker_restarts[index] += 1
            self.say(
                f"nats-server at {broker.url} exited with code {code}; starting it again on the "
                f"same port and store (restart #{self.broker_restarts[index]})"
            )
            try:
                await asyncio.to_thread(broker.start, start_timeout_s)
            except AiosError as exc:
                failures += 1
                delay = restart_delay(failures)
                self.say(f"nats-server at {broker.url} did not start: {exc}; again in {delay:.1f}s")
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._stop.wait()
                continue
            failures = 0
            self.say(f"nats-server at {broker.url} is serving again")

    async def _keep_running(self, r: Replica) -> None:
        failures = 0
        while not self._stop.is_set():
            started = time.monotonic()
            code = await self._run_once(r)
            if self._stop.is_set():
                return
            failures = 1 if time.monotonic() - started > self.healthy_after_s else failures + 1
            delay = restart_delay(failures)
            self.restarts[r.label] += 1
            self.say(
                f"{r.label} exited with code {code}; restarting in {delay:.1f}s (restart #{self.restarts[r.label]})"
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stop.wait()

    async def _run_once(self, r: Replica) -> int:
        env = child_env(os.environ, self.env, self.service_env.get(r.service.name, {}), r)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            r.service.module,
            *r.service.args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # Ctrl-C reaches us only; we stop children in order
            preexec_fn=die_with_parent(),  # and a SIGKILLed supervisor orphans nothing
            limit=1 << 20,
        )
        self.procs[r.label] = proc
        pump = asyncio.create_task(self._pump(r, proc))
        waiter = asyncio.create_task(proc.wait())
        stopper = asyncio.create_task(self._stop.wait())
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not waiter.done():
            await self._terminate(r, proc)
        stopper.cancel()
        code = await waiter
        await pump
        return code

    async def _terminate(self, r: Replica, proc: asyncio.subprocess.Process) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(self.grace_s):
                await proc.wait()
        except TimeoutError:
            self.say(f"{r.label} did not stop within {self.grace_s:.0f}s; killing it")
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    async def _pump(self, r: Replica, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        prefix = self._prefix[r.label]
        while line := await proc.stdout.readline():
            self.out.write(prefix + line.decode(errors="replace").rstrip("\n") + "\n")
            self.out.flush()
