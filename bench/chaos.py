"""chaos: random SIGKILLs of any service, the nats-server included, during a campaign; what was
lost, duplicated or stalled, and how long the stack took to make progress again.

A nats-server of its own (killed, then started again on the same port and store after a short
outage) and ``aios-rl up --nats-url`` for the services (the supervisor restarts a killed one).
A seeded schedule kills one victim every few seconds while the campaign runs. Counted: scheduled
episodes that never arrived (lost), episodes compared more than once in the stream (duplicated),
whether the campaign finished (stalled otherwise), and per kill the seconds until the next
episode came out compared (recovery).

    .venv/bin/python bench/chaos.py            # 40 epochs, 14 kills 2-4 s apart (~2 min)
    .venv/bin/python bench/chaos.py --quick    # 6 epochs, 3 kills (~40 s)
    .venv/bin/python bench/chaos.py --cluster  # the same on a local 3-node JetStream cluster
                                               # (bench/results/chaos-cluster.{md,json})

``--cluster``: three nats-servers clustered on loopback (``NatsCluster``), every stream, KV
bucket and object store at 3 replicas, the services given all three URLs. The ``nats-server``
victim is then the server leading the episode stream at that moment (killed, restarted after the
outage on its port and store, and caught up by the cluster): the failure a cluster is for.

The campaign mixes shell episodes (tests run in the sandbox: seconds each) and orchestrator ones,
so kills land mid-episode, mid-update and mid-comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run as a script: `bench` importable

from rich.console import Console

from aios_rl.bus import Bus, BusError, connect, discover, jetstream_ready, provision
from aios_rl.envs.orchestrator import generate
from aios_rl.envs.registry import task_store
from aios_rl.envs.shell.generate import generate as generate_shell
from aios_rl.envs.shell.store import ShellTaskStore
from aios_rl.envs.shell.verify import RunCache, default_cache_dir
from aios_rl.stack import SERVICES
from aios_rl.stack.natsd import NatsCluster, NatsServer
from aios_rl.state.ledger import Ledger
from bench import _common
from contracts import (
    CampaignSpec,
    CampaignStatus,
    Episode,
    StartCampaign,
    StatusCampaign,
    TrainerSettings,
)


@dataclass(frozen=True)
class Settings:
    """One chaos run."""

    epochs: int
    kills: int
    """Victims killed, one at a time."""
    gap_s: tuple[float, float] = (2.0, 4.0)
    """Seconds between kills, drawn uniformly."""
    outage_s: float = 3.0
    """How long a killed nats-server stays down."""
    tasks_per_epoch: int = 8
    group_size: int = 4
    ack_wait_s: float = 10.0
    """The runners' ack wait in this stack: a killed runner's jobs come back after it."""
    seed: int = 0
    timeout_s: float = 900.0
    cluster: int = 0
    """0: one nats-server; N: a local N-node cluster with 3 replicas (``--cluster``)."""


FULL = Settings(epochs=40, kills=14)
QUICK = Settings(epochs=6, kills=3)
VICTIMS = [s.name for s in SERVICES if s.replicas > 0] + ["nats-server"]


def kill_schedule(rng: random.Random, kills: int) -> list[str]:
    """``kills`` victims in a seeded order: every service and the nats-server once before any
    twice; a short run still kills the nats-server and the campaign."""
    first = ["nats-server", "campaign"]
    rest = [v for v in VICTIMS if v not in first]
    rng.shuffle(rest)
    head = first + rest
    order = head[:kills]
    rng.shuffle(order)
    while len(order) < kills:
        order += rng.sample(VICTIMS, len(VICTIMS))[: kills - len(order)]
    return order


@dataclass
class Results:
    kills: list[dict[str, object]] = field(default_factory=list)
    scheduled: int = 0
    received: int = 0
    lost: int = 0
    compared_messages: int = 0
    duplicated: int = 0
    state: str = "unknown"
    retries: int = 0
    finished_in_s: float = 0.0
    replicas: int = 1


async def _pid(bus: Bus, service: str) -> int | None:
    for v in await discover(bus.nc, namespace="", window=0.3):
        if v.name == service and v.pid:
            return v.pid
    return None


async def _episode_leader(bus: Bus) -> int:
    """The index of the cluster member leading the episode stream (``aios-node-<i>``); 0 when
    none is known (mid-election)."""
    with contextlib.suppress(Exception):
        info = await bus.js.stream_info(bus.names.stream("EPISODES"))
        if info.cluster and info.cluster.leader:
            return int(info.cluster.leader.rsplit("-", 1)[1])
    return 0


async def _status(bus: Bus, cid: str) -> CampaignStatus | None:
    with contextlib.suppress(BusError):
        return await bus.request(
            bus.names.campaign_cmd("status"),
            StatusCampaign(campaign_id=cid),
            CampaignStatus,
            timeout=5,
        )
    return None


async def measure(s: Settings, log: Callable[[str], None]) -> Results:
    res = Results()
    rng = random.Random(s.seed)
    with tempfile.TemporaryDirectory(prefix="aios-chaos-") as tmp:
        server: NatsServer | NatsCluster = (
            NatsCluster(Path(tmp) / "cluster", s.cluster).start()
            if s.cluster
            else NatsServer(Path(tmp) / "nats").start()
        )
        res.replicas = min(3, s.cluster) if s.cluster else 1
        async with connect(server.url, name="bench-chaos-provision", connect_deadline=30) as bus:
            await jetstream_ready(bus)
            await provision(bus, replicas=res.replicas)  # before any service provisions
        env = {
            **os.environ,
            "AIOS_LOG_FORMAT": "json",
            "AIOS_ACK_WAIT_S": str(s.ack_wait_s),
            "AIOS_TRAIN_TIMEOUT_S": "30",
            "AIOS_TRAIN_RETRY_S": "1",
        }
        env.pop("AIOS_NAMESPACE", None)
        up_log = open(Path(tmp) / "up.log", "wb")  # noqa: ASYNC230 - the stack's merged logs
        up = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "aios_rl.cli",
            "up",
            "--nats-url",
            server.url,
            "--replicas",
            str(res.replicas),
            stdout=up_log,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
        )
        try:
            async with connect(server.url, name="bench-chaos", connect_deadline=30) as bus:
                await provision(bus)
                wanted = {s.name for s in SERVICES if s.replicas > 0}
                async with asyncio.timeout(120):
                    while not wanted <= {v.name for v in await discover(bus.nc, window=0.3)}:
                        pass  # each round waits for discovery replies
                await task_store(bus, "orchestrator").put_all(generate(60))
                shell = await asyncio.to_thread(
                    generate_shell, 16, s.seed, "train", cache=RunCache(default_cache_dir())
                )
                await ShellTaskStore(bus).put_all(shell)
                log(f"stack up ({len(wanted)} services); starting the campaign")
                compared_at: list[float] = []

                async def on_compared(msg, raw) -> None:  # type: ignore[no-untyped-def]
                    if isinstance(msg, Episode) and msg.campaign_id == "chaos":
                        compared_at.append(time.monotonic())

                await bus.subscribe(bus.names.episode("compared", "*"), on_compared)
                spec = CampaignSpec(
                    campaign_id="chaos",
                    environments={"orchestrator": 0.5, "shell": 0.5},
                    tasks_per_epoch=s.tasks_per_epoch,
                    group_size=s.group_size,
                    epochs=s.epochs,
                    episode_deadline_s=max(120.0, 4 * s.ack_wait_s),
                    trainer=TrainerSettings(learning_rate=1e-2, seed=0),
                )
                started = time.monotonic()
                async with asyncio.timeout(60):
                    while True:
                        with contextlib.suppress(BusError):
                            await bus.request(
                                bus.names.campaign_cmd("start"),
                                StartCampaign(spec=spec),
                                CampaignStatus,
                                timeout=10,
                            )
                            break
                        await asyncio.sleep(1)  # a retry period: the campaign service restarts
                schedule = kill_schedule(rng, s.kills)
                for k, victim in enumerate(schedule):
                    await asyncio.sleep(rng.uniform(*s.gap_s))  # the schedule, not a wait
                    status = await _status(bus, "chaos")
                    if status is not None and status.state in ("finished", "failed"):
                        break
                    at = time.monotonic()
                    seen_before = len(compared_at)
                    if victim == "nats-server" and isinstance(server, NatsCluster):
                        node = await _episode_leader(bus)
                        server.kill(node)
                        await asyncio.sleep(s.outage_s)  # the outage itself
                        server.restart(node)
                        victim = f"nats-server (node {node}, the episode stream's leader)"
                    elif victim == "nats-server":
                        server.kill()
                        await asyncio.sleep(s.outage_s)  # the outage itself
                        server.start()
                    else:
                        pid = await _pid(bus, victim)
                        if pid is None:
                            log(f"kill {k + 1}: {victim} not found (restarting?)")
                            continue
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    log(f"kill {k + 1}: {victim}")
                    res.kills.append(
                        {"victim": victim, "at_s": round(at - started, 1), "_seen": seen_before}
                    )
                deadline = time.monotonic() + s.timeout_s
                while time.monotonic() < deadline:
                    status = await _status(bus, "chaos")
                    if status is not None and status.state in ("finished", "failed"):
                        break
                    await asyncio.sleep(1)  # a poll period
                res.finished_in_s = round(time.monotonic() - started, 1)
                status = await _status(bus, "chaos")
                res.state = status.state if status is not None else "unknown"
                res.retries = status.retries if status is not None else 0
                for kill in res.kills:  # recovery: the next compared episode after the kill
                    seen = int(kill.pop("_seen"))  # type: ignore[call-overload]
                    later = compared_at[seen:] if seen < len(compared_at) else []
                    kill_at = started + float(kill["at_s"])  # type: ignore[arg-type]
                    after = [t for t in later if t > kill_at]
                    kill["recovered_in_s"] = round(after[0] - kill_at, 1) if after else None
                records = await Ledger(bus).records("chaos")
                res.scheduled = sum(r.scheduled for r in records)
                res.received = sum(r.received for r in records)
                res.lost = sum(r.missing for r in records)
                ids: list[str] = []
                async for m in bus.read_stream(
                    bus.names.stream("EPISODES"), bus.names.episode("compared", "*")
                ):
                    with contextlib.suppress(Exception):
                        ids.append(json.loads(m.data)["episode_id"])
                res.compared_messages = len(ids)
                res.duplicated = len(ids) - len(set(ids))
        finally:
            if up.returncode is None:
                up.send_signal(signal.SIGINT)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(up.wait(), 60)
            up_log.close()
            server.stop()
    return res


def main(argv: list[str] | None = None) -> int:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument(
        "--cluster",
        action="store_true",
        help="a three-node JetStream cluster (results: chaos-cluster)",
    )
    known, rest = pre.parse_known_args(argv)
    name = "chaos-cluster" if known.cluster else "chaos"
    _, s, out = _common.bench_args(
        name, __doc__, "~40 s", full=FULL, quick=QUICK, argv=rest, parents=[pre]
    )
    if known.cluster:
        s = dataclasses.replace(s, cluster=3)
    console = Console()
    res, machine, elapsed = _common.run(lambda log: measure(s, log), ["nats-py"], console)
    recovered = [float(k["recovered_in_s"]) for k in res.kills if k["recovered_in_s"] is not None]  # type: ignore[arg-type]
    rows = [
        (
            "kills (victims)",
            f"{len(res.kills)} ({', '.join(str(k['victim']) for k in res.kills)})",
            "-",
        ),
        ("campaign", f"{res.state} in {res.finished_in_s} s", "finished"),
        ("episodes scheduled / received", f"{res.scheduled} / {res.received}", "equal"),
        ("lost (scheduled, never received)", res.lost, "0"),
        ("duplicated (compared twice in the stream)", res.duplicated, "0"),
        ("transient errors the campaign retried through", res.retries, "-"),
        (
            "recovery after a kill (median / max, s)",
            f"{statistics.median(recovered):.1f} / {max(recovered):.1f}" if recovered else "-",
            "-",
        ),
    ]
    ok = res.state == "finished" and res.lost == 0 and res.duplicated == 0 and bool(res.kills)
    kills = "; ".join(
        f"{k['victim']} at {k['at_s']} s (next compared episode after {k['recovered_in_s']} s)"
        for k in res.kills
    )
    _common.report_checks(
        console,
        out,
        title="chaos: random SIGKILLs during a campaign"
        + (f" on a {s.cluster}-node cluster ({res.replicas} replicas)" if s.cluster else ""),
        rows=rows,
        ok=ok,
        verdict="nothing lost, nothing duplicated, finished",
        settings=asdict(s),
        machine=machine,
        elapsed_s=elapsed,
        results=asdict(res),
        notes=[f"Kills: {kills}"],
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
