"""Helpers shared by the integration tests: run a service for the length of a test, read a
durable consumer's state once JetStream has applied the acks already sent."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from nats.aio.msg import Msg
from nats.js.api import ConsumerInfo

from aios_rl.bus import Bus, Service, connect

T = TypeVar("T")

READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 15.0


@contextlib.asynccontextmanager
async def running(svc: Service) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``svc`` in a task until the block ends; enter once ``svc.ready`` is set.

    A service that fails while starting re-raises its error here instead of hanging the test.
    On exit the service is stopped gracefully and joined."""
    task = asyncio.create_task(svc.run(install_signal_handlers=False), name=f"svc-{svc.name}")
    ready = asyncio.create_task(svc.ready.wait())
    try:
        done, _ = await asyncio.wait(
            {task, ready}, timeout=READY_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        if task in done:
            task.result()  # raises the start-up error
            raise AssertionError(f"service {svc.name} returned before it was ready")
        if ready not in done:
            raise AssertionError(f"service {svc.name} was not ready within {READY_TIMEOUT_S}s")
        yield task
    finally:
        ready.cancel()
        svc.stop()
        if not task.done():
            await asyncio.wait_for(task, STOP_TIMEOUT_S)
        elif not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


async def settled_consumer(
    bus: Bus, stream: str, durable: str, *, within: float = 5.0
) -> ConsumerInfo:
    """The consumer's info once nothing it delivered is waiting for an ack.

    An ack is a fire-and-forget publish that the server applies on the consumer's own goroutine,
    so an info query sent right after it can still count the message as pending (measured here:
    about half the time without a flush). This asks again, each time a server round trip, until
    ``num_ack_pending`` is 0 or the deadline passes; it returns the last answer either way, and
    the caller asserts on it (a message that is really unacked keeps ``num_ack_pending`` > 0)."""

    async def poll() -> ConsumerInfo:
        while True:
            await bus.nc.flush()
            info = await bus.js.consumer_info(stream, durable)
            if not info.num_ack_pending:
                return info

    try:
        return await asyncio.wait_for(poll(), within)
    except TimeoutError:
        return await bus.js.consumer_info(stream, durable)


@contextlib.asynccontextmanager
async def stored(bus: Bus, subject: str) -> AsyncIterator[asyncio.Queue[Msg]]:
    """Every message a stream holds on ``subject``, from the first, as it is stored (an ordered
    consumer: what lands here was really written to the stream, not just published)."""
    queue: asyncio.Queue[Msg] = asyncio.Queue()

    async def on_msg(msg: Msg) -> None:
        queue.put_nowait(msg)

    sub = await bus.js.subscribe(subject, cb=on_msg, ordered_consumer=True)
    try:
        yield queue
    finally:
        await sub.unsubscribe()


async def next_item(queue: asyncio.Queue[T], within: float = 5.0) -> T:
    """The next item of ``queue``; ``TimeoutError`` when none comes ``within`` seconds."""
    return await asyncio.wait_for(queue.get(), within)


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, within: float, every: float = 0.25, what: str = ""
) -> T:
    """The first value ``probe()`` returns that is not ``None``, asked every ``every`` seconds;
    ``TimeoutError`` naming ``what`` after ``within``. For conditions another process makes
    true (a file it writes, a state it reaches) with no event to wait on: the one poll loop of
    the tests."""
    try:
        async with asyncio.timeout(within):
            while (value := await probe()) is None:  # noqa: ASYNC110 - no event: another process
                await asyncio.sleep(every)  # the poll period; the deadline bounds the wait
    except TimeoutError:
        raise TimeoutError(f"not within {within} s: {what or probe}") from None
    return value


async def admin_of(data_dir: Path, *, within: float = 30.0) -> dict[str, str]:
    """``connect`` keywords for the admin of the stack ``aios-rl up --data-dir data_dir`` starts
    (its credentials appear before its server does)."""
    from aios_rl.stack.auth import admin_credentials

    async def probe():  # type: ignore[no-untyped-def]
        return admin_credentials(data_dir)

    creds = await eventually(probe, within=within, every=0.05, what="the admin's credentials")
    return {"user": creds.user, "password": creds.password}


def stack_env() -> dict[str, str]:
    """The environment of an ``aios-rl up`` (or command) a test starts: JSON logs, wide tables,
    and no NATS URL or namespace inherited from the shell."""
    import os

    env = {**os.environ, "AIOS_LOG_FORMAT": "json", "COLUMNS": "220"}
    env.pop("NATS_URL", None)
    env.pop("AIOS_NAMESPACE", None)
    return env


@dataclass
class UpStack:
    """A stack ``aios-rl up`` runs for a test (:func:`up_stack`)."""

    proc: asyncio.subprocess.Process
    port: int
    data: Path
    """The store (``--data-dir``)."""
    log_path: Path
    """``up``'s standard output and error, merged: every service's log lines."""
    admin: dict[str, str]
    """``connect`` keywords of the stack's admin."""

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def credentials(self) -> Path:
        """The admin's credentials file, for a command's ``--credentials``."""
        return self.data / "auth" / "admin.json"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def connect(self, name: str) -> contextlib.AbstractAsyncContextManager[Bus]:
        """A bus connection as the admin."""
        return connect(self.url, name=name, connect_deadline=30, **self.admin)


@contextlib.asynccontextmanager
async def up_stack(
    tmp_path: Path, *flags: str, env: dict[str, str] | None = None
) -> AsyncIterator[UpStack]:
    """``aios-rl up *flags`` on a free port and the store ``tmp_path/aios`` (with users, JSON
    logs merged into ``tmp_path/up.log``); stopped as Ctrl-C stops it (SIGINT, then waited for)
    when the block ends. ``env``: the process's environment (default :func:`stack_env`)."""
    from aios_rl.stack.natsd import free_port

    port, data, log_path = free_port(), tmp_path / "aios", tmp_path / "up.log"
    with open(log_path, "wb") as log:  # noqa: ASYNC230 - opened once, for the child
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "aios_rl.cli", "up", *flags, "--nats-port", str(port),
            "--data-dir", str(data), stdout=log, stderr=asyncio.subprocess.STDOUT,
            env=stack_env() if env is None else env,
        )  # fmt: skip
    try:
        yield UpStack(proc, port, data, log_path, await admin_of(data))
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 60)


async def until_every_service(
    bus: Bus, *, namespace: str = "", within: float = 120.0, wanted: set[str] | None = None
) -> list:
    """Wait until every service the registry starts by default (or those ``wanted``) answers
    discovery; the views of the last round (each round waits for the replies: no busy loop)."""
    from aios_rl.bus import discover
    from aios_rl.stack import SERVICES

    if wanted is None:
        wanted = {s.name for s in SERVICES if s.replicas > 0}
    views: list = []
    async with asyncio.timeout(within):
        while not wanted <= {v.name for v in views}:
            views = await discover(bus.nc, namespace=namespace, window=0.2)
    return views


def agentbench_dev_dir() -> Path:
    """AgentBench's dev splits: ``$AGENTBENCH_DEV_DIR``, else where the benchmarks look
    (``bench/_common.py::agentbench_dir``: ``$AGENTBENCH_DIR`` or a copy beside the checkout),
    else the machine's copy; a missing path when none exists (the tests that need it skip)."""
    import os

    from bench._common import agentbench_dir

    candidates = (
        Path(os.environ.get("AGENTBENCH_DEV_DIR", "/nonexistent")),
        agentbench_dir(),
        Path("/work/shared/agentbench-dev"),
    )
    return next((p for p in candidates if p.is_dir()), Path("/nonexistent"))


async def play(host: Any, task: Any, turns: list[str], *, max_steps: int = 8) -> Any:
    """One episode of ``task`` on an environment ``host``: ``turns`` taken until it ends, the
    episode closed; returns it (its ``result()`` and turns stay readable)."""
    env = await host.open(task, seed=0, max_steps=max_steps)
    try:
        for turn in turns:
            if env.done:
                break
            await env.step(turn)
        return env
    finally:
        await env.close()


def nats_server_pids(port: int) -> set[int]:
    """The live ``nats-server`` processes listening on client ``port`` (a zombie has no command
    line, so it is not one)."""
    import itertools

    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0].endswith(b"nats-server"):
            continue
        pairs = itertools.pairwise(argv)
        if any(flag == b"-p" and value == str(port).encode() for flag, value in pairs):
            found.add(int(entry.name))
    return found


def rolled_back(record: Any) -> bool:
    """The gate rolled an epoch's student back (an ``EpochRecord``: verdict ``worse``, a
    rollback decision, no training that epoch). The degradation test can fire on noise (about
    1 epoch in 20 for a student that did not change), so a test of plumbing accepts it."""
    return (
        record.verdict == "worse"
        and (record.decision or "").startswith("rollback")
        and not record.new_checkpoint
    )
