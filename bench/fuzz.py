"""fuzz: hostile input against the whole stack — malformed messages on every consumed subject
and every endpoint, publishes without a reply subject on every endpoint, garbage in every KV key
a service reads — then one honest episode.

The stack is the embedded one ``aios-rl demo`` uses (every service its own process under the
supervisor). The targets are what the running services say they read: every endpoint from
``$SRV.INFO`` (with the request schema in its metadata) and every durable consumer's subject
from each service's status (a wildcard token stands for each environment). Counted: services
that exited (an instance whose pid changed), after the no-reply publishes and after everything;
poison messages and no-reply publishes that got no dead letter; requests that got no reply; and
whether an honest rollout afterwards comes out compared. The target is 0 / 0 / 0 / yes.

    .venv/bin/python bench/fuzz.py            # the full corpus (~30 s on 2 cores)
    .venv/bin/python bench/fuzz.py --quick    # a few payloads per target (~30 s)
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run as a script: `bench` importable

import msgspec
from rich.console import Console

from aios_rl.bus import Bus, ServiceView, discover
from aios_rl.envs.orchestrator import generate
from aios_rl.envs.registry import task_store
from aios_rl.stack.embedded import active_checkpoint, stack
from aios_rl.state import Kv
from bench import _common
from contracts import (
    ENVIRONMENTS,
    ControlSnapshot,
    DeadLetter,
    Episode,
    GatewaySettings,
    Names,
    RolloutJob,
    decode,
    encode,
    registered,
)
from contracts.examples import example
from contracts.subjects import (
    BUCKET_CHECKPOINTS,
    BUCKET_CONTROL,
    DLQ_REQUESTS,
    SCHEMA_HEADER,
    STREAM_DLQ,
)


@dataclass(frozen=True)
class Settings:
    """What one run sends."""

    payloads: int
    """How many payloads of the corpus go to each target (its first N)."""
    reply_timeout_s: float = 15.0
    """How long a request may take to be answered (an error reply counts as an answer)."""
    settle_s: float = 60.0
    """How long the dead letters of the poison messages may take to appear."""


FULL = Settings(payloads=99)
QUICK = Settings(payloads=4)


def corpus() -> list[tuple[str, bytes]]:
    """(name, payload): malformed in every way a probe found or a parser fears."""
    deep = b'{"episode_id":"e","environment":"shell","task_id":"t","zz":' + b'{"a":' * 5000
    return [
        ("deep nesting", deep + b"1" + b"}" * 5001),
        ("not json", b"{not json"),
        ("900 KB of junk", b'{"junk": "' + b"x" * 900_000 + b'"}'),
        ("lone surrogate", b'{"episode_id": "\\ud800", "environment": "shell", "task_id": "t"}'),
        ("wrong types", b'{"episode_id": 7, "environment": ["shell"], "task_id": null}'),
        ("NaN and huge numbers", b'{"episode_id": "e", "env_reward": NaN, "seed": 1e400}'),
        ("invalid utf-8", b'{"episode_id": "\xff\xfe"}'),
        ("empty", b""),
        ("array", b"[]"),
    ]


def targets(
    views: list[ServiceView], names: Names
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(subject, schema) of every consumed subject, and of every endpoint (schema empty: it takes
    any body, as ``status`` does), as the running services ``views`` say: endpoints from their
    ``$SRV.INFO`` (and each service's ``status``, which discovery reads rather than lists),
    consumed subjects from the durable consumers in their status. A ``*`` or ``>`` in a
    consumed subject stands for each environment (every wildcard there names one)."""
    consumed: dict[str, str] = {}
    endpoints: dict[str, str] = {}
    for v in views:
        endpoints[names.status(v.name)] = ""
        for e in v.endpoints:
            endpoints[e.subject] = e.request_schema
        for c in v.consumers:
            tokens = names.subject(c.subject).split(".")
            choices = [ENVIRONMENTS if t in ("*", ">") else (t,) for t in tokens]
            for concrete in itertools.product(*choices):
                consumed[".".join(concrete)] = c.schema
    return sorted(consumed.items()), sorted(endpoints.items())


def well_formed(schema: str) -> tuple[bytes, dict[str, str]]:
    """A valid message of ``schema`` (its required fields, smallest values) and its headers."""
    return encode(example(registered()[schema]))


def digest(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


async def letters(
    bus: Bus, after: int, subject: str | None = None
) -> AsyncIterator[tuple[int, DeadLetter]]:
    """Every dead letter the DLQ stream holds after sequence ``after`` (on ``subject``, by default
    any ``dlq.>``) that decodes, with its sequence."""
    async for m in bus.read_stream(bus.names.stream(STREAM_DLQ), subject or bus.names.dlq(">")):
        if m.seq <= after:
            continue
        with contextlib.suppress(Exception):
            yield m.seq, decode(m.data, m.headers, DeadLetter)


@dataclass
class Results:
    sent: int = 0
    dead_lettered: int = 0
    not_dead_lettered: list[str] = field(default_factory=list)
    requests: int = 0
    error_replies: int = 0
    no_reply: list[str] = field(default_factory=list)
    kv_garbage: int = 0
    no_reply_sent: int = 0
    """Publishes without a reply subject on endpoints (every payload, and a well-formed one)."""
    no_reply_expected: int = 0
    """Those on endpoints that take a request schema: each must be dead-lettered (``no_reply``);
    a status endpoint reads no body and only logs them."""
    no_reply_dead_lettered: int = 0
    no_reply_missing: list[str] = field(default_factory=list)
    exited_after_no_reply: list[str] = field(default_factory=list)
    exited: list[str] = field(default_factory=list)
    honest_episode: str = "not run"
    huge_reward: str = "not dead-lettered"
    reasons: dict[str, int] = field(default_factory=dict)


async def pids(bus: Bus) -> dict[str, int | None]:
    """Service instance id -> pid, for every running instance of the namespace."""
    views = await discover(bus.nc, namespace=bus.names.namespace, window=0.5)
    return {f"{v.name}/{v.id}": v.pid for v in views}


async def garbage_in_kv(bus: Bus) -> int:
    """Garbage under the keys services read at run time (the gateway's control key, a
    campaign's, the checkpoint pointers); the pointers and the gateway's key are put back after,
    so the honest episode can run."""
    control = Kv(bus, bus.names.bucket(BUCKET_CONTROL))
    checkpoints = Kv(bus, bus.names.bucket(BUCKET_CHECKPOINTS))
    pointers = await checkpoints.latest(Names.key_pointers())
    gateway = Names.key_control("gateway")
    for kv, key in ((control, gateway), (control, Names.key_control("campaign", "fuzz"))):
        await kv.put(key, b"\x00garbage{")
    await checkpoints.put(Names.key_pointers(), b'{"active": 42}')
    if pointers is not None and pointers.value is not None:
        await checkpoints.put(Names.key_pointers(), pointers.value)
    await control.put(
        gateway,
        msgspec.json.encode(ControlSnapshot(key=gateway, state=GatewaySettings(), version=1)),
    )
    return 3


async def measure(s: Settings, log: Callable[[str], None]) -> Results:
    res = Results()
    payloads = corpus()[: s.payloads]
    with tempfile.TemporaryDirectory(prefix="aios-fuzz-") as tmp:
        async with stack(
            None,
            namespace="",
            data_dir=Path(tmp),
            needs=set(),
            echo=log,
            fresh=True,
        ) as st:
            bus = st.bus
            await active_checkpoint(bus, 120)
            await task_store(bus, "orchestrator").put_all(generate(4))
            views = await discover(bus.nc, namespace=bus.names.namespace, window=0.5)
            before = {f"{v.name}/{v.id}": v.pid for v in views}
            log(f"{len(before)} service instances up")
            consumed, endpoints = targets(views, bus.names)
            dlq = bus.names.stream(STREAM_DLQ)
            first_dl = (await bus.js.stream_info(dlq)).state.last_seq

            # Publishes without a reply subject (nobody can read an answer): every payload and a
            # well-formed request on every endpoint. Each is refused, its handler not run, and
            # dead-lettered on dlq.REQUESTS; no service may exit for it.
            expected: dict[tuple[str, str], str] = {}
            for subject, schema in endpoints:
                bodies = [(n, p, {SCHEMA_HEADER: schema} if schema else {}) for n, p in payloads]
                if schema:
                    bodies.append(("well-formed", *well_formed(schema)))
                for name, payload, headers in bodies:
                    await bus.nc.publish(subject, payload, headers=headers)
                    res.no_reply_sent += 1
                    if schema:
                        expected[(subject, digest(payload))] = f"{subject} <- {name}"
            await bus.nc.flush()
            res.no_reply_expected = len(expected)
            log(
                f"{res.no_reply_sent} publishes without a reply subject on {len(endpoints)} endpoints"
            )
            refused: set[tuple[str, str]] = set()
            deadline = time.monotonic() + s.settle_s
            while time.monotonic() < deadline and len(refused) < len(expected):
                async for _, dl in letters(bus, first_dl, bus.names.dlq(DLQ_REQUESTS)):
                    if dl.reason == "no_reply":
                        key = (dl.subject, dl.payload_sha256 or digest(dl.payload))
                        if key in expected:
                            refused.add(key)
                if len(refused) < len(expected):
                    await asyncio.sleep(1.0)  # a poll period: dead letters are re-read each round
            res.no_reply_dead_lettered = len(refused)
            res.no_reply_missing = [expected[k] for k in sorted(set(expected) - refused)][:20]
            res.exited_after_no_reply = sorted(set(before) - set(await pids(bus)))
            log(
                f"{res.no_reply_dead_lettered} of {res.no_reply_expected} dead-lettered; "
                f"{len(res.exited_after_no_reply)} service instances exited"
            )
            sent_seqs: dict[tuple[str, int], str] = {}
            for subject, schema in consumed:
                for name, payload in payloads:
                    for header in (schema, "no_such_schema.v1"):
                        ack = await bus.js.publish(
                            subject, payload, headers={SCHEMA_HEADER: header}
                        )
                        what = f"{bus.names.strip(subject)} <- {name} ({header})"
                        sent_seqs[(ack.stream, ack.seq)] = what
                        res.sent += 1
            log(f"{res.sent} poison messages published on {len(consumed)} subjects")

            async def ask(subject: str, schema: str, name: str, payload: bytes) -> None:
                try:
                    await bus.nc.request(
                        subject, payload, timeout=s.reply_timeout_s, headers={SCHEMA_HEADER: schema}
                    )
                    res.error_replies += 1  # an answer: an error reply, or a status
                except Exception as exc:  # no reply at all
                    res.no_reply.append(f"{bus.names.strip(subject)} <- {name}: {exc!r}")

            for subject, schema in endpoints:
                await asyncio.gather(*(ask(subject, schema, n, p) for n, p in payloads))
                res.requests += len(payloads)
            log(f"{res.requests} malformed requests sent to {len(endpoints)} endpoints")
            res.kv_garbage = await garbage_in_kv(bus)
            log("garbage written to KV control and checkpoints (pointers restored)")

            # Every poison message is dead-lettered by each consumer of its subject.
            seen: set[tuple[str, int]] = set()
            counted: set[int] = set()  # dead letters already counted (the stream is re-read)
            deadline = time.monotonic() + s.settle_s
            while time.monotonic() < deadline and len(seen) < len(sent_seqs):
                async for seq, dl in letters(bus, first_dl):
                    if (dl.stream, dl.stream_seq) in sent_seqs and seq not in counted:
                        counted.add(seq)
                        seen.add((dl.stream, dl.stream_seq))
                        res.reasons[dl.reason] = res.reasons.get(dl.reason, 0) + 1
                if len(seen) < len(sent_seqs):
                    await asyncio.sleep(1.0)  # a poll period: dead letters are re-read each round
            res.dead_lettered = len(seen)

            # A well-formed episode with a reward near the float limit: fused, then refused by
            # comparison (its sums would overflow), never stored.
            huge = Episode(episode_id="huge", environment="shell", task_id="t", env_reward=1.7e308)
            await bus.publish_durable(bus.names.episode("taught", "shell"), huge, msg_id="huge")
            deadline = time.monotonic() + s.settle_s
            while time.monotonic() < deadline and res.huge_reward == "not dead-lettered":
                async for _, dl in letters(bus, 0):
                    if b'"huge"' in dl.payload:
                        res.huge_reward = f"dead-lettered ({dl.reason} by {dl.service})"
                if res.huge_reward == "not dead-lettered":
                    await asyncio.sleep(1.0)  # a poll period
            res.not_dead_lettered = [sent_seqs[q] for q in sorted(set(sent_seqs) - seen)][:20]

            # One honest episode through the whole pipeline.
            task = generate(4)[0]
            job = RolloutJob(
                job_id="honest",
                episode_id="honest",
                environment="orchestrator",
                task_id=task.task_id,
            )
            done = asyncio.Event()

            async def on_compared(msg, raw) -> None:  # type: ignore[no-untyped-def]
                if isinstance(msg, Episode) and msg.episode_id == "honest":
                    done.set()

            sub = await bus.subscribe(bus.names.episode("compared", "orchestrator"), on_compared)
            await bus.publish_durable(bus.names.rollout_job("orchestrator"), job, msg_id="honest")
            try:
                await asyncio.wait_for(done.wait(), 120)
                res.honest_episode = "compared"
            except TimeoutError:
                res.honest_episode = "not compared within 120 s"
            await sub.unsubscribe()
            after = await pids(bus)
            res.exited = sorted(set(before) - set(after))
    return res


def main(argv: list[str] | None = None) -> int:
    _, s, out = _common.bench_args("fuzz", __doc__, "~30 s", full=FULL, quick=QUICK, argv=argv)
    console = Console()
    res, machine, elapsed = _common.run(
        lambda log: measure(s, log), ["nats-py", "msgspec"], console
    )
    rows = [
        ("poison messages published", res.sent, "-"),
        ("  of them dead-lettered (with a reason)", res.dead_lettered, f"{res.sent}"),
        ("malformed requests", res.requests, "-"),
        (
            "  answered (error replies; a status endpoint answers its status)",
            res.error_replies,
            f"{res.requests}",
        ),
        ("  unanswered", len(res.no_reply), "0"),
        ("publishes without a reply subject on endpoints", res.no_reply_sent, "-"),
        (
            "  of them dead-lettered (no_reply; a status endpoint only logs them)",
            res.no_reply_dead_lettered,
            f"{res.no_reply_expected}",
        ),
        ("  service instances that exited after them", len(res.exited_after_no_reply), "0"),
        ("KV keys given garbage", res.kv_garbage, "-"),
        ("episode with reward 1.7e308", res.huge_reward, "dead-lettered"),
        ("service instances that exited", len(res.exited), "0"),
        ("honest episode afterwards", res.honest_episode, "compared"),
    ]
    ok = (
        res.dead_lettered == res.sent
        and not res.no_reply
        and res.no_reply_dead_lettered == res.no_reply_expected
        and not res.exited_after_no_reply
        and not res.exited
        and res.honest_episode == "compared"
        and res.huge_reward.startswith("dead-lettered")
    )
    notes = [f"Dead-letter reasons: {json.dumps(res.reasons)}"]
    if (
        res.not_dead_lettered
        or res.no_reply
        or res.no_reply_missing
        or res.exited_after_no_reply
        or res.exited
    ):
        notes += ["", "Misses (first 20):", ""]
        notes += [f"- no dead letter: {m}" for m in res.not_dead_lettered]
        notes += [f"- no reply: {m}" for m in res.no_reply[:20]]
        notes += [f"- no dead letter of a no-reply publish: {m}" for m in res.no_reply_missing]
        notes += [f"- exited after the no-reply publishes: {m}" for m in res.exited_after_no_reply]
        notes += [f"- exited: {m}" for m in res.exited]
    _common.report_checks(
        console,
        out,
        title="fuzz: hostile input against the whole stack",
        rows=rows,
        ok=ok,
        verdict="every target met",
        settings={**asdict(s), "payloads_used": min(s.payloads, len(corpus()))},
        machine=machine,
        elapsed_s=elapsed,
        results=asdict(res),
        notes=notes,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
