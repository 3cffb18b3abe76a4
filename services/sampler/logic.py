"""The sampler's logic, free of NATS: dynamic batching and the model cache (request checks and
seed derivation are :mod:`aios_rl.student.serving`'s)."""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

# How a request becomes a decision is the student's (shared with the in-process kernel);
# re-exported here for the sampler's callers.
from aios_rl.student.serving import check_request, derive_seed

__all__ = ["Batcher", "LruCache", "check_request", "derive_seed"]

In = TypeVar("In")
Out = TypeVar("Out")
V = TypeVar("V")


JOIN_THRESHOLD = 1.5
"""Wait for a batch to fill only while recent batches averaged more than this many requests."""
SIZE_DECAY = 0.8
"""Weight of the past in the moving average of batch sizes."""


@dataclass
class _Pending(Generic[In, Out]):
    item: In
    future: asyncio.Future[Out]


@dataclass
class Batcher(Generic[In, Out]):
    """Collects concurrent requests for one key into batches of at most ``max_batch``, then runs
    ``run_batch`` once for the whole batch.

    Waiting pays only under concurrency: the batcher keeps a moving average of its batches'
    sizes, and waits up to ``max_wait_s`` after the first request for others to join only while
    that average says requests do arrive together (above ``JOIN_THRESHOLD``), and only until the
    batch holds as many requests as recent batches did (the average, rounded up; at most
    ``max_batch``): with 8 clients in flight it runs on the 8th, not after a window waiting for
    a 32nd that cannot come. A lone client (its next request comes only after its answer) is
    served at once, never after a window that nobody else joins; requests that queued while a
    batch ran always go together in the next one, so batches still grow with the load.

    ``run_batch`` gets the items and returns one result per item, or raises. When a batch of
    several raises, each of its items is run again alone (``fallbacks`` counts such batches), so
    only the items that fail by themselves fail, each with its own error. Batches of different
    keys (checkpoints) never mix."""

    run_batch: Callable[[str, list[In]], Awaitable[list[Out]]]
    max_batch: int = 16
    max_wait_s: float = 0.005
    batches: int = 0
    items: int = 0
    fallbacks: int = 0
    waits: int = 0
    """Batches that waited for others to join."""
    recent_size: float = 1.0
    """Moving average of batch sizes (weight ``1 - SIZE_DECAY`` on the newest)."""
    _queues: dict[str, list[_Pending[In, Out]]] = field(default_factory=dict)
    _wakeups: dict[str, asyncio.Event] = field(default_factory=dict)
    _workers: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    async def submit(self, key: str, item: In) -> Out:
        """Queue ``item`` under ``key`` and wait for its result."""
        fut: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(key, []).append(_Pending(item, fut))
        wake = self._wakeups.setdefault(key, asyncio.Event())
        wake.set()
        worker = self._workers.get(key)
        if worker is None or worker.done():
            self._workers[key] = asyncio.create_task(self._drain(key), name=f"batcher-{key}")
        return await fut

    async def _drain(self, key: str) -> None:
        queue = self._queues[key]
        wake = self._wakeups[key]
        while queue:
            target = min(self.max_batch, math.ceil(self.recent_size))
            if len(queue) < target and self.max_wait_s > 0 and self.recent_size > JOIN_THRESHOLD:
                self.waits += 1
                # Give concurrent requests a moment to join this batch.
                deadline = asyncio.get_running_loop().time() + self.max_wait_s
                while len(queue) < target:
                    wake.clear()
                    remaining = deadline - asyncio.get_running_loop().time()
                    if remaining <= 0:
                        break
                    try:
                        async with asyncio.timeout(remaining):
                            await wake.wait()
                    except TimeoutError:
                        break
            batch = queue[: self.max_batch]
            del queue[: self.max_batch]
            self.batches += 1
            self.items += len(batch)
            self.recent_size = SIZE_DECAY * self.recent_size + (1 - SIZE_DECAY) * len(batch)
            if len(batch) > 1:
                try:
                    results = await self._run(key, batch)
                except Exception:  # answered below, one by one: each caller gets its own error
                    self.fallbacks += 1
                else:
                    for p, r in zip(batch, results, strict=True):
                        if not p.future.done():
                            p.future.set_result(r)
                    continue
            for p in batch:
                if p.future.done():
                    continue  # its caller gave up
                try:
                    [result] = await self._run(key, [p])
                except Exception as exc:  # raised again in the caller's own task
                    if not p.future.done():
                        p.future.set_exception(exc)
                else:
                    if not p.future.done():
                        p.future.set_result(result)

    async def _run(self, key: str, batch: list[_Pending[In, Out]]) -> list[Out]:
        results = await self.run_batch(key, [p.item for p in batch])
        if len(results) != len(batch):
            raise RuntimeError(f"run_batch returned {len(results)} results for {len(batch)} items")
        return results

    async def close(self) -> None:
        for task in self._workers.values():
            task.cancel()
        await asyncio.gather(*self._workers.values(), return_exceptions=True)


class LruCache(Generic[V]):
    """A small least-recently-used map (loaded models by checkpoint id)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"cache capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._data: OrderedDict[str, V] = OrderedDict()

    def get(self, key: str) -> V | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def peek(self, key: str) -> V | None:
        """The value under ``key`` without making it recently used."""
        return self._data.get(key)

    def put(self, key: str, value: V, *, pin: str | None = None) -> None:
        """Insert ``key``; evict the least recently used entry other than ``pin`` when full."""
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.capacity:
            victim = next((k for k in self._data if k != pin and k != key), None)
            if victim is None:
                break
            del self._data[victim]

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def keys(self) -> list[str]:
        return list(self._data)
