"""The bus kit against a real nats-server, each test in a namespace of its own."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import msgspec
import nats.js.errors
import pytest

from aios_rl.bus import (
    Bus,
    BusError,
    NoResponders,
    PermanentError,
    ProvisionError,
    RemoteError,
    RequestTimeout,
    Service,
    ServiceSettings,
    connect,
    load_settings,
    provision,
)
from aios_rl.envs.runner import RunnerSettings as OrchestratorRunnerSettings
from contracts import (
    SCHEMA_HEADER,
    ActRequest,
    ActResponse,
    DeadLetter,
    DecodeError,
    Episode,
    ErrorReply,
    Message,
    Names,
    RailDecideRequest,
    ServiceStatus,
    Topology,
    decode,
    topology,
)
from contracts.subjects import BUCKET_COMPARISON, STREAM_DLQ, STREAM_EPISODES, ConsumerSpec
from services.reward.settings import RewardSettings
from tests.support import next_item, running, settled_consumer, stored

pytestmark = pytest.mark.timeout(60)

FAST_FETCH_S = 0.2
"""Idle pull loops notice ``stop()`` within this long: keeps each test's shutdown quick."""


def make_service(bus: Bus, name: str = "probe", **kw: Any) -> Service:
    return Service(bus, name=name, version="0.0.1", fetch_timeout_s=FAST_FETCH_S, **kw)


def episode(i: int | str, env: str = "shell", **kw: Any) -> Episode:
    return Episode(episode_id=f"ep-{i}", environment=env, task_id=f"task-{i}", **kw)  # type: ignore[arg-type]


def act(observation: str = "obs") -> ActRequest:
    return ActRequest(episode_id="ep-1", step=0, observation=observation)


async def echo(req: ActRequest) -> ActResponse:
    return ActResponse(
        action=req.observation.upper(), logprob=-0.5, checkpoint_id=req.checkpoint_id
    )


def taught(names: Names, env: str = "shell") -> str:
    return names.episode("taught", env)


# -- publish, request/reply ------------------------------------------------------------------------


async def test_publish_durable_is_typed_and_deduplicated(bus: Bus, names: Names) -> None:
    ep = episode(1, env_reward=0.5)
    seq = await bus.publish_durable(taught(names), ep, msg_id="ep-1:taught")
    stored_msg = await bus.js.get_msg(names.stream(STREAM_EPISODES), seq)
    assert stored_msg.subject == taught(names)
    assert stored_msg.headers is not None and stored_msg.headers[SCHEMA_HEADER] == "episode.v1"
    assert decode(stored_msg.data or b"", stored_msg.headers, Episode) == ep

    again = await bus.publish_durable(taught(names), ep, msg_id="ep-1:taught")
    assert again == seq, "a republish with the same Nats-Msg-Id must not store a second copy"
    other = await bus.publish_durable(taught(names), episode(2), msg_id="ep-2:taught")
    assert other == seq + 1


async def test_read_stream_reads_what_was_stored_when_it_began(bus: Bus, names: Names) -> None:
    stream = names.stream(STREAM_EPISODES)
    assert [m async for m in bus.read_stream(stream, taught(names))] == []  # nothing stored
    seqs = [await bus.publish_durable(taught(names), episode(i)) for i in range(5)]
    await bus.publish_durable(names.episode("rewarded", "shell"), episode(9))  # other subject
    got = []
    async for m in bus.read_stream(stream, names.episode("taught", "*")):
        got.append(decode(m.data, m.headers, Episode).episode_id)
        if len(got) == 2:  # published while the read runs: after its end, not read
            await bus.publish_durable(taught(names), episode(7))
    assert got == [episode(i).episode_id for i in range(5)]
    stored = await bus.stored(stream, seqs[3])
    assert stored is not None and stored.subject == taught(names) and stored.stored_at > 0
    assert decode(stored.data, stored.headers, Episode) == episode(3)
    assert await bus.stored(stream, seqs[-1] + 100) is None
    later = [m async for m in bus.read_stream(stream, taught(names), since=time.time() + 60)]
    assert later == []
    with pytest.raises(BusError):
        async for _ in bus.read_stream("NO_SUCH_STREAM", taught(names)):
            pass


async def test_a_publish_the_connection_cannot_take_is_a_bus_error(
    nats_url: str, names: Names
) -> None:
    async with connect(nats_url, name="closed", names=names) as closed:
        pass  # leaving the block closes it
    with pytest.raises(BusError, match="cannot publish on"):
        await closed.publish(names.policy_act(), act())


async def test_a_stream_of_deltas_stops_queueing_once_a_publish_failed(
    nats_url: str, names: Names
) -> None:
    from contracts import CompletionRequest
    from services.sampler.handlers import _Deltas

    async with connect(nats_url, name="closed", names=names) as closed:
        pass  # leaving the block closes it
    deltas = _Deltas(
        closed, CompletionRequest(request_id="r1", checkpoint_id="c", messages=[], stream=True)
    )
    deltas.on_text("Hello")
    await asyncio.wait_for(deltas.task, timeout=5)  # its publisher ended at the first failure
    assert deltas.stopped
    deltas.on_text("Hello, world")  # the answer carries it: nothing more is queued
    assert deltas.texts.empty()
    await asyncio.wait_for(deltas.close(), timeout=5)


async def test_publish_durable_without_a_stream_is_a_bus_error(bus: Bus, names: Names) -> None:
    with pytest.raises(BusError, match="no JetStream stream"):
        await bus.publish_durable(names.policy_act(), act(), timeout=2.0)


async def test_publish_durable_waits_out_a_stream_without_a_leader(bus: Bus, names: Names) -> None:
    """A clustered stream electing a new leader answers 503 (or nothing) for a few seconds and
    stores nothing: the publish is tried again until a stream takes it, within its timeout."""
    subject = "leaderless.x"
    refused: list[int] = []
    two_refused = asyncio.Event()

    async def electing(msg: Any) -> None:
        refused.append(1)
        await msg.respond(json.dumps({"error": {"code": 503, "description": "no leader"}}).encode())
        if len(refused) == 2:
            two_refused.set()

    sub = await bus.nc.subscribe(subject, cb=electing)
    publishing = asyncio.create_task(bus.publish_durable(subject, act(), timeout=10.0))
    await asyncio.wait_for(two_refused.wait(), 5)
    await sub.unsubscribe()
    await bus.js.add_stream(name="LEADERLESS", subjects=[subject])
    try:
        assert await asyncio.wait_for(publishing, 10) == 1
        assert len(refused) >= 2
        assert (await bus.js.stream_info("LEADERLESS")).state.messages == 1
    finally:
        await bus.js.delete_stream("LEADERLESS")


async def test_request_reply_round_trip(bus: Bus, names: Names) -> None:
    svc = make_service(bus)
    svc.endpoint("act", names.policy_act(), ActRequest, echo)
    async with running(svc):
        reply = await bus.request(names.policy_act(), act("look left"), ActResponse, timeout=5)
    assert reply == ActResponse(action="LOOK LEFT", logprob=-0.5, checkpoint_id="active")


async def test_subscribe_hands_over_decoded_messages_and_decode_errors(
    bus: Bus, names: Names
) -> None:
    got: asyncio.Queue[Message | DecodeError] = asyncio.Queue()

    async def handler(msg: Message | DecodeError, _raw: Any) -> None:
        got.put_nowait(msg)

    sub = await bus.subscribe(names.rail_decide(), handler)
    await bus.publish(names.rail_decide(), act("x"))
    await bus.nc.publish(names.rail_decide(), b"{}")  # no schema header
    assert await next_item(got) == act("x")
    err = await next_item(got)
    assert isinstance(err, DecodeError) and err.reason == "missing_schema"
    await sub.unsubscribe()


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_endpoint_errors_come_back_typed(bus: Bus, names: Names, concurrency: int) -> None:
    async def handler(req: ActRequest) -> ActResponse:
        if req.observation == "permanent":
            raise PermanentError("this observation can never be answered")
        if req.observation == "bug":
            raise ValueError("handler bug")
        return await echo(req)

    svc = make_service(bus)
    svc.endpoint("act", names.policy_act(), ActRequest, handler, concurrency=concurrency)
    subject = names.policy_act()
    async with running(svc):
        with pytest.raises(RemoteError) as permanent:
            await bus.request(subject, act("permanent"), ActResponse, timeout=5)
        with pytest.raises(RemoteError) as bug:
            await bus.request(subject, act("bug"), ActResponse, timeout=5)
        with pytest.raises(RemoteError) as wrong:
            await bus.request(
                subject,
                RailDecideRequest(
                    campaign_id="c", group_id="g", environment="shell", budget_left=1
                ),
                ActResponse,
                timeout=5,
            )
        raw = await bus.nc.request(subject, b'{"episode_id": "e"}', timeout=5)
        # No schema header: decoded as the endpoint's declared request, answered when it fits.
        bare = await bus.nc.request(subject, msgspec.json.encode(act("bare")), timeout=5)
        # The endpoint still answers well after those failures.
        assert (await bus.request(subject, act("ok"), ActResponse, timeout=5)).action == "OK"
    assert (permanent.value.code, permanent.value.subject) == ("422", subject)
    assert "can never be answered" in permanent.value.description
    assert bug.value.code == "500" and "ValueError: handler bug" in bug.value.description
    assert wrong.value.code == "400" and "wrong_schema" in wrong.value.description
    assert raw.headers is not None and raw.headers["Nats-Service-Error-Code"] == "400"
    assert "invalid_payload" in raw.headers["Nats-Service-Error"]
    # The error reply's body is typed too (error.v1), naming what the endpoint takes.
    body = decode(raw.data, raw.headers, ErrorReply)
    assert (body.code, body.endpoint, body.expected_schema) == ("400", "act", "act_request.v1")
    assert body.service == svc.name and "invalid_payload" in body.message
    assert decode(bare.data, bare.headers, ActResponse).action == "BARE"


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_a_reply_too_large_to_send_is_an_error_reply(
    bus: Bus, names: Names, concurrency: int
) -> None:
    async def huge(req: ActRequest) -> ActResponse:
        size = bus.nc.max_payload + 1 if req.observation == "huge" else 1
        return ActResponse(action="x" * size)

    svc = make_service(bus)
    svc.endpoint("act", names.policy_act(), ActRequest, huge, concurrency=concurrency)
    async with running(svc) as run_task:
        with pytest.raises(RemoteError) as err:
            await bus.request(names.policy_act(), act("huge"), ActResponse, timeout=5)
        assert (
            await bus.request(names.policy_act(), act("small"), ActResponse, timeout=5)
        ).action == "x"
        assert not run_task.done()
    assert err.value.code == "500" and "MaxPayloadError" in err.value.description


async def test_no_responders(bus: Bus, names: Names) -> None:
    with pytest.raises(NoResponders, match="no service answers"):
        await bus.request(names.policy_act(), act(), ActResponse, timeout=5)


async def test_request_timeout(bus: Bus, names: Names) -> None:
    release = asyncio.Event()
    entered = asyncio.Event()

    async def stuck(req: ActRequest) -> ActResponse:
        entered.set()
        await release.wait()
        return await echo(req)

    svc = make_service(bus)
    svc.endpoint("act", names.policy_act(), ActRequest, stuck)
    async with running(svc):
        try:
            started = time.monotonic()
            with pytest.raises(RequestTimeout, match=r"within 0\.3s"):
                await bus.request(names.policy_act(), act(), ActResponse, timeout=0.3)
            assert time.monotonic() - started >= 0.29
            assert entered.is_set(), "the request reached the handler and was not answered in time"
        finally:
            release.set()


@pytest.mark.parametrize(("concurrency", "overlaps"), [(3, True), (1, False)])
async def test_concurrent_endpoint_overlaps_requests(
    bus: Bus, names: Names, concurrency: int, overlaps: bool
) -> None:
    """Three handlers wait on a barrier that opens only when three are in flight at once.

    With ``concurrency=3`` all three answer; with 1 the barrier never opens (the control case
    that shows the barrier really needs overlap)."""
    n = 3
    in_flight = 0
    most = 0
    all_in = asyncio.Event()

    async def barrier(req: ActRequest) -> ActResponse:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        if in_flight == n:
            all_in.set()
        try:
            await all_in.wait()
            return await echo(req)
        finally:
            in_flight -= 1

    svc = make_service(bus)
    svc.endpoint("act", names.policy_act(), ActRequest, barrier, concurrency=concurrency)
    async with running(svc):
        try:
            results = await asyncio.gather(
                *(
                    bus.request(
                        names.policy_act(),
                        act(f"o{i}"),
                        ActResponse,
                        timeout=2.0 if overlaps else 0.5,
                    )
                    for i in range(n)
                ),
                return_exceptions=True,
            )
        finally:
            all_in.set()  # let a blocked handler finish so shutdown is quick
    if overlaps:
        assert sorted(r.action for r in results) == ["O0", "O1", "O2"]  # type: ignore[union-attr]
        assert most == n
    else:
        assert all(isinstance(r, RequestTimeout) for r in results)
        assert most == 1


# -- durable consumers ------------------------------------------------------------------------------


async def test_durable_consumer_processes_and_acks(bus: Bus, names: Names) -> None:
    got: asyncio.Queue[Episode] = asyncio.Queue()

    async def handler(ep: Episode) -> None:
        got.put_nowait(ep)

    svc = make_service(bus)
    svc.consume("reward", Episode, handler, concurrency=2)
    sent = [
        episode(i, env=env) for i, env in enumerate(["shell", "browser", "orchestrator", "shell"])
    ]
    async with running(svc):
        for ep in sent:
            await bus.publish_durable(taught(names, ep.environment), ep)
        received = [await next_item(got) for _ in sent]
    assert sorted(e.episode_id for e in received) == sorted(e.episode_id for e in sent)
    assert {e.episode_id: e for e in received} == {e.episode_id: e for e in sent}
    assert got.empty()

    info = await settled_consumer(bus, names.stream(STREAM_EPISODES), "reward")
    assert info.num_ack_pending == 0 and info.num_pending == 0
    assert info.delivered is not None and info.delivered.consumer_seq == len(sent), (
        "something was redelivered"
    )
    status = svc.status()
    assert [
        (c.consumer, c.subject, c.processed, c.retried, c.dead_lettered) for c in status.consumers
    ] == [("reward", "episode.taught.*", len(sent), 0, 0)]


async def test_malformed_messages_are_dead_lettered_and_the_service_keeps_serving(
    bus: Bus, names: Names
) -> None:
    got: asyncio.Queue[Episode] = asyncio.Queue()

    async def handler(ep: Episode) -> None:
        got.put_nowait(ep)

    garbage = b"\x00\x01 not json"
    headerless = msgspec.json.encode(episode("no-header"))
    svc = make_service(bus)
    svc.consume("reward", Episode, handler)
    async with stored(bus, names.dlq(STREAM_EPISODES)) as dead, running(svc):
        await bus.js.publish(taught(names), garbage, headers={SCHEMA_HEADER: "episode.v1"})
        await bus.js.publish(taught(names), headerless)
        good = episode("good")
        await bus.publish_durable(taught(names), good)
        assert await next_item(got) == good
        letters = [
            decode((m := await next_item(dead)).data, m.headers, DeadLetter) for _ in range(2)
        ]
    assert got.empty()
    by_payload = {bytes(d.payload): d for d in letters}
    assert set(by_payload) == {garbage, headerless}, (
        "each dead letter must carry the original payload"
    )
    for d in letters:
        assert d.reason == "undecodable"
        assert (d.service, d.consumer, d.subject) == ("probe", "reward", taught(names))
        assert d.stream == names.stream(STREAM_EPISODES)
        assert d.deliveries == 1
    assert (
        "invalid_payload" in by_payload[garbage].error
        and by_payload[garbage].schema == "episode.v1"
    )
    assert "missing_schema" in by_payload[headerless].error and by_payload[headerless].schema == ""
    # The dead letters are stored, namespaced, on dlq.EPISODES of this test's DLQ stream.
    dlq = await bus.js.stream_info(names.stream(STREAM_DLQ), subjects_filter=names.dlq(">"))
    assert dlq.state.subjects == {f"{names.namespace}.dlq.EPISODES": 2}
    info = await settled_consumer(bus, names.stream(STREAM_EPISODES), "reward")
    assert info.num_ack_pending == 0 and info.num_pending == 0
    assert svc.status().consumers[0].dead_lettered == 2


def fast_retry_topology(names: Names, *, max_deliver: int, backoff_s: list[float]) -> Topology:
    """The stack's streams with one durable ("flaky") on ``episode.taught.shell`` that gives up
    quickly: tests of retry and dead-lettering run in a fraction of a second."""
    base = topology(names)
    spec = ConsumerSpec(
        stream=names.stream(STREAM_EPISODES),
        durable="flaky",
        filter_subject=taught(names),
        ack_wait_s=5.0,
        max_deliver=max_deliver,
        backoff_s=backoff_s,
    )
    return msgspec.structs.replace(base, consumers=[spec], buckets=[], object_stores=[])


async def test_failing_handler_is_retried_with_backoff_then_dead_lettered(
    bus: Bus, names: Names
) -> None:
    topo = fast_retry_topology(names, max_deliver=3, backoff_s=[0.05, 0.25])
    await provision(bus, topo)
    calls: asyncio.Queue[float] = asyncio.Queue()

    async def always_fails(ep: Episode) -> None:
        calls.put_nowait(time.monotonic())
        raise RuntimeError(f"cannot handle {ep.episode_id}")

    svc = make_service(bus, topology=topo)
    svc.consume("flaky", Episode, always_fails)
    async with stored(bus, names.dlq(STREAM_EPISODES)) as dead, running(svc):
        await bus.publish_durable(taught(names), episode(1))
        msg = await next_item(dead)
        letter = decode(msg.data, msg.headers, DeadLetter)
    times = [calls.get_nowait() for _ in range(calls.qsize())]
    assert len(times) == 3, f"handler ran {len(times)} times, expected max_deliver=3"
    assert times[1] - times[0] >= 0.045 and times[2] - times[1] >= 0.24, "back-off was not honoured"
    assert letter.reason == "failed" and letter.deliveries == 3
    assert "RuntimeError('cannot handle ep-1')" in letter.error
    assert decode(letter.payload, letter.headers, Episode) == episode(1)
    info = await settled_consumer(bus, names.stream(STREAM_EPISODES), "flaky")
    assert info.num_ack_pending == 0 and info.num_pending == 0
    (stats,) = svc.status().consumers
    assert (stats.processed, stats.retried, stats.dead_lettered) == (0, 2, 1)
    assert "cannot handle" in stats.last_error


async def test_permanent_error_dead_letters_at_once(bus: Bus, names: Names) -> None:
    topo = fast_retry_topology(names, max_deliver=5, backoff_s=[0.05])
    await provision(bus, topo)
    calls: list[str] = []

    async def rejects(ep: Episode) -> None:
        calls.append(ep.episode_id)
        raise PermanentError("task-1 does not exist")

    svc = make_service(bus, topology=topo)
    svc.consume("flaky", Episode, rejects)
    async with stored(bus, names.dlq(STREAM_EPISODES)) as dead, running(svc):
        await bus.publish_durable(taught(names), episode(1))
        msg = await next_item(dead)
    letter = decode(msg.data, msg.headers, DeadLetter)
    assert letter.reason == "rejected" and letter.deliveries == 1
    assert letter.error == "task-1 does not exist"
    assert calls == ["ep-1"]
    info = await settled_consumer(bus, names.stream(STREAM_EPISODES), "flaky")
    assert info.num_ack_pending == 0 and info.num_pending == 0
    assert info.delivered is not None and info.delivered.consumer_seq == 1


async def test_consume_of_an_undeclared_durable_is_a_key_error(bus: Bus, names: Names) -> None:
    async def handler(ep: Episode) -> None:
        raise AssertionError("never called")

    with pytest.raises(KeyError, match="no-such"):
        make_service(bus).consume("no-such", Episode, handler)
    with pytest.raises(KeyError, match="reward"):  # a custom topology replaces the stack's
        make_service(bus, topology=fast_retry_topology(names, max_deliver=1, backoff_s=[])).consume(
            "reward", Episode, handler
        )


# -- discovery and status ---------------------------------------------------------------------------


async def test_service_discovery_and_status(bus: Bus, names: Names) -> None:
    name = f"probe-{names.namespace}"  # $SRV subjects are not namespaced: keep the name unique
    got: asyncio.Queue[Episode] = asyncio.Queue()

    async def handler(ep: Episode) -> None:
        got.put_nowait(ep)

    async def answer(req: ActRequest) -> ActResponse:
        if req.observation == "bug":
            raise ValueError("bug")
        return await echo(req)

    svc = make_service(bus, name=name)
    svc.endpoint("act", names.policy_act(), ActRequest, answer)
    svc.consume("reward", Episode, handler)
    svc.stats(lambda: {"cache_size": 7.0})
    async with running(svc):
        await bus.request(names.policy_act(), act(), ActResponse, timeout=5)
        with pytest.raises(RemoteError):
            await bus.request(names.policy_act(), act("bug"), ActResponse, timeout=5)
        await bus.publish_durable(taught(names), episode(1))
        await next_item(got)

        ping = json.loads((await bus.nc.request(f"$SRV.PING.{name}", b"", timeout=5)).data)
        info = json.loads((await bus.nc.request(f"$SRV.INFO.{name}", b"", timeout=5)).data)
        stats = json.loads((await bus.nc.request(f"$SRV.STATS.{name}", b"", timeout=5)).data)
        raw = await bus.nc.request(names.status(name), b"", timeout=5)
        status = decode(raw.data, raw.headers, ServiceStatus)

    assert ping["type"] == "io.nats.micro.v1.ping_response"
    assert (ping["name"], ping["version"], ping["id"]) == (name, "0.0.1", svc.instance)
    assert ping["metadata"]["namespace"] == names.namespace
    assert {e["name"]: e["subject"] for e in info["endpoints"]} == {
        "status": names.status(name),
        "act": names.policy_act(),
    }
    endpoint_stats = {e["name"]: e for e in stats["endpoints"]}
    assert set(endpoint_stats) == {"status", "act"}
    assert endpoint_stats["act"]["num_requests"] == 2
    # Errors as the kit counts them (requests run as tasks micro's own counters do not see).
    assert endpoint_stats["act"]["data"] == {"num_requests": 2, "num_errors": 1}
    assert endpoint_stats["status"]["data"]["service"] == name

    assert (status.service, status.instance, status.version) == (name, svc.instance, "0.0.1")
    assert status.extra == {"cache_size": 7.0}
    (consumer,) = status.consumers
    assert (consumer.consumer, consumer.subject, consumer.processed) == (
        "reward",
        "episode.taught.*",
        1,
    )


# -- shutdown ----------------------------------------------------------------------------------------


async def not_done_within(task: asyncio.Task[None], seconds: float) -> bool:
    """True when ``task`` is still running after ``seconds`` (it must be waiting for something)."""
    done, _ = await asyncio.wait({task}, timeout=seconds)
    return not done


async def test_stop_lets_an_in_flight_handler_finish_and_ack(bus: Bus, names: Names) -> None:
    entered = asyncio.Event()
    release = asyncio.Event()
    finished: list[tuple[str, bool]] = []
    svc = make_service(bus)

    async def slow(ep: Episode) -> None:
        entered.set()
        await release.wait()
        finished.append((ep.episode_id, svc.stopping))

    svc.consume("reward", Episode, slow, concurrency=2)
    async with running(svc) as run_task:
        await bus.publish_durable(taught(names), episode(1))
        await asyncio.wait_for(entered.wait(), 5)
        svc.stop()
        assert await not_done_within(run_task, 3 * FAST_FETCH_S), (
            "run() returned with a handler in flight"
        )
        release.set()
        await asyncio.wait_for(run_task, 5)
    assert finished == [("ep-1", True)], "the handler must complete after stop() was asked"
    info = await settled_consumer(bus, names.stream(STREAM_EPISODES), "reward")
    assert info.num_ack_pending == 0 and info.num_pending == 0
    assert info.delivered is not None and info.delivered.consumer_seq == 1


async def test_stop_past_the_grace_period_hands_the_message_back(bus: Bus, names: Names) -> None:
    entered = asyncio.Event()
    svc = make_service(bus, shutdown_grace_s=0.3)

    async def hangs(ep: Episode) -> None:
        entered.set()
        await asyncio.Event().wait()

    svc.consume("reward", Episode, hangs)
    async with running(svc) as run_task:
        await bus.publish_durable(taught(names), episode(1))
        await asyncio.wait_for(entered.wait(), 5)
        svc.stop()
        await asyncio.wait_for(run_task, 5)
    assert svc.status().consumers[0].processed == 0
    # Handed back with a nak: another replica gets it now, not after ack_wait (30 s) runs out.
    replica = await bus.js.pull_subscribe_bind(
        durable="reward", stream=names.stream(STREAM_EPISODES)
    )
    (msg,) = await replica.fetch(1, timeout=3)
    assert msg.metadata.num_delivered == 2
    assert decode(msg.data, msg.headers, Episode) == episode(1)
    await msg.ack()
    await replica.unsubscribe()


async def test_stop_lets_an_in_flight_request_finish(bus: Bus, names: Names) -> None:
    entered = asyncio.Event()
    release = asyncio.Event()

    async def slow(req: ActRequest) -> ActResponse:
        entered.set()
        await release.wait()
        return await echo(req)

    svc = make_service(bus)
    svc.endpoint("act", names.policy_act(), ActRequest, slow)
    async with running(svc) as run_task:
        request = asyncio.create_task(
            bus.request(names.policy_act(), act("late"), ActResponse, timeout=5)
        )
        await asyncio.wait_for(entered.wait(), 5)
        svc.stop()
        assert await not_done_within(run_task, 3 * FAST_FETCH_S), (
            "run() returned with a request in flight"
        )
        release.set()
        reply = await request
        await asyncio.wait_for(run_task, 5)
    assert reply.action == "LATE"


# -- provisioning -----------------------------------------------------------------------------------


async def stream_names(bus: Bus) -> list[str]:
    """Every stream on the server (the JetStream API pages the list)."""
    out: list[str] = []
    while True:
        resp = await bus.nc.request(
            "$JS.API.STREAM.NAMES", json.dumps({"offset": len(out)}).encode(), timeout=5
        )
        page = json.loads(resp.data)
        out += page.get("streams") or []
        if not page.get("streams") or len(out) >= page["total"]:
            return out


async def test_creating_waits_for_a_cluster_that_cannot_place_replicas_yet() -> None:
    """A new cluster refuses a replicated stream until its peers have joined: a refusal while
    nothing exists is asked again; one because another process created it is a race, not an
    error; one that lasts past the deadline is raised."""
    from aios_rl.bus._provision import created

    refusal = nats.js.errors.BadRequestError(
        code=400, err_code=10074, description="insufficient resources"
    )
    calls: list[str] = []

    def creating(refusals: int, made: list[bool]) -> Any:
        async def create() -> None:
            calls.append("create")
            if len(calls) <= refusals:
                raise refusal
            made.append(True)

        return create

    made: list[bool] = []

    async def nothing() -> bool:
        return bool(made)

    assert await created(creating(2, made), nothing, within=10) is True
    assert calls == ["create"] * 3 and made == [True]

    calls.clear()

    async def someone_else_made_it() -> bool:
        return True

    assert await created(creating(1, []), someone_else_made_it, within=10) is False
    assert calls == ["create"]

    calls.clear()

    async def never() -> bool:
        return False

    with pytest.raises(nats.js.errors.BadRequestError):
        await created(creating(1000, []), never, within=0.5)
    assert len(calls) >= 2


async def test_provision_is_idempotent_and_keeps_data(bus: Bus, names: Names) -> None:
    topo = topology(names)
    await bus.publish_durable(taught(names), episode(1))
    checkpoints = topo.buckets[0]
    await (await bus.js.key_value(checkpoints.name)).put(names.key_pointers(), b"{}")
    before = {s.name: (await bus.js.stream_info(s.name)).config for s in topo.streams}

    await provision(bus)
    await asyncio.gather(provision(bus), provision(bus))  # services start concurrently

    for s in topo.streams:
        info = await bus.js.stream_info(s.name)
        assert info.config == before[s.name], f"re-provisioning changed stream {s.name}"
    assert (await bus.js.stream_info(names.stream(STREAM_EPISODES))).state.messages == 1
    for c in topo.consumers:
        info = await bus.js.consumer_info(c.stream, c.durable)
        assert info.config.filter_subject == c.filter_subject
        assert info.config.max_deliver == c.max_deliver + 1
    reward = await bus.js.consumer_info(names.stream(STREAM_EPISODES), "reward")
    assert reward.num_pending == 1, "re-provisioning reset the consumer's position"
    ours = {name for name in await stream_names(bus) if names.namespace in name}
    assert ours == {s.name for s in topo.streams} | {f"KV_{b.name}" for b in topo.buckets} | {
        f"OBJ_{o.name}" for o in topo.object_stores
    }, "re-provisioning created resources twice or under other names"
    for b in topo.buckets:
        assert (await (await bus.js.key_value(b.name)).status()).history == b.history
    entry = await (await bus.js.key_value(checkpoints.name)).get(names.key_pointers())
    assert entry.value == b"{}" and entry.revision == 1


async def test_provision_brings_a_changed_stream_to_the_declared_config(
    bus: Bus, names: Names
) -> None:
    topo = topology(names)
    changed = msgspec.structs.replace(
        topo,
        streams=[
            msgspec.structs.replace(s, description="changed")
            if s.name == names.stream(STREAM_EPISODES)
            else s
            for s in topo.streams
        ],
    )
    await provision(bus, changed)
    assert (await bus.js.stream_info(names.stream(STREAM_EPISODES))).config.description == "changed"
    await provision(bus, topo)
    assert (
        await bus.js.stream_info(names.stream(STREAM_EPISODES))
    ).config.description == topo.streams[1].description


# -- an ack wait set by the service -----------------------------------------------------------------

OVERRIDE_KEY = "aios_ack_wait_s"


async def test_a_service_sets_its_ack_wait_and_provisioning_by_others_keeps_it(
    bus: Bus, names: Names
) -> None:
    stream = names.stream(STREAM_EPISODES)
    declared = topology(names).consumer("reward")
    assert declared.ack_wait_s != 2.0

    async def handler(ep: Episode) -> None:
        raise AssertionError("never called")

    svc = make_service(bus)
    svc.consume("reward", Episode, handler, ack_wait_s=2.0)
    async with running(svc):
        info = await bus.js.consumer_info(stream, "reward")
        assert info.config.ack_wait == 2.0
        assert (info.config.metadata or {}).get(OVERRIDE_KEY) == "2.0"
        await provision(bus)  # other services start (or restart) with the same contract
        await asyncio.gather(provision(bus), provision(bus))
        assert (await bus.js.consumer_info(stream, "reward")).config.ack_wait == 2.0
        # A changed contract still reaches the consumer, around the service's ack wait.
        changed = msgspec.structs.replace(
            topology(names),
            consumers=[
                msgspec.structs.replace(c, max_ack_pending=7) if c.durable == "reward" else c
                for c in topology(names).consumers
            ],
        )
        await provision(bus, changed)
        info = await bus.js.consumer_info(stream, "reward")
        assert (info.config.ack_wait, info.config.max_ack_pending) == (2.0, 7)
        assert svc.status().consumers[0].consumer == "reward"
    # Started without one, the service restores the declared ack wait (and config).
    plain = make_service(bus)
    plain.consume("reward", Episode, handler)
    async with running(plain):
        info = await bus.js.consumer_info(stream, "reward")
    assert info.config.ack_wait == declared.ack_wait_s
    assert info.config.max_ack_pending == declared.max_ack_pending
    assert OVERRIDE_KEY not in (info.config.metadata or {})
    await provision(bus, changed)  # an unmarked consumer follows the contract as before
    assert (await bus.js.consumer_info(stream, "reward")).config.max_ack_pending == 7


async def test_a_message_a_dead_process_held_comes_back_after_the_services_ack_wait(
    bus: Bus, names: Names
) -> None:
    stream = names.stream(STREAM_EPISODES)
    declared = topology(names).consumer("reward")
    await bus.publish_durable(taught(names), episode(1))
    # A process fetches the message under the declared ack wait, then dies holding it.
    dead = await bus.js.pull_subscribe_bind(durable="reward", stream=stream)
    (held,) = await dead.fetch(1, timeout=5)
    await dead.unsubscribe()
    assert held.metadata.num_delivered == 1
    got: asyncio.Queue[Episode] = asyncio.Queue()

    async def handler(ep: Episode) -> None:
        got.put_nowait(ep)

    svc = make_service(bus)
    svc.consume("reward", Episode, handler, ack_wait_s=2.0)
    async with running(svc):
        # The new ack wait applies to what is already pending: back in ~2 s, not 30.
        assert await next_item(got, within=declared.ack_wait_s / 3) == episode(1)
    info = await settled_consumer(bus, stream, "reward")
    assert info.num_ack_pending == 0 and info.num_redelivered == 0
    assert info.delivered is not None and info.delivered.consumer_seq == 2


async def test_a_handler_longer_than_the_ack_wait_is_kept_alive_not_redelivered(
    bus: Bus, names: Names
) -> None:
    calls: list[str] = []

    async def long_episode(ep: Episode) -> None:
        calls.append(ep.episode_id)
        await asyncio.sleep(2.5)  # the work itself lasts 2.5 ack waits: no condition is awaited

    svc = make_service(bus)
    svc.consume("reward", Episode, long_episode, concurrency=2, ack_wait_s=1.0)
    async with running(svc):
        await bus.publish_durable(taught(names), episode(1))
        info = await settled_consumer(bus, names.stream(STREAM_EPISODES), "reward", within=10)
    assert calls == ["ep-1"], "redelivered while its handler was still running"
    assert info.num_ack_pending == 0 and info.delivered is not None
    assert info.delivered.consumer_seq == 1


async def test_an_ack_wait_below_a_second_or_an_unprovisioned_consumer_is_refused(
    bus: Bus, names: Names
) -> None:
    async def handler(ep: Episode) -> None:
        raise AssertionError("never called")

    with pytest.raises(ValueError, match="at least 1 second"):
        make_service(bus).consume("reward", Episode, handler, ack_wait_s=0.5)
    topo = fast_retry_topology(names, max_deliver=1, backoff_s=[])  # never provisioned
    svc = make_service(bus, topology=topo)
    svc.consume("flaky", Episode, handler, ack_wait_s=5.0)
    with pytest.raises(ProvisionError, match=r"flaky .* does not exist"):
        await asyncio.wait_for(svc.run(install_signal_handlers=False), 10)


def test_runner_ack_wait_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert load_settings(OrchestratorRunnerSettings, [], prog="t").ack_wait_s == 0.0
    monkeypatch.setenv("AIOS_ACK_WAIT_S", "10")
    assert load_settings(OrchestratorRunnerSettings, [], prog="t").ack_wait_s == 10.0
    with pytest.raises(SystemExit):
        load_settings(OrchestratorRunnerSettings, ["--ack-wait-s", "0.5"], prog="t")
    assert "ack_wait_s must be 0" in capsys.readouterr().err


# -- settings ------------------------------------------------------------------------------------------


def test_load_settings_reads_env_and_argv_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NATS_URL", "nats://env:4222")
    monkeypatch.setenv("AIOS_NAMESPACE", "from-env")
    monkeypatch.setenv("AIOS_SHUTDOWN_GRACE_S", "2.5")
    monkeypatch.setenv("AIOS_TEACHER_WEIGHT", "0.7")
    s = load_settings(RewardSettings, ["--namespace", "from-argv", "--concurrency", "3"], prog="t")
    assert s.nats_url == "nats://env:4222"
    assert s.namespace == "from-argv"
    assert s.shutdown_grace_s == 2.5
    assert s.teacher_weight == 0.7
    assert s.concurrency == 3
    assert isinstance(s, RewardSettings)

    monkeypatch.delenv("AIOS_NAMESPACE")
    base = load_settings(ServiceSettings, ["--nats-url", "nats://argv:1"], prog="t")
    assert base.nats_url == "nats://argv:1" and base.namespace == ""


@pytest.mark.parametrize(
    ("env", "argv", "mentions"),
    [
        ({"AIOS_SHUTDOWN_GRACE_S": "soon"}, [], "AIOS_SHUTDOWN_GRACE_S"),
        ({}, ["--shutdown-grace-s", "soon"], "--shutdown-grace-s"),
        ({}, ["--concurrency", "2.5"], "--concurrency"),
        ({"AIOS_TEACHER_WEIGHT": "-1"}, [], "teacher_weight must be >= 0"),
        ({}, ["--shaping-clip=-0.1"], "shaping_clip must be >= 0"),
    ],
    ids=["env-type", "argv-type", "argv-int", "env-validation", "argv-validation"],
)
def test_load_settings_bad_value_exits_2_with_one_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    argv: list[str],
    mentions: str,
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as exit_:
        load_settings(RewardSettings, argv, prog="aios-rl-reward")
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected a one-line message, got:\n{err}"
    assert lines[0].startswith("aios-rl-reward: error: ")
    assert mentions in lines[0]


async def test_a_background_task_that_swallows_cancellation_is_cancelled_again_until_it_ends(
    bus: Bus, names: Names
) -> None:
    svc = make_service(bus, "stubborn", shutdown_grace_s=30)  # time enough on any machine
    started = asyncio.Event()
    ignored = 0

    async def stubborn() -> None:
        nonlocal ignored
        started.set()
        while ignored < 3:  # swallows the first cancellations, as a nats-py request can on 3.11
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                ignored += 1
        await asyncio.Event().wait()  # the fourth cancellation ends it

    svc.task(stubborn)
    task = asyncio.create_task(svc.run(install_signal_handlers=False))
    await asyncio.wait_for(started.wait(), 10)
    svc.stop()
    await asyncio.wait_for(task, 10)
    assert ignored == 3


async def test_a_background_task_that_swallows_cancellation_cannot_hang_shutdown(
    bus: Bus, names: Names
) -> None:
    svc = make_service(bus, "deaf", shutdown_grace_s=0.5)
    started = asyncio.Event()
    ignored, deafened = 0, True

    async def deaf() -> None:
        nonlocal ignored
        started.set()
        while deafened:  # every cancellation swallowed, for as long as the test wants
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                ignored += 1

    svc.task(deaf)
    task = asyncio.create_task(svc.run(install_signal_handlers=False))
    await asyncio.wait_for(started.wait(), 10)
    svc.stop()
    await asyncio.wait_for(task, 10)  # stopped after its grace, the task left running
    (left,) = [t for t in asyncio.all_tasks() if t.get_name() == "deaf"]
    assert ignored >= 1 and not left.done()
    deafened = False  # the test's own clean-up: the next cancellation ends it
    left.cancel()
    await asyncio.wait_for(left, 5)


async def test_a_failing_background_task_stops_the_service_and_raises(
    bus: Bus, names: Names
) -> None:
    svc = make_service(bus, "fragile")

    async def fragile() -> None:
        await svc.ready.wait()
        raise RuntimeError("background work broke")

    svc.task(fragile)
    with pytest.raises(RuntimeError, match="background work broke"):
        await asyncio.wait_for(svc.run(install_signal_handlers=False), 15)


async def test_provision_sets_bucket_ttl_and_updates_an_existing_bucket(
    bus: Bus, names: Names
) -> None:
    topo = topology(names)
    comparison = next(b for b in topo.buckets if b.name == names.bucket(BUCKET_COMPARISON))
    assert comparison.ttl_s > 0
    await provision(bus, topo)
    kv = await bus.js.key_value(comparison.name)
    assert (await kv.status()).ttl == pytest.approx(comparison.ttl_s)
    await kv.put("kept", b"1")
    # A deployment made before the TTL existed: the bucket is brought to the declaration.
    older = msgspec.structs.replace(
        topo,
        buckets=[msgspec.structs.replace(b, ttl_s=0.0, history=3) for b in topo.buckets],
    )
    await provision(bus, older)
    assert (await kv.status()).ttl in (None, 0) and (await kv.status()).history == 3
    await provision(bus, topo)
    status = await kv.status()
    assert status.ttl == pytest.approx(comparison.ttl_s) and status.history == 1
    assert (await kv.get("kept")).value == b"1", "updating the bucket lost its keys"


async def test_endpoints_have_unique_names_and_describe_their_contracts(bus: Bus) -> None:
    from aios_rl.bus._discovery import gather
    from contracts import ActRequest, ActResponse

    async def handler(req: ActRequest) -> ActResponse:
        return ActResponse(action=req.candidates[0], action_index=0)

    svc = Service(bus, name="described", version="0.0.1")
    svc.endpoint(
        "act", bus.names.subject("described", "act"), ActRequest, handler, reply=ActResponse
    )
    with pytest.raises(ValueError, match="already has an endpoint named 'act'"):
        svc.endpoint("act", bus.names.subject("described", "again"), ActRequest, handler)
    with pytest.raises(ValueError, match="named 'status'"):
        svc.endpoint("status", bus.names.subject("described", "status"), ActRequest, handler)
    async with running(svc):
        infos = [i for i in await gather(bus.nc, "$SRV.INFO") if i["id"] == svc.instance]
    (info,) = infos
    meta = {ep["name"]: ep["metadata"] for ep in info["endpoints"]}
    assert meta["act"] == {"request_schema": "act_request.v1", "response_schema": "act_response.v1"}
    assert meta["status"] == {"request_schema": "", "response_schema": "service_status.v1"}


def test_logs_follow_stderr_when_it_is_swapped_and_the_old_one_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A program (or pytest) that replaces sys.stderr and closes the old one after logging was
    configured must not leave the logger writing to a closed file (an in-process CLI call in one
    test once broke the logs of every later test)."""
    import io
    import sys

    from aios_rl.bus import configure_logging, get_logger

    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging("probe", fmt="json", level="info")
    try:
        get_logger().info("one")
        first.close()
        monkeypatch.setattr(sys, "stderr", second)
        get_logger().info("two")  # raised "I/O operation on closed file" before
        assert '"event": "two"' in second.getvalue()
    finally:
        monkeypatch.undo()
        configure_logging("tests", fmt="json", level="warning")
