"""Shell tasks in the Object Store ``tasks`` (through the one task store,
:mod:`aios_rl.state.tasks`), and on disk.

**Object Store.** :class:`ShellTaskStore` is the task store typed for shell tasks: a task's id is
the content address of its files and test command (checked on every put and get); each split's
index keeps the order ids were added in.

**Directory.** :func:`write_dir` lays tasks out for people to read, and :func:`read_dir` loads
them back::

    <dir>/index-<split>.json                  the split's TaskIndex
    <dir>/<split>/<task_id>/task.json         the task (contract JSON, indented)
    <dir>/<split>/<task_id>/statement.md      what the policy reads
    <dir>/<split>/<task_id>/files/...         the buggy code base with its tests
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

from aios_rl.bus import Bus
from contracts import ShellTask, TaskIndex

from ...state.tasks import TaskKind, TaskStore, decode_task
from .verify import materialize, task_id_of

__all__ = ["SHELL_TASKS", "ShellTaskStore", "read_dir", "shell_task_id", "write_dir"]

ENVIRONMENT = "shell"


def shell_task_id(task: ShellTask) -> str:
    """The content address of a shell task (its files and test command)."""
    return task_id_of(task.files, task.test_command)


SHELL_TASKS = TaskKind(ENVIRONMENT, ShellTask, shell_task_id)
"""Shell tasks as the task store knows them."""


class ShellTaskStore(TaskStore[ShellTask]):
    """Shell tasks in the stack's ``tasks`` Object Store (under ``bus.names``, provisioned)."""

    def __init__(self, bus: Bus) -> None:
        super().__init__(bus, SHELL_TASKS)


# -- on disk -------------------------------------------------------------------------------------------

_pretty = msgspec.json.Encoder(order="deterministic")


def _pretty_json(obj: object) -> str:
    return msgspec.json.format(_pretty.encode(obj), indent=2).decode("utf-8") + "\n"


def write_dir(path: Path, tasks: Sequence[ShellTask]) -> None:
    """Write ``tasks`` under ``path`` (layout in the module docstring), merging each split's
    index with the one already there. Rewrites a task directory that exists."""
    path = Path(path)
    for task in tasks:
        task_dir = path / task.split / task.task_id
        task_dir.mkdir(parents=True, exist_ok=True)
        (task_dir / "task.json").write_text(_pretty_json(task), encoding="utf-8")
        (task_dir / "statement.md").write_text(task.statement + "\n", encoding="utf-8")
        materialize(task.files, task_dir / "files")
    for split in dict.fromkeys(t.split for t in tasks):
        index_file = path / f"index-{split}.json"
        ids: list[str] = []
        if index_file.is_file():
            ids = list(msgspec.json.decode(index_file.read_bytes(), type=TaskIndex).task_ids)
        ids = list(dict.fromkeys([*ids, *(t.task_id for t in tasks if t.split == split)]))
        index = TaskIndex(environment=ENVIRONMENT, split=split, task_ids=ids)
        index_file.write_text(_pretty_json(index), encoding="utf-8")


def read_dir(path: Path, split: str | None = None) -> list[ShellTask]:
    """The tasks under ``path`` (of ``split``, or of every split), in index order.

    Raises ``CorruptTaskError`` when a ``task.json`` does not decode or does not match the id
    its directory is named by, ``FileNotFoundError`` when an indexed task is missing."""
    path = Path(path)
    splits = (
        [split]
        if split is not None
        else sorted(
            p.name.removeprefix("index-").removesuffix(".json") for p in path.glob("index-*.json")
        )
    )
    out = []
    for name in splits:
        index_file = path / f"index-{name}.json"
        index = msgspec.json.decode(index_file.read_bytes(), type=TaskIndex)
        for task_id in index.task_ids:
            data = (path / name / task_id / "task.json").read_bytes()
            out.append(decode_task(SHELL_TASKS, data, task_id))
    return out
