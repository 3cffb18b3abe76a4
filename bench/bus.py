"""Bus benchmark: what typed msgspec contracts cost (or save) on NATS, against stdlib
``json`` + ``dataclasses``, in one run on an embedded nats-server it starts and stops itself.

Measured for both codecs, in the same run, alternating which goes first on each repeat:

1. codec alone (no NATS): an ``Episode`` encoded, decoded, and both; an act round trip
   (``ActRequest`` encoded, decoded, the ``ActResponse`` built, encoded, decoded).
2. JetStream, through the stack's own ``EPISODES`` stream and ``replay`` durable consumer
   (provisioned by the kit under a unique namespace per run and codec): publishing realistic
   compared-stage ``Episode`` messages (8 trajectory steps, ~200-character observations,
   candidate lists, teacher signal, comparison ...) with ``Nats-Msg-Id``, once awaiting each ack
   (what ``Bus.publish_durable`` does) and once with up to 256 acks in flight; then consuming
   all of them with a pull consumer that fetches in batches, decodes each into its type and acks.
3. Request/reply over core NATS: a responder on its own connection decodes ``ActRequest`` and
   answers ``ActResponse``; one client sends sequential requests. p50 / p99 latency and req/s.

Both codecs run the exact same transport code; only encode/decode differ (the msgspec side is
``contracts.encode`` / ``contracts.decode``, the baseline is ``bench/_baseline.py``). Throughputs
and latency percentiles (computed per repeat) are medians over repeats, so one repeat disturbed
by other work on the machine does not decide a number.

Run from the repo root:

    .venv/bin/python bench/bus.py            # ~1 min; writes bench/results/bus.{md,json}
    .venv/bin/python bench/bus.py --quick    # ~10 s;  writes bench/results/bus-quick.{md,json}
    .venv/bin/python bench/bus.py --out /tmp/bus.md
"""

from __future__ import annotations

import asyncio
import gc
import random
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run as a script: `bench` importable

import msgspec
import nats.errors
from nats.js import JetStreamContext
from rich.console import Console

import contracts
from aios_rl.bus import Bus, connect, provision
from aios_rl.stats import quantile
from bench import _baseline, _common
from contracts import Names, Topology, topology
from contracts.subjects import MSG_ID_HEADER, STREAM_EPISODES


@dataclass(frozen=True)
class Settings:
    """Loop counts of one run. Every loop is bounded; nothing runs "for N seconds"."""

    messages: int
    """Episodes per publish mode (sequential, pipelined); the consumer then reads twice this."""
    requests: int
    """Sequential request/reply round trips per codec and repeat."""
    codec_loops: int
    """Encode+decode iterations per codec micro-benchmark and repeat."""
    warmup: int
    """Untimed iterations before each timed loop (publishes, fetches, requests, codec calls)."""
    repeats: int
    """How many times every measurement runs per codec (the order of the codecs alternates)."""
    fetch_batch: int = 128
    """Messages per pull-consumer fetch (within the ``replay`` consumer's max_ack_pending)."""
    in_flight: int = 256
    """Most JetStream publishes awaiting their ack at once in the pipelined mode."""


FULL = Settings(messages=800, requests=1200, codec_loops=800, warmup=200, repeats=5)
QUICK = Settings(messages=400, requests=800, codec_loops=500, warmup=50, repeats=1)


@dataclass(frozen=True)
class Codec:
    """One way of turning messages into bytes and back, with ``contracts.encode``/``decode``'s
    signatures, and the message types it works with."""

    name: str
    encode: Callable[..., tuple[bytes, dict[str, str]]]
    decode: Callable[..., Any]
    episode: type
    act_request: type
    act_response: type


MSGSPEC = Codec(
    "msgspec",
    contracts.encode,
    contracts.decode,
    contracts.Episode,
    contracts.ActRequest,
    contracts.ActResponse,
)
BASELINE = Codec(
    "json+dataclasses",
    _baseline.encode,
    _baseline.decode,
    _baseline.Episode,
    _baseline.ActRequest,
    _baseline.ActResponse,
)
CODECS = (MSGSPEC, BASELINE)


# -- realistic messages --------------------------------------------------------------------------

_OBS_LINES = [
    "$ pytest -q tests/test_parser.py",
    "FAILED tests/test_parser.py::test_nested_quotes - AssertionError: expected 3 tokens, got 2",
    "src/parser.py:41: in tokenize",
    "    if ch == '\"' and not escaped:",
    "1 failed, 12 passed in 0.31s",
    "page /shop/cart: 3 items, subtotal 41.70, button 'Checkout' enabled",
    "form #login: fields username, password; error banner 'Invalid credentials'",
    "request: deploy the billing service to staging; preflight: 2 warnings, 0 errors",
]
_ACTIONS = [
    "run_tests",
    "open_file src/parser.py",
    "edit src/parser.py:41",
    "revert_last_edit",
    "click button#checkout",
    "scroll down 600",
    "fill #username alice",
    "dispatch subagent",
    "dry_run",
    "ask_human",
]


def _observation(rng: random.Random, length: int = 200) -> str:
    text = ""
    while len(text) < length:
        text += rng.choice(_OBS_LINES) + "\n"
    return text[:length]


def make_episode(i: int, rng: random.Random) -> contracts.Episode:
    """A compared-stage episode (the largest a stage publishes): 8 steps, teacher, comparison."""
    env = ("shell", "browser", "orchestrator")[i % 3]
    steps = []
    for k in range(8):
        candidates = rng.sample(_ACTIONS, 5)
        choice = rng.randrange(5)
        steps.append(
            contracts.TrajectoryStep(
                index=k,
                observation=_observation(rng),
                action=candidates[choice],
                candidates=candidates,
                action_index=choice,
                logprob=-rng.random() * 3,
                entropy=rng.random() * 1.6,
                value=rng.uniform(-1, 1),
                step_reward=0.0,
            )
        )
    branch = None
    if i % 4 == 0:
        branch = contracts.BranchInfo(
            parent_episode_id=f"ep-{i - 1:08d}",
            branch_step=3,
            budget=2,
            regime=contracts.DecodingRegime(temperature=1.2, top_p=0.95),
        )
    return contracts.Episode(
        episode_id=f"ep-{i:08d}-{uuid.uuid4().hex[:8]}",
        environment=env,
        task_id=f"{env}-task-{i % 97:04d}",
        campaign_id="camp-bench",
        epoch=3,
        checkpoint_id="ckpt-000042",
        group_id=f"grp-{i // 4:06d}",
        seed=i,
        regime=contracts.DecodingRegime(temperature=0.9, top_p=0.95),
        branch=branch,
        trajectory=steps,
        outcome=rng.choice(["success", "partial", "failure"]),
        env_reward=rng.random(),
        reward=rng.uniform(-1, 1),
        reward_breakdown=contracts.RewardBreakdown(
            env_reward=0.5, teacher_score=0.4, teacher_weight=0.3, shaping=0.12, total=0.62
        ),
        teacher_status="ok",
        teacher_signal=contracts.TeacherSignal(
            backend="oracle",
            verdict="partially_correct",
            score=0.4,
            hints=[
                contracts.TeacherHint(
                    step=2, better_action="run_tests", note="check before editing"
                ),
                contracts.TeacherHint(step=5, better_action=None, note="fine"),
            ],
            rationale="Found the failing tokenizer branch but edited the wrong condition first; recovered.",
            latency_s=0.8,
        ),
        comparison=contracts.ComparisonResult(
            verdict="better",
            reference_checkpoint="ckpt-000041",
            delta=0.21,
            reference_reward=0.41,
            reference_runs=2,
            reason="reward delta",
        ),
        lane="positive",
        timings=contracts.Timings(
            started_at=1.7e9 + i,
            finished_at=1.7e9 + i + 12.5,
            stages={
                "completed": 1.7e9 + i + 12.6,
                "taught": 1.7e9 + i + 13.4,
                "rewarded": 1.7e9 + i + 13.5,
            },
        ),
        evidence=[
            contracts.EvidenceRef(
                kind="log", bucket="evidence", name=f"ep-{i:08d}.log", size_bytes=18234
            )
        ],
        info={"tests_passed": "12", "tests_failed": "1"},
        reference_checkpoint="ckpt-000041",
    )


def make_act_request(i: int, rng: random.Random) -> contracts.ActRequest:
    return contracts.ActRequest(
        episode_id=f"ep-{i:08d}",
        step=i % 8,
        observation=_observation(rng),
        candidates=rng.sample(_ACTIONS, 5),
        regime=contracts.DecodingRegime(temperature=0.9, top_p=0.95),
        seed=i,
        want_hidden=True,
    )


_HIDDEN = [round(0.01 * k - 0.08, 4) for k in range(16)]


def respond(codec: Codec, req: Any) -> Any:
    """What the sampler would answer (minus the model): pick a candidate, report its numbers."""
    idx = req.step % len(req.candidates)
    return codec.act_response(
        action=req.candidates[idx],
        action_index=idx,
        logprob=-0.73,
        entropy=1.12,
        value=0.05,
        checkpoint_id="ckpt-000042",
        hidden=_HIDDEN,
    )


def to_baseline(msg: Any, typ: type) -> Any:
    """The baseline dataclass equal to a contracts message (through its JSON)."""
    data, headers = contracts.encode(msg)
    return _baseline.decode(data, headers, typ)


def check_equivalence(episode: contracts.Episode, request: contracts.ActRequest) -> None:
    """Both codecs must write the same document, or the comparison means nothing.

    Raises ``RuntimeError`` when a mirror in ``bench/_baseline.py`` has other fields than its
    contract (a contract changed), or when the baseline's bytes do not decode back into the
    same Struct."""
    for name in _baseline.__all__:
        mirror, contract = getattr(_baseline, name), getattr(contracts, name, None)
        if not isinstance(mirror, type) or contract is None:
            continue
        want = [f.name for f in msgspec.structs.fields(contract)]
        have = [f.name for f in fields(mirror)]
        if want != have:
            raise RuntimeError(
                f"bench/_baseline.py's {name} has fields {have}, contracts.{name} has {want}: "
                "update the mirror to match the contract."
            )
    for msg, typ in ((episode, _baseline.Episode), (request, _baseline.ActRequest)):
        data, headers = _baseline.encode(to_baseline(msg, typ))
        if contracts.decode(data, headers, type(msg)) != msg:
            raise RuntimeError(
                f"the baseline's {typ.__name__} does not round-trip to the same contract."
            )


# -- 1. codec alone -----------------------------------------------------------------------------


def bench_codec_episode(
    codec: Codec, episodes: list[Any], loops: int, warmup: int
) -> dict[str, float]:
    """Episodes per second through encode alone, decode alone, and encode+decode."""
    enc, dec, typ, n = codec.encode, codec.decode, codec.episode, len(episodes)
    encoded = [enc(ep) for ep in episodes[:64]]
    for i in range(warmup):
        dec(*enc(episodes[i % n]), typ)
    gc.collect()
    t0 = time.perf_counter()
    for i in range(loops):
        enc(episodes[i % n])
    t1 = time.perf_counter()
    for i in range(loops):
        dec(*encoded[i % 64], typ)
    t2 = time.perf_counter()
    for i in range(loops):
        dec(*enc(episodes[i % n]), typ)
    t3 = time.perf_counter()
    return {
        "codec_episode_encode": loops / (t1 - t0),
        "codec_episode_decode": loops / (t2 - t1),
        "codec_episode": loops / (t3 - t2),
    }


def bench_codec_act(codec: Codec, requests: list[Any], loops: int, warmup: int) -> float:
    """Act round trips per second: request encode, decode, response build, encode, decode."""
    enc, dec, n = codec.encode, codec.decode, len(requests)

    def once(req: Any) -> None:
        got = dec(*enc(req), codec.act_request)
        dec(*enc(respond(codec, got)), codec.act_response)

    for i in range(warmup):
        once(requests[i % n])
    gc.collect()
    t0 = time.perf_counter()
    for i in range(loops):
        once(requests[i % n])
    return loops / (time.perf_counter() - t0)


# -- 2. JetStream publish and consume ------------------------------------------------------------


async def bench_jetstream(
    bus: Bus, js: JetStreamContext, codec: Codec, episodes: list[Any], s: Settings
) -> dict[str, float]:
    """Publish ``warmup`` episodes untimed, ``messages`` awaiting each ack, ``messages`` with up to
    ``in_flight`` acks pending; then consume them all (the first ``warmup`` untimed).

    Returns msgs/s for ``publish_sequential``, ``publish_pipelined`` and ``consume``. Raises
    ``RuntimeError`` when the stream does not end up with every message exactly once."""
    names = Names(f"b{uuid.uuid4().hex[:12]}")
    full = topology(names)
    stream = names.stream(STREAM_EPISODES)
    consumer = full.consumer("replay")
    await provision(
        bus,
        Topology(
            streams=[x for x in full.streams if x.name == stream],
            consumers=[consumer],
            buckets=[],
            object_stores=[],
        ),
    )
    warm, seq, pipe = (
        episodes[: s.warmup],
        episodes[s.warmup : s.warmup + s.messages],
        episodes[s.warmup + s.messages : s.warmup + 2 * s.messages],
    )

    def prepare(ep: Any) -> tuple[str, bytes, dict[str, str]]:
        data, headers = codec.encode(ep, {MSG_ID_HEADER: f"{ep.episode_id}:compared"})
        return names.episode("compared", ep.environment), data, headers

    for ep in warm:
        subject, data, headers = prepare(ep)
        await js.publish(subject, data, headers=headers)

    gc.collect()
    t0 = time.perf_counter()
    for ep in seq:
        subject, data, headers = prepare(ep)
        await js.publish(subject, data, headers=headers)
    publish_sequential = len(seq) / (time.perf_counter() - t0)

    gc.collect()
    t0 = time.perf_counter()
    futures = []
    for ep in pipe:
        subject, data, headers = prepare(ep)
        futures.append(await js.publish_async(subject, data, headers=headers))
    acks = await asyncio.gather(*futures)
    publish_pipelined = len(pipe) / (time.perf_counter() - t0)

    total = len(warm) + len(seq) + len(pipe)
    info = await js.stream_info(stream)
    if info.state.messages != total or any(a.duplicate for a in acks):
        raise RuntimeError(
            f"stream {stream} holds {info.state.messages} messages, expected {total}."
        )

    psub = await js.pull_subscribe_bind(durable=consumer.durable, stream=stream)

    async def consume(count: int) -> None:
        left = count
        while left:
            for msg in await psub.fetch(min(s.fetch_batch, left), timeout=10):
                codec.decode(msg.data, msg.headers, codec.episode)
                await msg.ack()
                left -= 1

    await consume(len(warm))
    gc.collect()
    t0 = time.perf_counter()
    await consume(len(seq) + len(pipe))
    await bus.nc.flush()
    consume_rate = (len(seq) + len(pipe)) / (time.perf_counter() - t0)

    await psub.unsubscribe()
    await js.delete_stream(stream)
    return {
        "publish_sequential": publish_sequential,
        "publish_pipelined": publish_pipelined,
        "consume": consume_rate,
    }


# -- 3. request/reply ---------------------------------------------------------------------------


async def wait_for_responder(
    nc: Any, subject: str, data: bytes, headers: dict[str, str], deadline_s: float = 5.0
) -> None:
    """Send one request until a responder answers it.

    Seen here: the first request on a subject just subscribed from another connection (after
    that connection's flush) now and then comes back "no responders". Raises ``RuntimeError``
    when nobody has answered within ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            await nc.request(subject, data, headers=headers, timeout=deadline_s)
            return
        except nats.errors.NoRespondersError:
            if time.monotonic() > end:
                raise RuntimeError(f"no responder on {subject!r} after {deadline_s}s.") from None
            await asyncio.sleep(0.005)  # the probe's back-off; the condition is the reply itself


async def bench_request_reply(
    client: Bus, server: Bus, codec: Codec, requests: list[Any], s: Settings
) -> tuple[list[float], float]:
    """Sequential requests from ``client`` to a responder on ``server``'s connection.

    Returns the latency of each timed request in microseconds, and requests per second."""
    subject = Names(f"b{uuid.uuid4().hex[:12]}").policy_act()

    async def handler(msg: Any) -> None:
        req = codec.decode(msg.data, msg.headers, codec.act_request)
        data, headers = codec.encode(respond(codec, req))
        await server.nc.publish(msg.reply, data, headers=headers)

    sub = await server.nc.subscribe(subject, queue="q", cb=handler)
    await server.nc.flush()
    nc, enc, dec, n = client.nc, codec.encode, codec.decode, len(requests)

    async def once(req: Any) -> None:
        data, headers = enc(req)
        reply = await nc.request(subject, data, headers=headers, timeout=5)
        dec(reply.data, reply.headers, codec.act_response)

    await wait_for_responder(nc, subject, *enc(requests[0]))
    for i in range(s.warmup):
        await once(requests[i % n])
    latencies = []
    gc.collect()
    t0 = time.perf_counter()
    for i in range(s.requests):
        t = time.perf_counter_ns()
        await once(requests[i % n])
        latencies.append((time.perf_counter_ns() - t) / 1000)
    rate = s.requests / (time.perf_counter() - t0)
    await sub.unsubscribe()
    return latencies, rate


# -- the run ------------------------------------------------------------------------------------


async def measure(s: Settings, log: Callable[[str], None]) -> dict[str, dict[str, list[float]]]:
    """Every measurement for both codecs: ``{codec name: {metric: [value per repeat]}}``."""
    rng = random.Random(7)
    # Every repeat publishes the same episodes into a fresh stream, so Nats-Msg-Id never collides.
    episodes = [make_episode(i, rng) for i in range(s.warmup + 2 * s.messages)]
    requests = [make_act_request(i, rng) for i in range(64)]
    check_equivalence(episodes[0], requests[0])
    msgs = {
        MSGSPEC.name: (episodes, requests),
        BASELINE.name: (
            [to_baseline(e, _baseline.Episode) for e in episodes],
            [to_baseline(r, _baseline.ActRequest) for r in requests],
        ),
    }
    out: dict[str, dict[str, list[float]]] = {c.name: {} for c in CODECS}

    def add(codec: Codec, metric: str, *values: float) -> None:
        out[codec.name].setdefault(metric, []).extend(values)

    with _common.nats_server("aios-bench-bus-") as server:
        async with (
            connect(server.url, name="bench-client") as client,
            connect(server.url, name="bench-responder") as responder,
        ):
            js = client.nc.jetstream(publish_async_max_pending=s.in_flight)
            for r in range(s.repeats):
                order = CODECS if r % 2 == 0 else CODECS[::-1]
                for codec in order:
                    log(f"repeat {r + 1}/{s.repeats}: {codec.name}")
                    eps, reqs = msgs[codec.name]
                    for metric, value in bench_codec_episode(
                        codec, eps, s.codec_loops, s.warmup
                    ).items():
                        add(codec, metric, value)
                    add(
                        codec,
                        "codec_act",
                        bench_codec_act(codec, reqs, s.codec_loops, s.warmup),
                    )
                    jet = await bench_jetstream(client, js, codec, eps, s)
                    for metric, value in jet.items():
                        add(codec, metric, value)
                    latencies, rate = await bench_request_reply(client, responder, codec, reqs, s)
                    add(codec, "latency_p50_us", quantile(latencies, 0.50))
                    add(codec, "latency_p99_us", quantile(latencies, 0.99))
                    add(codec, "request_rate", rate)
            out[MSGSPEC.name]["episode_bytes"] = [len(MSGSPEC.encode(episodes[0])[0])]
            out[BASELINE.name]["episode_bytes"] = [
                len(BASELINE.encode(msgs[BASELINE.name][0][0])[0])
            ]
    return out


def build_rows(res: dict[str, dict[str, list[float]]], s: Settings) -> list[_common.Row]:
    ours, base = res[MSGSPEC.name], res[BASELINE.name]

    def row(name: str, unit: str, metric: str, higher: bool = True) -> _common.Row:
        return _common.Row(
            name,
            unit,
            _common.median(ours[metric]),
            _common.median(base[metric]),
            higher,
            samples={"ours": ours[metric], "baseline": base[metric]},
        )

    return [
        row("codec only: Episode encode", "ops/s", "codec_episode_encode"),
        row("codec only: Episode decode", "ops/s", "codec_episode_decode"),
        row("codec only: Episode encode+decode", "ops/s", "codec_episode"),
        row("codec only: act round trip (2 encodes, 2 decodes)", "ops/s", "codec_act"),
        row("JetStream publish, each ack awaited", "msgs/s", "publish_sequential"),
        row(
            f"JetStream publish, up to {s.in_flight} acks in flight", "msgs/s", "publish_pipelined"
        ),
        row(f"JetStream consume (fetch {s.fetch_batch}, decode, ack)", "msgs/s", "consume"),
        row("request/reply latency p50", "us", "latency_p50_us", higher=False),
        row("request/reply latency p99", "us", "latency_p99_us", higher=False),
        row("request/reply, sequential", "req/s", "request_rate"),
        row("Episode payload size", "bytes", "episode_bytes", higher=False),
    ]


def main(argv: list[str] | None = None) -> int:
    _, s, out = _common.bench_args("bus", __doc__, "~10 s", full=FULL, quick=QUICK, argv=argv)
    console = Console()
    packages = ["msgspec", "nats-py", "rich"]
    res, machine, elapsed = _common.run(lambda log: measure(s, log), packages, console)
    rows = build_rows(res, s)
    title = "bus: msgspec vs json+dataclasses"
    _common.print_rows(title, rows, MSGSPEC.name, BASELINE.name, console)
    notes = [
        "ratio = msgspec / baseline for rates, baseline / msgspec for latency and size: > 1 means msgspec is better.",
        "Both codecs run the same transport code on one nats-server (file-backed JetStream) on this machine; "
        "client, responder and server share its cores.",
        "Every number is the median over the repeats (latency percentiles are computed per repeat); "
        "the JSON file beside this one keeps each repeat's value.",
        "The baseline checks no types when decoding; msgspec validates every field.",
        "Publish/consume use the stack's EPISODES stream and `replay` consumer config from contracts.topology, "
        "under a fresh namespace per codec and repeat; messages carry Aios-Schema and Nats-Msg-Id headers.",
    ]
    _common.report(
        console,
        out,
        title="Bus benchmark: msgspec contracts vs json + dataclasses over NATS",
        rows=rows,
        ours=MSGSPEC.name,
        baseline=BASELINE.name,
        machine=machine,
        settings=asdict(s),
        notes=notes,
        elapsed_s=elapsed,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
