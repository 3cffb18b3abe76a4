"""Shell tasks in the Object Store ``tasks``, and on disk.

**Object Store.** A task is the object ``shell/<task_id>.json`` (:meth:`Names.object_task`): its
contract JSON, with the schema name in the object's headers. The id is a content address (of
the files and the test command), so a put of an id already stored is a no-op: the first stored
version of a task wins, whatever statement or edit order a later generation run gave it. Each
split has an index object ``shell/index-<split>.json`` (:meth:`Names.object_task_index`), a
:class:`~contracts.TaskIndex` whose ids keep the order they were added in. Updating an index is
read-merge-write without a compare-and-set (the Object Store has none): one writer per split at
a time, which is how ``benchmark-generate`` uses it.

**Directory.** :func:`write_dir` lays tasks out for people to read, and :func:`read_dir` loads
them back::

    <dir>/index-<split>.json                  the split's TaskIndex
    <dir>/<split>/<task_id>/task.json         the task (contract JSON, indented)
    <dir>/<split>/<task_id>/statement.md      what the policy reads
    <dir>/<split>/<task_id>/files/...         the buggy code base with its tests
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import msgspec
import nats.errors
import nats.js.errors
from nats.js import api
from nats.js.object_store import ObjectStore

from aios_rl.bus import Bus
from contracts import SCHEMA_HEADER, DecodeError, Names, ShellTask, TaskIndex, decode, encode
from contracts.subjects import OBJECTS_TASKS

from .verify import materialize, task_id_of

__all__ = [
    "CorruptTaskError",
    "PutResult",
    "TaskStore",
    "TaskStoreError",
    "TaskStoreUnavailableError",
    "UnknownTaskError",
    "read_dir",
    "write_dir",
]

ENVIRONMENT = "shell"


class TaskStoreError(Exception):
    """Root of the task store's errors."""


class UnknownTaskError(TaskStoreError, KeyError):
    """No task is stored under this id."""


class CorruptTaskError(TaskStoreError):
    """A stored task does not decode, or its content does not match its id."""


class TaskStoreUnavailableError(TaskStoreError):
    """NATS failed while reading or writing the store."""


class PutResult(NamedTuple):
    """What :meth:`TaskStore.put_all` did."""

    stored: int
    """Tasks uploaded."""
    existing: int
    """Tasks already stored (left as they were)."""
    indexed: dict[str, int]
    """Split -> ids added to its index."""


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    try:
        yield
    except (nats.errors.Error, TimeoutError, OSError) as exc:
        if isinstance(exc, nats.js.errors.NotFoundError):
            raise
        raise TaskStoreUnavailableError(f"{what}: NATS failed: {exc!r}") from exc


def _decode_task(data: bytes, task_id: str) -> ShellTask:
    try:
        task = decode(data, {SCHEMA_HEADER: ShellTask.SCHEMA}, ShellTask)
    except DecodeError as exc:
        raise CorruptTaskError(f"task {task_id}: {exc}") from exc
    if task.task_id != task_id or task_id_of(task.files, task.test_command) != task_id:
        raise CorruptTaskError(
            f"task {task_id}: stored content does not match its id (holds {task.task_id})"
        )
    return task


class TaskStore:
    """Shell tasks in the stack's ``tasks`` Object Store (under ``bus.names``, provisioned).

    Every method may raise :class:`TaskStoreUnavailableError` when NATS fails."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._bucket = bus.names.bucket(OBJECTS_TASKS)
        self._obs: ObjectStore | None = None

    async def _store(self) -> ObjectStore:
        if self._obs is None:
            with _translated(f"open object store {self._bucket}"):
                self._obs = await self._bus.js.object_store(self._bucket)
        return self._obs

    async def _read(self, name: str) -> bytes | None:
        obs = await self._store()
        sink = io.BytesIO()
        with _translated(f"read {name}"):
            try:
                # writeinto: nats-py otherwise concatenates bytes chunk by chunk (quadratic).
                await obs.get(name, writeinto=sink)
            except nats.js.errors.NotFoundError:
                return None
        return sink.getvalue()

    async def _exists(self, name: str) -> bool:
        obs = await self._store()
        with _translated(f"look up {name}"):
            try:
                info = await obs.get_info(name)
            except nats.js.errors.NotFoundError:
                return False
        return not info.deleted

    async def _write(self, name: str, data: bytes, schema: str) -> None:
        obs = await self._store()
        meta = api.ObjectMeta(name=name, headers={SCHEMA_HEADER: schema})
        with _translated(f"write {name}"):
            await obs.put(name, data, meta=meta)

    async def put(self, task: ShellTask) -> bool:
        """Store ``task`` under its id unless it is already stored; ``True`` when it uploaded.

        Raises ``CorruptTaskError`` when ``task.task_id`` is not its content address. Does not
        touch the split's index (see :meth:`put_all`, :meth:`add_to_index`)."""
        if task_id_of(task.files, task.test_command) != task.task_id:
            raise CorruptTaskError(f"task {task.task_id}: its id is not its content address")
        name = Names.object_task(ENVIRONMENT, task.task_id)
        if await self._exists(name):
            return False
        data, _ = encode(task)
        await self._write(name, data, ShellTask.SCHEMA)
        return True

    async def get(self, task_id: str) -> ShellTask:
        """The task stored under ``task_id``. Raises ``UnknownTaskError``, and
        ``CorruptTaskError`` when it does not decode or does not match its id."""
        try:
            name = Names.object_task(ENVIRONMENT, task_id)
        except ValueError:  # not even a valid id
            raise UnknownTaskError(task_id) from None
        data = await self._read(name)
        if data is None:
            raise UnknownTaskError(task_id)
        return _decode_task(data, task_id)

    async def index(self, split: str) -> TaskIndex:
        """The split's index (empty if none was written). Raises ``CorruptTaskError`` when the
        index object does not decode."""
        name = Names.object_task_index(ENVIRONMENT, split)
        data = await self._read(name)
        if data is None:
            return TaskIndex(environment=ENVIRONMENT, split=split)
        try:
            return decode(data, {SCHEMA_HEADER: TaskIndex.SCHEMA}, TaskIndex)
        except DecodeError as exc:
            raise CorruptTaskError(f"index of split {split!r}: {exc}") from exc

    async def list(self, split: str) -> list[str]:
        """The ids of ``split``'s tasks, in the order they were indexed."""
        return list((await self.index(split)).task_ids)

    async def add_to_index(self, split: str, task_ids: Iterable[str]) -> int:
        """Append the ids not yet in ``split``'s index (in the given order); how many were
        added. Read-merge-write: one writer per split at a time (module docstring)."""
        current = await self.index(split)
        known = set(current.task_ids)
        new = [i for i in dict.fromkeys(task_ids) if i not in known]
        if new:
            index = TaskIndex(
                environment=ENVIRONMENT, split=split, task_ids=[*current.task_ids, *new]
            )
            data, _ = encode(index)
            await self._write(Names.object_task_index(ENVIRONMENT, split), data, TaskIndex.SCHEMA)
        return len(new)

    async def put_all(self, tasks: Sequence[ShellTask]) -> PutResult:
        """Store every task (idempotently) and add each to its split's index."""
        stored = existing = 0
        for task in tasks:
            if await self.put(task):
                stored += 1
            else:
                existing += 1
        indexed = {}
        for split in dict.fromkeys(t.split for t in tasks):
            indexed[split] = await self.add_to_index(
                split, [t.task_id for t in tasks if t.split == split]
            )
        return PutResult(stored, existing, indexed)


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
            out.append(_decode_task(data, task_id))
    return out
