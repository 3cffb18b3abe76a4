"""``aios-rl mixed`` and ``aios-rl mixed-eval``: one student trained on several environments at
once, and its held-out scores per environment.

``mixed`` runs one campaign whose epochs draw tasks from every environment by ``--ratio``, runs
them concurrently, and ends each epoch in one verdict and one decision for the whole student
(the comparison's per-environment veto: ``aios_rl/comparison.py``). Like ``shell train``
it uses the stack at ``--nats-url`` when one answers, else an embedded one on the store
(``--store``), and generates the tasks any environment lacks first.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Mapping

from rich.console import Console
from rich.table import Table

from contracts import ENVIRONMENTS

from ..bus import Bus
from ..rollouts import RAIL
from ..stack.embedded import active_checkpoint
from ..state.checkpoints import CheckpointRegistry
from ..state.ledger import Ledger
from ._common import (
    CliError,
    bus_args,
    insecure_arg,
    json_arg,
    make_console,
    positive,
    print_campaign_json,
    print_json,
    store_arg,
    training_args,
)
from ._training import apply_teacher, campaign_spec, check_store_student, current_teacher
from .campaign_watch import run_campaign
from .engine import (
    NEEDS,
    POINTERS,
    check_training,
    ensure_tasks,
    evaluate,
    needs_of,
    on_a_stack,
    open_stack,
    resolve,
)
from .evaluation import EvalSummary
from .report import env_table, epoch_table, learning_signals, rollout_table, signals_line

__all__ = ["DEFAULT_RATIO", "add", "parse_ratio"]

DEFAULT_RATIO = {"shell": 0.4, "browser": 0.3, "orchestrator": 0.3}
"""``--mixed`` without ``--ratio``: the specification's split."""


def parse_ratio(text: str) -> dict[str, float]:
    """``shell=0.4,browser=0.3,orchestrator=0.3`` as a normalised mapping. Raises ``CliError``
    for an unknown environment, a repeated one, a weight that is not a positive number, or a
    malformed item."""
    out: dict[str, float] = {}
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        name = name.strip()
        if not sep or not name:
            raise CliError(f"--ratio: {item.strip()!r} is not env=weight")
        if name not in ENVIRONMENTS:
            raise CliError(
                f"--ratio: unknown environment {name!r} (known: {', '.join(ENVIRONMENTS)})"
            )
        if name in out:
            raise CliError(f"--ratio: {name} given twice")
        try:
            weight = float(value)
        except ValueError:
            raise CliError(f"--ratio: {name}={value!r} is not a number") from None
        if not weight > 0 or weight == float("inf"):
            raise CliError(f"--ratio: {name}={value} must be a positive number")
        out[name] = weight
    total = sum(out.values())
    return {k: v / total for k, v in out.items()}


def _ratios(args: argparse.Namespace) -> dict[str, float]:
    only = [env for env in ENVIRONMENTS if getattr(args, f"{env}_only", False)]
    if args.ratio:
        if only:
            raise CliError(f"--ratio and --{only[0]}-only exclude each other")
        return parse_ratio(args.ratio)
    if only:
        return {only[0]: 1.0}
    return dict(DEFAULT_RATIO)


def add(subparsers: argparse._SubParsersAction) -> None:
    mixed = subparsers.add_parser(
        "mixed",
        help="train one student on several environments at once: one verdict and one decision "
        "per epoch for the whole student",
    )
    which = mixed.add_mutually_exclusive_group()
    which.add_argument(
        "--mixed",
        action="store_true",
        help="every environment (the default), by --ratio or shell=0.4,browser=0.3,orchestrator=0.3",
    )
    for env in ENVIRONMENTS:
        which.add_argument(f"--{env}-only", action="store_true", help=f"{env} tasks only")
    mixed.add_argument(
        "--ratio",
        metavar="ENV=W,...",
        help="share of each epoch's tasks per environment, e.g. shell=0.4,browser=0.3,orchestrator=0.3",
    )
    training_args(mixed, epochs=5, train_tasks=60, heldout=16)
    mixed.add_argument("--campaign-id", help="campaign id (default mixed-<date>-<time>)")
    bus_args(mixed)
    mixed.set_defaults(run=on_a_stack(_run_mixed))

    ev = subparsers.add_parser(
        "mixed-eval",
        help="held-out success and reward per environment of a checkpoint (or two side by side)",
    )
    ev.add_argument(
        "--checkpoint",
        default="active",
        metavar="ID|POINTER",
        help=f"checkpoint id, or {' / '.join(POINTERS)} (default active)",
    )
    ev.add_argument(
        "--against", metavar="ID|POINTER", help="a second checkpoint to show side by side"
    )
    ev.add_argument(
        "--env",
        action="append",
        choices=ENVIRONMENTS,
        help="an environment to evaluate (repeat; default all)",
    )
    ev.add_argument("--limit", type=positive, default=16, help="held-out tasks per environment")
    ev.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    json_arg(ev)
    store_arg(ev)
    insecure_arg(ev)
    bus_args(ev)
    ev.set_defaults(run=on_a_stack(_run_mixed_eval))


def heldout_table(title: str, columns: Mapping[str, Mapping[str, EvalSummary]]) -> Table:
    """Rows: environments; per checkpoint column group: success and mean reward, 95 %
    intervals."""
    table = Table(title=title)
    table.add_column("environment")
    for name in columns:
        table.add_column(f"{name} success", justify="right")
        table.add_column(f"{name} reward", justify="right")
    envs = sorted({env for per in columns.values() for env in per})
    for env in envs:
        row = [env]
        for per in columns.values():
            s = per.get(env)
            row += [s.success.pct(), s.reward.num()] if s else ["-", "-"]
        table.add_row(*row)
    return table


async def _scores(
    bus: Bus,
    checkpoint: str,
    heldout: Mapping[str, list[str]],
    console: Console,
    label: str,
    seed: int = 0,
) -> dict[str, EvalSummary]:
    out: dict[str, EvalSummary] = {}
    for env, ids in heldout.items():
        out[env], _ = await evaluate(
            bus,
            checkpoint,
            ids,
            console,
            split="heldout",
            label=f"{env} {label}",
            seed=seed,
            env=env,
        )
    return out


def _needs(envs: list[str], strategy: str = "uniform") -> set[str]:
    needs = set(NEEDS)
    for env in envs:
        needs |= needs_of(env)
    return needs | ({"rail"} if strategy in RAIL else set())


def _run_mixed(args: argparse.Namespace) -> int:
    ratios = _ratios(args)
    envs = sorted(ratios)
    check_training(args, envs)
    console = make_console(args)

    async def main() -> int:
        started = time.monotonic()
        async with open_stack(args, console, _needs(envs, args.strategy)) as st:
            bus = st.bus
            campaign_id = args.campaign_id or f"mixed-{time.strftime('%Y%m%d-%H%M%S')}"
            spec = campaign_spec(args, campaign_id, ratios, episode_deadline_s=600)
            heldout: dict[str, list[str]] = {}
            for env in envs:
                await ensure_tasks(
                    bus, spec.split, args.train_tasks, console, seed=args.seed, env=env
                )
                heldout[env] = await ensure_tasks(
                    bus, "heldout", args.heldout, console, seed=args.seed, env=env
                )
            initial = await active_checkpoint(bus, 120)
            await check_store_student(bus, initial, args.student)
            await apply_teacher(bus, args.teacher)
            teacher = await current_teacher(bus)
            console.print(signals_line(spec.trainer, teacher))
            before = await _scores(bus, initial, heldout, console, "held-out, before")
            console.print(
                "mixed campaign "
                + campaign_id
                + ": "
                + ", ".join(f"{e} {ratios[e]:.0%}" for e in envs)
                + f" of {args.tasks_per_epoch} tasks x {args.group_size} per epoch"
            )
            end = await run_campaign(bus, spec, console)
            records = await Ledger(bus).records(campaign_id)
            final = (await CheckpointRegistry(bus).pointers())[0].active or initial
            after = (
                before
                if final == initial
                else await _scores(bus, final, heldout, console, "held-out, after")
            )
        code = 0 if end == "finished" else 1
        if args.json:
            print_campaign_json(
                campaign_id,
                end,
                spec,
                {"checkpoint": initial, "environments": _as_dicts(before)},
                {"checkpoint": final, "environments": _as_dicts(after)},
                records,
                time.monotonic() - started,
                learned_from=learning_signals(spec.trainer, teacher),
            )
            return code
        console.print(epoch_table(records, title=f"campaign {campaign_id} ({end})"))
        console.print(env_table(records, title="per environment: one verdict, one decision"))
        console.print(rollout_table(records, title="rollouts: what each epoch spent"))
        console.print(
            heldout_table(
                f"held-out per environment ({args.heldout} tasks each), near-greedy, 95% intervals",
                {f"{initial[:8]} before": before, f"{final[:8]} after": after},
            )
        )
        console.print(signals_line(spec.trainer, teacher))
        console.print(f"{time.monotonic() - started:.0f}s; active is {final}")
        return code

    return asyncio.run(main())


def _as_dicts(scores: Mapping[str, EvalSummary]) -> dict[str, dict[str, object]]:
    return {env: dict(s.__dict__) for env, s in sorted(scores.items())}


def _run_mixed_eval(args: argparse.Namespace) -> int:
    envs = sorted(set(args.env or ENVIRONMENTS))
    console = make_console(args)

    async def main() -> int:
        async with open_stack(args, console, _needs(envs)) as st:
            heldout = {
                env: await ensure_tasks(st.bus, "heldout", args.limit, console, env=env)
                for env in envs
            }
            columns: dict[str, dict[str, EvalSummary]] = {}
            ids: dict[str, str] = {}
            for name in [args.checkpoint, *([args.against] if args.against else [])]:
                ckpt = await resolve(st.bus, name)
                label = ckpt[:12] + (f" ({name})" if name in POINTERS else "")
                ids[label] = ckpt
                columns[label] = await _scores(
                    st.bus, ckpt, heldout, console, f"held-out {label}", seed=args.seed
                )
        if args.json:
            print_json(
                [
                    {"checkpoint": ids[label], "environments": _as_dicts(per)}
                    for label, per in columns.items()
                ]
            )
            return 0
        console.print(
            heldout_table(
                f"held-out per environment ({args.limit} tasks each), near-greedy, 95% intervals",
                columns,
            )
        )
        return 0

    return asyncio.run(main())
