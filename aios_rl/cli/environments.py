"""Every environment's ``benchmark-generate``, ``train`` and ``eval``, declared once.

``aios-rl shell | orchestrator | browser`` each start with these three commands, built from the
environment's :class:`~aios_rl.envs.registry.Benchmark` (its words, defaults and splits):
:func:`add_group`. The top-level ``benchmark-generate`` (``--env``, default shell), ``train``
and ``eval`` (the shell's) are the same declaration: :func:`add`. What ``train`` and ``eval``
run is in :mod:`.engine`. ``benchmark-generate`` creates what it stores into on a server that has
no aios-rl state yet, as every command that stores tasks does (``_common.writing``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
from collections import Counter
from collections.abc import Sequence

from ..envs import registry
from ._common import CliError, bus_args, eval_args, positive, training_args, url, writing
from .engine import AfterEval, on_a_stack, run_eval, run_train

__all__ = ["add", "add_group", "generate_tasks"]

DEFAULT_ENV = "shell"
"""The environment of the top-level commands."""


def add(subparsers: argparse._SubParsersAction) -> None:
    """The top-level ``benchmark-generate`` (any environment, ``--env``), ``train`` and
    ``eval`` (the shell's)."""
    _generate_parser(
        subparsers,
        None,
        help=f"generate tasks of one environment (default {DEFAULT_ENV}) and store them",
    )
    _train_parser(subparsers, DEFAULT_ENV, help=f"the same as `{DEFAULT_ENV} train`")
    _eval_parser(subparsers, DEFAULT_ENV, help=f"the same as `{DEFAULT_ENV} eval`")


def add_group(
    subparsers: argparse._SubParsersAction, env: str, *, after_eval: AfterEval | None = None
) -> argparse._SubParsersAction:
    """``aios-rl ENV`` with its ``benchmark-generate``, ``train`` and ``eval`` (``after_eval``:
    the environment's baselines on the eval's tasks). Returns the group's subparsers, for the
    environment's own commands."""
    group = subparsers.add_parser(env, help=registry.benchmark(env).help)
    sub = group.add_subparsers(dest=f"{env}_command", metavar="ACTION", required=True)
    _generate_parser(sub, env)
    _train_parser(sub, env)
    _eval_parser(sub, env, after=after_eval)
    return sub


def _generate_parser(
    subparsers: argparse._SubParsersAction, env: str | None, *, help: str | None = None
) -> None:
    """``benchmark-generate`` for ``env``, or (``None``) for every environment, by ``--env``."""
    benches = registry.benchmarks() if env is None else {env: registry.benchmark(env)}
    gen = subparsers.add_parser(
        "benchmark-generate", help=help or registry.benchmark(env or DEFAULT_ENV).generate_help
    )
    gen.add_argument("--count", type=positive, required=True, help="tasks to generate")
    if env is None:
        gen.add_argument(
            "--env",
            dest="environment",
            choices=tuple(benches),
            default=DEFAULT_ENV,
            help=f"environment (default {DEFAULT_ENV})",
        )
    gen.add_argument("--seed", type=int, default=0, help="generation seed (default 0)")
    splits = tuple(dict.fromkeys(s for b in benches.values() for s in b.generate_splits))
    gen.add_argument(
        "--split", choices=splits, default=splits[0], help="which split (default train)"
    )
    writers = [name for name, b in benches.items() if b.verified]
    if writers:
        only = "" if env else f"{', '.join(writers)}: "
        gen.add_argument(
            "--out", metavar="DIR", help=f"{only}also write the tasks to this directory"
        )
        gen.add_argument(
            "--no-store",
            action="store_true",
            help=f"{only}do not store them in NATS (needs --out)",
        )
    bus_args(gen)
    gen.set_defaults(run=generate_tasks, **({"environment": env} if env else {}))


def _train_parser(
    subparsers: argparse._SubParsersAction, env: str, *, help: str | None = None
) -> None:
    bench = registry.benchmark(env)
    train = subparsers.add_parser(
        "train",
        help=help
        or f"train the student on {env} tasks: a campaign with held-out scores before and after",
    )
    training_args(
        train,
        epochs=5,
        train_tasks=bench.train_tasks,
        heldout=bench.heldout,
        splits=bench.train_splits,
    )
    train.add_argument("--campaign-id", help=f"campaign id (default {env}-<date>-<time>)")
    bus_args(train)
    train.set_defaults(run=on_a_stack(run_train), environment=env)


def _eval_parser(
    subparsers: argparse._SubParsersAction,
    env: str,
    *,
    help: str | None = None,
    after: AfterEval | None = None,
) -> None:
    bench = registry.benchmark(env)
    ev = subparsers.add_parser("eval", help=help or bench.eval_help)
    eval_args(ev, limit=bench.eval_limit, splits=bench.eval_splits)
    command = functools.partial(run_eval, after=after) if after is not None else run_eval
    ev.set_defaults(run=on_a_stack(command), environment=env)


def generate_tasks(args: argparse.Namespace) -> int:
    """``benchmark-generate``: ``--count`` tasks of ``--split`` for the command's environment,
    stored in the task store at ``--nats-url`` (created there if the server has none) and, for
    an environment that verifies its tasks, written to ``--out``."""
    env = args.environment
    bench = registry.benchmark(env)
    out, no_store = getattr(args, "out", None), getattr(args, "no_store", False)
    verified = registry.verified_generator(env)
    if verified is None and (out or no_store):
        writers = [name for name, b in registry.benchmarks().items() if b.verified]
        raise CliError(f"--out and --no-store are for {' and '.join(writers)} tasks")
    if args.split not in bench.generate_splits:
        raise CliError(
            f"--split {args.split}: {env} tasks come in {', '.join(bench.generate_splits)}"
        )
    if verified is not None:
        if no_store and not out:
            raise ValueError("--no-store needs --out, or the tasks would go nowhere")
        if not no_store:  # the store made (or refused) before a slow generation, not after
            asyncio.run(_writable(args, env))
        summary = verified(
            args.count,
            args.seed,
            args.split,
            out_dir=out,
            nats_url=None if no_store else url(args),
            namespace=args.namespace,
        )
        print(f"{summary.count} verified {args.split} tasks in {summary.seconds:.0f}s")
        return 0
    tasks = registry.generator(env)(args.count, seed=args.seed, split=args.split)
    stored, existing = asyncio.run(_store(args, env, tasks))
    print(
        f"{len(tasks)} {args.split} {env} tasks{_kinds(bench, tasks)}: {stored} stored, "
        f"{existing} already there"
    )
    return 0


def _kinds(bench: registry.Benchmark, tasks: Sequence[object]) -> str:
    """`` (9 runs, 3 clarity gates)``: the tasks counted by kind, as the benchmark names them."""
    if not bench.kinds:
        return ""
    counts = Counter(getattr(t, "kind", None) for t in tasks)
    return " (" + ", ".join(f"{counts[kind]} {words}" for kind, words in bench.kinds) + ")"


async def _writable(args: argparse.Namespace, env: str) -> None:
    async with writing(args, f"aios-rl-{env}"):
        pass


async def _store(args: argparse.Namespace, env: str, tasks: Sequence[object]) -> tuple[int, int]:
    async with writing(args, f"aios-rl-{env}") as bus:
        result = await registry.task_store(bus, env).put_all(tasks)
    return result.stored, result.existing
