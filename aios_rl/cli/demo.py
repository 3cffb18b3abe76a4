"""``aios-rl demo``: the README's main job.

The whole stack as separate processes on an embedded NATS (a fresh JetStream store in
``--data-dir``); shell bug-fix tasks generated, verified and stored; the held-out success of the
initial student measured through the shell runners; a short campaign (collect -> compare ->
decide -> train, every service in the loop); the held-out score of each epoch's policy; a summary
table; a clean shutdown.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from ..stack.embedded import StackError, stack
from ._common import CliError, training_args
from .shell import make_console, train_and_report

__all__ = ["add", "run_demo"]


def add(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo", help="the main job: full stack on an embedded NATS, a short run, a summary"
    )
    training_args(demo, epochs=4, data_dir=".aios/demo", train_tasks=60, heldout=30)
    demo.add_argument("--verbose", action="store_true", help="stream service logs to the terminal")
    demo.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        return run_demo(args)
    except (StackError, TimeoutError) as exc:
        raise CliError(f"{exc} (service logs: {args.data_dir}/services.log)") from exc


def run_demo(args: argparse.Namespace) -> int:
    console = make_console()

    async def main() -> int:
        async with stack(
            None,
            data_dir=Path(args.data_dir),
            insecure=args.insecure,
            needs=set(),
            echo=console.print,
            fresh=True,
            verbose=args.verbose,
            name="aios-rl-demo",
        ) as st:
            code = await train_and_report(
                st.bus, console, args, campaign_id=f"demo-{int(time.time())}"
            )
        console.print("stack stopped cleanly")
        return code

    return asyncio.run(main())
