"""Reload benchmark: how long a pointer move in the checkpoint registry takes to reach every
sampler replica, with the replicas under load, and whether any request fails meanwhile.

What runs:

- an embedded ``nats-server -js``, the stack's topology under a fresh namespace, and
  ``checkpoints`` tiny student checkpoints (seeds 0, 1, ...) stored through
  ``CheckpointRegistry``; the first is made ``active`` before any sampler starts;
- ``replicas`` samplers, each ``python -m services.sampler`` as its own OS process with the
  service's defaults (one queue group on ``policy.act``, a cache of 4 loaded checkpoints);
- ``clients`` concurrent clients in this process sending ``policy.act`` requests for the
  ``active`` checkpoint one after the other, for the whole run (the load);
- ``moves`` pointer moves, one after the other: ``CheckpointRegistry.advance`` to the next
  checkpoint in a cycle longer than the samplers' cache, so every move loads its checkpoint
  from the Object Store. A move is done when every replica has logged
  ``sampler.active_switched`` to it (each replica's JSON log, read live): from then on it
  answers every request for ``active`` with the new checkpoint.

Per move, the time from just before ``advance`` is called to the last replica's switch (the
timestamp in its log line); p50 / p99 over the moves with the clients sending (under load) and,
as the baseline measured in the same run, over ``idle_moves`` moves with no client sending.
Failed requests: every request of the load that raised (timeout, no responders, an error reply)
while moves ran. Stale answers: requests sent after every replica had switched that came back
with the previous checkpoint (none may).

Run from the repo root:

    .venv/bin/python bench/reload.py            # ~1.5 min; writes bench/results/reload.{md,json}
    .venv/bin/python bench/reload.py --quick    # ~30 s smoke run
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run as a script: `bench` importable

from rich.console import Console
from sampler import make_observation

from aios_rl.bus import Bus, BusError
from aios_rl.stack.natsd import NatsServer
from aios_rl.state.checkpoints import CheckpointRegistry
from aios_rl.stats import quantile
from aios_rl.student import new_student
from bench import _common
from contracts import ActRequest, ActResponse, DecodingRegime


@dataclass(frozen=True)
class Settings:
    """What one run measures. Every loop is bounded."""

    moves: int
    """Pointer moves under load."""
    idle_moves: int
    """Pointer moves with no client sending (the baseline)."""
    replicas: int = 3
    """Sampler processes."""
    clients: int = 16
    """Concurrent clients of the load."""
    checkpoints: int = 6
    """Checkpoints the moves cycle through (more than the samplers' cache of 4: every move
    loads one from the Object Store)."""
    move_timeout_s: float = 30.0
    """Deadline for every replica to switch after one move."""
    request_timeout_s: float = 10.0
    """Deadline of every request of the load."""


FULL = Settings(moves=50, idle_moves=20)
QUICK = Settings(moves=6, idle_moves=3)

_ACTIONS = ["run_tests", "open_file src/a.py", "git diff", "submit", "ask_human", "dry_run"]


@dataclass
class Switches:
    """Each replica's ``sampler.active_switched`` log lines as they arrive."""

    seen: list[tuple[int, str, float]] = field(default_factory=list)
    """(replica, new checkpoint, unix time of the switch from its log line)."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def on_line(self, replica: int) -> Callable[[dict[str, Any]], None]:
        def note(record: dict[str, Any]) -> None:
            if record.get("event") != "sampler.active_switched":
                return
            at = dt.datetime.fromisoformat(str(record["timestamp"]).replace("Z", "+00:00"))
            self.seen.append((replica, str(record["new"]), at.timestamp()))
            self.changed.set()

        return note

    def switched(self, checkpoint: str, since: float) -> dict[int, float]:
        """Replica -> when it switched to ``checkpoint`` at or after ``since``."""
        out: dict[int, float] = {}
        for replica, new, at in self.seen:
            if new == checkpoint and at >= since - 0.05 and replica not in out:
                out[replica] = at
        return out


@dataclass
class Load:
    """The clients' counts: answered requests by checkpoint, failures, and every answer's send
    time with its checkpoint (to find stale answers after a move)."""

    answered: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    answers: list[tuple[float, str]] = field(default_factory=list)
    """(unix time the request was sent, checkpoint that answered)."""


@contextlib.asynccontextmanager
async def samplers(
    server: NatsServer, bus: Bus, switches: Switches, n: int, log: Callable[[str], None]
) -> AsyncIterator[None]:
    async with contextlib.AsyncExitStack() as stack:
        for r in range(1, n + 1):
            env = {"NATS_URL": server.url, "AIOS_NAMESPACE": bus.names.namespace}
            env["AIOS_REPLICA"] = str(r)
            await stack.enter_async_context(
                _common.start_service(
                    "services.sampler",
                    env,
                    {"service.ready", "sampler.active_switched"},
                    server.data_dir / f"sampler-{r}.log",
                    on_line=switches.on_line(r),
                )
            )
            log(f"sampler replica {r} of {n} serving")
        yield


async def client(
    bus: Bus, load: Load, c: int, stop: asyncio.Event, timeout: float, rng: random.Random
) -> None:
    k = 0
    while not stop.is_set():
        req = ActRequest(
            episode_id=f"load-c{c}-{k // 8}",
            step=k % 8,
            observation=make_observation(rng),
            candidates=rng.sample(_ACTIONS, 4),
            regime=DecodingRegime(temperature=0.9),
        )
        k += 1
        sent = time.time()
        try:
            resp = await bus.request(bus.names.policy_act(), req, ActResponse, timeout=timeout)
        except BusError as exc:
            load.failed += 1
            name = type(exc).__name__
            load.errors[name] = load.errors.get(name, 0) + 1
            continue
        load.answered += 1
        load.answers.append((sent, resp.checkpoint_id))


async def moves(
    registry: CheckpointRegistry,
    switches: Switches,
    ids: list[str],
    count: int,
    start: int,
    s: Settings,
) -> tuple[list[float], list[tuple[float, float, str, str]], int]:
    """``count`` moves through ``ids`` from index ``start``: each move's seconds to the last
    replica's switch; (move time, all switched time, old, new) per move; the next index."""
    took, windows = [], []
    i = start
    for _ in range(count):
        old, new = ids[i % len(ids)], ids[(i + 1) % len(ids)]
        i += 1
        t0 = time.time()
        await registry.advance(new, reason="reload bench", expect_active=old)
        async with asyncio.timeout(s.move_timeout_s):
            while len(done := switches.switched(new, t0)) < s.replicas:
                switches.changed.clear()
                await switches.changed.wait()
        last = max(done.values())
        took.append(last - t0)
        windows.append((t0, last, old, new))
    return took, windows, i


async def measure(s: Settings, log: Callable[[str], None]) -> dict:
    switches = Switches()
    load = Load()
    with _common.nats_server("aios-bench-reload-") as server:
        async with _common.stack_with_checkpoint(server, "bench-reload", "reload bench") as (
            bus,
            _,
            first,
        ):
            registry = CheckpointRegistry(bus)
            ids = [first]
            for seed in range(1, s.checkpoints):
                meta = await registry.store(
                    new_student("tiny", seed=seed).to_bytes(),
                    parent_id=first,
                    created_by="bench",
                    algorithm="init",
                )
                ids.append(meta.checkpoint_id)
            async with samplers(server, bus, switches, s.replicas, log):
                log(f"{s.idle_moves} moves with no load (the baseline)")
                idle, _, nxt = await moves(registry, switches, ids, s.idle_moves, 0, s)
                log(f"{s.moves} moves under {s.clients} clients")
                stop = asyncio.Event()
                async with asyncio.TaskGroup() as tg:
                    for c in range(s.clients):
                        tg.create_task(
                            client(bus, load, c, stop, s.request_timeout_s, random.Random(c))
                        )
                    await asyncio.sleep(1.0)  # the load ramps up before the first move
                    answered0, failed0 = load.answered, load.failed
                    t_start = time.time()
                    try:
                        loaded, windows, _ = await moves(registry, switches, ids, s.moves, nxt, s)
                    finally:
                        t_end = time.time()
                        stop.set()
    stale = sum(
        1
        for t0, last, old, _ in windows
        for sent, ckpt in load.answers
        if last < sent and ckpt == old and _before_next(sent, t0, windows)
    )
    return {
        "idle_s": idle,
        "loaded_s": loaded,
        "requests": load.answered - answered0 + load.failed - failed0,
        "failed": load.failed - failed0,
        "errors": load.errors,
        "stale": stale,
        "load_rate": (load.answered - answered0) / (t_end - t_start),
        "checkpoint_bytes": len(new_student("tiny", seed=0).to_bytes()),
    }


def _before_next(sent: float, t0: float, windows: list[tuple[float, float, str, str]]) -> bool:
    """Whether ``sent`` falls before the move after the one that started at ``t0``."""
    later = [w[0] for w in windows if w[0] > t0]
    return not later or sent < min(later)


def main(argv: list[str] | None = None) -> int:
    _, s, out = _common.bench_args("reload", __doc__, "~30 s", full=FULL, quick=QUICK, argv=argv)
    console = Console()
    res, machine, elapsed = _common.run(
        lambda log: measure(s, log), ["torch", "nats-py", "msgspec"], console
    )
    ms = 1000.0
    p = {(k, q): quantile(res[k], q / 100) * ms for k in ("loaded_s", "idle_s") for q in (50, 99)}
    ok = p["loaded_s", 99] <= 1000 and res["failed"] == 0 and res["stale"] == 0
    rows = [
        ("move -> every replica serves it, p50 (under load)", f"{p['loaded_s', 50]:.0f} ms", "-"),
        (
            "move -> every replica serves it, p99 (under load)",
            f"{p['loaded_s', 99]:.0f} ms",
            "<= 1000 ms",
        ),
        ("same, p50 with no load (baseline)", f"{p['idle_s', 50]:.0f} ms", "-"),
        ("same, p99 with no load (baseline)", f"{p['idle_s', 99]:.0f} ms", "-"),
        (
            "ratio p50 no load / under load",
            f"{p['idle_s', 50] / p['loaded_s', 50]:.2f}x",
            "-",
        ),
        (
            "failed requests while moves ran",
            f"{res['failed']} of {res['requests']}",
            "0",
        ),
        ("stale answers (old checkpoint after every replica switched)", str(res["stale"]), "0"),
        ("load served meanwhile", f"{res['load_rate']:.0f} req/s", "-"),
    ]
    notes = [
        f"{s.replicas} sampler replicas (`python -m services.sampler`, service defaults), "
        f"{s.clients} clients in this process; {s.moves} moves under load, {s.idle_moves} with "
        f"no load first; the moves cycle through {s.checkpoints} checkpoints of "
        f"{res['checkpoint_bytes'] / 2**20:.1f} MiB (more than the cache of 4: every move "
        "loads from the Object Store).",
        "A move's time: from just before CheckpointRegistry.advance to the timestamp of the "
        "last replica's sampler.active_switched log line (the model is loaded by then; every "
        "later request for active gets it).",
        f"Errors by kind: {res['errors'] or 'none'}.",
    ]
    _common.report_checks(
        console,
        out,
        title="Reload benchmark: a pointer move to every sampler replica",
        rows=rows,
        ok=ok,
        verdict="p99 within 1 s, no failed request, no stale answer",
        settings=asdict(s),
        machine=machine,
        elapsed_s=elapsed,
        results=res,
        notes=notes,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("AIOS_LOG_LEVEL", "info")
    sys.exit(main())
