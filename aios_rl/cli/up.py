"""``aios-rl up``: the whole stack, an embedded NATS (unless ``--nats-url``) and every service
as a supervised process, until Ctrl-C. An embedded server (or cluster node) that exits is
started again on the same port and store.

The embedded NATS runs with authorization (``docs/security.md``): a user per service with the
permissions ``contracts.access`` declares, passwords kept in ``<data-dir>/auth/``; ``up`` itself
is the admin and provisions the topology before any service starts. ``--insecure`` runs without
(development only). With ``--nats-url`` the server is not ours: services connect with the
credentials kept in ``<data-dir>/auth/`` when there are some."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from contracts import ENVIRONMENTS, Names, topology
from contracts.subjects import runner_name

from ..agents.tokens import AGENTS_FILE
from ..bus import BusError, ConnectError, connect, discover, jetstream_ready, provision
from ..stack import SERVICES
from ..stack.auth import AUTH_DIR, StackAuth, credentials_env, existing, prepare
from ..stack.natsd import NatsCluster, NatsServer, NatsServerError
from ..stack.supervisor import Replica, Supervisor, parse_scale, plan
from ..stack.tls import TlsError
from ._common import CliError, bus_args, port

__all__ = ["add"]


def add(subparsers: argparse._SubParsersAction) -> None:
    up = subparsers.add_parser(
        "up", help="run the whole stack: embedded NATS (unless --nats-url) and every service"
    )
    bus_args(up)
    up.add_argument(
        "--data-dir",
        "--store",
        dest="data_dir",
        default=os.environ.get("AIOS_STORE", ".aios/stack"),
        help="the store: where the embedded NATS keeps JetStream data and NATS users, the one "
        "every other command keeps your work in (env AIOS_STORE; default .aios/stack)",
    )
    up.add_argument(
        "--nats-port",
        type=port,
        default=4222,
        help="client port of the embedded NATS (default 4222)",
    )
    up.add_argument(
        "--scale",
        action="append",
        default=[],
        metavar="NAME=N",
        help="run N replicas of a service (repeatable)",
    )
    up.add_argument("--only", default="", metavar="NAME,...", help="run only these services")
    up.add_argument(
        "--tls",
        action="store_true",
        help="the embedded NATS speaks TLS only, with a certificate from a local CA kept in "
        "<data-dir>/auth/tls/ (needs openssl)",
    )
    up.add_argument(
        "--env",
        action="append",
        default=[],
        type=_env_name,
        metavar="NAME",
        help="an environment of your own whose runner you start yourself (repeatable): its "
        "consumer is provisioned and, with users, <data-dir>/auth/NAME-runner.json holds its "
        "credentials (AIOS_CREDENTIALS=that file python -m services.runner --env NAME "
        "--env-module YOUR.MODULE)",
    )
    up.add_argument(
        "--cluster",
        type=_cluster_size,
        default=0,
        metavar="N",
        help="run N embedded nats-servers as one JetStream cluster (routes on loopback, a store "
        "each under <data-dir>/cluster/); streams and buckets get 3 replicas (--replicas)",
    )
    up.add_argument(
        "--replicas",
        type=_replicas,
        default=None,
        metavar="R",
        help="copies of every stream, KV bucket and object store (1-5; default 3 in a cluster, "
        "else 1); existing ones are brought to R",
    )
    up.add_argument(
        "--insecure",
        action="store_true",
        help="no NATS users or permissions: anyone who reaches the port can do anything "
        "(development only; see docs/security.md)",
    )
    up.set_defaults(run=_run)


def _bounded(what: str, low: int, high: int, why: str) -> Callable[[str], int]:
    """An argparse type: an int in [low, high], else a one-line error naming ``what``."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {what}") from None
        if not low <= n <= high:
            raise argparse.ArgumentTypeError(f"{why} {low} to {high}, not {n}")
        return n

    return parse


_cluster_size = _bounded("servers", 1, 7, "a local cluster has")
_replicas = _bounded("replicas", 1, 5, "replicas must be (JetStream's limit)")


def _env_name(text: str) -> str:
    try:
        runner_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an environment name (a-z, 0-9, _)")
    return text


async def _running_singletons(
    url: str,
    namespace: str,
    replicas: list[Replica],
    auth: StackAuth | None,
    environments: list[str] | None = None,
    stream_replicas: int | None = None,
) -> list[str]:
    """The services of ``replicas`` that cannot share their work and already run in the
    namespace (each with its pid): a second ``up`` must not start them twice. Provisions the
    topology (as the admin) when none runs, so services find it there, with the runner
    consumers of ``environments`` of the user's own."""
    admin = credentials_env(auth.admin if auth else None)
    try:
        async with connect(
            url,
            name="aios-rl-up",
            names=Names(namespace),
            connect_deadline=5.0,
            user=admin["NATS_USER"],
            password=admin["NATS_PASSWORD"],
            ca=str(auth.ca) if auth and auth.ca else None,
        ) as bus:
            found = await discover(bus.nc, namespace=namespace, window=0.3)
            wanted = {r.service.name for r in replicas if not r.service.scalable}
            running = sorted(f"{v.name} (pid {v.pid})" for v in found if v.name in wanted)
            if not running:
                await jetstream_ready(bus)  # a new cluster elects its meta leader first
                await provision(
                    bus,
                    topology(bus.names, (*ENVIRONMENTS, *(environments or ()))),
                    replicas=stream_replicas,
                )
            return running
    except ConnectError as exc:
        raise CliError(f"no NATS server answers at {url}: {exc}") from exc
    except BusError as exc:
        raise CliError(f"cannot provision the topology at {url}: {exc}") from exc


def _run(args: argparse.Namespace) -> int:
    only = [n.strip() for n in args.only.split(",") if n.strip()] or None
    replicas = plan(SERVICES, scale=parse_scale(args.scale, [s.name for s in SERVICES]), only=only)
    server: NatsServer | NatsCluster | None = None
    url = args.nats_url
    if args.cluster and url:
        raise CliError("--cluster starts its own servers: drop --nats-url")
    if args.replicas and args.replicas > max(args.cluster, 1) and not url:
        raise CliError(
            f"--replicas {args.replicas} needs at least {args.replicas} servers (--cluster)"
        )
    stream_replicas = args.replicas or (min(3, args.cluster) if args.cluster else None)
    names = Names(args.namespace)
    users = [r.service.name for r in replicas]
    auth: StackAuth | None = None
    if args.tls and (args.insecure or url):
        raise CliError("--tls is for the embedded NATS with users: drop --insecure / --nats-url")
    if not args.insecure:
        try:
            auth = (
                existing(args.data_dir, users)
                if url
                else prepare(args.data_dir, names, users, tls=args.tls, environments=args.env)
            )
        except TlsError as exc:
            raise CliError(str(exc)) from exc
    if not url and args.cluster:
        server = NatsCluster(
            Path(args.data_dir) / "cluster",
            args.cluster,
            port=args.nats_port,
            config=auth.config if auth else None,
        )
        try:
            server.start()
        except NatsServerError as exc:
            raise CliError(
                f"{exc} (is another stack running? try --nats-port, --data-dir)"
            ) from exc
        url = server.url
    elif not url:
        data = Path(args.data_dir) / "nats"
        server = NatsServer(
            data,
            port=args.nats_port,
            log_file=data / "nats-server.log",
            config=auth.config if auth else None,
        )
        try:
            server.start()
        except NatsServerError as exc:
            raise CliError(
                f"{exc} (is another stack running? try --nats-port, --data-dir or --nats-url)"
            ) from exc
        url = server.url
    try:
        running = asyncio.run(
            _running_singletons(
                url, args.namespace, replicas, auth, list(args.env), stream_replicas
            )
        )
    except BaseException:
        if server is not None:
            server.stop()
        raise
    if running:
        if server is not None:
            server.stop()
        raise CliError(
            f"{', '.join(running)} already running in namespace {args.namespace!r} at {url}: "
            "one stack per namespace (stop it, or use --namespace, or --only for the others)"
        )
    env = {
        "NATS_URL": url,
        "AIOS_NAMESPACE": args.namespace,
        # The agent gateway's token file (aios-rl auth agent-token writes it there).
        "AIOS_TOKENS_FILE": os.environ.get(
            "AIOS_TOKENS_FILE", str(Path(args.data_dir) / AUTH_DIR / AGENTS_FILE)
        ),
        "AIOS_LOG_FORMAT": os.environ.get(
            "AIOS_LOG_FORMAT", "console" if sys.stdout.isatty() else "json"
        ),
    }
    service_env = auth.service_env if auth else {u: credentials_env(None) for u in users}
    brokers = server.servers if isinstance(server, NatsCluster) else [server] if server else []
    sup = Supervisor(replicas, env=env, service_env=service_env, brokers=brokers)
    if isinstance(server, NatsCluster):
        where = (
            f"embedded NATS cluster of {args.cluster} at {url} (data "
            f"{Path(args.data_dir) / 'cluster'}; {stream_replicas} replicas)"
        )
    elif server:
        where = f"embedded NATS at {url} (data {Path(args.data_dir) / 'nats'})"
    else:
        where = f"NATS at {url}"
    if auth is not None:
        where += f", users and permissions from {auth.config.parent}"
        where += f", TLS (CA {auth.ca})" if auth.ca else ""
    else:
        where += ", no authorization (--insecure)" if args.insecure else ", no credentials"
    sup.say(f"{where}; starting {', '.join(r.label for r in replicas)}")

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, sup.stop)
        await sup.run()

    try:
        asyncio.run(run())
    finally:
        if server is not None:
            server.stop()
            sup.say("embedded NATS stopped")
    return 0
