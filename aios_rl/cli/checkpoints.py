"""``aios-rl checkpoints``: the three checkpoint pointers and the lineage as a tree, from the
server at ``--nats-url``, else from the store (``--store``) with no server running."""

from __future__ import annotations

import argparse
import asyncio
import sys

import msgspec

from ..state.checkpoints import CheckpointRegistry, render_tree
from ._common import bus_args, json_arg, read_state, store_arg

__all__ = ["add"]


def add(subparsers: argparse._SubParsersAction) -> None:
    ckpt = subparsers.add_parser(
        "checkpoints", help="the three checkpoint pointers and the lineage as a tree"
    )
    bus_args(ckpt)
    store_arg(ckpt)
    json_arg(ckpt)
    ckpt.set_defaults(run=lambda args: asyncio.run(_checkpoints(args)))


async def _checkpoints(args: argparse.Namespace) -> int:
    async with read_state(args, "aios-rl-checkpoints") as state:
        snap = await CheckpointRegistry(state.bus).snapshot()
    if args.json:
        doc = {
            "pointers": msgspec.to_builtins(snap.pointers),
            "revision": snap.revision,
            "checkpoints": {k: msgspec.to_builtins(v) for k, v in sorted(snap.metas.items())},
        }
        sys.stdout.write(msgspec.json.encode(doc).decode() + "\n")
        return 0
    p = snap.pointers
    print(f"active          {p.active or '-'}")
    print(f"pre_update_ref  {p.pre_update_ref or '-'}")
    print(f"last_stable     {p.last_stable or '-'}")
    if p.reason:
        print(f"last move       {p.reason}")
    print()
    print(render_tree(snap.pointers, snap.metas) if snap.metas else "no checkpoints stored yet")
    return 0
