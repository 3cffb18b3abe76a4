"""The sampler under bad input: a bad request among good ones, a batch that fails, and garbage
under the checkpoint pointers. Pure batching first, then the real sampler service on a real
nats-server."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from aios_rl.bus import Bus, RemoteError
from aios_rl.state.checkpoints import CheckpointRegistry
from aios_rl.student import Decision, load_student, new_student
from contracts import ActRequest, ActResponse, CheckpointPointers, DecodingRegime, Names
from contracts.subjects import BUCKET_CHECKPOINTS
from services.sampler.logic import Batcher, check_request
from services.sampler.main import build
from services.sampler.settings import SamplerSettings
from tests.support import running

pytestmark = pytest.mark.timeout(120)

CANDIDATES = ["ls", "cat README", "pytest -q", "git diff"]


# -- pure ------------------------------------------------------------------------------------------


async def test_a_failing_batch_is_answered_one_by_one_so_only_the_bad_item_fails() -> None:
    calls: list[list[int]] = []

    async def run(key: str, items: list[int]) -> list[int]:
        calls.append(list(items))
        if -1 in items:
            raise ValueError("no candidates")
        return [i * 10 for i in items]

    b: Batcher[int, int] = Batcher(run, max_batch=16, max_wait_s=0.05)
    results = await asyncio.gather(
        *(b.submit("k", i) for i in [1, 2, -1, 3]), return_exceptions=True
    )
    assert results[:2] == [10, 20] and results[3] == 30
    assert isinstance(results[2], ValueError)
    assert calls[0] == [1, 2, -1, 3] and sorted(calls[1:]) == [[-1], [1], [2], [3]]
    assert b.fallbacks == 1


@pytest.mark.parametrize(
    ("candidates", "regime", "free_text", "message"),
    [
        ([], DecodingRegime(), False, "offers no candidate"),
        (["a"], DecodingRegime(temperature=0.0), True, "temperature"),
        (["a"], DecodingRegime(temperature=-1.0), True, "temperature"),
        (["a"], DecodingRegime(temperature=float("inf")), True, "temperature"),
        (["a"], DecodingRegime(temperature=float("nan")), True, "temperature"),
        (["a"], DecodingRegime(top_p=0.0), True, "top_p"),
        (["a"], DecodingRegime(top_p=1.5), True, "top_p"),
    ],
)
def test_check_request_names_what_is_wrong(
    candidates: list[str], regime: DecodingRegime, free_text: bool, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_request(candidates, regime, free_text=free_text, backend="tiny")


def test_check_request_accepts_free_text_and_vanishing_temperatures() -> None:
    check_request([], DecodingRegime(), free_text=True, backend="hf")
    check_request(["a"], DecodingRegime(temperature=1e-45), free_text=False, backend="tiny")


# -- the service -----------------------------------------------------------------------------------


def sampler(bus: Bus, names: Names, **kw: object):
    settings = dict(max_batch=256, max_wait_ms=50.0, concurrency=256)
    return build(bus, SamplerSettings(namespace=names.namespace, **{**settings, **kw}))  # type: ignore[arg-type]


async def act(bus: Bus, req: ActRequest) -> ActResponse:
    return await bus.request(bus.names.policy_act(), req, ActResponse, timeout=30)


async def stored_student(registry: CheckpointRegistry, seed: int) -> str:
    meta = await registry.store(
        new_student(seed=seed).to_bytes(), parent_id=None, created_by="test", algorithm="init"
    )
    return meta.checkpoint_id


async def test_a_bad_request_among_good_ones_fails_alone(bus: Bus, names: Names) -> None:
    """160 good requests, sent at once with one offering no candidates, one with temperature
    0, and one with temperature 1e-45 (whose logits once went NaN): every good one is
    answered, the two invalid ones get 422 with a clear message, and 1e-45 acts greedily."""
    registry = CheckpointRegistry(bus)
    active = await stored_student(registry, seed=0)
    await registry.init(active)
    model = load_student(await registry.load(active))
    good = [
        ActRequest(
            episode_id=f"good-{i}", step=i % 7, observation=f"obs {i}", candidates=CANDIDATES
        )
        for i in range(160)
    ]
    empty = ActRequest(episode_id="empty", step=0, observation="free text?", candidates=[])
    frozen = ActRequest(
        episode_id="zero",
        step=0,
        observation="obs",
        candidates=CANDIDATES,
        regime=DecodingRegime(temperature=0.0),
    )
    tiny_t = ActRequest(
        episode_id="tiny-t",
        step=0,
        observation="obs 3",
        candidates=CANDIDATES,
        regime=DecodingRegime(temperature=1e-45),
    )
    svc, state = sampler(bus, names)
    async with running(svc):
        await asyncio.wait_for(state.until(lambda s: s.active == active), 30)
        results = await asyncio.gather(
            *(act(bus, r) for r in [*good[:80], empty, frozen, tiny_t, *good[80:]]),
            return_exceptions=True,
        )
        stats = state.stats()
    answers = [r for r in results if isinstance(r, ActResponse)]
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(answers) == 161, errors[:3]
    assert len(errors) == 2 and all(isinstance(e, RemoteError) for e in errors)
    by_code = sorted((e.code, e.description) for e in errors)  # type: ignore[union-attr]
    assert [c for c, _ in by_code] == ["422", "422"]
    assert any("offers no candidate" in d for _, d in by_code), by_code
    assert any("temperature" in d for _, d in by_code), by_code
    assert all(a.action in CANDIDATES and a.checkpoint_id == active for a in answers)
    greedy = results[82]
    assert isinstance(greedy, ActResponse)
    logits = model.forward([Decision("obs 3", tuple(CANDIDATES))])[0][0]
    assert greedy.action_index == int(logits.argmax())
    assert stats["batches"] < 160, "the good requests were not batched: the test proves nothing"


async def test_garbage_pointers_never_stop_the_sampler(bus: Bus, names: Names) -> None:
    """Garbage under ``pointers`` once crash-looped the sampler. It starts anyway (503 until
    something is active), picks up valid pointers written later, keeps serving the last good
    checkpoint through garbage and through pointers to a checkpoint that does not load, and
    moves on when the pointers are good again."""
    registry = CheckpointRegistry(bus)
    a, b = await stored_student(registry, seed=0), await stored_student(registry, seed=1)
    kv = await bus.js.key_value(names.bucket(BUCKET_CHECKPOINTS))

    async def put(value: bytes | CheckpointPointers) -> None:
        data = value if isinstance(value, bytes) else msgspec.json.encode(value)
        await kv.put(Names.key_pointers(), data)

    probe = ActRequest(episode_id="probe", step=0, observation="hello", candidates=CANDIDATES)
    await put(b"\x00 garbage")
    svc, state = sampler(bus, names)
    async with running(svc) as task:
        with pytest.raises(RemoteError) as err:
            await act(bus, probe)
        assert err.value.code == "503"

        await put(CheckpointPointers(active=a, last_stable=a))
        await asyncio.wait_for(state.until(lambda s: s.active == a), 30)
        assert (await act(bus, probe)).checkpoint_id == a

        await put(b'{"active": 12}')
        await put(CheckpointPointers(active="ffffffffffffffff", last_stable=a))
        await asyncio.wait_for(state.until(lambda s: s.stats()["active_unloadable"] == 1), 30)
        assert (await act(bus, probe)).checkpoint_id == a, "the last good checkpoint is served"

        await put(CheckpointPointers(active=b, pre_update_ref=a, last_stable=a))
        await asyncio.wait_for(state.until(lambda s: s.active == b), 30)
        assert (await act(bus, probe)).checkpoint_id == b
        assert not task.done()
        stats = state.stats()
    assert (stats["pointers_corrupt"], stats["active_unloadable"], stats["reloads"]) == (2, 1, 2)
