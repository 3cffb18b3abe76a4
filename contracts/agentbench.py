"""AgentBench's tasks as environments of ours: DB-bench tasks (SQL against a MariaDB database of
the episode's own) in AgentBench's own format, content-addressed like every task."""

from __future__ import annotations

import msgspec

from ._base import Message

__all__ = ["AgentBenchDbTask", "DbTable"]


class DbTable(msgspec.Struct, frozen=True, kw_only=True):
    """One table a DB task starts from: every column ``TEXT``, as AgentBench creates them."""

    name: str
    columns: list[str]
    rows: list[list[str]] = []


class AgentBenchDbTask(Message, frozen=True, kw_only=True):
    """A DB-bench task (AgentBench's ``dbbench`` JSONL entry, fields renamed where ours differ).

    ``kind`` is AgentBench's ``type[0]``: ``INSERT``, ``UPDATE`` and ``DELETE`` are judged by
    the table hash after the episode (``answer_md5``); every other kind (``other``,
    ``counting``, ``aggregation-SUM``, ...) by the final answer against ``label``."""

    SCHEMA = "agentbench_db_task.v1"

    task_id: str
    split: str = "dev"
    kind: str
    description: str
    add_description: str = ""
    evidence: str = ""
    tables: list[DbTable]
    label: list[str] = []
    """Answer tasks: the expected answer. Modification tasks: the reference SQL."""
    answer_md5: str = ""
    """Modification tasks: what the table-hash query returns after the reference SQL (the
    driver's text of its rows, ``[('<md5>',)]``)."""
    gold_sql: str = ""
    """Answer tasks: the dataset's SQL (informational; its dialect does not always run)."""
    source: str = ""
    """Where it came from (``dbbench/dev.jsonl:12``)."""
