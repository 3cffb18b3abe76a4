"""The teacher gateway: its pure rules, then the service on a real nats-server with real backends
(the oracle in process and as a subprocess, teacher-openai as a subprocess for the live swap),
a backend that never answers, one that is absent, and one that counts its calls."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from aios_rl.bus import Bus, Service
from aios_rl.state.control import ControlStore
from contracts import (
    CampaignSpec,
    CampaignState,
    ControlSnapshot,
    ControlState,
    Episode,
    GatewaySettings,
    Names,
    StepDigest,
    TeacherHint,
    TeacherRequest,
    TeacherSignal,
    TrajectoryStep,
    decode,
)
from contracts.subjects import BUCKET_CONTROL, MSG_ID_HEADER
from services.teacher_gateway.logic import (
    DigestLimits,
    LruCache,
    accept,
    build_request,
    cache_key,
    checked_settings,
    pick_steps,
    sample_point,
    taught,
    wants_teacher,
)
from services.teacher_gateway.main import build
from services.teacher_gateway.settings import GatewayServiceSettings
from services.teacher_oracle.main import build as build_oracle
from services.teacher_oracle.settings import OracleSettings
from tests.support import next_item, running, stored
from tests.teacher_support import (
    FIX,
    RUN,
    SUBMIT,
    TASK,
    TEST_EDIT,
    module_process,
    openai_server,
    service_env,
    shell_episode,
    store_task,
    until_serving,
)

pytestmark = pytest.mark.timeout(60)

GATEWAY_KEY = Names.key_control("gateway")

# -- pure rules ------------------------------------------------------------------------------------


def test_success_sampling_is_deterministic_and_about_the_rate() -> None:
    ids = [f"ep-{i}" for i in range(4000)]
    success = [shell_episode(i, [RUN], "success") for i in ids]
    pick = [wants_teacher(ep, success_sample_rate=0.25, seed=3) for ep in success]
    assert pick == [wants_teacher(ep, success_sample_rate=0.25, seed=3) for ep in success]
    assert 0.22 < sum(pick) / len(pick) < 0.28
    other_seed = [wants_teacher(ep, success_sample_rate=0.25, seed=4) for ep in success]
    assert other_seed != pick, "the seed must change which successes are picked"
    assert not any(wants_teacher(ep, success_sample_rate=0.0, seed=3) for ep in success)
    assert all(wants_teacher(ep, success_sample_rate=1.0, seed=3) for ep in success)
    # A larger rate picks a superset: raising it never drops an episode already sampled.
    wider = [wants_teacher(ep, success_sample_rate=0.5, seed=3) for ep in success]
    assert all(w for p, w in zip(pick, wider, strict=True) if p)
    assert all(0.0 <= sample_point(i, 3) < 1.0 for i in ids[:100])


@pytest.mark.parametrize("outcome", ["failure", "partial", "blocked"])
def test_every_unsuccessful_episode_gets_a_teacher(outcome: str) -> None:
    ep = shell_episode("x", [RUN], outcome)  # type: ignore[arg-type]
    assert wants_teacher(ep, success_sample_rate=0.0, seed=0)


@pytest.mark.parametrize("outcome", ["failure", "success"])
def test_evaluation_episodes_never_reach_a_teacher(outcome: str) -> None:
    ep = shell_episode("x", [RUN], outcome)  # type: ignore[arg-type]
    assert wants_teacher(ep, success_sample_rate=1.0, seed=0)
    held_out = msgspec.structs.replace(ep, role="eval")
    assert not wants_teacher(held_out, success_sample_rate=1.0, seed=0)


def test_pick_steps_keeps_the_start_and_the_end() -> None:
    assert pick_steps(5, 40) == [0, 1, 2, 3, 4]
    assert pick_steps(100, 8) == [0, 1, 94, 95, 96, 97, 98, 99]
    assert pick_steps(10, 1) == [9]
    assert pick_steps(10, 2) == [0, 9]


def test_request_is_a_compact_digest_of_the_episode() -> None:
    long_obs = "A" * 500 + "the error is here"
    ep = msgspec.structs.replace(
        shell_episode("ep-1", [RUN, TEST_EDIT, SUBMIT]),
        trajectory=[
            TrajectoryStep(
                index=10 + i, observation=long_obs, action="x" * 50, candidates=["c"] * 9
            )
            for i in range(6)
        ],
        info={"task_statement": "Fix it.", "tests_passed": "3/5", "log": "L" * 300},
        env_reward=0.25,
    )
    limits = DigestLimits(
        max_steps=4,
        max_observation_chars=120,
        max_candidates=3,
        max_action_chars=20,
        max_report_chars=100,
    )
    req = build_request(ep, "oracle", limits)
    assert (req.request_id, req.episode_id, req.task_id) == ("ep-1.oracle", "ep-1", ep.task_id)
    assert (req.environment, req.outcome, req.task_statement) == ("shell", "failure", "Fix it.")
    assert [s.index for s in req.steps] == [10, 13, 14, 15]
    for s in req.steps:
        assert len(s.observation) <= 160 and s.observation.endswith("the error is here")
        assert len(s.action) == 20 and s.action.endswith("…")
        assert s.candidates == ["c"] * 3
    assert req.env_report.startswith("env_reward: 0.25\nlog: LLL") and "tests_passed: 3/5" in (
        req.env_report
    )
    assert "task_statement" not in req.env_report and len(req.env_report) < 140


def test_cache_key_ignores_ids_only() -> None:
    a = build_request(shell_episode("ep-1", [RUN]), "oracle", DigestLimits())
    b = build_request(shell_episode("ep-2", [RUN]), "oracle", DigestLimits())
    assert a.episode_id != b.episode_id and cache_key("oracle", a) == cache_key("oracle", b)
    assert cache_key("oracle", a) != cache_key("openai", a)
    c = build_request(shell_episode("ep-3", [RUN, FIX]), "oracle", DigestLimits())
    assert cache_key("oracle", a) != cache_key("oracle", c)


def test_lru_cache_forgets_the_least_recently_used() -> None:
    cache: LruCache[int] = LruCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c"), len(cache)) == (1, None, 3, 2)


def test_accept_keeps_hints_for_shown_steps_and_clamps() -> None:
    req = TeacherRequest(
        request_id="r",
        episode_id="e",
        environment="shell",
        task_id="t",
        steps=[StepDigest(index=i, observation="", action="a") for i in (3, 4)],
    )
    reply = TeacherSignal(
        backend="whoever",
        score=7.0,
        hints=[TeacherHint(step=4, better_action="b"), TeacherHint(step=9), TeacherHint(step=4)],
        rationale="r" * 5000,
    )
    out = accept(reply, req, "openai")
    assert (out.backend, out.score, out.status) == ("openai", 1.0, "ok")
    assert out.hints == [TeacherHint(step=4, better_action="b")] and len(out.rationale) == 2000
    bad = accept(msgspec.structs.replace(reply, score=math.nan), req, "openai")
    assert (bad.status, bad.score) == ("unparseable", 0.0)


def test_taught_sets_status_signal_and_stage_stamp() -> None:
    ep = shell_episode("e", [RUN])
    sig = TeacherSignal(backend="oracle", score=-1.0)
    out = taught(ep, "ok", sig, now=42.0)
    assert (out.teacher_status, out.teacher_signal) == ("ok", sig)
    assert out.timings.stages == {"completed": 2.0, "taught": 42.0}
    assert ep.timings.stages == {"completed": 2.0}


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (GatewaySettings(backend="no good"), "not a name"),
        (GatewaySettings(timeout_s=0), "timeout_s"),
        (GatewaySettings(timeout_s=math.inf), "timeout_s"),
        (GatewaySettings(success_sample_rate=1.5), "success_sample_rate"),
        (CampaignState(spec=CampaignSpec(campaign_id="c")), "not GatewaySettings"),
    ],
)
def test_checked_settings_rejects(state: ControlState, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        checked_settings(state)
    assert checked_settings(GatewaySettings(backend="openai")).backend == "openai"


# -- the service on the bus --------------------------------------------------------------------------


def gateway(bus: Bus, names: Names, **kw: Any):
    svc, gw = build(bus, GatewayServiceSettings(namespace=names.namespace, **kw))
    svc.fetch_timeout_s = 0.2  # idle pull loops notice stop() quickly
    return svc, gw


def oracle(bus: Bus, names: Names) -> Service:
    svc, _ = build_oracle(bus, OracleSettings(namespace=names.namespace))
    return svc


async def publish(bus: Bus, ep: Episode) -> float:
    await bus.publish_durable(
        bus.names.episode("completed", ep.environment), ep, msg_id=f"{ep.episode_id}:completed"
    )
    return time.monotonic()


async def taught_episodes(
    queue: asyncio.Queue, n: int, within: float = 10.0
) -> AsyncIterator[tuple[Episode, dict[str, str], float]]:
    for _ in range(n):
        msg = await next_item(queue, within)
        yield decode(msg.data, msg.headers, Episode), dict(msg.headers or {}), time.monotonic()


async def test_failed_shell_episode_gets_the_oracle_fix_as_hint(bus: Bus, names: Names) -> None:
    """The gateway and the oracle in process: hints name the true fix at every step that offered
    it; a sampled-out success, a failed evaluation episode (never judged) and an episode of an
    environment the oracle holds no ground truth for pass too, each with its status."""
    await store_task(bus)
    svc, gw = gateway(bus, names, default_success_sample_rate=0.0)
    failed = shell_episode("ep-fail", [RUN, TEST_EDIT, SUBMIT])
    success = shell_episode("ep-ok", [FIX, SUBMIT], "success")
    browser = msgspec.structs.replace(shell_episode("ep-web", [RUN]), environment="beacon")
    held_out = msgspec.structs.replace(shell_episode("ep-eval", [RUN, SUBMIT]), role="eval")
    async with stored(bus, names.episode("taught", "*")) as out, running(oracle(bus, names)):
        async with running(svc):
            for ep in (failed, success, browser, held_out):
                await publish(bus, ep)
            got = {ep.episode_id: (ep, h) async for ep, h, _ in taught_episodes(out, 4)}
    ep, headers = got["ep-fail"]
    assert headers[MSG_ID_HEADER] == "ep-fail:taught"
    assert ep.teacher_status == "ok" and "taught" in ep.timings.stages
    sig = ep.teacher_signal
    assert sig is not None and (sig.backend, sig.status, sig.verdict) == (
        "oracle",
        "ok",
        "incorrect",
    )
    assert sig.score == -1.0 and not sig.boundary
    assert [(h.step, h.better_action) for h in sig.hints] == [(0, FIX), (1, FIX), (2, FIX)]
    assert (
        msgspec.structs.replace(
            ep, teacher_status=None, teacher_signal=None, timings=failed.timings
        )
        == failed
    ), "the gateway must change nothing else"
    ok, _ = got["ep-ok"]
    assert (ok.teacher_status, ok.teacher_signal) == ("skipped", None)
    web, _ = got["ep-web"]
    assert web.teacher_status == "ok" and web.teacher_signal is not None
    assert (web.teacher_signal.verdict, web.teacher_signal.score) == ("unsure", 0.0)
    evaluated, _ = got["ep-eval"]
    assert (evaluated.teacher_status, evaluated.teacher_signal) == ("skipped", None)
    assert gw.stats()["status_ok"] == 2 and gw.stats()["status_skipped"] == 2


async def test_gateway_and_oracle_as_processes(bus: Bus, nats_url: str, names: Names) -> None:
    """The same through ``python -m services.teacher_oracle`` and
    ``python -m services.teacher_gateway``, each its own process, stopped by SIGTERM."""
    await store_task(bus)
    env = service_env(nats_url, names, AIOS_DEFAULT_SUCCESS_SAMPLE_RATE="0")
    async with (
        stored(bus, names.episode("taught", "*")) as out,
        module_process("services.teacher_oracle", env) as oracle_proc,
        module_process("services.teacher_gateway", env),
    ):
        await until_serving(bus, "teacher-oracle", oracle_proc)
        await publish(
            bus, shell_episode("ep-proc", [TEST_EDIT, FIX], "partial")
        )  # fix + a test edit
        [ep] = [e async for e, _, _ in taught_episodes(out, 1, within=20)]
    sig = ep.teacher_signal
    assert sig is not None and (sig.backend, sig.status, sig.verdict) == (
        "oracle",
        "ok",
        "partially_correct",
    )
    assert [(h.step, h.better_action) for h in sig.hints] == [(0, FIX)]
    assert (sig.score, sig.boundary) == (0.25, False)  # the test edit explains the partial
    store = ControlStore(bus)
    snap, _ = await store.load(GATEWAY_KEY)
    assert snap is not None and snap.state == GatewaySettings(
        backend="oracle", timeout_s=30.0, success_sample_rate=0.0
    ), "the gateway seeds a missing control key from its defaults"


async def test_a_silent_backend_delays_episodes_by_at_most_the_timeout(
    bus: Bus, names: Names
) -> None:
    timeout = 0.5
    slack = 1.0  # generous: two cores shared with the server and the test

    async def never_answer(_msg: Any) -> None:
        pass

    silent = await bus.nc.subscribe(names.teacher_request("silent"), cb=never_answer)
    svc, gw = gateway(
        bus,
        names,
        default_backend="silent",
        default_timeout_s=timeout,
        default_success_sample_rate=0.0,
    )
    failures = [shell_episode(f"f{i}", [RUN] * (i + 1)) for i in range(8)]
    successes = [shell_episode(f"s{i}", [FIX], "success") for i in range(8)]
    sent: dict[str, float] = {}
    async with stored(bus, names.episode("taught", "*")) as out, running(svc):
        for f, s in zip(failures, successes, strict=True):
            sent[f.episode_id] = await publish(bus, f)
            sent[s.episode_id] = await publish(bus, s)
        arrivals = [(ep, at) async for ep, _, at in taught_episodes(out, 16)]
        # The stream keeps flowing after the timeouts: one more is taught within the bound too.
        late = shell_episode("late", [SUBMIT])
        sent["late"] = await publish(bus, late)
        arrivals += [(ep, at) async for ep, _, at in taught_episodes(out, 1)]
    await silent.unsubscribe()
    order = [ep.episode_id for ep, _ in arrivals]
    assert sorted(order) == sorted(sent), "every episode is taught exactly once"
    for ep, at in arrivals:
        delay = at - sent[ep.episode_id]
        if ep.outcome == "success":
            assert ep.teacher_status == "skipped"
        else:
            assert ep.teacher_status == "timeout", ep.episode_id
            sig = ep.teacher_signal
            assert sig is not None and (sig.backend, sig.status) == ("silent", "timeout")
            assert sig.latency_s >= timeout - 0.05
            assert timeout - 0.05 <= delay <= timeout + slack, (ep.episode_id, delay)
    # Skipped episodes never queue behind a waiting teacher.
    first_timeout = min(i for i, (ep, _) in enumerate(arrivals) if ep.outcome != "success")
    assert all(ep.outcome == "success" for ep, _ in arrivals[:first_timeout])
    assert first_timeout == 8, order
    assert gw.stats()["status_timeout"] == 9


async def test_an_absent_backend_is_an_error_at_once(bus: Bus, names: Names) -> None:
    svc, _ = gateway(bus, names, default_backend="nobody", default_timeout_s=20.0)
    async with stored(bus, names.episode("taught", "*")) as out, running(svc):
        sent = await publish(bus, shell_episode("ep", [RUN]))
        ((ep, _, at),) = [x async for x in taught_episodes(out, 1)]
    assert at - sent < 5.0, "no responders must not wait for the 20 s timeout"
    assert ep.teacher_status == "error" and ep.teacher_signal is not None
    assert "no teacher-nobody service" in ep.teacher_signal.rationale


class Counting:
    """A backend that counts its calls; it may hold answers until released."""

    def __init__(self) -> None:
        self.calls = 0
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()

    async def answer(self, req: TeacherRequest) -> TeacherSignal:
        self.calls += 1
        self.arrived.set()
        await self.release.wait()
        return TeacherSignal(
            backend="counting",
            verdict="correct",
            score=0.5,
            hints=[TeacherHint(step=0, better_action="x"), TeacherHint(step=99, better_action="y")],
            rationale=f"call {self.calls}",
        )

    def service(self, bus: Bus) -> Service:
        svc = Service(bus, name="teacher-counting", version="0.0.1")
        svc.endpoint(
            "judge",
            bus.names.teacher_request("counting"),
            TeacherRequest,
            self.answer,
            concurrency=8,
        )
        return svc


async def test_identical_requests_are_answered_from_the_cache(bus: Bus, names: Names) -> None:
    backend = Counting()
    svc, gw = gateway(bus, names, default_backend="counting")
    first, second = shell_episode("a", [RUN, SUBMIT]), shell_episode("b", [RUN, SUBMIT])
    other = shell_episode("c", [RUN, TEST_EDIT])
    async with (
        stored(bus, names.episode("taught", "*")) as out,
        running(backend.service(bus)),
        running(svc),
    ):
        await publish(bus, first)
        [a] = [ep async for ep, _, _ in taught_episodes(out, 1)]
        await publish(bus, second)
        [b] = [ep async for ep, _, _ in taught_episodes(out, 1)]
        assert backend.calls == 1, "the identical request went to the backend again"
        await publish(bus, other)
        [c] = [ep async for ep, _, _ in taught_episodes(out, 1)]
        assert backend.calls == 2, "a different request must reach the backend"

        # Identical requests in flight at the same time: one backend call for both.
        backend.release.clear()
        backend.arrived.clear()
        req = build_request(shell_episode("d", [SUBMIT]), "counting", gw.limits)
        twin = msgspec.structs.replace(req, request_id="e.counting", episode_id="e")
        leader = asyncio.create_task(gw.ask("counting", req, 10.0))
        await asyncio.wait_for(backend.arrived.wait(), 5)
        follower = asyncio.create_task(gw.ask("counting", twin, 10.0))
        await asyncio.sleep(0)  # one turn of the loop: the follower reaches its wait
        backend.release.set()
        d, e = await asyncio.wait_for(asyncio.gather(leader, follower), 5)
    assert backend.calls == 3 and d == e
    assert a.teacher_signal == b.teacher_signal and a.teacher_signal is not None
    assert a.teacher_signal.rationale == "call 1" and c.teacher_signal.rationale == "call 2"
    assert [h.step for h in a.teacher_signal.hints] == [0], "hints for unshown steps dropped"
    assert gw.stats()["cache_hits"] == 2 and gw.stats()["requests"] == 3


async def test_sampled_successes_are_the_ones_the_rule_picks(bus: Bus, names: Names) -> None:
    backend = Counting()
    svc, _ = gateway(
        bus, names, default_backend="counting", default_success_sample_rate=0.5, sample_seed=7
    )
    # Distinct content per episode, so that the cache cannot hide a call.
    eps = [shell_episode(f"s{i}", [RUN] * (i + 1), "success") for i in range(12)]
    want = {ep.episode_id for ep in eps if wants_teacher(ep, success_sample_rate=0.5, seed=7)}
    assert 0 < len(want) < len(eps)
    async with stored(bus, names.episode("taught", "*")) as out, running(backend.service(bus)):
        async with running(svc):
            for ep in eps:
                await publish(bus, ep)
            got = {ep.episode_id: ep async for ep, _, _ in taught_episodes(out, len(eps))}
    assert {i for i, ep in got.items() if ep.teacher_status == "ok"} == want
    assert {i for i, ep in got.items() if ep.teacher_status == "skipped"} == set(got) - want
    assert backend.calls == len(want)


async def test_control_changes_apply_live_and_bad_ones_are_refused(bus: Bus, names: Names) -> None:
    svc, gw = gateway(bus, names)
    store = ControlStore(bus)

    def set_backend(name: str):
        return lambda s: msgspec.structs.replace(s, backend=name)

    async with stored(bus, names.episode("taught", "*")) as out, running(svc):
        await asyncio.wait_for(gw.until(lambda g: g.config_version >= 1), 5)
        bad = await store.update(GATEWAY_KEY, set_backend("not a name"))
        await asyncio.wait_for(gw.until(lambda g: g.config_version == bad.version), 5)
        assert gw.config.backend == "oracle", "an invalid write must not replace good settings"
        off = await store.update(GATEWAY_KEY, set_backend("none"))
        await asyncio.wait_for(gw.until(lambda g: g.config_version == off.version), 5)
        assert gw.config.backend == "none"
        await publish(bus, shell_episode("ep", [RUN]))
        [ep] = [e async for e, _, _ in taught_episodes(out, 1)]
    assert (ep.teacher_status, ep.teacher_signal) == ("skipped", None)


async def test_garbage_under_the_control_key_is_reported_and_the_gateway_runs_on(
    bus: Bus, names: Names
) -> None:
    """Garbage under ``gateway.default`` once crash-looped the gateway (6 restarts in 40 s). It
    reports it, runs on its defaults, applies the next valid write, and skips garbage written
    while it runs, keeping its last good settings."""
    await store_task(bus)
    kv = await bus.js.key_value(names.bucket(BUCKET_CONTROL))

    def snapshot(version: int, backend: str) -> bytes:
        state = GatewaySettings(backend=backend, success_sample_rate=0.0)
        return msgspec.json.encode(ControlSnapshot(key=GATEWAY_KEY, state=state, version=version))

    await kv.put(GATEWAY_KEY, b"\x00\xff not a snapshot")
    svc, gw = gateway(bus, names, default_success_sample_rate=0.0)
    async with (
        stored(bus, names.episode("taught", "*")) as out,
        running(oracle(bus, names)),
        running(svc) as task,
    ):
        await publish(bus, shell_episode("g-defaults", [RUN]))
        [ep] = [e async for e, _, _ in taught_episodes(out, 1)]
        assert ep.teacher_signal is not None and ep.teacher_signal.backend == "oracle"
        assert (gw.config.backend, gw.config_version) == ("oracle", 0), "the defaults"

        await kv.put(GATEWAY_KEY, snapshot(1, "none"))
        await asyncio.wait_for(gw.until(lambda g: g.config_version == 1), 5)
        assert gw.config.backend == "none"
        await kv.put(GATEWAY_KEY, b'{"key": "gateway.default"}')
        await publish(bus, shell_episode("g-kept", [RUN]))
        [ep] = [e async for e, _, _ in taught_episodes(out, 1)]
        assert ep.teacher_status == "skipped", "the last good settings stay"

        await kv.put(GATEWAY_KEY, snapshot(2, "oracle"))
        await asyncio.wait_for(gw.until(lambda g: g.config_version == 2), 5)
        assert gw.config.backend == "oracle" and not task.done()
        assert gw.stats()["control_corrupt"] == 2


async def test_live_swap_from_the_oracle_to_teacher_openai(
    bus: Bus, nats_url: str, names: Names
) -> None:
    """The gateway runs on the oracle; teacher-openai starts as its own process; one control
    write later the next episode carries the new backend's signal, the gateway never stopped."""
    await store_task(bus)
    svc, gw = gateway(bus, names)
    oracle_svc, oracle_state = build_oracle(bus, OracleSettings(namespace=names.namespace))
    verdict = {
        "verdict": "partially_correct",
        "score": 0.3,
        "hints": [{"step": 1, "better_action": FIX}],
        "boundary": False,
        "rationale": "from the openai-compatible test server",
    }
    with openai_server(lambda _: (500, "{}")) as server:
        server.verdict_reply(verdict)
        env = service_env(
            nats_url, names, AIOS_BASE_URL=server.url, AIOS_MODEL="judge-7b", AIOS_API_KEY="sk-t"
        )
        async with (
            stored(bus, names.episode("taught", "*")) as out,
            running(oracle_svc),
            running(svc) as gateway_task,
        ):
            await publish(bus, shell_episode("before", [RUN, TEST_EDIT]))
            [before] = [e async for e, _, _ in taught_episodes(out, 1)]
            async with module_process("services.teacher_openai", env) as proc:
                await until_serving(bus, "teacher-openai", proc)
                snap = await ControlStore(bus).update(
                    GATEWAY_KEY, lambda s: msgspec.structs.replace(s, backend="openai")
                )
                await asyncio.wait_for(gw.until(lambda g: g.config.backend == "openai"), 5)
                assert gw.config_version == snap.version
                await publish(bus, shell_episode("after", [RUN, TEST_EDIT]))
                [after] = [e async for e, _, _ in taught_episodes(out, 1)]
            assert not gateway_task.done(), "the gateway was not restarted"
    assert before.teacher_signal is not None and before.teacher_signal.backend == "oracle"
    sig = after.teacher_signal
    assert sig is not None and (sig.backend, sig.status, sig.verdict, sig.score) == (
        "openai",
        "ok",
        "partially_correct",
        0.3,
    )
    assert sig.rationale == verdict["rationale"]
    assert [(h.step, h.better_action) for h in sig.hints] == [(1, FIX)]
    assert oracle_state.answered == 1, "after the swap the oracle is no longer asked"
    [request] = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-t"
    body = request["json"]
    assert body["model"] == "judge-7b" and body["response_format"] == {"type": "json_object"}
    assert TASK.statement in body["messages"][1]["content"]
