"""A stack to talk to: the one at ``--nats-url`` when it answers, else one started here.

``aios-rl shell train``, ``shell eval`` and ``demo`` need every service running. When a NATS
server answers at the URL, they use that stack (``aios-rl up`` or ``docker compose up`` elsewhere)
and check the services they need are there. Otherwise they start an embedded ``nats-server``
with its JetStream store in ``<data_dir>/nats`` (kept between commands, so ``shell eval`` after
``shell train`` sees the trained checkpoints) and every service of the registry as a process
under the supervisor, with logs in ``<data_dir>/services.log``; both stop when the block ends.

The embedded server runs with authorization unless ``insecure``: a user per service (passwords
kept in ``<data_dir>/auth/``), this process the admin, which provisions the topology before the
services start. A stack found at the URL is used with the admin credentials kept in
``<data_dir>/auth/`` when there are some.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from contracts import Names

from ..bus import Bus, ConnectError, connect, discover, provision
from ..state.checkpoints import CheckpointRegistry
from .auth import admin_credentials, credentials_env, prepare
from .natsd import NatsServer
from .services import SERVICES
from .supervisor import Supervisor, plan

__all__ = ["StackError", "active_checkpoint", "stack", "wait_for_services"]


class StackError(Exception):
    """The stack is not usable (services missing, nothing trained yet): one line for the user."""


@dataclass
class Stack:
    bus: Bus
    url: str
    embedded: bool
    log_path: Path | None = None


async def wait_for_services(bus: Bus, wanted: set[str], deadline_s: float) -> None:
    """Return once every service in ``wanted`` answers discovery. Raises ``StackError`` naming
    the missing ones after ``deadline_s``."""
    seen: set[str] = set()
    try:
        async with asyncio.timeout(deadline_s):
            while not wanted <= seen:
                found = await discover(bus.nc, namespace=bus.names.namespace, window=0.3)
                seen = {v.name for v in found}
    except TimeoutError:
        missing = ", ".join(sorted(wanted - seen))
        raise StackError(
            f"services not running after {deadline_s:.0f}s: {missing} (start them with aios-rl up)"
        ) from None


async def active_checkpoint(bus: Bus, deadline_s: float) -> str:
    """The ``active`` pointer, waiting for the trainer to create the initial checkpoint."""
    try:
        async with asyncio.timeout(deadline_s):
            async for pointers in CheckpointRegistry(bus).watch():
                if pointers.active:
                    return pointers.active
    except TimeoutError:
        pass
    raise StackError(f"no active checkpoint after {deadline_s:.0f}s: is the trainer running?")


def _prepare(data_dir: Path, *, fresh: bool) -> Path:
    """Create ``data_dir`` (wiping its JetStream store when ``fresh``); the services' log path."""
    data_dir.mkdir(parents=True, exist_ok=True)
    if fresh and (data_dir / "nats").exists():
        shutil.rmtree(data_dir / "nats")
    return data_dir / "services.log"


async def _answers(url: str, user: str | None, password: str | None) -> bool:
    try:
        async with connect(
            url, name="aios-rl-probe", connect_deadline=2.0, user=user, password=password
        ):
            return True
    except ConnectError:
        return False


@contextlib.asynccontextmanager
async def stack(
    url: str | None,
    *,
    namespace: str = "",
    data_dir: Path,
    needs: set[str],
    echo: Callable[[str], None] = print,
    fresh: bool = False,
    verbose: bool = False,
    name: str = "aios-rl",
    start_timeout_s: float = 180.0,
    insecure: bool = False,
) -> AsyncIterator[Stack]:
    """The stack at ``url`` if it answers, else an embedded one (see the module docstring).
    ``fresh`` wipes the embedded JetStream store first; ``insecure`` runs it without users.
    Raises ``StackError``."""
    names = Names(namespace)
    # The stack at the URL: as the admin kept in the data dir, else as NATS_USER / NATS_PASSWORD
    # (the command's --credentials).
    kept = None if insecure else admin_credentials(data_dir)
    user, password = (kept.user, kept.password) if kept else (None, None)
    if url and await _answers(url, user, password):
        async with connect(
            url, name=name, names=names, connect_deadline=5.0, user=user, password=password
        ) as bus:
            await provision(bus)
            await wait_for_services(bus, needs, 30)
            yield Stack(bus=bus, url=url, embedded=False)
        return
    if url:
        echo(f"no NATS at {url}: starting an embedded stack")
    log_path = _prepare(data_dir, fresh=fresh)
    replicas = plan(SERVICES)
    users = [r.service.name for r in replicas]
    auth = None if insecure else prepare(data_dir, names, users)
    admin = credentials_env(auth.admin if auth else None)
    server = NatsServer(data_dir / "nats", config=auth.config if auth else None)
    with server, open(log_path, "a") as log_file:  # noqa: ASYNC230 - opened once
        sup = Supervisor(
            replicas,
            env={"NATS_URL": server.url, "AIOS_NAMESPACE": namespace, "AIOS_LOG_FORMAT": "json"},
            service_env=auth.service_env if auth else {u: credentials_env(None) for u in users},
            out=sys.stdout if verbose else log_file,
        )
        runner: asyncio.Task[None] | None = None
        try:
            async with connect(
                server.url,
                name=name,
                names=names,
                user=admin["NATS_USER"],
                password=admin["NATS_PASSWORD"],
            ) as bus:
                await provision(bus)  # as the admin, before any service starts
                runner = asyncio.create_task(sup.run())
                echo(
                    f"embedded NATS at {server.url}; starting {len(replicas)} services "
                    f"(logs: {log_path})"
                )
                await wait_for_services(bus, {r.service.name for r in replicas}, start_timeout_s)
                yield Stack(bus=bus, url=server.url, embedded=True, log_path=log_path)
        finally:
            sup.stop()
            if runner is not None:
                await runner
