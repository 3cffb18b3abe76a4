"""A stack to talk to: the one at ``--nats-url`` when it answers, else one started here; and a
reader of the store for the commands that only look.

Every command keeps the user's work in one **store** (``--store``, default ``.aios/stack``): the
JetStream data in ``<store>/nats``, NATS users in ``<store>/auth/``, service logs in
``<store>/services.log``. So ``eval`` after ``demo`` or ``train`` scores the checkpoint they left
active, and ``checkpoints`` shows their lineage.

:func:`stack` (``train``, ``eval``, ``demo``, ``mixed``...) needs every service running. When a
NATS server answers at the URL, it uses that stack (``aios-rl up`` or ``docker compose up``
elsewhere) and checks the services it needs are there; when another command's embedded stack
is serving the store right now, it uses that one; otherwise it starts an embedded
``nats-server`` on the store and every service of the registry as a process under the
supervisor. What it started stops when the block ends.

:func:`reader` (``checkpoints``, ``campaign status``, ``rail status``) needs only the state: the
server at the URL, else the store's running server, else an embedded ``nats-server`` alone on
the store (no services), else :class:`NoStoreError`.

The embedded server runs with authorization unless ``insecure``: a user per service (passwords
kept in ``<store>/auth/``), this process the admin, which provisions the topology before the
services start. A server found at the URL is used with the admin credentials kept in
``<store>/auth/`` when they are accepted, else with the command's own (``--credentials``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import sys
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aios_rl.errors import AiosError
from contracts import Names
from contracts.subjects import runner_name

from ..agents.tokens import AGENTS_FILE
from ..bus import Bus, ConnectError, connect, discover, provision
from ..state.checkpoints import CheckpointRegistry
from .auth import AUTH_DIR, admin_credentials, credentials_env, prepare
from .natsd import NatsServer, serving_port
from .services import SERVICES, ServiceEntry
from .supervisor import Replica, Supervisor, plan

__all__ = [
    "DEFAULT_STORE",
    "NoStoreError",
    "Reader",
    "StackError",
    "active_checkpoint",
    "has_state",
    "reader",
    "running_url",
    "stack",
    "wait_for_services",
]

DEFAULT_STORE = Path(".aios") / "stack"
"""Where every command keeps the user's work unless told otherwise (``--store``,
``AIOS_STORE``)."""


class StackError(AiosError):
    """The stack is not usable (services missing, nothing trained yet): one line for the user."""


class NoStoreError(StackError):
    """No server answers and the store holds no state yet: there is nothing to read."""


@dataclass
class Stack:
    bus: Bus
    url: str
    embedded: bool
    log_path: Path | None = None


@dataclass
class Reader:
    """A connection to the state a read command looks at, and where it comes from."""

    bus: Bus
    url: str
    source: Literal["server", "running", "store"]
    """``server``: the one at the URL; ``running``: another command's embedded server on the
    store; ``store``: a server started here on the store, with no services."""
    user: str = ""
    password: str = ""
    """The login the connection used (empty: a server without users), for a process this
    command starts on the same state (``aios-rl dashboard``)."""


def has_state(store: Path) -> bool:
    """Whether ``store`` holds JetStream state (a command has run on it)."""
    return (store / "nats" / "jetstream").is_dir()


def running_url(store: Path) -> str | None:
    """The URL of another command's embedded server on ``store`` while it runs, else ``None``."""
    port = serving_port(store / "nats")
    return None if port is None else f"nats://127.0.0.1:{port}"


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


async def _answers(
    url: str, user: str | None, password: str | None, *, deadline_s: float = 2.0
) -> bool:
    try:
        async with connect(
            url, name="aios-rl-probe", connect_deadline=deadline_s, user=user, password=password
        ):
            return True
    except ConnectError:
        return False


async def _listening(url: str) -> bool:
    """Whether something accepts TCP connections at one of ``url``'s servers (a quick look
    before a NATS handshake, which retries until its deadline)."""
    for part in url.split(","):
        parsed = urllib.parse.urlsplit(part.strip())
        try:
            async with asyncio.timeout(1.0):
                _, writer = await asyncio.open_connection(parsed.hostname, parsed.port or 4222)
        except (OSError, TimeoutError, ValueError):
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True
    return False


async def _login(
    url: str | None, store: Path, *, insecure: bool = False
) -> tuple[str | None, str | None] | None:
    """The (user, password) a server at ``url`` accepts: the store's admin when it has one and
    the server takes it, else the command's own (``None, None``: ``NATS_USER`` /
    ``NATS_PASSWORD``); ``None`` when nothing listens there. A server that listens but takes
    neither is an error (``StackError``), never a reason to run somewhere else: the command
    would otherwise work on another stack than the one the user named, and say it succeeded."""
    if not url or not await _listening(url):
        return None
    kept = None if insecure else admin_credentials(store)
    if kept is not None and await _answers(url, kept.user, kept.password):
        return kept.user, kept.password
    if await _answers(url, None, None, deadline_s=5.0):
        return None, None
    own = os.environ.get("NATS_USER") or "no user"
    raise StackError(
        f"the NATS server at {url} did not accept "
        + (f"the store's admin ({store}/auth) nor " if kept is not None else "")
        + f"this command's credentials ({own}): give the stack's --credentials "
        "(<its data-dir>/auth/admin.json) or NATS_USER / NATS_PASSWORD"
    )


def _replicas(
    args: Mapping[str, Sequence[str]],
    scale: Mapping[str, int] | None,
    environments: Sequence[str] = (),
) -> list[Replica]:
    """The embedded stack's processes: every service of the registry (``scale`` overriding
    replica counts), each with its extra command-line ``args``, and a runner for each of
    ``environments`` the registry does not run (``<env>-runner``: ``services.runner --env``)."""
    known = {s.name for s in SERVICES}
    extra = [
        ServiceEntry(
            runner_name(env), "services.runner", f"runs {env} episodes", args=("--env", env)
        )
        for env in environments
        if runner_name(env) not in known
    ]
    entries = [
        dataclasses.replace(s, args=(*s.args, *args[s.name])) if args.get(s.name) else s
        for s in (*SERVICES, *extra)
    ]
    return plan(entries, scale=scale)


def _with_env(
    base: Mapping[str, Mapping[str, str]], extra: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, str]]:
    """Each service's environment: ``base`` (its credentials), then ``extra`` over it."""
    out = {name: dict(env) for name, env in base.items()}
    for name, env in extra.items():
        out.setdefault(name, {}).update(env)
    return out


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
    service_args: Mapping[str, Sequence[str]] | None = None,
    scale: Mapping[str, int] | None = None,
    environments: Sequence[str] = (),
    service_env: Mapping[str, Mapping[str, str]] | None = None,
    embedded_only: str = "",
) -> AsyncIterator[Stack]:
    """The stack at ``url`` if it answers, else the one another command runs on ``data_dir``
    (the store), else an embedded one (see the module docstring). ``fresh`` wipes the store's
    JetStream data first (and never attaches to another command's); ``insecure`` runs it
    without users; ``service_args`` (service -> extra flags), ``scale`` (service -> replicas)
    and ``environments`` (a runner each, for environments the registry does not run: the
    AgentBench ones) and ``service_env`` (service -> extra environment variables) shape the
    embedded stack only; ``embedded_only`` (the reason, for the message) refuses to attach to a
    running stack, which those would not reach. Raises ``StackError``."""
    names = Names(namespace)
    running = running_url(data_dir)
    if fresh and running:
        raise StackError(
            f"the store {data_dir} is in use by a stack at {running}: stop that command first, "
            "or give another store"
        )
    for at in (url, running):
        login = await _login(at, data_dir, insecure=insecure)
        if at is None or login is None:
            continue
        if embedded_only:
            raise StackError(
                f"{embedded_only} starts its own stack, but one answers at {at}: stop it, "
                "or give another --store (and --nats-url)"
            )
        if at == running:
            echo(f"using the stack already running on {data_dir} at {at}")
        user, password = login
        async with connect(
            at, name=name, names=names, connect_deadline=5.0, user=user, password=password
        ) as bus:
            await provision(bus)
            await wait_for_services(bus, needs, 30)
            yield Stack(bus=bus, url=at, embedded=False)
        return
    if url:
        echo(f"no NATS at {url}: starting an embedded stack")
    log_path = _prepare(data_dir, fresh=fresh)
    replicas = _replicas(service_args or {}, scale, environments)
    users = [s.name for s in SERVICES]
    auth = None if insecure else prepare(data_dir, names, users, environments=tuple(environments))
    users += [r.service.name for r in replicas if r.service.name not in users]
    admin = credentials_env(auth.admin if auth else None)
    server = NatsServer(data_dir / "nats", config=auth.config if auth else None)
    with server, open(log_path, "a") as log_file:  # noqa: ASYNC230 - opened once
        sup = Supervisor(
            replicas,
            env={
                "NATS_URL": server.url,
                "AIOS_NAMESPACE": namespace,
                "AIOS_LOG_FORMAT": "json",
                # The agent gateway's token file (aios-rl auth agent-token writes it there).
                "AIOS_TOKENS_FILE": str(data_dir / AUTH_DIR / AGENTS_FILE),
            },
            service_env=_with_env(
                auth.service_env if auth else {u: credentials_env(None) for u in users},
                service_env or {},
            ),
            out=sys.stdout if verbose else log_file,
            brokers=[server],
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


@contextlib.asynccontextmanager
async def reader(
    url: str | None,
    *,
    store: Path,
    namespace: str = "",
    name: str = "aios-rl",
    serve: bool = True,
    create: bool = False,
) -> AsyncIterator[Reader]:
    """A connection to the state: the server at ``url`` if it answers, else the one another
    command runs on ``store``, else (with ``serve``) an embedded ``nats-server`` alone on the
    store, stopped when the block ends. The store's auth config and admin credentials are used
    when it has users. Raises ``NoStoreError`` when none of these is there (``create``: a store
    that holds nothing yet is started, with users, for a command that writes to it)."""
    names = Names(namespace)
    running = running_url(store)
    for at, source in ((url, "server"), (running, "running")):
        login = await _login(at, store)
        if at is None or login is None:
            continue
        user, password = login
        async with connect(
            at, name=name, names=names, connect_deadline=5.0, user=user, password=password
        ) as bus:
            yield Reader(
                bus=bus,
                url=at,
                source=source,  # type: ignore[arg-type]
                user=user,
                password=password,
            )
        return
    where = f"no NATS server answers at {url}" if url else "no NATS server is running"
    if not serve:
        raise NoStoreError(f"{where}, and no command is running on the store {store}")
    if not has_state(store) and not create:
        raise NoStoreError(
            f"{where} and the store {store} holds nothing yet: run `aios-rl demo` or "
            "`aios-rl train` first (or pass --store / --nats-url)"
        )
    kept = admin_credentials(store)
    if kept is None and create and not has_state(store):
        # A new store, written by a command before any stack ran on it: with users, as the
        # embedded stack would make it.
        prepare(store, names, [s.name for s in SERVICES])
        kept = admin_credentials(store)
    auth = prepare(store, names, [s.name for s in SERVICES]) if kept else None
    with NatsServer(store / "nats", config=auth.config if auth else None) as server:
        async with connect(
            server.url,
            name=name,
            names=names,
            connect_deadline=5.0,
            user=kept.user if kept else "",
            password=kept.password if kept else "",
        ) as bus:
            await provision(bus)  # what a read expects exists, even in an older store
            yield Reader(
                bus=bus,
                url=server.url,
                source="store",
                user=kept.user if kept else "",
                password=kept.password if kept else "",
            )
