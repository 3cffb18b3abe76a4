"""``aios-rl shell import`` and ``aios-rl shell mine``: users' bugs as shell tasks.

``import PATH --test-cmd CMD`` snapshots a directory (or a git commit of it, ``--commit``) whose
tests fail; ``--fix-commit SHA`` or ``--fix-patch FILE`` gives the known fix (hidden ground
truth). ``mine REPO`` walks a git history for commits whose tests fail before and pass after.
Every test run is sandboxed. Tasks go to the store (``--store``, or the stack at ``--nats-url``),
where ``shell train --split real`` and ``shell eval --split real|real-heldout`` find them, and
with ``--out`` to a directory. See :mod:`aios_rl.envs.shell.importing`.
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from pathlib import Path

from rich.table import Table

from ..envs.shell.importing import (
    Imported,
    ImportOptions,
    RejectedTask,
    build_task,
    mine,
    normalise_command,
)
from ..envs.shell.pertest import DEFAULT_TEST_TIMEOUT_S
from ..envs.shell.repair import RepairOptions
from ..envs.shell.repo import (
    SnapshotError,
    apply_patch,
    diff,
    is_git,
    is_test_path,
    patch_of,
    resolve,
    snapshot_commit,
    snapshot_dir,
)
from ..envs.shell.sandbox import SandboxConfig, SandboxUnavailable, policy_executor
from ..envs.shell.store import ShellTaskStore, write_dir
from ..stack.embedded import NoStoreError, StackError
from ._common import (
    CliError,
    bus_args,
    json_arg,
    make_console,
    positive,
    print_json,
    read_state,
    store_arg,
)

__all__ = ["add"]

SPLITS = ("real", "real-heldout", "train", "heldout")


def _share(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {text}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < 86_400:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds (below a day), not {text}")
    return value


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=positive, default=60, help="seconds per test run (60)")
    p.add_argument(
        "--test-timeout",
        type=_seconds,
        default=DEFAULT_TEST_TIMEOUT_S,
        metavar="SECONDS",
        help="seconds one test may run before it is stopped and counted as failing, so a bug "
        f"that loops for ever still makes a task; kept in the task for its later runs "
        f"({DEFAULT_TEST_TIMEOUT_S:g}; 0: none, a hanging test then rejects the tree)",
    )
    p.add_argument(
        "--max-tries",
        type=positive,
        default=40,
        help="candidate edits checked against the tests per task (40)",
    )
    p.add_argument("--offer", type=positive, default=6, help="candidate edits offered (6)")
    p.add_argument("--out", metavar="DIR", help="also write the tasks to this directory")
    p.add_argument("--no-store", action="store_true", help="do not store them (needs --out)")
    json_arg(p)
    store_arg(p)
    bus_args(p)


def add(shell_sub: argparse._SubParsersAction) -> None:
    imp = shell_sub.add_parser(
        "import",
        help="make a task of a directory (or git commit) whose tests fail",
        description="Snapshot PATH into a verified task: its tests must fail (twice, alike); "
        "with a known fix they must pass after it. Candidate edits come from fault "
        "localisation and mutation operators, never from the fix.",
    )
    imp.add_argument("path", metavar="PATH", type=Path, help="the directory (or git work tree)")
    imp.add_argument(
        "--test-cmd", required=True, help='the test command, e.g. "python -m pytest tests/"'
    )
    imp.add_argument("--commit", metavar="REV", help="take the tree of this commit of PATH")
    fix = imp.add_mutually_exclusive_group()
    fix.add_argument(
        "--fix-commit", metavar="SHA", help="the commit of PATH whose code changes fix the bug"
    )
    fix.add_argument("--fix-patch", metavar="FILE", type=Path, help="a unified diff that fixes it")
    imp.add_argument("--name", help="the task family's name (default: PATH's name)")
    imp.add_argument("--split", choices=SPLITS, default="real", help="which split (real)")
    _common(imp)
    imp.set_defaults(run=_import)

    mn = shell_sub.add_parser(
        "mine",
        help="make tasks of the bug fixes in a git history (tests fail before, pass after)",
        description="Walk REPO's commits; a commit whose tests fail with its code changes "
        "reverted and pass with them (twice each, with different hash seeds) becomes a task, "
        "its code changes the known fix.",
    )
    mn.add_argument("repo", metavar="REPO", type=Path, help="a local git repository")
    mn.add_argument(
        "--test-cmd",
        default="python -m pytest -q",
        help='the test command at every commit (default "python -m pytest -q")',
    )
    mn.add_argument("--rev", default="HEAD", help="walk back from this revision (HEAD)")
    mn.add_argument("--since", default="", help='only commits after this date ("2024-01-01")')
    mn.add_argument("--limit", type=positive, default=0, help="at most this many commits")
    mn.add_argument(
        "--heldout-share",
        type=_share,
        default=0.2,
        help="share of commits (by hash) whose tasks go to real-heldout (0.2)",
    )
    _common(mn)
    mn.set_defaults(run=_mine)


def _executor(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    try:
        return policy_executor(SandboxConfig(wall_timeout_s=float(args.timeout)))
    except SandboxUnavailable as exc:
        raise CliError(f"the sandbox is not available: {exc}") from None


def _options(args: argparse.Namespace, **kw: object) -> ImportOptions:
    return ImportOptions(
        repair=RepairOptions(max_tries=args.max_tries, offer=args.offer),
        test_timeout_s=args.test_timeout,
        **kw,  # type: ignore[arg-type]
    )


def _check(args: argparse.Namespace) -> list[str]:
    if args.no_store and not args.out:
        raise CliError("--no-store needs --out, or the tasks would go nowhere")
    try:
        return normalise_command(args.test_cmd)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _fix_of(args: argparse.Namespace, files: dict[str, str]) -> dict[str, str] | None:
    """The known fix as path -> fixed text (``""``: deleted), or ``None``."""
    if args.fix_patch is not None:
        try:  # bytes as they are: a CRLF line of the patch must match one of the tree
            patch = args.fix_patch.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read --fix-patch {args.fix_patch}: {exc}") from None
    elif args.fix_commit:
        if not is_git(args.path):
            raise CliError("--fix-commit needs PATH to be a git work tree")
        sha = resolve(args.path, args.fix_commit)
        after = snapshot_commit(args.path, sha).files
        before = snapshot_commit(args.path, f"{sha}^").files
        code = [p for p in diff(before, after) if not is_test_path(p)]
        if not code:
            raise CliError(f"commit {sha[:12]} changes no code outside the tests")
        patch = patch_of(before, after, code)
    else:
        return None
    fixed = apply_patch(files, patch)
    return {p: fixed.get(p, "") for p in diff(files, fixed)}


def _store(args: argparse.Namespace, tasks: list) -> str:  # type: ignore[type-arg]
    if args.out:
        write_dir(Path(args.out), tasks)
    if args.no_store or not tasks:
        return f"written to {args.out}" if args.out else "nothing stored"

    async def put() -> str:
        async with read_state(args, "aios-rl-shell-import", create=True) as state:
            result = await ShellTaskStore(state.bus).put_all(tasks)
            return f"stored: {result.stored} new, {result.existing} already there"

    try:
        return asyncio.run(put())
    except (NoStoreError, StackError, TimeoutError) as exc:
        raise CliError(str(exc)) from None


def _row(table: Table, got: Imported) -> None:
    t = got.task
    table.add_row(
        t.task_id,
        t.split,
        str(len(t.failing_tests)),
        f"{len(t.candidate_edits)}/{got.tried}",
        "yes" if got.solvable else "no",
        "-"
        if t.known_fix is None
        else ("not ranked" if got.fix_rank is None else str(got.fix_rank)),
        f"{got.seconds:.0f}s",
    )


def _table(title: str) -> Table:
    table = Table(title=title)
    for col in ("task", "split", "failing", "offered/tried", "solvable", "fix line rank", "time"):
        table.add_column(col, justify="right" if col not in ("task", "split") else "left")
    return table


def _doc(got: Imported) -> dict[str, object]:
    return {
        "task_id": got.task.task_id,
        "split": got.task.split,
        "source": got.task.source,
        "failing_tests": got.task.failing_tests,
        "candidates": len(got.task.candidate_edits),
        "tried": got.tried,
        "solvable": got.solvable,
        "fix_rank": got.fix_rank,
        "seconds": round(got.seconds, 1),
    }


def _import(args: argparse.Namespace) -> int:
    command = _check(args)
    console = make_console(args)
    path = args.path
    if not path.is_dir():
        raise CliError(f"{path} is not a directory")
    try:
        if args.commit:
            if not is_git(path):
                raise CliError("--commit needs PATH to be a git work tree")
            files = snapshot_commit(path, args.commit).files
        else:
            snap = snapshot_dir(path)
            files = snap.files
            for rel, why in sorted(snap.skipped.items())[:10]:
                console.print(f"left out {rel}: {why}")
        fix = _fix_of(args, files)
    except SnapshotError as exc:
        raise CliError(str(exc)) from None
    name = args.name or path.resolve().name
    executor = _executor(args)
    try:
        got = build_task(
            files,
            command,
            executor,
            name=name,
            source=f"import:{name}",
            fix=fix,
            commit=resolve(path, args.fix_commit) if args.fix_commit else "",
            split=args.split,
            options=_options(args),
            progress=console.log,
        )
    except (RejectedTask, SnapshotError) as exc:
        raise CliError(f"{path} does not make a task: {exc}") from None
    where = _store(args, [got.task])
    if args.json:
        print_json({**_doc(got), "stored": where})
        return 0
    table = _table(f"imported {name}")
    _row(table, got)
    console.print(table)
    console.print(
        f"solvable by candidates: {'1/1' if got.solvable else '0/1'}; {where}; "
        f"train or evaluate with `aios-rl shell train|eval --split {got.task.split}`"
    )
    return 0


def _mine(args: argparse.Namespace) -> int:
    command = _check(args)
    console = make_console(args)
    if not args.repo.is_dir() or not is_git(args.repo):
        raise CliError(f"{args.repo} is not the top of a git work tree")
    executor = _executor(args)
    try:
        report = mine(
            args.repo,
            command,
            executor,
            rev=args.rev,
            since=args.since,
            limit=args.limit,
            options=_options(args, heldout_share=args.heldout_share),
            progress=console.log,
        )
    except SnapshotError as exc:
        raise CliError(str(exc)) from None
    tasks = [g.task for g in report.tasks]
    where = _store(args, tasks)
    solvable = sum(g.solvable for g in report.tasks)
    reasons = Counter(r.split(":", 1)[0] for _, _, r in report.rejected)
    if args.json:
        print_json(
            {
                "commits": report.commits,
                "tasks": [_doc(g) for g in report.tasks],
                "solvable": solvable,
                "rejected": [
                    {"commit": sha, "subject": subject, "reason": why}
                    for sha, subject, why in report.rejected
                ],
                "stored": where,
            }
        )
        return 0
    table = _table(f"mined {args.repo.resolve().name}: {report.commits} commits")
    for got in report.tasks:
        _row(table, got)
    console.print(table)
    console.print(
        f"{len(tasks)} tasks from {report.commits} commits; solvable by candidates: "
        f"{solvable}/{len(tasks)}; rejected: "
        + (", ".join(f"{why} {n}" for why, n in reasons.most_common()) or "none")
    )
    console.print(where)
    return 0
