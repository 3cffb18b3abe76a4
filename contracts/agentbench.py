"""AgentBench's tasks as environments of ours, in AgentBench's own formats, content-addressed like
every task: DB-bench tasks (SQL against a MariaDB database of the episode's own) and OS tasks (a
shell on a machine of the episode's own)."""

from __future__ import annotations

import msgspec

from ._base import Message

__all__ = ["AgentBenchDbTask", "AgentBenchOsTask", "DbTable", "OsMatch", "OsScript"]


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


class OsScript(msgspec.Struct, frozen=True, kw_only=True):
    """A script of an OS task: what runs it (``bash``, ``python``, ``c``, ``c++``) and its code."""

    language: str = "bash"
    code: str


class OsMatch(msgspec.Struct, frozen=True, kw_only=True):
    """An OS task's ``match`` evaluation: the exact answer, or a regular expression."""

    answer: str | None = None
    regex: str | None = None
    strip: bool = True


class AgentBenchOsTask(Message, frozen=True, kw_only=True):
    """An OS-interaction task (AgentBench's ``os_interaction`` JSON entry, its script files read
    in): the machine is set up by ``init`` (then ``start``, in the agent's shell), the agent works
    in a shell, and its answer is judged by ``match`` or by the ``check`` scripts (called with the
    answer, then each earlier script's output; a ``None`` entry runs ``example`` there)."""

    SCHEMA = "agentbench_os_task.v1"

    task_id: str
    split: str = "dev"
    description: str
    image: str = "default"
    """The root filesystem (AgentBench's image): ``default`` or ``packages``."""
    init: list[OsScript] = []
    start: OsScript | None = None
    match: OsMatch | None = None
    check: list[OsScript | None] = []
    example: OsScript | None = None
    labels: list[str] = []
    source: str = ""
