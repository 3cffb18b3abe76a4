"""``aios-rl services``: the running services, through NATS service discovery: of the server at
``--nats-url``, else of the stack another command runs on the store (``--store``)."""

from __future__ import annotations

import argparse
import asyncio
import sys

import msgspec

from ..bus import discover
from ..stack.embedded import NoStoreError, has_state
from ._common import CliError, bus_args, make_console, read_state, store_arg, url

__all__ = ["add"]


def add(subparsers: argparse._SubParsersAction) -> None:
    services = subparsers.add_parser(
        "services", help="list running services through NATS service discovery"
    )
    bus_args(services)
    store_arg(services)
    services.add_argument("--json", action="store_true", help="print JSON for machines")
    services.add_argument(
        "--all-namespaces", action="store_true", help="list services of every namespace"
    )
    services.set_defaults(run=lambda args: asyncio.run(_services(args)))


async def _services(args: argparse.Namespace) -> int:
    try:
        async with read_state(args, "aios-rl-services", serve=False) as reading:
            views = await discover(
                reading.bus.nc, namespace=None if args.all_namespaces else args.namespace
            )
    except NoStoreError:
        kept = "holds your work" if has_state(args.store) else "is empty"
        raise CliError(
            f"no server is running: nothing answers at {url(args)} and no command runs on the "
            f"store {args.store} (it {kept}); `aios-rl up --store {args.store}` serves it"
        ) from None
    if args.json:
        sys.stdout.write(msgspec.json.encode(views).decode() + "\n")
        return 0
    if not views:
        print("no services answered")
        return 0
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
    make_console().print(table)
    return 0
