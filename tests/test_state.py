"""The state room's own pieces on a real nats-server: the KV handle, the one compare-and-set, the
Object Store handle, the generic task store, and the error tree every store derives from."""

from __future__ import annotations

import asyncio
import hashlib
from typing import ClassVar

import msgspec
import pytest

from aios_rl.bus import Bus, connect
from aios_rl.state import (
    ContentionError,
    CorruptError,
    ErrorKinds,
    Kv,
    NotFoundError,
    Objects,
    StaleRevisionError,
    StateError,
    UnavailableError,
    compare_and_set,
)
from aios_rl.state.checkpoints import (
    CorruptCheckpointError,
    PointerContentionError,
    RegistryUnavailableError,
    UnknownCheckpointError,
)
from aios_rl.state.control import (
    ControlContentionError,
    ControlNotFoundError,
    ControlUnavailableError,
    CorruptControlError,
)
from aios_rl.state.ledger import CorruptLedgerError, LedgerUnavailableError
from aios_rl.state.tasks import (
    CorruptTaskError,
    TaskKind,
    TaskStore,
    TaskStoreUnavailableError,
    UnknownTaskError,
    task_ids,
)
from contracts import Message, Names
from contracts.subjects import BUCKET_CONTROL, OBJECTS_TASKS, OBJECTS_WEIGHTS


class Counter(msgspec.Struct, frozen=True):
    n: int


def decode(entry) -> Counter | None:  # type: ignore[no-untyped-def]
    return None if entry.value is None else msgspec.json.decode(entry.value, type=Counter)


async def add_one(kv: Kv, key: str, **kw: object):  # type: ignore[no-untyped-def]
    return await compare_and_set(
        kv,
        key,
        lambda c: Counter(1 if c is None else c.n + 1),
        decode=decode,
        encode=msgspec.json.encode,
        **kw,  # type: ignore[arg-type]
    )


def test_every_stores_errors_are_one_of_the_four_kinds() -> None:
    kinds = {
        NotFoundError: [UnknownCheckpointError, ControlNotFoundError, UnknownTaskError],
        CorruptError: [
            CorruptCheckpointError,
            CorruptControlError,
            CorruptLedgerError,
            CorruptTaskError,
        ],
        UnavailableError: [
            RegistryUnavailableError,
            ControlUnavailableError,
            LedgerUnavailableError,
            TaskStoreUnavailableError,
        ],
        ContentionError: [PointerContentionError, ControlContentionError],
    }
    for kind, classes in kinds.items():
        assert issubclass(kind, StateError)
        for cls in classes:
            assert issubclass(cls, kind), f"{cls.__name__} is not a {kind.__name__}"


async def test_compare_and_set_creates_updates_and_skips_unchanged(bus: Bus) -> None:
    kv = Kv(bus, bus.names.bucket(BUCKET_CONTROL))
    first = await add_one(kv, "t.one")
    assert (first.value, first.written, first.conflicts) == (Counter(1), True, 0)
    second = await add_one(kv, "t.one")
    assert second.value == Counter(2) and second.revision > first.revision
    same = await compare_and_set(
        kv, "t.one", lambda c: c, decode=decode, encode=msgspec.json.encode
    )
    assert (same.value, same.revision, same.written) == (Counter(2), second.revision, False)
    with pytest.raises(StaleRevisionError):
        await kv.write("t.one", b'{"n": 9}', revision=first.revision)  # moved on since
    with pytest.raises(ZeroDivisionError):  # what change raises ends the call, nothing written
        await compare_and_set(
            kv, "t.one", lambda c: Counter(1 // 0), decode=decode, encode=msgspec.json.encode
        )
    entry = await kv.latest("t.one")
    assert entry is not None and decode(entry) == Counter(2)


async def test_compare_and_set_retries_a_lost_race_then_gives_up(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Busy(ContentionError):
        """This test's contention."""

    kv = Kv(bus, bus.names.bucket(BUCKET_CONTROL), ErrorKinds(contention=Busy))
    other = Kv(bus, kv.bucket)
    await add_one(kv, "t.race")
    original = kv.latest
    interfering = 2

    async def latest(key: str):  # type: ignore[no-untyped-def]
        nonlocal interfering
        entry = await original(key)
        if interfering:
            interfering -= 1
            await add_one(other, key)  # another writer gets in between our read and our write
        return entry

    monkeypatch.setattr(kv, "latest", latest)
    won = await add_one(kv, "t.race")
    assert won.conflicts == 2 and won.value == Counter(4)  # re-applied on the winners' value
    interfering = 10
    with pytest.raises(Busy, match="3 times"):
        await add_one(kv, "t.race", attempts=3)


async def test_handles_on_an_unprovisioned_namespace_are_unavailable(nats_url: str) -> None:
    names = Names("nothing-here")
    async with connect(nats_url, name="test", names=names) as bare:
        with pytest.raises(UnavailableError):
            await Kv(bare, names.bucket(BUCKET_CONTROL)).latest("k")
        with pytest.raises(UnavailableError):
            await Objects(bare, names.bucket(OBJECTS_WEIGHTS)).get("w")
        with pytest.raises(TaskStoreUnavailableError):
            await task_ids(bare, "shell", "train")


async def test_objects_round_trip(bus: Bus) -> None:
    objects = Objects(bus, bus.names.bucket(OBJECTS_WEIGHTS))
    data = bytes(range(256)) * 1200  # several chunks
    assert await objects.get("w1") is None and not await objects.exists("w1")
    await objects.put("w1", data)
    assert await objects.get("w1") == data
    assert await objects.exists("w1") and await objects.size("w1") == len(data)


async def test_objects_read_back_whole_when_written_alone_or_interleaved(bus: Bus) -> None:
    """A large object written alone (its chunks contiguous: read in windows of several) and
    two written at once (their chunks interleaved: read chunk by chunk past the first other
    one) come back byte for byte."""
    objects = Objects(bus, bus.names.bucket(OBJECTS_WEIGHTS))
    alone = hashlib.sha256(b"a").digest() * (3 * 2**20 // 32 + 7)  # 3 MiB and a bit: 25 chunks
    await objects.put("alone", alone)
    assert await objects.get("alone") == alone
    a, b = bytes(range(256)) * 4000, bytes(range(255, -1, -1)) * 4000
    await asyncio.gather(objects.put("a", a), objects.put("b", b))
    assert await objects.get("a") == a and await objects.get("b") == b


class Note(Message, frozen=True, kw_only=True):
    SCHEMA: ClassVar[str] = "note.test"
    task_id: str
    split: str = "train"
    text: str


def note_id(note: Note) -> str:
    return hashlib.sha256(note.text.encode()).hexdigest()[:16]


def note(text: str, split: str = "train") -> Note:
    return Note(task_id=hashlib.sha256(text.encode()).hexdigest()[:16], text=text, split=split)


async def test_the_task_store_is_typed_checked_and_keeps_index_order(bus: Bus) -> None:
    store = TaskStore(bus, TaskKind("notes", Note, note_id))
    tasks = [note(t) for t in ("c", "a", "b")] + [note("z", split="heldout")]
    result = await store.put_all(tasks)
    assert (result.stored, result.existing, result.indexed) == (4, 0, {"train": 3, "heldout": 1})
    assert await store.list("train") == [t.task_id for t in tasks[:3]]  # as added, not sorted
    assert await task_ids(bus, "notes", "heldout") == [tasks[3].task_id]
    assert await store.get(tasks[1].task_id) == tasks[1]
    again = await store.put_all([note("d"), tasks[0]])
    assert (again.stored, again.existing, again.indexed) == (1, 1, {"train": 1})
    assert (await store.list("train"))[-1] == note("d").task_id
    with pytest.raises(UnknownTaskError, match="no notes task"):
        await store.get("0" * 16)
    with pytest.raises(CorruptTaskError, match="content address"):
        await store.put(Note(task_id="0" * 16, text="lies"))
    # A stored object whose content does not match its id is never handed out.
    obs = await bus.js.object_store(bus.names.bucket(OBJECTS_TASKS))
    await obs.put(Names.object_task("notes", tasks[2].task_id), msgspec.json.encode(tasks[0]))
    with pytest.raises(CorruptTaskError, match="does not match"):
        await store.get(tasks[2].task_id)
