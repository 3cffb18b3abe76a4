"""A teacher written in TypeScript (``examples/teacher-ts``: nats.js, Ajv, types generated from
the published JSON Schemas) against real services: the gateway is swapped to it by its control
key, its signals come back on taught episodes and shape the reward; a request that does not fit
the schema gets an error.v1 reply; its endpoint describes its contracts like the Python ones.
``deploy/setup.sh`` installs Node packages and builds it (``npm ci && npm run build``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from aios_rl.bus import Bus
from aios_rl.bus._discovery import gather
from aios_rl.state.control import ControlStore
from contracts import Episode, ErrorReply, Names, TeacherRequest, TeacherSignal, decode
from services.reward.main import build as build_reward
from services.reward.settings import RewardSettings
from services.teacher_gateway.main import build as build_gateway
from services.teacher_gateway.settings import GatewayServiceSettings

from .support import next_item, running, stored
from .teacher_support import FIX, RUN, SUBMIT, WRONG, shell_episode, store_task

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "teacher-ts"


@contextlib.asynccontextmanager
async def teacher_ts(nats_url: str, names: Names) -> AsyncIterator[asyncio.subprocess.Process]:
    node = shutil.which("node")
    assert node, "node is not installed: deploy/setup.sh installs nodejs"
    entry = EXAMPLE / "dist" / "teacher.js"
    assert entry.is_file(), f"{entry} is missing: run deploy/setup.sh (npm ci && npm run build)"
    proc = await asyncio.create_subprocess_exec(
        node,
        str(entry),
        env={**os.environ, "NATS_URL": nats_url, "AIOS_NAMESPACE": names.namespace},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        if b'"service.ready"' not in line:
            raise AssertionError(line.decode() + (await proc.stderr.read()).decode()[-2000:])
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 20)
    assert proc.returncode == 0, f"teacher-ts exited {proc.returncode}"


async def test_the_typescript_teacher_judges_episodes_that_shape_rewards(
    bus: Bus, nats_url: str, names: Names
) -> None:
    await store_task(bus)
    gw_svc, gw = build_gateway(bus, GatewayServiceSettings(namespace=names.namespace))
    gw_svc.fetch_timeout_s = 0.2
    reward_svc = build_reward(bus, RewardSettings(namespace=names.namespace, teacher_weight=0.4))
    key = Names.key_control("gateway", "default")  # the key the gateway follows
    async with (
        teacher_ts(nats_url, names),
        stored(bus, names.episode("taught", "*")) as taught,
        stored(bus, names.episode("rewarded", "*")) as rewarded,
        running(gw_svc),
        running(reward_svc),
    ):
        await ControlStore(bus).update(key, lambda s: msgspec.structs.replace(s, backend="ts"))
        await asyncio.wait_for(gw.until(lambda g: g.config.backend == "ts"), 10)
        for ep in (
            shell_episode("untested", [WRONG, SUBMIT], "failure"),
            shell_episode("fixed", [RUN, FIX, SUBMIT], "success"),
        ):
            await bus.publish_durable(
                names.episode("completed", "shell"), ep, msg_id=f"{ep.episode_id}:completed"
            )
        got = {}
        for _ in range(2):
            msg = await next_item(taught, 20)
            ep = decode(msg.data, msg.headers, Episode)
            got[ep.episode_id] = ep
        shaped = {}
        for _ in range(2):
            msg = await next_item(rewarded, 20)
            ep = decode(msg.data, msg.headers, Episode)
            shaped[ep.episode_id] = ep
        # Straight to the endpoint: a request that does not fit the schema.
        bad = await bus.nc.request(
            names.teacher_request("ts"),
            b'{"request_id": 7}',
            headers={"Aios-Schema": "teacher_request.v1"},
            timeout=10,
        )
        ok = await bus.request(
            names.teacher_request("ts"),
            TeacherRequest(
                request_id="r", episode_id="e", environment="shell", task_id="t", outcome="blocked"
            ),
            TeacherSignal,
            timeout=10,
        )
        infos = [i for i in await gather(bus.nc, "$SRV.INFO") if i["name"] == "teacher-ts"]
    untested = got["untested"].teacher_signal
    assert untested is not None and (untested.backend, untested.verdict, untested.score) == (
        "ts",
        "incorrect",
        -0.5,
    )
    assert [(h.step, h.better_action) for h in untested.hints] == [(1, RUN)]
    assert got["fixed"].teacher_signal is None or got["fixed"].teacher_signal.backend == "ts"
    breakdown = shaped["untested"].reward_breakdown
    assert breakdown is not None and breakdown.teacher_score == -0.5
    assert breakdown.shaping == pytest.approx(-0.2)  # weight 0.4 x score -0.5, within the clip
    assert shaped["untested"].reward == pytest.approx(0.0 - 0.2)
    assert bad.headers is not None and bad.headers["Nats-Service-Error-Code"] == "400"
    error = decode(bad.data, bad.headers, ErrorReply)
    assert error.expected_schema == "teacher_request.v1" and "request_id" in error.message
    assert ok.boundary and ok.backend == "ts"
    (info,) = infos
    (judge,) = info["endpoints"]
    assert judge["metadata"] == {
        "request_schema": "teacher_request.v1",
        "response_schema": "teacher_signal.v1",
    }
