"""No input can kill a service (issue 12): hostile messages and requests against the bus kit on a
real nats-server. After each one the service still runs and serves a normal message or request;
a poison message is dead-lettered once, with its reason, and acked; a request always gets an
error reply."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import pytest
from nats.aio.msg import Msg

from aios_rl.bus import Bus, PermanentError, RemoteError, Service, provision
from contracts import (
    SCHEMA_HEADER,
    ActRequest,
    ActResponse,
    DeadLetter,
    Episode,
    Names,
    decode,
)
from contracts.subjects import OBJECTS_EVIDENCE, STREAM_EPISODES
from tests.support import next_item, running, settled_consumer, stored
from tests.test_bus import act, echo, episode, fast_retry_topology, make_service, taught

pytestmark = pytest.mark.timeout(60)

DEPTH = 5_000
"""Deep enough to exhaust msgspec's recursion (measured: a ``RecursionError`` at 5,000)."""

ERROR_CODE = "Nats-Service-Error-Code"
ERROR = "Nats-Service-Error"


def deep_episode() -> bytes:
    """An episode whose unknown field nests objects ``DEPTH`` deep (the attacker probe's body)."""
    head = b'{"episode_id":"e","environment":"shell","task_id":"t","zz":'
    return head + b'{"a":' * DEPTH + b"1" + b"}" * (DEPTH + 1)


def deep_request() -> bytes:
    head = b'{"episode_id":"e","step":0,"observation":"o","zz":'
    return head + b'{"a":' * DEPTH + b"1" + b"}" * (DEPTH + 1)


def junk(size: int = 900_000) -> bytes:
    """A JSON object near the size of a bus message: base64 in a dead letter pushes it past 1 MiB."""
    return json.dumps({"junk": "j" * size}).encode()


async def flaky_service(bus: Bus, names: Names, handler: Any) -> Service:
    """A service on the test's durable ``flaky`` (``episode.taught.shell``, three deliveries)."""
    topo = fast_retry_topology(names, max_deliver=3, backoff_s=[0.05])
    await provision(bus, topo)
    svc = make_service(bus, topology=topo)
    svc.consume("flaky", Episode, handler)
    return svc


async def letters(queue: asyncio.Queue[Msg], n: int = 1) -> list[DeadLetter]:
    out = []
    for _ in range(n):
        m = await next_item(queue)
        out.append(decode(m.data, m.headers, DeadLetter))
    return out


async def assert_settled(bus: Bus, names: Names, durable: str, delivered: int) -> None:
    """Nothing waits for an ack and nothing was delivered twice."""
    info = await settled_consumer(bus, names.stream(STREAM_EPISODES), durable)
    assert info.num_ack_pending == 0 and info.num_pending == 0
    assert info.delivered is not None and info.delivered.consumer_seq == delivered, (
        "a poison message was redelivered"
    )


# -- durable consumers ---------------------------------------------------------------------------


async def test_deeply_nested_message_is_dead_lettered_once_and_the_service_goes_on(
    bus: Bus, names: Names
) -> None:
    got: asyncio.Queue[Episode] = asyncio.Queue()

    async def handler(ep: Episode) -> None:
        got.put_nowait(ep)

    svc = await flaky_service(bus, names, handler)
    async with stored(bus, names.dlq(STREAM_EPISODES)) as dead, running(svc) as run_task:
        await bus.js.publish(taught(names), deep_episode(), headers={SCHEMA_HEADER: "episode.v1"})
        (letter,) = await letters(dead)
        await bus.publish_durable(taught(names), episode("after"))
        assert await next_item(got) == episode("after")
        assert not run_task.done()
    assert letter.reason == "undecodable" and "too_deep" in letter.error
    assert letter.deliveries == 1 and letter.schema == "episode.v1"
    assert bytes(letter.payload) == deep_episode()
    await assert_settled(bus, names, "flaky", delivered=2)
    (stats,) = svc.status().consumers
    assert (stats.processed, stats.dead_lettered) == (1, 1)


async def test_a_message_too_big_for_a_dead_letter_is_kept_in_the_evidence_store(
    bus: Bus, names: Names
) -> None:
    got: asyncio.Queue[Episode] = asyncio.Queue()

    async def handler(ep: Episode) -> None:
        got.put_nowait(ep)

    body = junk()
    svc = await flaky_service(bus, names, handler)
    async with stored(bus, names.dlq(STREAM_EPISODES)) as dead, running(svc) as run_task:
        await bus.js.publish(taught(names), body, headers={SCHEMA_HEADER: "episode.v1"})
        (letter,) = await letters(dead)
        await bus.publish_durable(taught(names), episode("after"))
        assert await next_item(got) == episode("after")
        assert not run_task.done()
    assert letter.reason == "undecodable" and "invalid_payload" in letter.error
    assert letter.payload == b"" and letter.payload_size == len(body)
    assert letter.payload_sha256 == hashlib.sha256(body).hexdigest()
    assert letter.payload_ref.startswith("dlq/") and str(letter.stream_seq) in letter.payload_ref
    evidence = await bus.js.object_store(names.bucket(OBJECTS_EVIDENCE))
    assert (await evidence.get(letter.payload_ref)).data == body
    await assert_settled(bus, names, "flaky", delivered=2)


async def test_without_an_evidence_store_the_dead_letter_keeps_a_truncated_payload_and_digest(
    bus: Bus, names: Names
) -> None:
    got: asyncio.Queue[Episode] = asyncio.Queue()

    async def handler(ep: Episode) -> None:
        got.put_nowait(ep)

    await bus.js.delete_object_store(names.bucket(OBJECTS_EVIDENCE))
    body = junk()
    svc = await flaky_service(bus, names, handler)
    async with stored(bus, names.dlq(STREAM_EPISODES)) as dead, running(svc) as run_task:
        await bus.js.publish(taught(names), body)  # no schema header either
        (letter,) = await letters(dead)
        await bus.publish_durable(taught(names), episode("after"))
        assert await next_item(got) == episode("after")
        assert not run_task.done()
    assert letter.reason == "undecodable" and "missing_schema" in letter.error
    assert letter.payload_ref == ""
    assert 0 < len(letter.payload) < len(body) and body.startswith(letter.payload)
    assert letter.payload_size == len(body)
    assert letter.payload_sha256 == hashlib.sha256(body).hexdigest()
    await assert_settled(bus, names, "flaky", delivered=2)


async def test_an_unencodable_permanent_error_is_still_dead_lettered(
    bus: Bus, names: Names
) -> None:
    got: asyncio.Queue[Episode] = asyncio.Queue()

    async def handler(ep: Episode) -> None:
        if ep.episode_id == "ep-poison":
            raise PermanentError("cannot handle \ud800 at all")
        got.put_nowait(ep)

    svc = await flaky_service(bus, names, handler)
    async with stored(bus, names.dlq(STREAM_EPISODES)) as dead, running(svc) as run_task:
        await bus.publish_durable(taught(names), episode("poison"))
        (letter,) = await letters(dead)
        await bus.publish_durable(taught(names), episode("after"))
        assert await next_item(got) == episode("after")
        assert not run_task.done()
    assert letter.reason == "rejected" and "cannot handle" in letter.error
    assert decode(letter.payload, letter.headers, Episode) == episode("poison")
    await assert_settled(bus, names, "flaky", delivered=2)


async def test_the_max_deliveries_advisory_survives_garbage_and_dead_letters_a_big_message(
    bus: Bus, names: Names
) -> None:
    """The server's advisory names a message the kit fetches and dead-letters itself; the
    advisories are published here as the server would, plus garbage no server sends."""

    async def handler(ep: Episode) -> None:
        raise AssertionError("never called")

    svc = await flaky_service(bus, names, handler)
    stream = names.stream(STREAM_EPISODES)
    body = junk()
    # On a subject the service does not consume: only the advisory brings it to the kit.
    seq = (await bus.js.publish(names.episode("completed", "shell"), body)).seq
    advisory = f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.flaky"
    async with stored(bus, names.dlq(STREAM_EPISODES)) as dead, running(svc) as run_task:
        for garbage in (
            b"\xff not json",
            b'{"stream_seq": "x"}',
            json.dumps({"stream_seq": seq + 1000, "deliveries": 4}).encode(),  # no such message
            json.dumps({"stream_seq": seq, "deliveries": "many"}).encode(),
            b'{"stream_seq": 1' + b"0" * 5_000 + b"}",
            b"[" * DEPTH,
        ):
            await bus.nc.publish(advisory, garbage)
        await bus.nc.publish(advisory, json.dumps({"stream_seq": seq, "deliveries": 4}).encode())
        (letter,) = await letters(dead)
        assert not run_task.done()
    assert (letter.reason, letter.stream_seq, letter.deliveries) == ("failed", seq, 4)
    assert letter.payload_size == len(body) and letter.payload_ref
    evidence = await bus.js.object_store(names.bucket(OBJECTS_EVIDENCE))
    assert (await evidence.get(letter.payload_ref)).data == body


# -- endpoints -----------------------------------------------------------------------------------


async def test_a_deeply_nested_request_gets_a_400_and_the_endpoint_goes_on(
    bus: Bus, names: Names
) -> None:
    svc = make_service(bus)
    svc.endpoint("act", names.policy_act(), ActRequest, echo)
    async with running(svc) as run_task:
        raw = await bus.nc.request(
            names.policy_act(), deep_request(), headers={SCHEMA_HEADER: "act_request.v1"}, timeout=5
        )
        assert (await bus.request(names.policy_act(), act("ok"), ActResponse, timeout=5)).action
        assert not run_task.done()
    assert raw.headers is not None and raw.headers[ERROR_CODE] == "400"
    assert "too_deep" in raw.headers[ERROR]


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_unencodable_replies_and_errors_get_a_500_and_the_endpoint_goes_on(
    bus: Bus, names: Names, concurrency: int
) -> None:
    async def hostile(req: ActRequest) -> ActResponse:
        match req.observation:
            case "surrogate":
                return ActResponse(action="\ud800")
            case "not-a-struct":
                return {"action": "x"}  # type: ignore[return-value]
            case "surrogate-error":
                raise RuntimeError("bad \ud800\nsecond line")
            case "surrogate-permanent":
                raise PermanentError("bad \udfff")
            case "huge-error":
                raise RuntimeError("e" * 20_000)
        return await echo(req)

    svc = make_service(bus)
    svc.endpoint("act", names.policy_act(), ActRequest, hostile, concurrency=concurrency)
    codes = {}
    async with running(svc) as run_task:
        for case in (
            "surrogate",
            "not-a-struct",
            "surrogate-error",
            "surrogate-permanent",
            "huge-error",
        ):
            with pytest.raises(RemoteError) as err:
                await bus.request(names.policy_act(), act(case), ActResponse, timeout=5)
            codes[case] = err.value
        assert (await bus.request(names.policy_act(), act("ok"), ActResponse, timeout=5)).action
        assert not run_task.done()
    assert {k: v.code for k, v in codes.items()} == {
        "surrogate": "500",
        "not-a-struct": "500",
        "surrogate-error": "500",
        "surrogate-permanent": "422",
        "huge-error": "500",
    }
    assert "could not be encoded" in codes["surrogate"].description
    assert "RuntimeError: bad" in codes["surrogate-error"].description
    assert len(codes["huge-error"].description) < 10_000
