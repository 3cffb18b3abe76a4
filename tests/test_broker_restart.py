"""The embedded broker is supervised like the services: a ``nats-server`` that ``aios-rl up``
started and that dies is started again on the same port and store, and a campaign running on the
stack finishes with every episode compared once (one node of ``up --cluster 3``:
``test_cluster``)."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from aios_rl.bus import connect
from aios_rl.stack.natsd import NatsServer
from aios_rl.stack.supervisor import Supervisor
from aios_rl.state.ledger import Ledger
from contracts import Episode
from contracts.subjects import STREAM_EPISODES

from .support import eventually, nats_server_pids, stack_env, until_every_service, up_stack

CAMPAIGN = "broker-killed"


async def test_a_killed_server_is_started_again_on_its_port_and_store(tmp_path: Path) -> None:
    out = io.StringIO()
    server = NatsServer(tmp_path / "nats")
    with server:
        sup = Supervisor([], env={}, out=out, brokers=[server], broker_check_s=0.1)
        running = asyncio.create_task(sup.run())
        try:
            async with connect(server.url, name="test-broker", connect_deadline=10) as bus:
                kv = await bus.js.create_key_value(bucket="kept")
                await kv.put("k", b"before the kill")
                first = server.pid
                assert first is not None and nats_server_pids(server.port) == {first}
                os.kill(first, signal.SIGKILL)

                async def serving_again() -> int | None:
                    pids = nats_server_pids(server.port)
                    return next(iter(pids)) if pids and first not in pids else None

                second = await eventually(serving_again, within=20, what="a new server")
                assert second == server.pid

                async def read_back() -> bytes | None:
                    try:
                        return (await kv.get("k")).value
                    except Exception:  # reconnecting
                        return None

                assert await eventually(read_back, within=20, what="the value") == (
                    b"before the kill"
                )
        finally:
            sup.stop()
            await asyncio.wait_for(running, 30)
    text = out.getvalue()
    assert f"nats-server at {server.url} exited with code -9" in text, text
    assert f"nats-server at {server.url} is serving again" in text, text
    assert sup.broker_restarts == [1]


@pytest.mark.slow
async def test_killing_the_broker_under_up_mid_campaign_loses_nothing(tmp_path: Path) -> None:
    """``aios-rl up`` (with users) and a shell campaign on it; once episodes are compared the
    server is SIGKILLed: a new one serves on the same port and store within seconds, the
    campaign finishes, every scheduled episode is compared exactly once. (One node of
    ``up --cluster 3``, twice: ``test_cluster``.)"""
    env = stack_env()
    train = None
    async with up_stack(tmp_path) as up, up.connect("test-broker-killed") as bus:
        port, url = up.port, up.url
        try:
            await until_every_service(bus)
            stream = bus.names.stream(STREAM_EPISODES)
            train = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "aios_rl.cli", "shell", "train",
                "--epochs", "1", "--tasks-per-epoch", "4", "--group-size", "2",
                "--train-tasks", "4", "--heldout", "2", "--campaign-id", CAMPAIGN,
                "--nats-url", url, "--credentials", str(up.credentials),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
            )  # fmt: skip
            done = asyncio.create_task(train.communicate())
            compared: Counter[str] = Counter()

            async def on_compared(msg: object, raw: object) -> None:
                if isinstance(msg, Episode) and msg.campaign_id == CAMPAIGN:
                    compared[msg.episode_id] += 1

            await bus.subscribe(bus.names.episode("compared", "shell"), on_compared)

            async def some_compared() -> int | None:
                return len(compared) if compared else None

            await eventually(some_compared, within=300, what="a compared episode")
            assert not done.done(), "the campaign ended before the kill"
            (pid,) = nats_server_pids(port)
            os.kill(pid, signal.SIGKILL)

            async def serving_again() -> set[int] | None:
                pids = nats_server_pids(port)
                return pids if pids and pid not in pids else None

            await eventually(serving_again, within=30, what="the server started again")
            out, err = await asyncio.wait_for(done, 600)
            assert train.returncode == 0, (out.decode()[-3000:], err.decode()[-3000:])
            records = await Ledger(bus).records(CAMPAIGN)
            stored: Counter[str] = Counter()
            async for m in bus.read_stream(stream, bus.names.episode("compared", "shell")):
                ep = msgspec.json.decode(m.data, type=Episode)
                if ep.campaign_id == CAMPAIGN and ep.role == "rollout":
                    stored[ep.episode_id] += 1
        finally:
            if train is not None and train.returncode is None:
                train.kill()
    text = up.log()
    assert f"{url} exited with code -9" in text, text[-3000:]
    assert f"{url} is serving again" in text, text[-3000:]
    assert "embedded NATS stopped" in text
    assert [r.epoch for r in records] == [0]
    (record,) = records
    assert record.received == record.scheduled and record.missing == 0, record
    rollouts = sum(s.episodes for s in record.per_env.values())
    assert len(stored) == rollouts  # none lost
    assert set(stored.values()) == {1}, stored  # none twice
    assert up.proc.returncode == 0
