"""Every environment's tasks in the Object Store ``tasks``: one store, typed per environment.

A task is the object ``<environment>/<task_id>.json`` (:meth:`Names.object_task`): its contract
JSON, with the schema name in the object's headers. The id is the task's content address, so a
put of an id already stored is a no-op (the first stored version wins) and every read is checked
against it: a task whose content does not match its id is :class:`CorruptTaskError`, never
handed out. Reads fetch the object chunk by chunk and check its size and digest, so a partial
object is never returned.

Each (environment, split) has an index object ``<environment>/index-<split>.json``
(:meth:`Names.object_task_index`), a :class:`~contracts.TaskIndex` whose ids keep **the order
they were added in** (that order is what the campaign samples from and what evaluation takes
the first N of). Updating an index is read-merge-write without a compare-and-set (the Object
Store has none): one writer per split at a time, which is how task generation uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from aios_rl.bus import Bus
from contracts import SCHEMA_HEADER, DecodeError, Message, Names, TaskIndex, decode, encode
from contracts.subjects import OBJECTS_TASKS

from ._errors import CorruptError, NotFoundError, StateError, UnavailableError
from ._handles import ErrorKinds, Objects

__all__ = [
    "CorruptTaskError",
    "PutResult",
    "TaskKind",
    "TaskStore",
    "TaskStoreError",
    "TaskStoreUnavailableError",
    "UnknownTaskError",
    "decode_task",
    "task_ids",
]

T = TypeVar("T", bound=Message)


class TaskStoreError(StateError):
    """Root of the task store's errors."""


class UnknownTaskError(TaskStoreError, NotFoundError, KeyError):
    """No task is stored under this id."""

    def __init__(self, environment: str, task_id: str) -> None:
        super().__init__(f"no {environment} task {task_id!r} is stored")
        self.task_id = task_id

    def __str__(self) -> str:
        return str(self.args[0])


class CorruptTaskError(TaskStoreError, CorruptError):
    """A stored task (or index) does not decode, or a task's content does not match its id."""


class TaskStoreUnavailableError(TaskStoreError, UnavailableError):
    """NATS failed while reading or writing the store."""


_KINDS = ErrorKinds(unavailable=TaskStoreUnavailableError)

MAX_TASK_BYTES = 64 * 1024 * 1024
"""Largest task or index object read: stored documents, not bus messages, may exceed a bus
message's 1 MiB (a real repository's task, an index of many thousand ids)."""


@dataclass(frozen=True)
class TaskKind(Generic[T]):
    """What the store needs to know of one environment's tasks."""

    environment: str
    """The environment's name: the objects' folder in the bucket."""
    type: type[T]
    """The task's contract (a ``Message`` with a ``task_id`` and a ``split``)."""
    content_id: Callable[[T], str]
    """The task's content address, recomputed from its content (checked on every put and get)."""


class PutResult(NamedTuple):
    """What :meth:`TaskStore.put_all` did."""

    stored: int
    """Tasks uploaded."""
    existing: int
    """Tasks already stored (left as they were)."""
    indexed: dict[str, int]
    """Split -> ids added to its index."""


def decode_task(kind: TaskKind[T], data: bytes, task_id: str) -> T:
    """``data`` as ``kind``'s task stored under ``task_id``. Raises ``CorruptTaskError`` when
    it does not decode or does not match the id."""
    try:
        task = decode(data, {SCHEMA_HEADER: kind.type.SCHEMA}, kind.type, max_bytes=MAX_TASK_BYTES)
    except DecodeError as exc:
        raise CorruptTaskError(f"{kind.environment} task {task_id}: {exc}") from exc
    held = task.task_id  # type: ignore[attr-defined]
    if held != task_id or kind.content_id(task) != task_id:
        raise CorruptTaskError(
            f"{kind.environment} task {task_id}: stored content does not match its id "
            f"(holds {held})"
        )
    return task


def _index(environment: str, split: str, data: bytes | None) -> TaskIndex:
    if data is None:
        return TaskIndex(environment=environment, split=split)  # type: ignore[arg-type]
    try:
        return decode(data, {SCHEMA_HEADER: TaskIndex.SCHEMA}, TaskIndex, max_bytes=MAX_TASK_BYTES)
    except DecodeError as exc:
        raise CorruptTaskError(f"{environment} index of split {split!r}: {exc}") from exc


async def task_ids(bus: Bus, environment: str, split: str) -> list[str]:
    """The ids of ``environment``'s ``split`` in index order (empty when there is no index),
    for readers that need no task type (the campaign's sampler)."""
    objects = Objects(bus, bus.names.bucket(OBJECTS_TASKS), _KINDS)
    data = await objects.get(Names.object_task_index(environment, split))
    return list(_index(environment, split, data).task_ids)


class TaskStore(Generic[T]):
    """``kind``'s tasks in the stack's ``tasks`` Object Store (under ``bus.names``, provisioned).

    Every method may raise :class:`TaskStoreUnavailableError` when NATS fails."""

    def __init__(self, bus: Bus, kind: TaskKind[T]) -> None:
        self.kind = kind
        self._objects = Objects(bus, bus.names.bucket(OBJECTS_TASKS), _KINDS)

    @property
    def environment(self) -> str:
        return self.kind.environment

    async def put(self, task: T) -> bool:
        """Store ``task`` under its id unless it is already stored; ``True`` when it uploaded.

        Raises ``CorruptTaskError`` when ``task.task_id`` is not its content address. Does not
        touch the split's index (see :meth:`put_all`, :meth:`add_to_index`)."""
        task_id = task.task_id  # type: ignore[attr-defined]
        if self.kind.content_id(task) != task_id:
            raise CorruptTaskError(
                f"{self.environment} task {task_id}: its id is not its content address"
            )
        name = Names.object_task(self.environment, task_id)
        if await self._objects.exists(name):
            return False
        data, _ = encode(task)
        await self._objects.put(name, data, headers={SCHEMA_HEADER: self.kind.type.SCHEMA})
        return True

    async def get(self, task_id: str) -> T:
        """The task stored under ``task_id``. Raises ``UnknownTaskError``, and
        ``CorruptTaskError`` when it does not decode or does not match its id."""
        try:
            name = Names.object_task(self.environment, task_id)
        except ValueError:  # not even a valid id
            raise UnknownTaskError(self.environment, task_id) from None
        data = await self._objects.get(name)
        if data is None:
            raise UnknownTaskError(self.environment, task_id)
        return decode_task(self.kind, data, task_id)

    async def index(self, split: str) -> TaskIndex:
        """The split's index (empty if none was written). Raises ``CorruptTaskError`` when the
        index object does not decode."""
        data = await self._objects.get(Names.object_task_index(self.environment, split))
        return _index(self.environment, split, data)

    async def list(self, split: str) -> list[str]:
        """The ids of ``split``'s tasks, in the order they were indexed."""
        return list((await self.index(split)).task_ids)

    async def add_to_index(self, split: str, ids: Iterable[str]) -> int:
        """Append the ids not yet in ``split``'s index (in the given order); how many were
        added. Read-merge-write: one writer per split at a time (module docstring)."""
        current = await self.index(split)
        known = set(current.task_ids)
        new = [i for i in dict.fromkeys(ids) if i not in known]
        if new:
            index = TaskIndex(
                environment=self.environment,  # type: ignore[arg-type]
                split=split,
                task_ids=[*current.task_ids, *new],
            )
            data, _ = encode(index)
            await self._objects.put(
                Names.object_task_index(self.environment, split),
                data,
                headers={SCHEMA_HEADER: TaskIndex.SCHEMA},
            )
        return len(new)

    async def put_all(self, tasks: Sequence[T]) -> PutResult:
        """Store every task (idempotently) and add each to its split's index, in order."""
        stored = existing = 0
        for task in tasks:
            if await self.put(task):
                stored += 1
            else:
                existing += 1
        indexed = {}
        splits = dict.fromkeys(t.split for t in tasks)  # type: ignore[attr-defined]
        for split in splits:
            indexed[split] = await self.add_to_index(
                split,
                [t.task_id for t in tasks if t.split == split],  # type: ignore[attr-defined]
            )
        return PutResult(stored, existing, indexed)
