"""``aios-rl agentbench verify``: every task's reference solution run through the environment,
pass or fail with the failure class. The check a user runs before trusting numbers.

OS tasks: the ``example`` runs in the agent's shell, then its output is the answer
(:func:`~.os.reference_action`); a ``match`` task without an example answers its expected text;
each on a machine of its own, judged by AgentBench's rules.

DB tasks: a modification task's reference SQL (its label) runs as one ``Operation`` turn, then
an answer; an answer task answers its label. Both go through :class:`~.db_adapter.DbEnv` on a
real MariaDB, so what passes is what an agent doing the right thing would be credited with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from contracts import AgentBenchDbTask, AgentBenchOsTask

from .db import MODIFYING, reference_turns
from .db_adapter import DbHost, DbRunnerSettings
from .mariadb import MariaDb
from .os import ROUND_LIMIT, problem, reference_action
from .os_adapter import OsHost, OsRunnerSettings

__all__ = ["Check", "reference_turns", "verify_db", "verify_os"]


@dataclass(frozen=True)
class Check:
    task_id: str
    source: str
    kind: str
    passed: bool
    failure: str = ""
    """The failure class: ``reference SQL error``, ``table hash differs``, ``answer judged
    wrong``, ``environment error``."""
    detail: str = ""


async def _check(host: DbHost, task: AgentBenchDbTask) -> Check:
    try:
        env = await host.open(task, seed=0, max_steps=8)
    except Exception as exc:
        return Check(task.task_id, task.source, task.kind, False, "environment error", str(exc))
    try:
        for turn in reference_turns(task):
            if env.done:
                break
            await env.step(turn)
        result = env.result()
        if result.outcome == "success":
            note = result.info.get("init_error", "")
            return Check(
                task.task_id,
                task.source,
                task.kind,
                True,
                detail=f"its table cannot be made ({note}); MySQL refuses it too" if note else "",
            )
        if task.kind in MODIFYING:
            reply = env.turns[3] if len(env.turns) > 3 else ""
            if reply.startswith("(") and not reply.startswith("(("):
                return Check(
                    task.task_id, task.source, task.kind, False, "reference SQL error", reply[:200]
                )
            return Check(
                task.task_id,
                task.source,
                task.kind,
                False,
                "table hash differs",
                f"{env.table_hash} != {task.answer_md5}",
            )
        return Check(
            task.task_id, task.source, task.kind, False, "answer judged wrong", str(task.label)
        )
    finally:
        await env.close()


def verify_db(
    tasks: list[AgentBenchDbTask],
    *,
    server: MariaDb | None = None,
    progress: Callable[[Check], None] | None = None,
) -> list[Check]:
    """Every task's reference through the environment, one at a time, on one server (a fresh
    one unless given; stopped at the end only when this made it)."""

    async def run() -> list[Check]:
        host = DbHost(DbRunnerSettings(nats_url=""), server)
        try:
            out = []
            for task in tasks:
                check = await _check(host, task)
                out.append(check)
                if progress is not None:
                    progress(check)
            return out
        finally:
            if server is None:
                await host.aclose()

    return asyncio.run(run())


async def _check_os(host: OsHost, task: AgentBenchOsTask) -> Check:
    kind = "match" if task.match is not None else "check"
    if reference_action(task, problem(task)) is None:
        return Check(task.task_id, task.source, kind, False, "no reference solution")
    try:
        env = await host.open(task, seed=0, max_steps=ROUND_LIMIT)
    except Exception as exc:
        return Check(task.task_id, task.source, kind, False, "environment error", str(exc))
    try:
        while not env.done:
            action = reference_action(task, env.observation)
            assert action is not None
            await env.step(action)
        result = env.result()
        notes = "; ".join(f"{k}: {v}" for k, v in result.info.items() if k.startswith("init_"))
        if result.outcome == "success":
            return Check(task.task_id, task.source, kind, True, detail=notes)
        failure = "answer judged wrong" if kind == "match" else "check failed"
        if "check_error" in result.info:
            failure = "check not supported"
        return Check(
            task.task_id,
            task.source,
            kind,
            False,
            failure,
            f"answered {result.info.get('answer', '')[:80]!r}" + (f"; {notes}" if notes else ""),
        )
    finally:
        await env.close()


def verify_os(
    tasks: list[AgentBenchOsTask],
    *,
    settings: OsRunnerSettings | None = None,
    progress: Callable[[Check], None] | None = None,
) -> list[Check]:
    """Every task's reference (:func:`~.os.reference_action`) through the environment, one
    task at a time, each on a machine of its own."""

    async def run() -> list[Check]:
        host = OsHost(settings or OsRunnerSettings(nats_url=""))
        out = []
        for task in tasks:
            check = await _check_os(host, task)
            out.append(check)
            if progress is not None:
                progress(check)
        return out

    return asyncio.run(run())
