"""Scale benchmark: what each stage of the pipeline costs per episode on this machine, what
JetStream sustains at 1 and 3 replicas (measured here, on one server and on a local 3-node
cluster), and, from those numbers, how many episodes/s a deployment of N runner hosts and M
sampler replicas could run and which stage runs out first.

Measured, in one run:

1. **Per-stage CPU per episode**: ``bench/pipeline.py``'s stack measurement (the whole stack on an
   embedded NATS, orchestrator episodes with the tiny student, ``tasks`` x (4 rollouts + 2
   reference runs) per epoch, ``repeats`` epochs): CPU seconds of each process over the timed
   epochs / episodes. nats-server's share is measured the same way.
2. **Trainer per sample**: a GRPO update of the tiny student (``bench/trainer.py``'s toy task,
   one torch thread): seconds / samples.
3. **JetStream rates** at R1 (one server) and R3 (a 3-node cluster on loopback,
   ``aios_rl.stack.natsd.NatsCluster``): durable publishes of episode-sized messages
   (``payload_bytes``), ``in_flight`` outstanding at a time, until each is acked (msgs/s); and a
   durable pull consumer fetching them in batches of 64 and acking each (msgs/s). The ratio R3 /
   R1 is the price of replication.

Projected (a model, not a measurement): a host has ``cores_per_host`` cores. Scalable stages
(runners, samplers, teacher, reward, comparison) get the cores of the hosts that run them;
single-instance stages (campaign, replay, trainer) get one core each; JetStream carries
``messages per episode`` (counted from the stack's streams during the measurement) at the R3
rate. For each (N runner hosts, M sampler replicas) the projected episodes/s is the smallest
stage capacity, and the row names that stage: the first bottleneck, and where it moves as N and
M grow. The model ignores latency (it is throughput at saturation) and the network.

Run from the repo root:

    .venv/bin/python bench/scale.py            # ~2 min; bench/results/scale.{md,json}
    .venv/bin/python bench/scale.py --quick    # ~40 s smoke run
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run as a script: `bench` importable

import torch
import trainer as trainer_bench
from rich.console import Console

from aios_rl.bus import Bus, connect, jetstream_ready
from aios_rl.stack.natsd import NatsCluster, NatsServer
from aios_rl.student import new_student
from bench import _common, pipeline
from contracts import Names
from contracts.subjects import ConsumerSpec, StreamSpec, Topology


@dataclass(frozen=True)
class Settings:
    tasks: int
    repeats: int
    messages: int
    """Messages published (and consumed) per JetStream measurement."""
    payload_bytes: int = 4096
    in_flight: int = 64
    train_samples: int = 256
    cores_per_host: int = 2
    messages_per_episode: float = 12.0
    """JetStream messages one episode costs in the projection: the episode stream's hops (rollout
    job, completed, taught, rewarded, compared, replay lane: 6) and about as many KV operations
    (the campaign's arrivals, comparison's marks and statistics), from the design
    (the episode pipeline in docs/architecture.md), not counted in this run."""


FULL = Settings(tasks=16, repeats=2, messages=4000)
QUICK = Settings(tasks=4, repeats=1, messages=800, train_samples=64)

SCALABLE = {
    "orchestrator-runner": "runners",
    "sampler": "samplers",
    "teacher-gateway": "control",
    "teacher-oracle": "control",
    "reward": "control",
    "comparison": "control",
}
"""Scalable processes -> the host group whose cores they share in the projection."""
SINGLE = ("campaign", "replay")
"""Single-instance processes: one core each at most."""
GRID = ((1, 1), (2, 1), (4, 2), (8, 4), (16, 8), (32, 16), (64, 32))
"""(runner hosts, sampler replicas) rows of the projection."""


# -- JetStream rates ----------------------------------------------------------------------------


def _topology(names: Names, replicas: int) -> Topology:
    stream = names.stream("SCALE")
    return Topology(
        streams=[
            StreamSpec(
                name=stream,
                subjects=[names.subject("scale", ">")],
                retention="limits",
                max_age_s=600,
                description="bench/scale.py",
            )
        ],
        consumers=[
            ConsumerSpec(
                stream=stream,
                durable="scale",
                filter_subject=names.subject("scale", ">"),
                ack_wait_s=30,
            )
        ],
        buckets=[],
        object_stores=[],
    )


async def js_rates(bus: Bus, s: Settings, replicas: int) -> dict[str, float]:
    """Publish then consume ``s.messages`` messages on a stream of ``replicas`` copies."""
    from aios_rl.bus import provision

    names = bus.names
    topo = _topology(names, replicas)
    await provision(bus, topo, replicas=replicas)
    payload = b"x" * s.payload_bytes
    subject = names.subject("scale", "ep")
    sem = asyncio.Semaphore(s.in_flight)

    async def one(i: int) -> None:
        async with sem:
            await bus.js.publish(subject, payload, headers={"Nats-Msg-Id": f"m{i}"}, timeout=30)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(s.messages)))
    publish_s = time.perf_counter() - t0
    sub = await bus.js.pull_subscribe_bind(durable="scale", stream=topo.streams[0].name)
    got = 0
    t0 = time.perf_counter()
    while got < s.messages:
        msgs = await sub.fetch(64, timeout=30)
        for m in msgs:
            await m.ack()
        got += len(msgs)
    consume_s = time.perf_counter() - t0
    await bus.js.delete_stream(topo.streams[0].name)
    return {"publish_per_s": s.messages / publish_s, "consume_per_s": got / consume_s}


async def measure_js(s: Settings, log: Callable[[str], None]) -> dict[str, dict[str, float]]:
    out = {}
    with tempfile.TemporaryDirectory(prefix="aios-bench-scale-") as tmp:
        log("JetStream R1: one server")
        with NatsServer(Path(tmp) / "single") as server:
            async with connect(server.url, name="bench-scale", names=Names("s1")) as bus:
                out["R1"] = await js_rates(bus, s, 1)
        log("JetStream R3: a 3-node cluster on loopback")
        with NatsCluster(Path(tmp) / "cluster", 3) as cluster:
            async with connect(cluster.url, name="bench-scale", names=Names("s3")) as bus:
                await jetstream_ready(bus)
                out["R3"] = await js_rates(bus, s, 3)
    return out


# -- the stack's per-episode costs --------------------------------------------------------------


async def measure_stack(s: Settings, log: Callable[[str], None]) -> dict:
    ps = pipeline.Settings(tasks=s.tasks, group_size=4, reference_runs=2, repeats=s.repeats)
    res = await pipeline.measure_scale(ps, log)
    _, per = pipeline.cpu_table(res, ps)
    return {
        "cpu_ms": per,
        "episodes": ps.episodes,
        "episodes_per_s": ps.episodes / statistics.median(res["stack"]),
    }


def measure_trainer(s: Settings, log: Callable[[str], None]) -> float:
    log(f"trainer: one GRPO update of {s.train_samples} samples")
    torch.set_num_threads(1)
    weights = new_student("tiny", seed=0).to_bytes()
    ts = trainer_bench.Settings(
        sizes=(s.train_samples,), repeats=1, service_size=16, service_repeats=0
    )
    _, episodes, _ = trainer_bench.first_update(weights, ts)
    seconds = []
    for _ in range(2):
        t, _ = trainer_bench.timed_update(
            weights, episodes[: s.train_samples], trainer_bench.config_for("grpo")
        )
        seconds.append(t)
    return statistics.median(seconds) / s.train_samples * 1000


async def measure(s: Settings, log: Callable[[str], None]) -> dict:
    return {
        "stack": await measure_stack(s, log),
        "trainer_ms_per_sample": measure_trainer(s, log),
        "jetstream": await measure_js(s, log),
    }


# -- the projection (pure) ----------------------------------------------------------------------


def project(
    cpu_ms: dict[str, float],
    trainer_ms_per_sample: float,
    js_per_s: float,
    messages: float,
    runner_hosts: int,
    samplers: int,
    cores_per_host: int,
    samples_per_episode: float = 1.0,
) -> tuple[float, str, dict[str, float]]:
    """Episodes/s each stage could sustain and the smallest (the bottleneck): runners share
    ``runner_hosts * cores_per_host`` cores, samplers one core each, the control stages (teacher,
    reward, comparison) ``max(1, runner_hosts // 4)`` hosts, single stages one core, the trainer
    one core (``samples_per_episode`` samples per episode), JetStream ``js_per_s / messages``."""
    cap: dict[str, float] = {}
    groups: dict[str, float] = {}
    for proc, group in SCALABLE.items():
        groups[group] = groups.get(group, 0.0) + cpu_ms.get(proc, 0.0)
    runner_cores = runner_hosts * cores_per_host
    control_cores = max(1, runner_hosts // 4) * cores_per_host
    if groups.get("runners"):
        cap["runners"] = runner_cores * 1000 / groups["runners"]
    if groups.get("samplers"):
        cap["samplers"] = samplers * 1000 / groups["samplers"]
    if groups.get("control"):
        cap["teacher, reward, comparison"] = control_cores * 1000 / groups["control"]
    for proc in SINGLE:
        if cpu_ms.get(proc):
            cap[proc] = 1000 / cpu_ms[proc]
    cap["trainer"] = 1000 / (trainer_ms_per_sample * samples_per_episode)
    cap["JetStream"] = js_per_s / messages
    stage = min(cap, key=lambda k: cap[k])
    return cap[stage], stage, cap


def main(argv: list[str] | None = None) -> int:
    _, s, out = _common.bench_args("scale", __doc__, "~40 s", full=FULL, quick=QUICK, argv=argv)
    console = Console()
    res, machine, elapsed = _common.run(lambda log: measure(s, log), ["nats-py", "torch"], console)
    js = res["jetstream"]
    stack = res["stack"]
    rows = [
        _common.Row(
            "JetStream durable publish, R3 vs R1",
            "msg/s",
            js["R3"]["publish_per_s"],
            js["R1"]["publish_per_s"],
        ),
        _common.Row(
            "JetStream pull consume + ack, R3 vs R1",
            "msg/s",
            js["R3"]["consume_per_s"],
            js["R1"]["consume_per_s"],
        ),
    ]
    _common.print_rows("JetStream: 3 replicas vs 1", rows, "R3", "R1", console)
    cpu = stack["cpu_ms"]
    js_rate = min(js["R3"]["publish_per_s"], js["R3"]["consume_per_s"])
    lines = [
        "| runner hosts | sampler replicas | projected episodes/s | first bottleneck | next |",
        "|---:|---:|---:|---|---|",
    ]
    projection = []
    for n, m in GRID:
        eps, stage, cap = project(
            cpu,
            res["trainer_ms_per_sample"],
            js_rate,
            s.messages_per_episode,
            n,
            m,
            s.cores_per_host,
        )
        ranked = sorted(cap, key=lambda k: cap[k])
        nxt = f"{ranked[1]} ({cap[ranked[1]]:,.0f}/s)" if len(ranked) > 1 else "-"
        lines.append(f"| {n} | {m} | {eps:,.0f} | {stage} | {nxt} |")
        projection.append(
            {
                "runner_hosts": n,
                "samplers": m,
                "episodes_per_s": eps,
                "bottleneck": stage,
                "capacity": cap,
            }
        )
    table = "\n".join(lines)
    console.print(table)
    cost_lines = ["| process | CPU per episode (ms) |", "|---|---:|"]
    for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]):
        cost_lines.append(f"| {k} | {v:.2f} |")
    cost_lines.append(
        f"| trainer, per sample (GRPO, 1 thread) | {res['trainer_ms_per_sample']:.2f} |"
    )
    notes = [
        f"Measured here: the stack ran {stack['episodes_per_s']:.1f} episodes/s on this machine "
        f"({s.tasks} tasks x 6 episodes per epoch, {s.repeats} epoch(s)); per-process CPU per "
        "episode below.",
        f"JetStream ({s.payload_bytes}-byte messages, {s.in_flight} publishes in flight, "
        f"{s.messages} messages): R1 publish {js['R1']['publish_per_s']:,.0f}/s, consume "
        f"{js['R1']['consume_per_s']:,.0f}/s; R3 publish {js['R3']['publish_per_s']:,.0f}/s, "
        f"consume {js['R3']['consume_per_s']:,.0f}/s (all three servers on this machine's "
        "cores: a real cluster has a host each).",
        f"Projection: {s.cores_per_host} cores per host; runners on the runner hosts, one core "
        "per sampler replica, teacher/reward/comparison on one control host per 4 runner hosts, "
        "campaign and replay one core each, the trainer one core at one sample per episode, "
        f"JetStream at the R3 rate over {s.messages_per_episode:.0f} messages per "
        "episode (6 stream hops and about 6 KV operations).",
    ]
    _common.report(
        console,
        out,
        title="Scale benchmark: per-stage cost, JetStream at R1 and R3, and a projection",
        rows=rows,
        ours="R3",
        baseline="R1",
        machine=machine,
        settings=asdict(s),
        notes=notes,
        elapsed_s=elapsed,
    )
    doc = json.loads(out.with_suffix(".json").read_text())
    doc |= {
        "cpu_ms_per_episode": cpu,
        "trainer_ms_per_sample": res["trainer_ms_per_sample"],
        "jetstream": js,
        "stack_episodes_per_s": stack["episodes_per_s"],
        "projection": projection,
    }
    out.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    with out.open("a") as f:
        f.write("\n## Per-stage CPU per episode (measured)\n\n" + "\n".join(cost_lines) + "\n")
        f.write("\n## Projection (a model from the numbers above)\n\n" + table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
