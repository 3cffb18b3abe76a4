"""AgentBench's DB bench, pure: its task format, its interaction protocol and its judge. No
database here (:mod:`.mariadb` runs the SQL), no NATS.

The protocol is AgentBench v0.2's ``dbbench`` (the one its ``dev.jsonl`` and published DB numbers
use), restated:

- The agent sees the instructions, the question and the table's description. Each turn it
  answers with text. ``Action: Operation`` followed by a fenced ```` ```sql ```` block runs the
  first such block (newlines made spaces) and shows the database's reply (the driver's text of
  the fetched rows, or the error); at most :data:`MAX_ROUNDS` operations. Any other turn ends the
  episode: its answer is what follows ``Final Answer:`` on a later line (none: empty).
- Modification tasks (``INSERT``, ``UPDATE``, ``DELETE``): after the episode the table is hashed
  (:func:`table_hash_sql`) and the result compared with the task's ``answer_md5``; the answer
  text does not count.
- Answer tasks: the answer is read as a Python literal (a list, or one value: ``["a", "b"]``,
  ``42``; AgentBench ``eval``\\ s it, we use ``ast.literal_eval``, the same for literals and
  never running code) and compared with the label: one value each, as numbers when both parse
  as numbers, else as text; several, as sets.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

import msgspec

from contracts import AgentBenchDbTask, DbTable

__all__ = [
    "INSTRUCTIONS",
    "MAX_ROUNDS",
    "MODIFYING",
    "OUTPUT_LIMIT",
    "DbAction",
    "content_id",
    "db_task_id",
    "expected_hash",
    "init_statements",
    "judge_answer",
    "load_db_tasks",
    "parse_action",
    "question",
    "reference_turns",
    "table_hash_sql",
]

MAX_ROUNDS = 5
"""Operations an episode may run (AgentBench's ``max_round``)."""

OUTPUT_LIMIT = 800
"""Characters of a database reply shown; longer ones are cut and marked."""

MODIFYING = ("INSERT", "UPDATE", "DELETE")

INSTRUCTIONS = """You will be asked a question and will operate a MySQL database with SQL to answer it. \
Explain the problem and your solution, and write down your thoughts. Then, each turn, either \
operate or answer.
To operate, write:
Action: Operation
```sql
SELECT * FROM table WHERE condition;
```
Put the SQL in a markdown block with no other comment, on one line. Only one statement runs per \
turn: the first SQL block. You will see its output.
To commit your final answer, write:
Action: Answer
Final Answer: ["ANSWER1", "ANSWER2", ...]
Only answer when you are sure: the answer must be exactly the correct one. If the question asks \
you to modify the database, the answer field can be anything once the changes are made.
A reply that matches neither pattern fails the task. The database's output is raw: handle it \
yourself."""
"""What the agent reads first (AgentBench's instructions in our words, the same formats)."""


class DbAction(msgspec.Struct, frozen=True):
    kind: str
    """``operation`` or ``answer``."""
    text: str
    """The SQL (``operation``) or the answer text (``answer``; empty when none was given)."""


_ACTION = re.compile(r"Action: (.*?)\n")
_SQL = re.compile(r"```sql\n([\s\S]*?)\n```")
_FINAL = re.compile(r"\nFinal Answer:(.*)")


def parse_action(text: str) -> DbAction:
    """What one turn of the agent asks (see the module docstring). An ``Action: Operation``
    without a SQL block is an answer with no text (AgentBench ends the episode there too)."""
    action = _ACTION.search(text)
    if action is not None and action.group(1) == "Operation":
        sql = _SQL.search(text)
        if sql is None:
            return DbAction("answer", "")
        return DbAction("operation", sql.group(1).strip().replace("\n", " "))
    final = _FINAL.search(text)
    return DbAction("answer", final.group(1) if final else "")


def _as_list(answer: str) -> list[object]:
    try:
        value = ast.literal_eval(answer.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return [answer]
    if isinstance(value, list | tuple | set):
        return list(value)
    return [answer]  # one value: AgentBench keeps the text (list() of a number fails)


def _number(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def judge_answer(answer: str, label: list[str]) -> bool:
    """Whether ``answer`` (the text after ``Final Answer:``) matches ``label`` (see the module
    docstring)."""
    got = _as_list(answer)
    if len(got) == 1 and len(label) == 1:
        a, b = _number(got[0]), _number(label[0])
        if a is not None and b is not None:
            return a == b
        return got[0] == label[0]
    try:
        return set(got) == set(label)
    except TypeError:  # unhashable members (a list in the list)
        return False


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _pyformat(sql: str) -> str:
    """``sql`` written in the driver's paramstyle (``%s`` marks a parameter), so a ``%`` of its
    own (in a table or column name) is written ``%%``."""
    return sql.replace("%", "%%")


def init_statements(table: DbTable) -> list[tuple[str, list[str]]]:
    """``(sql, parameters)`` that create ``table`` (every column ``TEXT``) and fill it. A
    statement with parameters is in the driver's paramstyle (names with ``%`` have it doubled;
    the values are parameters, never SQL text); one without is plain SQL."""
    columns = ",".join(f"{_quote(c)} TEXT" for c in table.columns)
    out = [(f"CREATE TABLE {_quote(table.name)} ({columns})", [])]
    if table.rows:
        names = _pyformat(",".join(_quote(c) for c in table.columns))
        row = "(" + ",".join(["%s"] * len(table.columns)) + ")"
        values = ",".join([row] * len(table.rows))
        params = [str(v) for r in table.rows for v in r]
        into = _pyformat(_quote(table.name))
        out.append((f"INSERT INTO {into} ({names}) VALUES {values}", params))
    return out


def table_hash_sql(table: DbTable) -> str:
    """AgentBench's table hash: the MD5 of the sorted first five hex digits of each row's MD5
    (the row's columns joined by commas)."""
    columns = ",".join(_quote(c) for c in table.columns)
    return (
        "select md5(group_concat(rowhash order by rowhash)) as hash "
        f"from( SELECT substring(MD5(CONCAT_WS(',', {columns})), 1, 5) AS rowhash "
        f"FROM {_quote(table.name)}) as sub;"
    )


def expected_hash(rows: list[list[str]]) -> str:
    """What :func:`table_hash_sql` returns for a table of ``rows`` (every value text, none
    NULL), computed here: the same rule without a database (``group_concat`` cut at MySQL's
    1024 characters), as the driver shows it."""
    parts = sorted(hashlib.md5(",".join(r).encode()).hexdigest()[:5] for r in rows)
    joined = ",".join(parts)[:1024]
    digest = hashlib.md5(joined.encode()).hexdigest() if rows else None
    return str([(digest,)])


def question(task: AgentBenchDbTask) -> str:
    """The task as the agent reads it after the instructions."""
    parts = [task.description]
    if task.add_description:
        parts.append(task.add_description)
    if task.evidence:
        parts.append("Evidence: " + task.evidence)
    return "\n".join(parts)


def content_id(task: msgspec.Struct) -> str:
    """The content address of an AgentBench task (DB or OS): the first 16 hex digits of the
    sha256 of its canonical JSON without its id, split and source."""
    doc = msgspec.to_builtins(task)
    for key in ("task_id", "split", "source"):
        doc.pop(key, None)
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def db_task_id(task: AgentBenchDbTask) -> str:
    """The content address of a DB task (:func:`content_id`)."""
    return content_id(task)


def _table(raw: dict) -> DbTable:
    info = raw["table_info"]
    return DbTable(
        name=str(raw["table_name"]),
        columns=[str(c["name"]) for c in info["columns"]],
        rows=[[str(v) for v in row] for row in info.get("rows", [])],
    )


def load_db_tasks(path: Path, split: str = "dev") -> list[AgentBenchDbTask]:
    """The tasks of an AgentBench DB file (``.jsonl``, or ``.json`` holding a list). Raises
    ``ValueError`` naming the line of an entry that is not a DB task."""
    text = Path(path).read_text(encoding="utf-8")
    entries: Iterable[tuple[int, dict]]
    if str(path).endswith(".json"):
        entries = enumerate(json.loads(text), 1)
    else:
        entries = ((n, json.loads(line)) for n, line in enumerate(text.splitlines(), 1) if line)
    out = []
    for n, entry in entries:
        try:
            kind = entry["type"][0] if isinstance(entry["type"], list) else str(entry["type"])
            raw_tables = entry["table"] if isinstance(entry["table"], list) else [entry["table"]]
            label = entry.get("label", [])
            draft = AgentBenchDbTask(
                task_id="",
                split=split,
                kind=kind,
                description=str(entry["description"]),
                add_description=str(entry.get("add_description", "")),
                evidence=str(entry.get("evidence", "")),
                tables=[_table(t) for t in raw_tables],
                label=[str(x) for x in (label if isinstance(label, list) else [label])],
                answer_md5=str(entry.get("answer_md5", "")),
                gold_sql=str((entry.get("sql") or {}).get("query", "")),
                source=f"{Path(path).name}:{n}",
            )
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"{path}:{n} is not an AgentBench DB task: missing {exc}") from None
        if kind in MODIFYING and not draft.answer_md5:
            raise ValueError(f"{path}:{n}: a {kind} task needs answer_md5")
        out.append(msgspec.structs.replace(draft, task_id=db_task_id(draft)))
    return out


def reference_turns(task: AgentBenchDbTask) -> list[str]:
    """What an agent that knows the reference solution writes, turn by turn."""
    if task.kind in MODIFYING:
        return [
            f"Action: Operation\n```sql\n{task.label[0] if task.label else ''}\n```",
            "Action: Answer\nFinal Answer: []",
        ]
    return [f"Action: Answer\nFinal Answer: {json.dumps(task.label)}"]
