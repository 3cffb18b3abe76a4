"""``aios-rl browser benchmark-generate | train | eval``: the browser environment's commands, the
same as the shell's (``train`` / ``eval`` run on ``--nats-url``'s stack or an embedded one)."""

from __future__ import annotations

import argparse
import asyncio

from contracts import Names

from ..bus import connect
from ._common import (
    bus_args,
    eval_args,
    positive,
    training_args,
    url,
)
from .shell import _on_a_stack, run_shell_eval, run_shell_train

__all__ = ["add"]


def add(subparsers: argparse._SubParsersAction) -> None:
    browser = subparsers.add_parser(
        "browser", help="the browser environment: web flows on the sites service and MiniWoB++"
    )
    sub = browser.add_subparsers(dest="browser_command", metavar="ACTION", required=True)
    gen = sub.add_parser(
        "benchmark-generate",
        help="generate browser tasks (site flows and MiniWoB++ in equal shares) and store them",
    )
    gen.add_argument("--count", type=positive, required=True, help="tasks to generate")
    gen.add_argument("--seed", type=int, default=0, help="generation seed (default 0)")
    gen.add_argument(
        "--split", choices=("train", "heldout"), default="train", help="which split (default train)"
    )
    bus_args(gen)
    gen.set_defaults(run=_generate)

    train = sub.add_parser(
        "train",
        help="train the student on browser tasks: a campaign with held-out scores before and after",
    )
    training_args(train, epochs=5, train_tasks=40, heldout=24, splits=("train",))
    train.add_argument("--campaign-id", help="campaign id (default browser-<date>-<time>)")
    bus_args(train)
    train.set_defaults(run=_on_a_stack(run_shell_train), environment="browser")

    ev = sub.add_parser(
        "eval", help="success rate, partial rate and mean reward of a checkpoint, with intervals"
    )
    eval_args(ev, limit=24)
    ev.set_defaults(run=_on_a_stack(run_shell_eval), environment="browser")


def _generate(args: argparse.Namespace) -> int:
    from ..envs.browser.generate import generate
    from ..envs.browser.store import BrowserTaskStore

    tasks = generate(args.count, args.seed, args.split)

    async def store() -> int:
        async with connect(url(args), name="aios-rl-browser", names=Names(args.namespace)) as bus:
            result = await BrowserTaskStore(bus).put_all(tasks)
        print(
            f"{len(tasks)} {args.split} browser tasks: {result.stored} stored, "
            f"{result.existing} already there"
        )
        return 0

    return asyncio.run(store())
