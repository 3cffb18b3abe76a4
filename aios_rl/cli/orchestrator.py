"""``aios-rl orchestrator benchmark-generate | train | eval | import | mine``: the orchestrator
environment's commands. ``benchmark-generate``, ``train`` and ``eval`` are declared as every
environment's (:mod:`.environments`; ``train`` / ``eval`` on ``--nats-url``'s stack or an
embedded one); ``eval`` also prints what the baselines score on the same tasks; ``import`` stores
a user's own decisions (a JSONL log); ``mine`` turns the blocked and failed shell and browser
episodes the stack has recorded into clarity-gate tasks. Each creates the task store on a server
that has none yet, as every command that stores tasks does (``_common.writing``)."""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from collections.abc import Sequence

from contracts import OrchestratorTask

from ..bus import Bus
from . import environments
from ._common import CliError, bus_args, writing

__all__ = ["add", "baseline_scores"]


def add(subparsers: argparse._SubParsersAction) -> None:
    sub = environments.add_group(subparsers, "orchestrator", after_eval=_baselines)

    imp = sub.add_parser(
        "import",
        help="store your own orchestrator decisions (a JSONL log, docs/orchestrator.md) as tasks",
    )
    imp.add_argument("file", metavar="FILE", help="the JSONL file")
    imp.add_argument(
        "--dry-run", action="store_true", help="check the file and count its entries; store nothing"
    )
    bus_args(imp)
    imp.set_defaults(run=_import)

    mine = sub.add_parser(
        "mine",
        help="clarity-gate tasks from the blocked and failed shell / browser episodes recorded",
    )
    mine.add_argument("--seed", type=int, default=0, help="seed of the work items (default 0)")
    bus_args(mine)
    mine.set_defaults(run=_mine)


async def _store(args: argparse.Namespace, tasks: Sequence[OrchestratorTask]) -> tuple[int, int]:
    from ..envs.registry import task_store

    async with writing(args, "aios-rl-orchestrator") as bus:
        result = await task_store(bus, "orchestrator").put_all(tasks)
    return result.stored, result.existing


def _import(args: argparse.Namespace) -> int:
    from ..envs.orchestrator.importer import LogFormatError, read_file

    try:
        tasks = read_file(args.file)
    except LogFormatError as exc:
        raise CliError(str(exc)) from None
    splits = Counter(t.split for t in tasks)
    stages = Counter(t.logged.stage for t in tasks if t.logged)
    what = ", ".join(f"{n} {s}" for s, n in sorted(stages.items()))
    if args.dry_run:
        print(
            f"{len(tasks)} entries ({what}); train {splits['train']}, held-out {splits['heldout']}"
        )
        return 0
    stored, existing = asyncio.run(_store(args, tasks))
    print(
        f"{len(tasks)} imported decisions ({what}): {stored} stored, {existing} already there; "
        f"train {splits['train']}, held-out {splits['heldout']}"
    )
    return 0


def _mine(args: argparse.Namespace) -> int:
    from ..envs.orchestrator.ledger import read_episodes, tasks_from_episodes
    from ..envs.registry import task_store

    async def main() -> tuple[int, list[OrchestratorTask], int, int]:
        async with writing(args, "aios-rl-orchestrator") as bus:
            episodes = await read_episodes(bus)
            tasks = tasks_from_episodes(episodes, seed=args.seed)
            result = await task_store(bus, "orchestrator").put_all(tasks)
        return len(episodes), tasks, result.stored, result.existing

    seen, tasks, stored, existing = asyncio.run(main())
    causes = Counter(t.checkpoint.cause for t in tasks if t.checkpoint)
    splits = Counter(t.split for t in tasks)
    what = ", ".join(f"{n} {c}" for c, n in sorted(causes.items())) or "none"
    print(
        f"{seen} shell/browser episodes read; {len(tasks)} became clarity-gate tasks "
        f"(causes: {what}; train {splits['train']}, held-out {splits['heldout']}): "
        f"{stored} stored, {existing} already there"
    )
    return 0


def baseline_scores(
    tasks: Sequence[OrchestratorTask], train: Sequence[OrchestratorTask]
) -> dict[str, float]:
    """Mean reward of the oracle, random, constant, majority and one-feature policies on
    ``tasks`` (imported tasks left out; majority and one-feature rules fitted on ``train``)."""
    from ..envs.orchestrator import baselines as b

    runs = [t for t in tasks if t.kind != "imported"]
    policies: dict[str, b.Policy] = {"oracle": b.oracle, "random": b.random_policy(0)}
    policies |= {name: b.constant(d) for name, d in b.CONSTANT.items()}
    fit = [t for t in train if t.kind != "imported"]
    if fit:
        policies["majority per stage"] = b.constant(b.fit_majority(fit))
        policies["best one-feature rule"] = b.fit_one_feature(fit)[0]
    return {name: b.evaluate(runs, policy) for name, policy in policies.items()} if runs else {}


async def _baselines(bus: Bus, ids: list[str]) -> dict[str, float]:
    from ..envs.registry import task_store

    store = task_store(bus, "orchestrator")
    tasks = [await store.get(i) for i in ids]
    train = [await store.get(i) for i in (await store.list("train"))[:400]]
    if not [t for t in train if t.kind != "imported"]:
        from ..envs.orchestrator import generate

        train = generate(400, seed=0)  # none stored: fit the rules on the generator's train split
    return baseline_scores(tasks, train)
