"""Tasks of any environment in the Object Store ``tasks``: one JSON object per task
(content-addressed by its ``task_id``) and one ``TaskIndex`` per (environment, split), so every
runner replica sees the same tasks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

import msgspec
import nats.js.errors
from nats.js.object_store import ObjectStore

from aios_rl.bus import Bus
from contracts import Message, Names, TaskIndex
from contracts.subjects import OBJECTS_TASKS

__all__ = ["TaskNotFound", "get_task", "list_task_ids", "put_tasks"]


class _Task(Protocol):
    task_id: str


T = TypeVar("T", bound=Message)


class TaskNotFound(LookupError):
    """No task with that id (or no index for that split) is stored."""


async def _store(bus: Bus) -> ObjectStore:
    return await bus.js.object_store(bus.names.bucket(OBJECTS_TASKS))


async def put_tasks(bus: Bus, environment: str, split: str, tasks: Sequence[Message]) -> TaskIndex:
    """Store ``tasks`` (skipping ones already there) and merge their ids into the split's index."""
    store = await _store(bus)
    ids: list[str] = []
    for task in tasks:
        task_id = task.task_id  # type: ignore[attr-defined]
        name = Names.object_task(environment, task_id)
        try:
            await store.get_info(name)
        except nats.js.errors.ObjectNotFoundError:
            await store.put(name, msgspec.json.encode(task))
        ids.append(task_id)
    try:
        existing = await list_task_ids(bus, environment, split)
    except TaskNotFound:
        existing = []
    merged = TaskIndex(
        environment=environment, split=split, task_ids=sorted(set(existing) | set(ids))
    )
    await store.put(Names.object_task_index(environment, split), msgspec.json.encode(merged))
    return merged


async def list_task_ids(bus: Bus, environment: str, split: str) -> list[str]:
    """The ids in a split's index. Raises ``TaskNotFound`` when there is no index."""
    store = await _store(bus)
    try:
        obj = await store.get(Names.object_task_index(environment, split))
    except nats.js.errors.ObjectNotFoundError as exc:
        raise TaskNotFound(f"no {environment} tasks stored for split {split!r}") from exc
    return list(msgspec.json.decode(obj.data or b"{}", type=TaskIndex).task_ids)


async def get_task(bus: Bus, environment: str, task_id: str, kind: type[T]) -> T:
    """One task, decoded as ``kind``. Raises ``TaskNotFound``."""
    store = await _store(bus)
    try:
        obj = await store.get(Names.object_task(environment, task_id))
    except nats.js.errors.ObjectNotFoundError as exc:
        raise TaskNotFound(f"no {environment} task {task_id!r} is stored") from exc
    return msgspec.json.decode(obj.data or b"", type=kind)
