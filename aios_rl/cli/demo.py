"""``aios-rl demo``: the README's main job.

The whole stack as separate processes on an embedded NATS, on the store every command shares
(``--store``, default ``.aios/stack``), started fresh: the store's previous JetStream data is
wiped, so the demo always trains a new student. Shell bug-fix tasks generated, verified and
stored; the held-out success of the initial student measured through the shell runners; a short
campaign (collect -> compare -> decide -> train, every service in the loop); the held-out score
of each epoch's policy; a summary table; a clean shutdown. What it leaves (the trained student
active, its lineage, the campaign's ledger) is what ``eval``, ``checkpoints`` and ``campaign
status`` show next.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from ..stack.embedded import StackError, has_state, stack
from ._common import CliError, make_console, training_args
from ._training import (
    LM_STUDENTS,
    agent_service_env,
    embedded_options,
    option_needs,
)
from .engine import check_training, train_and_report

__all__ = ["LM_DEMO", "add", "lm_sizes", "run_demo"]


class _Default(int):
    """A size the user did not give: ``argparse`` converts a value given on the command line to
    a plain ``int``, so a ``_Default`` left in the namespace means the option was not passed."""


DEMO = {"epochs": 4, "tasks_per_epoch": 16, "group_size": 4, "train_tasks": 60, "heldout": 30}
LM_DEMO = {"epochs": 2, "tasks_per_epoch": 2, "group_size": 2, "train_tasks": 8, "heldout": 4}
"""The demo's sizes with a language-model student: every decision is a 135M-parameter model's
pass on CPU cores (a shell episode takes tens of seconds on two), so the default demo (about 300
episodes) would take hours; this one took 12 minutes on two cores (two epochs: the first
update is judged by the second epoch's comparison). A size given on the command line is kept."""


def lm_sizes(args: argparse.Namespace) -> list[str]:
    """With a language-model student, each demo size the user did not give becomes
    :data:`LM_DEMO`'s; the names of the sizes changed (empty: none, or not a language model)."""
    if getattr(args, "student", None) not in LM_STUDENTS:
        return []
    changed = []
    for key, value in LM_DEMO.items():
        if isinstance(getattr(args, key), _Default):
            setattr(args, key, value)
            changed.append(key)
    return changed


def add(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo", help="the main job: full stack on an embedded NATS, a short run, a summary"
    )
    training_args(
        demo, epochs=DEMO["epochs"], train_tasks=DEMO["train_tasks"], heldout=DEMO["heldout"]
    )
    demo.set_defaults(**{key: _Default(value) for key, value in DEMO.items()})
    demo.add_argument("--verbose", action="store_true", help="stream service logs to the terminal")
    demo.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    check_training(args, ["shell"])
    try:
        return run_demo(args)
    except (StackError, TimeoutError) as exc:
        raise CliError(f"{exc} (service logs: {args.store}/services.log)") from exc


def run_demo(args: argparse.Namespace) -> int:
    console = make_console(args)
    store = Path(args.store)
    if changed := lm_sizes(args):
        sizes = ", ".join(f"--{key.replace('_', '-')} {getattr(args, key)}" for key in changed)
        console.print(
            f"a language-model student on CPU: a smaller demo ({sizes}; give a size to change it)"
        )
    for key in DEMO:  # plain ints from here on
        setattr(args, key, int(getattr(args, key)))

    async def main() -> int:
        if has_state(store):
            console.print(f"a fresh start: the previous state in {store} is wiped")
        async with stack(
            None,
            data_dir=store,
            insecure=args.insecure,
            needs=option_needs(args),
            echo=console.print,
            fresh=True,
            verbose=args.verbose,
            name="aios-rl-demo",
            service_env=agent_service_env(args),
            **embedded_options(args),  # type: ignore[arg-type]
        ) as st:
            code = await train_and_report(
                st.bus, console, args, campaign_id=f"demo-{int(time.time())}"
            )
        console.print("stack stopped cleanly")
        console.print(
            f"next: aios-rl eval, aios-rl checkpoints, aios-rl campaign status (store {store})"
        )
        return code

    return asyncio.run(main())
