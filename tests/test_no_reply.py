"""A request published without a reply subject (issue 33): nobody can read its answer, and
``nats.micro`` cannot send one (``respond`` raises ``ValueError``), which used to escape the
service's task group and end the service. One publish was enough.

The bus kit on a real nats-server: such a request is refused before its handler runs, counted as
an endpoint error and dead-lettered on ``dlq.REQUESTS``, and the service goes on answering. Then
the whole stack, every service its own process under the supervisor (as ``bench/fuzz.py`` runs
it): a malformed and a well-formed body published on every endpoint and every consumed subject
the services name through ``$SRV``, and no service exits."""

from __future__ import annotations

import contextlib
import hashlib
import re
from pathlib import Path
from typing import Any

import nats.errors
import pytest
from nats.aio.msg import Msg

from aios_rl.bus import Bus, discover
from aios_rl.bus._service import _respond_error
from aios_rl.stack.embedded import stack
from bench.fuzz import letters, targets, well_formed
from contracts import (
    SCHEMA_HEADER,
    ActRequest,
    ActResponse,
    DeadLetter,
    Names,
    ServiceStatus,
    decode,
    encode,
)
from contracts.access import access, permissions
from contracts.subjects import DLQ_REQUESTS, OBJECTS_EVIDENCE, STREAM_DLQ
from tests.support import eventually, next_item, running, stored
from tests.test_bus import act, echo, make_service
from tests.test_hostile_input import junk

pytestmark = pytest.mark.timeout(120)

MALFORMED = b"{not json"
ERROR_CODE = "Nats-Service-Error-Code"


def _digest(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


# -- the bus kit ------------------------------------------------------------------------------------


async def test_a_request_without_a_reply_subject_is_refused_dead_lettered_and_the_service_goes_on(
    bus: Bus, names: Names
) -> None:
    handled: list[ActRequest] = []

    async def recording(req: ActRequest) -> ActResponse:
        handled.append(req)
        return await echo(req)

    svc = make_service(bus)
    svc.endpoint("act", names.policy_act(), ActRequest, recording)
    big = junk()  # its dead letter is too large for a bus message: the payload goes to evidence
    good, good_headers = encode(act("published"))
    header = {SCHEMA_HEADER: ActRequest.SCHEMA}
    async with stored(bus, names.dlq(DLQ_REQUESTS)) as dead, running(svc) as task:
        await bus.nc.publish(names.policy_act(), MALFORMED, headers=header)
        await bus.nc.publish(names.policy_act(), good, headers=good_headers)
        await bus.nc.publish(names.policy_act(), big, headers=header)
        await bus.nc.publish(names.status("probe"), MALFORMED)  # status reads no body: logged
        got: list[DeadLetter] = []
        for _ in range(3):
            m = await next_item(dead)
            got.append(decode(m.data, m.headers, DeadLetter))
        # Answered in order after the publishes on the same subscriptions: they were handled.
        reply = await bus.request(names.policy_act(), act("asked"), ActResponse, timeout=5)
        status = await bus.nc.request(names.status("probe"), b"", timeout=5)
        assert not task.done(), "the service ended"
        views = await discover(bus.nc, namespace=names.namespace, window=0.3)

    assert reply.action == "ASKED" and status.data
    assert [r.observation for r in handled] == ["asked"], "a handler ran for a no-reply request"
    by_size = {dl.payload_size: dl for dl in got}
    assert sorted(by_size) == sorted([len(MALFORMED), len(good), len(big)])
    for dl in got:
        assert (dl.reason, dl.service, dl.endpoint) == ("no_reply", "probe", "act")
        assert (dl.stream, dl.consumer, dl.subject) == ("", "", names.policy_act())
        assert dl.schema == ActRequest.SCHEMA and "reply subject" in dl.error
    assert by_size[len(MALFORMED)].payload == MALFORMED
    assert by_size[len(good)].payload == good
    kept = by_size[len(big)]
    assert kept.payload == b"" and kept.payload_sha256 == _digest(big) and kept.payload_ref
    evidence = await bus.js.object_store(names.bucket(OBJECTS_EVIDENCE))
    assert (await evidence.get(kept.payload_ref)).data == big

    (view,) = [v for v in views if v.name == "probe"]
    (ep,) = [e for e in view.endpoints if e.name == "act"]
    assert (ep.requests, ep.errors) == (4, 3)
    assert ep.request_schema == ActRequest.SCHEMA


class _Unanswerable:
    """A request whose every answer fails the way nats-py fails one without a reply subject."""

    subject = "x"

    async def respond_error(self, *args: Any, **kw: Any) -> None:
        raise ValueError("no reply subject set")


class _Log:
    def __init__(self) -> None:
        self.events: list[str] = []

    def warning(self, event: str, **kw: Any) -> None:
        self.events.append(event)

    exception = warning


async def test_an_error_reply_that_cannot_be_sent_is_logged_never_raised() -> None:
    log = _Log()
    await _respond_error(_Unanswerable(), "400", "bad", log)  # type: ignore[arg-type]
    assert log.events == ["endpoint.error_reply_failed"]


def test_a_serving_service_may_dead_letter_what_it_refuses() -> None:
    names = Names("ns")
    grants = access(names)
    evidence = f"$O.{names.bucket(OBJECTS_EVIDENCE)}.>"
    for user in ("sampler", "trainer", "sites"):  # they serve and consume nothing
        allowed = permissions(names, grants[user]).publish_allow
        assert names.dlq(DLQ_REQUESTS) in allowed and evidence in allowed, user
    dashboard = permissions(names, grants["dashboard"]).publish_allow  # serves nothing
    assert names.dlq(DLQ_REQUESTS) not in dashboard and evidence not in dashboard


# -- the whole stack --------------------------------------------------------------------------------


async def _ask(bus: Bus, subject: str, payload: bytes, headers: dict[str, str]) -> Msg | str:
    """The answer to one request, or why there is none."""
    try:
        return await bus.nc.request(subject, payload, timeout=15, headers=headers)
    except nats.errors.Error as exc:
        return f"no answer: {exc!r}"


def _code(answer: Msg) -> str:
    return (answer.headers or {}).get(ERROR_CODE, "none")


def _exits(log_path: Path) -> list[str]:
    """The supervisor's lines about a service process that exited (it restarts it)."""
    return [
        line
        for line in log_path.read_text(errors="replace").splitlines()
        if re.match(r"aios-rl \| \S+ exited with code", line)
    ]


@pytest.mark.slow
async def test_no_publish_without_a_reply_subject_ends_a_service_of_the_stack(
    tmp_path: Path,
) -> None:
    async with stack(
        None, data_dir=tmp_path / "store", needs=set(), echo=lambda _: None, fresh=True
    ) as st:
        bus = st.bus
        assert st.log_path is not None
        views = await discover(bus.nc, namespace="", window=0.5)
        consumed, endpoints = targets(views, bus.names)
        assert {"rail.decide", "trainer.cmd.update", "replay.sample", "comparison.verdict"} <= {
            s for s, _ in endpoints
        }, endpoints
        assert consumed and all(schema for _, schema in consumed), consumed
        first = (await bus.js.stream_info(bus.names.stream(STREAM_DLQ))).state.last_seq

        refused: set[tuple[str, str]] = set()  # (subject, digest) each endpoint must dead-letter
        for subject, schema in [*endpoints, *consumed]:
            good, headers = well_formed(schema) if schema else (b"{}", {})
            for payload in (MALFORMED, good):
                await bus.nc.publish(subject, payload, headers=headers)
                if (subject, schema) in endpoints and schema:
                    refused.add((subject, _digest(payload)))
        await bus.nc.flush()

        # Each endpoint's refusals are dead-lettered once its service has handled them.
        seen: set[tuple[str, str]] = set()

        async def all_refused() -> bool | None:
            async for _, dl in letters(bus, first, bus.names.dlq(DLQ_REQUESTS)):
                seen.add((dl.subject, dl.payload_sha256 or _digest(dl.payload)))
            return True if refused <= seen else None

        with contextlib.suppress(TimeoutError):  # what is missing is asserted below
            await eventually(all_refused, within=60, every=0.5, what="the dead letters")

        # The stack still answers, from the same processes: every endpoint (an error reply to a
        # malformed request), every service's status from the instance that was there before.
        codes: dict[str, str] = {}
        for subject, schema in endpoints:
            if schema:
                answer = await _ask(bus, subject, MALFORMED, {SCHEMA_HEADER: schema})
                codes[subject] = answer if isinstance(answer, str) else _code(answer)
        instances: dict[str, str] = {}
        for v in views:
            answer = await _ask(bus, bus.names.status(v.name), b"", {})
            instances[v.name] = (
                answer
                if isinstance(answer, str)
                else decode(answer.data, answer.headers, ServiceStatus).instance
            )
        exits = _exits(st.log_path)

    assert exits == [], exits
    assert codes == dict.fromkeys(codes, "400"), codes
    assert instances == {v.name: v.id for v in views}
    missing = sorted(refused - seen)
    assert not missing, f"no dead letter for {len(missing)} no-reply publishes: {missing[:5]}"
