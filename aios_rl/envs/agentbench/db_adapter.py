"""The ``agentbench_db`` environment behind the ``Environment`` protocol: AgentBench's DB bench
(:mod:`.db`) against a MariaDB database of the episode's own (:mod:`.mariadb`). Free-text
actions only (a student that writes text: ``--student hf``); each step is one turn of the agent.

Outcome: ``success`` (reward 1) when AgentBench's judge accepts the episode, else ``failure``
(0); ``blocked`` when the database could not be set up. The observation is the whole
conversation so far (instructions, question, then each turn and the database's reply), the last
``observation_chars`` of it when longer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from contracts import AgentBenchDbTask

from ...state.tasks import TaskKind
from ..base import EnvResult, EnvSpec
from ..runner import RunnerSettings
from .conversation import Conversation
from .db import (
    INSTRUCTIONS,
    MAX_ROUNDS,
    MODIFYING,
    OUTPUT_LIMIT,
    db_task_id,
    init_statements,
    judge_answer,
    parse_action,
    question,
    table_hash_sql,
)
from .mariadb import EpisodeDb, MariaDb

__all__ = ["DB_TASKS", "SPEC", "DbEnv", "DbHost", "DbRunnerSettings", "judge_db"]

ENVIRONMENT = "agentbench_db"

DB_TASKS = TaskKind(ENVIRONMENT, AgentBenchDbTask, db_task_id)


@dataclass(frozen=True, kw_only=True)
class DbRunnerSettings(RunnerSettings):
    """Run AgentBench DB episodes against a MariaDB server this runner starts (Debian's
    ``mariadbd``; ``deploy/setup.sh`` installs it)."""

    env: str = ENVIRONMENT
    concurrency: int = 4
    max_steps: int = MAX_ROUNDS + 1
    statement_timeout_s: float = 10.0
    """Longest one SQL statement may run."""
    observation_chars: int = 6000
    """Most characters of the conversation an observation holds (its end)."""
    mariadb_dir: str = ""
    """The server's folder (default: a fresh temporary one, removed at shutdown)."""


def judge_db(task: AgentBenchDbTask, answer: str, table_hash: str) -> bool:
    """AgentBench's verdict: the table hash for modification tasks, the answer otherwise."""
    if task.kind in MODIFYING:
        return table_hash == task.answer_md5
    return judge_answer(answer, task.label)


class DbEnv(Conversation):
    """One episode of one task (its database made by :meth:`DbHost.open`)."""

    def __init__(
        self, task: AgentBenchDbTask, db: EpisodeDb, *, max_steps: int, chars: int
    ) -> None:
        super().__init__([INSTRUCTIONS, question(task)], chars)
        self.task = task
        self.db = db
        self.max_steps = max_steps
        self.rounds = 0
        self.steps = 0
        self.answer: str | None = None
        self.table_hash = ""

    async def step(self, action: str) -> None:
        if self.done:
            raise RuntimeError("the episode is over")
        self.steps += 1
        parsed = parse_action(action)
        self.turns.append(action.strip())
        if parsed.kind == "operation" and self.rounds < MAX_ROUNDS:
            self.rounds += 1
            reply = await asyncio.to_thread(self.db.execute, parsed.text, limit=OUTPUT_LIMIT)
            self.turns.append(reply or "(no output)")
            if self.steps < self.max_steps:
                return
            parsed = parsed.__class__("answer", "")  # cut off: judged with no answer
        await self._finish(parsed.text if parsed.kind == "answer" else "")

    async def _finish(self, answer: str) -> None:
        self.answer = answer
        if self.task.kind in MODIFYING:
            hashes = [
                await asyncio.to_thread(self.db.execute, table_hash_sql(t))
                for t in self.task.tables
            ]
            self.table_hash = hashes[0] if len(hashes) == 1 else "_".join(sorted(hashes))
        self.verdict = judge_db(self.task, answer, self.table_hash)

    def result(self) -> EnvResult:
        assert self.verdict is not None, "result() before the episode ended"
        info = {
            "kind": self.task.kind,
            "rounds": str(self.rounds),
            "answer": (self.answer or "")[:300],
        }
        if self.table_hash:
            info["table_hash"] = self.table_hash[:100]
        if self.db.init_error:
            info["init_error"] = self.db.init_error[:300]
        return EnvResult("success" if self.verdict else "failure", float(self.verdict), info)

    async def close(self) -> None:
        await asyncio.to_thread(self.db.close)


class DbHost:
    """One MariaDB server per runner process, started at the first episode."""

    def __init__(self, settings: DbRunnerSettings, server: MariaDb | None = None) -> None:
        self.settings = settings
        self.server = server or (
            MariaDb(Path(settings.mariadb_dir), settings.statement_timeout_s)
            if settings.mariadb_dir
            else MariaDb(statement_timeout_s=settings.statement_timeout_s)
        )
        self._started = asyncio.Lock()

    async def open(self, task: AgentBenchDbTask, *, seed: int, max_steps: int) -> DbEnv:
        async with self._started:
            await asyncio.to_thread(self.server.start)
        statements = [s for t in task.tables for s in init_statements(t)]
        db = await asyncio.to_thread(self.server.episode, statements)
        return DbEnv(
            task,
            db,
            max_steps=min(max_steps, MAX_ROUNDS + 1),
            chars=self.settings.observation_chars,
        )

    def task_info(self, task: AgentBenchDbTask) -> dict[str, str]:
        return {
            "task_statement": question(task),
            "kind": task.kind,
            "split": task.split,
            "source": task.source,
        }

    async def aclose(self) -> None:
        await asyncio.to_thread(self.server.close)


SPEC = EnvSpec(
    name=ENVIRONMENT,
    tasks=DB_TASKS,
    host=DbHost,
    settings=DbRunnerSettings,
    description="Runs AgentBench DB-bench episodes against a MariaDB database of their own.",
)
