"""The stack on a local three-node JetStream cluster (3 replicas of every stream, KV bucket and
object store): provisioning sets and keeps the replicas, and during a shell campaign on
``aios-rl up --cluster 3`` the server that leads the episode stream is SIGKILLed, then, after
``up`` has started it again and it has caught up, the next leader: the campaign completes with
every scheduled episode compared exactly once and the checkpoint pointers consistent."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from aios_rl.bus import Bus, connect, jetstream_ready, provision
from aios_rl.stack.natsd import NatsCluster
from aios_rl.state.checkpoints import CheckpointRegistry
from aios_rl.state.ledger import Ledger
from contracts import Episode, Names
from contracts.subjects import STREAM_EPISODES

from .support import eventually, nats_server_pids, stack_env, until_every_service, up_stack

CAMPAIGN = "clustered"


async def _leader(bus: Bus, stream: str) -> str | None:
    info = await bus.js.stream_info(stream)
    return info.cluster.leader if info.cluster else None


async def _caught_up(bus: Bus, stream: str, size: int) -> bool | None:
    """True once ``stream`` has a leader and every replica is current (else ``None``)."""
    try:
        info = await bus.js.stream_info(stream)
    except Exception:
        return None
    c = info.cluster
    if c is None or not c.leader:
        return None
    replicas = c.replicas or []
    if len(replicas) == size - 1 and all(r.current and not r.offline for r in replicas):
        return True
    return None


@pytest.mark.slow
async def test_provisioning_sets_and_keeps_the_replicas(tmp_path: Path) -> None:
    with NatsCluster(tmp_path / "c", 3) as cluster:
        async with connect(cluster.url, name="test-cluster", names=Names("r")) as bus:
            await jetstream_ready(bus)
            await provision(bus, replicas=3)
            for stream in ("r_EPISODES", "KV_r_checkpoints", "OBJ_r_weights"):
                info = await bus.js.stream_info(stream)
                assert info.config.num_replicas == 3, stream
                assert info.cluster is not None and len(info.cluster.replicas or []) == 2
            await provision(bus)  # a service's provisioning leaves the replicas alone
            assert (await bus.js.stream_info("r_EPISODES")).config.num_replicas == 3
            await provision(bus, replicas=1)  # the admin may bring them down again
            assert (await bus.js.stream_info("KV_r_control")).config.num_replicas == 1


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_a_campaign_survives_losing_the_episode_streams_leader_twice(
    tmp_path: Path,
) -> None:
    """``aios-rl up --cluster 3`` (with users): three servers, 3 replicas of every stream,
    bucket and object store. During a shell campaign the node leading the episode stream is
    SIGKILLed; ``up`` starts it again on its port and store; once it has caught up, the next
    leader. The campaign completes, every episode compared exactly once."""
    env = stack_env()
    async with up_stack(tmp_path, "--cluster", "3", env=env) as up:

        async def announced() -> str | None:
            for line in up.log().splitlines():
                if "embedded NATS cluster of 3 at nats://127.0.0.1:" in line:
                    return line.split(" at ", 1)[1].split()[0]
            return None

        url = await eventually(announced, within=120, what="the cluster's URL")
        members = url.split(",")
        assert len(members) == 3, url
        async with connect(url, name="test-cluster", connect_deadline=30, **up.admin) as bus:
            await until_every_service(bus, within=180)
            stream = bus.names.stream(STREAM_EPISODES)
            for name in (stream, "KV_ledger", "OBJ_weights"):
                assert (await bus.js.stream_info(name)).config.num_replicas == 3, name
            train = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "aios_rl.cli", "shell", "train",
                "--epochs", "2", "--tasks-per-epoch", "4", "--group-size", "2",
                "--train-tasks", "8", "--heldout", "2", "--campaign-id", CAMPAIGN,
                "--nats-url", url, "--credentials", str(up.credentials),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
            )  # fmt: skip
            done = asyncio.create_task(train.communicate())

            async def episodes_stored(at_least: int) -> int | None:
                try:
                    n = (await bus.js.stream_info(stream)).state.messages
                except Exception:
                    return None
                return n if n >= at_least else None

            killed: list[tuple[str, int]] = []
            stage = "episodes flowing"
            try:
                async with asyncio.timeout(420):  # inside the test's own limit, with the log
                    for _ in range(2):
                        stage = f"episodes flowing before kill {len(killed) + 1}"
                        seen = await eventually(
                            lambda: episodes_stored(len(killed) * 40 + 10), within=420
                        )
                        stage = "a stream leader"
                        leader = await eventually(lambda: _leader(bus, stream), within=420)
                        member = members[int(leader.rsplit("-", 1)[1])]
                        node_port = int(member.rsplit(":", 1)[1])
                        assert not done.done(), "the campaign ended before the kill"
                        (pid,) = nats_server_pids(node_port)
                        os.kill(pid, signal.SIGKILL)
                        killed.append((leader, seen))

                        async def progressed(n: int = seen + 10) -> int | bool | None:
                            # ten more episodes stored, or the campaign over (its records and
                            # the count of compared episodes below say whether it lost any)
                            return await episodes_stored(n) or (True if done.done() else None)

                        stage = f"episodes after kill {len(killed)}"
                        await eventually(progressed, within=420)

                        async def restarted(
                            port: int = node_port, old: int = pid
                        ) -> set[int] | None:
                            pids = nats_server_pids(port)
                            return pids if pids and old not in pids else None

                        stage = f"up starting node {node_port} again"
                        await eventually(restarted, within=420)
                        stage = "the replicas current"
                        await eventually(lambda: _caught_up(bus, stream, 3), within=420)
                    stage = "the campaign's end"
                    out, err = await done
            except TimeoutError:
                n = await episodes_stored(0)
                pytest.fail(
                    f"stuck waiting for {stage} (killed {killed}, {n} episodes stored):\n"
                    + "\n".join(up.log().splitlines()[-60:])
                )
            assert train.returncode == 0, (out.decode()[-3000:], err.decode()[-3000:])
            records = await Ledger(bus).records(CAMPAIGN)
            compared: Counter[str] = Counter()
            async for m in bus.read_stream(stream, bus.names.episode("compared", "shell")):
                ep = msgspec.json.decode(m.data, type=Episode)
                if ep.campaign_id == CAMPAIGN and ep.role == "rollout":
                    compared[ep.episode_id] += 1
            pointers, _ = await CheckpointRegistry(bus).pointers()
            snap = await CheckpointRegistry(bus).snapshot()
    text = up.log()
    assert up.proc.returncode == 0 and "embedded NATS stopped" in text
    assert len(killed) == 2, killed
    for leader, _ in killed:
        member = members[int(leader.rsplit("-", 1)[1])]
        assert f"nats-server at {member} exited with code -9" in text, text[-3000:]
    assert text.count("is serving again") == 2, text[-3000:]
    assert [r.epoch for r in records] == [0, 1]
    for r in records:
        assert r.received == r.scheduled and r.missing == 0, r
    rollouts = sum(s.episodes for r in records for s in r.per_env.values())
    assert len(compared) == rollouts  # none lost
    assert set(compared.values()) == {1}, [k for k, n in compared.items() if n > 1]  # none twice
    for name in ("active", "pre_update_ref", "last_stable"):
        cid = getattr(pointers, name)
        assert cid is None or cid in snap.metas, (name, cid)
    lineage, at = [], pointers.active
    while at:
        lineage.append(at)
        at = snap.metas[at].parent_id
    assert snap.metas[lineage[-1]].created_by == "init"


async def test_serve_runs_one_service_against_a_server_elsewhere(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    """``aios-rl serve reward`` on another "host" (a process with only the URL): it joins the
    stack's namespace and answers discovery; SIGTERM stops it cleanly."""
    env = {**os.environ, "AIOS_LOG_FORMAT": "json"}
    env.pop("NATS_USER", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aios_rl.cli", "serve", "reward", "--nats-url", nats_url,
        "--namespace", bus.names.namespace, "--service-args", "--log-level info",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        await until_every_service(bus, namespace=bus.names.namespace, within=60, wanted={"reward"})
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, out.decode()[-2000:]
    assert b'"service.stopped"' in out
