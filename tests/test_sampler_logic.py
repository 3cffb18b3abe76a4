"""The sampler's pure parts: dynamic batching, the LRU cache, seed derivation."""

from __future__ import annotations

import asyncio

import pytest

from services.sampler.logic import Batcher, LruCache, derive_seed


async def test_concurrent_requests_share_one_batch_per_key() -> None:
    calls: list[tuple[str, list[int]]] = []

    async def run(key: str, items: list[int]) -> list[int]:
        calls.append((key, list(items)))
        return [i * 10 for i in items]

    b: Batcher[int, int] = Batcher(run, max_batch=8, max_wait_s=0.05)
    results = await asyncio.gather(
        *(b.submit("ckpt-a", i) for i in range(5)), *(b.submit("ckpt-b", i) for i in range(3))
    )
    assert results == [0, 10, 20, 30, 40, 0, 10, 20]
    assert sorted(calls) == [("ckpt-a", [0, 1, 2, 3, 4]), ("ckpt-b", [0, 1, 2])]


async def test_batches_never_exceed_max_batch() -> None:
    sizes: list[int] = []

    async def run(key: str, items: list[int]) -> list[int]:
        sizes.append(len(items))
        return items

    b: Batcher[int, int] = Batcher(run, max_batch=4, max_wait_s=0.05)
    assert await asyncio.gather(*(b.submit("k", i) for i in range(10))) == list(range(10))
    assert max(sizes) <= 4 and sum(sizes) == 10 and b.batches == len(sizes)


async def test_zero_wait_runs_each_request_alone_when_sequential() -> None:
    sizes: list[int] = []

    async def run(key: str, items: list[int]) -> list[int]:
        sizes.append(len(items))
        return items

    b: Batcher[int, int] = Batcher(run, max_batch=16, max_wait_s=0.0)
    for i in range(3):
        assert await b.submit("k", i) == i
    assert sizes == [1, 1, 1]


async def test_a_lone_client_is_answered_without_waiting_for_the_window() -> None:
    async def run(key: str, items: list[int]) -> list[int]:
        return items

    # A window far longer than the deadline below: a lone request must not sit in it.
    b: Batcher[int, int] = Batcher(run, max_batch=16, max_wait_s=30.0)
    for i in range(5):
        assert await asyncio.wait_for(b.submit("k", i), 2.0) == i
    assert b.waits == 0 and b.batches == 5


async def test_concurrent_clients_fill_batches() -> None:
    sizes: list[int] = []

    async def run(key: str, items: list[int]) -> list[int]:
        sizes.append(len(items))
        await asyncio.sleep(0)  # yield, as a model call in a thread would
        return items

    b: Batcher[int, int] = Batcher(run, max_batch=16, max_wait_s=0.01)

    async def client(c: int) -> None:
        for i in range(10):
            assert await b.submit("k", c * 100 + i) == c * 100 + i

    await asyncio.wait_for(asyncio.gather(*(client(c) for c in range(8))), 10.0)
    assert sum(sizes) == 80 and b.recent_size > 4
    assert sum(sizes) / len(sizes) > 4  # (waiting for late joiners: the test below)


async def test_a_batch_stops_waiting_once_it_is_as_large_as_recent_batches() -> None:
    sizes: list[int] = []

    async def run(key: str, items: list[int]) -> list[int]:
        sizes.append(len(items))
        return items

    # A window far longer than the deadline below: three clients must not wait for a 32nd.
    b: Batcher[int, int] = Batcher(run, max_batch=32, max_wait_s=30.0)
    for _ in range(10):  # batches of 3: the average climbs towards 3
        await asyncio.gather(*(b.submit("k", i) for i in range(3)))
    assert 2.5 < b.recent_size <= 3 and b.waits == 0

    async def late(i: int) -> int:
        await asyncio.sleep(0)  # arrive after the batch has started waiting
        await asyncio.sleep(0)
        return await b.submit("k", i)

    got = await asyncio.wait_for(asyncio.gather(b.submit("k", 0), late(1), late(2)), 2.0)
    assert got == [0, 1, 2]
    assert b.waits == 1 and sizes[-1] == 3  # it waited for the two late ones, then ran


async def test_a_failing_batch_fails_only_its_bad_caller_and_the_batcher_goes_on() -> None:
    async def run(key: str, items: list[int]) -> list[int]:
        if 3 in items:
            raise RuntimeError("model exploded")
        return items

    b: Batcher[int, int] = Batcher(run, max_batch=8, max_wait_s=0.02)
    results = await asyncio.gather(b.submit("k", 3), b.submit("k", 4), return_exceptions=True)
    assert isinstance(results[0], RuntimeError) and results[1] == 4
    assert await b.submit("k", 5) == 5


def test_lru_cache_evicts_least_recent_but_keeps_the_pinned() -> None:
    c: LruCache[str] = LruCache(2)
    c.put("a", "A")
    c.put("b", "B")
    assert c.get("a") == "A"
    c.put("c", "C")
    assert c.keys() == ["a", "c"]
    c.put("d", "D", pin="a")
    assert "a" in c and "d" in c and len(c) == 2
    with pytest.raises(ValueError):
        LruCache(0)


def test_derive_seed_is_stable_and_distinct() -> None:
    assert derive_seed("ep-1", 0) == derive_seed("ep-1", 0)
    seeds = {derive_seed(f"ep-{i}", s) for i in range(50) for s in range(4)}
    assert len(seeds) == 200
    assert derive_seed("ep-1", 0, base=1) != derive_seed("ep-1", 0)
