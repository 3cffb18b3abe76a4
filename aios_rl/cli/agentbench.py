"""``aios-rl agentbench verify``: AgentBench's reference solutions through our environments.

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

from ._common import CliError, json_arg, make_console

__all__ = ["add"]


def add(subparsers: argparse._SubParsersAction) -> None:
    ab = subparsers.add_parser("agentbench", help="AgentBench's benchmarks as environments")
    sub = ab.add_subparsers(dest="agentbench_command", metavar="ACTION", required=True)
    verify = sub.add_parser(
        "verify",
        help="run every task's reference solution through the environment: pass / fail",
    )
    verify.add_argument("--split", default="dev", help="which split's files (default dev)")
    verify.add_argument(
        "--dir",
        type=Path,
        default=os.environ.get("AGENTBENCH_DIR"),
        help="AgentBench's data folder (dbbench/<split>.jsonl; env AGENTBENCH_DIR)",
    )
    verify.add_argument("--env", choices=("db", "os"), default="db", help="which bench (db)")
    json_arg(verify)
    verify.set_defaults(run=_verify)


def _verify(args: argparse.Namespace) -> int:
    if args.env == "os":
        raise CliError(
            "the agentbench OS environment is not built yet (issue 24): only --env db runs"
        )
    if args.dir is None:
        raise CliError("give --dir (AgentBench's data folder) or set AGENTBENCH_DIR")
    path = Path(args.dir) / "dbbench" / f"{args.split}.jsonl"
    if not path.is_file():
        raise CliError(f"no DB tasks at {path}")
    from ..envs.agentbench.db import load_db_tasks
    from ..envs.agentbench.mariadb import MariaDbError
    from ..envs.agentbench.verify import verify_db

    try:
        tasks = load_db_tasks(path, args.split)
    except ValueError as exc:
        raise CliError(str(exc)) from None
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
