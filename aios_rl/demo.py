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

from .embedded import stack
from .shell_cli import make_console, train_and_report

__all__ = ["run_demo"]


def run_demo(args: argparse.Namespace) -> int:
    console = make_console()

    async def main() -> int:
        async with stack(
            None,
            data_dir=Path(args.data_dir),
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
