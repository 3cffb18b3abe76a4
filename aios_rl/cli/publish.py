"""``aios-rl publish``: a JSON message validated against its contract, then published."""

from __future__ import annotations

import argparse
import asyncio
import sys

import msgspec

from contracts import Names, registered

from ..bus import BusError, connect
from ._common import bus_args, url

__all__ = ["add"]


def add(subparsers: argparse._SubParsersAction) -> None:
    pub = subparsers.add_parser(
        "publish", help="validate a JSON message against its contract and publish it"
    )
    bus_args(pub)
    pub.add_argument(
        "subject", metavar="SUBJECT", help="e.g. episode.taught.shell (namespace added)"
    )
    pub.add_argument("schema", metavar="SCHEMA", help="contract name, e.g. episode.v1")
    pub.add_argument(
        "json",
        nargs="?",
        default="-",
        metavar="JSON",
        help="the message as JSON, or - for stdin (default)",
    )
    pub.add_argument("--msg-id", help="Nats-Msg-Id for JetStream de-duplication")
    pub.set_defaults(run=lambda args: asyncio.run(_publish(args)))


async def _publish(args: argparse.Namespace) -> int:
    types = registered()
    if args.schema not in types:
        raise ValueError(f"unknown schema {args.schema!r}; known: {', '.join(sorted(types))}")
    raw = sys.stdin.read() if args.json == "-" else args.json
    try:
        msg = msgspec.json.decode(raw.encode(), type=types[args.schema])
    except msgspec.DecodeError as exc:
        raise ValueError(f"the JSON is not a valid {args.schema}: {exc}") from exc
    async with connect(
        url(args), name="aios-rl-publish", names=Names(args.namespace), connect_deadline=3.0
    ) as bus:
        subject = bus.names.subject(args.subject)
        try:
            seq = await bus.publish_durable(subject, msg, msg_id=args.msg_id)
            print(f"published {args.schema} on {args.subject} (stream sequence {seq})")
        except BusError:
            await bus.publish(subject, msg)
            await bus.nc.flush()
            print(
                f"published {args.schema} on {args.subject} (core NATS: no stream holds this subject)"
            )
    return 0
