"""``aios-rl agentbench verify`` (AgentBench's reference solutions through our environments) and
``aios-rl agentbench import`` (its DB tasks into the task store, for ``eval`` and campaigns).

``--dir`` is an AgentBench data folder in AgentBench's layout (``dbbench/<split>.jsonl``; a
checkout's ``data/`` folder, or the dev splits this project's CI uses): default
``$AGENTBENCH_DIR``. Only the DB bench is built so far (``agentbench_db``); the OS bench's
environment is not, and ``--env os`` says so.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from pathlib import Path

from rich.table import Table

from ._common import CliError, bus_args, json_arg, make_console, read_state, store_arg

__all__ = ["add"]


def _data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--split", default="dev", help="which split's file, and its name (dev)")
    p.add_argument(
        "--dir",
        type=Path,
        default=os.environ.get("AGENTBENCH_DIR"),
        help="AgentBench's data folder (dbbench/<split>.jsonl; env AGENTBENCH_DIR)",
    )


def add(subparsers: argparse._SubParsersAction) -> None:
    ab = subparsers.add_parser("agentbench", help="AgentBench's benchmarks as environments")
    sub = ab.add_subparsers(dest="agentbench_command", metavar="ACTION", required=True)
    verify = sub.add_parser(
        "verify",
        help="run every task's reference solution through the environment: pass / fail",
    )
    _data_args(verify)
    verify.add_argument("--env", choices=("db", "os"), default="db", help="which bench (db)")
    json_arg(verify)
    verify.set_defaults(run=_verify)

    imp = sub.add_parser(
        "import",
        help="store AgentBench's DB tasks in the task store (environment agentbench_db)",
    )
    _data_args(imp)
    store_arg(imp)
    bus_args(imp)
    imp.set_defaults(run=_import)


def _tasks(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    if args.dir is None:
        raise CliError("give --dir (AgentBench's data folder) or set AGENTBENCH_DIR")
    path = Path(args.dir) / "dbbench" / f"{args.split}.jsonl"
    if not path.is_file():
        raise CliError(f"no DB tasks at {path}")
    from ..envs.agentbench.db import load_db_tasks

    try:
        return load_db_tasks(path, args.split)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _import(args: argparse.Namespace) -> int:
    import asyncio

    from ..envs.registry import task_store
    from ..stack.embedded import NoStoreError, StackError

    tasks = _tasks(args)

    async def put() -> str:
        async with read_state(args, "aios-rl-agentbench-import", create=True) as state:
            result = await task_store(state.bus, "agentbench_db").put_all(tasks)
            return f"{result.stored} new, {result.existing} already there"

    try:
        said = asyncio.run(put())
    except (NoStoreError, StackError, TimeoutError) as exc:
        raise CliError(str(exc)) from None
    make_console(args).print(
        f"{len(tasks)} agentbench_db tasks in split {args.split}: {said}. A runner runs their "
        "rollout jobs: `python -m services.runner --env agentbench_db` on a stack started with "
        "`aios-rl up --env agentbench_db` (docs/agentbench.md)"
    )
    return 0


def _verify(args: argparse.Namespace) -> int:
    if args.env == "os":
        raise CliError(
            "the agentbench OS environment is not built yet (issue 24): only --env db runs"
        )
    tasks = _tasks(args)
    from ..envs.agentbench.mariadb import MariaDbError
    from ..envs.agentbench.verify import verify_db

    console = make_console(args)
    try:
        with console.status(f"verifying {len(tasks)} DB tasks") as status:
            done: list[object] = []

            def seen(_check: object) -> None:
                done.append(_check)
                status.update(f"verifying DB tasks: {len(done)}/{len(tasks)}")

            checks = verify_db(tasks, progress=seen)
    except MariaDbError as exc:
        raise CliError(str(exc)) from None
    passed = sum(c.passed for c in checks)
    if args.json:
        from .shell import print_json

        print_json(
            {
                "split": args.split,
                "tasks": len(checks),
                "passed": passed,
                "checks": [c.__dict__ for c in checks],
            }
        )
        return 0 if passed == len(checks) else 1
    table = Table(title=f"agentbench db, {args.split}: {passed}/{len(checks)} pass")
    for col in ("task", "source", "kind", "result", "failure"):
        table.add_column(col)
    for c in checks:
        table.add_row(
            c.task_id, c.source, c.kind, "pass" if c.passed else "FAIL",
            f"{c.failure}: {c.detail}" if c.failure else c.detail,
        )  # fmt: skip
    console.print(table)
    by_kind = Counter(c.kind for c in checks)
    ok_kind = Counter(c.kind for c in checks if c.passed)
    console.print(
        ", ".join(f"{k} {ok_kind[k]}/{n}" for k, n in sorted(by_kind.items()))
        + f"; failure classes: {dict(Counter(c.failure for c in checks if not c.passed)) or 'none'}"
    )
    return 0 if passed == len(checks) else 1
