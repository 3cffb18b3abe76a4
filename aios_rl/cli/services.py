"""``aios-rl services``: the running services, through NATS service discovery."""

from __future__ import annotations

import argparse
import asyncio
import sys

import msgspec

from ..bus import connect, discover
from ._common import bus_args, url

__all__ = ["add"]


def add(subparsers: argparse._SubParsersAction) -> None:
    services = subparsers.add_parser(
        "services", help="list running services through NATS service discovery"
    )
    bus_args(services)
    services.add_argument("--json", action="store_true", help="print JSON for machines")
    services.add_argument(
        "--all-namespaces", action="store_true", help="list services of every namespace"
    )
    services.set_defaults(run=lambda args: asyncio.run(_services(args)))


async def _services(args: argparse.Namespace) -> int:
    async with connect(url(args), name="aios-rl-services", connect_deadline=3.0) as bus:
        views = await discover(bus.nc, namespace=None if args.all_namespaces else args.namespace)
    if args.json:
        sys.stdout.write(msgspec.json.encode(views).decode() + "\n")
        return 0
    if not views:
        print("no services answered")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(
        "service",
        "instance",
        "version",
        "pid",
        "endpoints (requests/errors)",
        "consumers (processed/retried/dlq)",
        "stats",
    )
    for v in views:
        eps = "\n".join(f"{e.name} {e.requests}/{e.errors}" for e in v.endpoints) or "-"
        cons = (
            "\n".join(
                f"{c.consumer} {c.processed}/{c.retried}/{c.dead_lettered}" for c in v.consumers
            )
            or "-"
        )
        extra = "\n".join(f"{k}={val:g}" for k, val in sorted(v.extra.items())) or "-"
        table.add_row(v.name, v.id, v.version, str(v.pid or "-"), eps, cons, extra)
    Console().print(table)
    return 0
