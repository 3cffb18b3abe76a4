"""``aios-rl up``: the whole stack, an embedded NATS (unless ``--nats-url``) and every service
as a supervised process, until Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

from contracts import Names

from ..bus import ConnectError, connect, discover
from ..stack import SERVICES
from ..stack.natsd import NatsServer, NatsServerError
from ..stack.supervisor import Replica, Supervisor, parse_scale, plan
from ._common import CliError, bus_args, port

__all__ = ["add"]


def add(subparsers: argparse._SubParsersAction) -> None:
    up = subparsers.add_parser(
        "up", help="run the whole stack: embedded NATS (unless --nats-url) and every service"
    )
    bus_args(up)
    up.add_argument(
        "--data-dir",
        default=".aios",
        help="where the embedded NATS keeps JetStream data (default .aios)",
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
    up.set_defaults(run=_run)


async def _running_singletons(url: str, namespace: str, replicas: list[Replica]) -> list[str]:
    """The services of ``replicas`` that cannot share their work and already run in the
    namespace (each with its pid): a second ``up`` must not start them twice."""
    try:
        async with connect(
            url, name="aios-rl-up", names=Names(namespace), connect_deadline=5.0
        ) as bus:
            found = await discover(bus.nc, namespace=namespace, window=0.3)
    except ConnectError as exc:
        raise CliError(f"no NATS server answers at {url}: {exc}") from exc
    wanted = {r.service.name for r in replicas if not r.service.scalable}
    return sorted(f"{v.name} (pid {v.pid})" for v in found if v.name in wanted)


def _run(args: argparse.Namespace) -> int:
    only = [n.strip() for n in args.only.split(",") if n.strip()] or None
    replicas = plan(SERVICES, scale=parse_scale(args.scale, [s.name for s in SERVICES]), only=only)
    server: NatsServer | None = None
    url = args.nats_url
    if not url:
        data = Path(args.data_dir) / "nats"
        server = NatsServer(data, port=args.nats_port, log_file=data / "nats-server.log")
        try:
            server.start()
        except NatsServerError as exc:
            raise CliError(
                f"{exc} (is another stack running? try --nats-port, --data-dir or --nats-url)"
            ) from exc
        url = server.url
    try:
        running = asyncio.run(_running_singletons(url, args.namespace, replicas))
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
        "AIOS_LOG_FORMAT": os.environ.get(
            "AIOS_LOG_FORMAT", "console" if sys.stdout.isatty() else "json"
        ),
    }
    sup = Supervisor(replicas, env=env)
    where = (
        f"embedded NATS at {url} (data {Path(args.data_dir) / 'nats'})"
        if server
        else f"NATS at {url}"
    )
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
