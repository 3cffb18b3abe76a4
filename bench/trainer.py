"""Trainer benchmark: how fast one policy update of the tiny student runs, GRPO against PPO, with
1 and 2 torch threads, and what the trainer service adds around the same update over NATS.

Measured in one run, on toy-task episodes (``tests/toytask.py``'s ``ToyTask``: one-step,
rewarded, in GRPO groups of 4, so one episode is one sample):

1. Bare updates, in this process: ``build_batch`` then ``update`` (``aios_rl.student.train``)
   with the configuration the trainer service derives from the campaign defaults
   (``TrainerSettings()``: 4 epochs, minibatches of 64, Adam, KL to the reference at 0.01), from
   the same initial checkpoint every time, on 256 and 1024 samples. Reported as samples per
   second of one update (samples in the batch / wall time of ``update``; every sample is seen
   4 times). GRPO (group advantages, no critic) against the baseline PPO (clipped surrogate and
   value loss on GAE advantages), both with 1 torch thread, the services' default; then GRPO
   with 2 torch threads against 1 (on 256 samples only). Median of the repeats; the order alternates
   between repeats.
2. One trainer-service update end to end: ``python -m services.trainer`` as a separate process on
   an embedded nats-server, sent a ``TrainerUpdate`` (GRPO, 1024 samples) for episodes this bench
   published on ``episode.compared`` just before; the time from request to reply covers reading
   the episodes back from the stream, loading the base and reference checkpoints, the update,
   storing the new checkpoint and advancing ``active``. The service's own ``update_started`` /
   ``update_done`` log lines split that time. Against it, the bare ``update()`` on the same
   episodes from the same base in this process (which must give the very checkpoint the service
   stored).

Before anything is timed, each process runs one untimed update: the first
``torch.optim.Adam`` of a process imports ``torch._dynamo`` (seconds); the bench reports that
first-update cost separately.

Run from the repo root:

    .venv/bin/python bench/trainer.py            # ~1.5 min; writes bench/results/trainer.{md,json}
    .venv/bin/python bench/trainer.py --quick    # ~20 s;    writes bench/results/trainer-quick.{md,json}

(Times on 2 cores; other work on the machine stretches them, 2 torch threads most of all. Much
of a quick run is fixed cost: importing torch in two processes, and each one's first Adam.)
    .venv/bin/python bench/trainer.py --out /tmp/trainer.md
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests/toytask.py

import msgspec
import torch
from rich.console import Console

from aios_rl.bus import Bus
from aios_rl.state.checkpoints import CheckpointRegistry, checkpoint_id_of
from aios_rl.student import load_student
from aios_rl.student.train import UpdateConfig, build_batch, update, update_config
from bench import _common
from contracts import Episode, TrainerSettings, TrainerUpdate, TrainerUpdateResult
from tests.toytask import ToyTask


@dataclass(frozen=True)
class Settings:
    """Sizes and loop counts of one run. Every loop is bounded."""

    sizes: tuple[int, ...]
    """Samples per bare update (multiples of the group size, 4)."""
    repeats: int
    """Timed bare updates per algorithm, size and thread count."""
    service_size: int
    """Samples of each end-to-end trainer-service update."""
    service_repeats: int
    """Timed trainer-service updates (each followed by the bare update on the same data)."""
    group_size: int = 4
    """Rollouts per toy context (a GRPO group)."""


FULL = Settings(sizes=(256, 1024), repeats=3, service_size=1024, service_repeats=2)
QUICK = Settings(sizes=(64,), repeats=1, service_size=64, service_repeats=1)


def config_for(algorithm: str) -> UpdateConfig:
    """What the trainer service runs for a campaign with default trainer settings."""
    return update_config(TrainerSettings(algorithm=algorithm))  # type: ignore[arg-type]


def timed_update(
    weights: bytes, episodes: list[Episode], config: UpdateConfig
) -> tuple[float, bytes]:
    """One update from ``weights`` on ``episodes`` (reference: the same weights). Returns the
    seconds ``update`` took and the new weights."""
    model, reference = load_student(weights), load_student(weights)
    batch = build_batch(episodes, config=config)
    t0 = time.perf_counter()
    update(model, reference, batch, config)
    return time.perf_counter() - t0, model.to_bytes()


def first_update(weights: bytes, s: Settings) -> tuple[ToyTask, list[Episode], float]:
    """The toy task, the episodes of the bare updates (acted by ``weights``) and the seconds of
    this process's first update (16 samples), which warms torch up."""
    torch.set_num_threads(1)
    task = ToyTask(seed=1)
    model = load_student(weights)
    episodes = task.rollouts(model, groups=max(s.sizes) // s.group_size, group_size=s.group_size)
    seconds, _ = timed_update(weights, episodes[:16], config_for("grpo"))
    return task, episodes, seconds


# -- 1. bare updates ------------------------------------------------------------------------------


def measure_bare(
    s: Settings, weights: bytes, episodes: list[Episode], log: Callable[[str], None]
) -> dict[str, list[float]]:
    """Seconds per update, ``{"<algorithm> <size> t<threads>": [per repeat]}``."""
    # 2 threads only at the smallest size: on a busy machine they can be several times slower.
    runs = [("grpo", 1, s.sizes), ("ppo", 1, s.sizes), ("grpo", 2, s.sizes[:1])]
    out: dict[str, list[float]] = {}
    for r in range(s.repeats):
        log(f"bare updates: repeat {r + 1}/{s.repeats}")
        for algorithm, threads, sizes in runs if r % 2 == 0 else runs[::-1]:
            torch.set_num_threads(threads)
            for n in sizes:
                seconds, _ = timed_update(weights, episodes[:n], config_for(algorithm))
                out.setdefault(f"{algorithm} {n} t{threads}", []).append(seconds)
    torch.set_num_threads(1)
    return out


# -- 2. the trainer service end to end ----------------------------------------------------------


async def publish_compared(bus: Bus, episodes: list[Episode]) -> None:
    """Publish ``episodes`` on ``episode.compared`` as the comparison service would."""
    subject = bus.names.episode("compared", "orchestrator")
    for ep in episodes:
        await bus.publish_durable(subject, ep, msg_id=f"{ep.episode_id}:compared")


def rollouts(
    task: ToyTask, weights: bytes, n: int, group_size: int, campaign: str
) -> list[Episode]:
    """``n`` toy episodes acted by the student ``weights``, tagged with ``campaign`` (epoch 0)."""
    model = load_student(weights)
    eps = task.rollouts(model, groups=n // group_size, group_size=group_size, tag=f"-{campaign}")
    return [msgspec.structs.replace(e, campaign_id=campaign, epoch=0) for e in eps]


async def fresh_episodes(
    bus: Bus, task: ToyTask, weights: bytes, n: int, s: Settings, update_id: str
) -> tuple[list[Episode], float]:
    """Publish ``n`` fresh episodes (acted by ``weights``) for update ``update_id`` on
    ``episode.compared``; returns them and the unix time just before the first went out."""
    episodes = rollouts(task, weights, n, s.group_size, update_id)
    since = time.time()
    await publish_compared(bus, episodes)
    return episodes, since


async def service_update(
    bus: Bus, update_id: str, since: float, n: int
) -> tuple[float, TrainerUpdateResult, float]:
    """Ask the trainer service for a GRPO update of the active checkpoint on the episodes of
    ``update_id`` and time request to reply. Returns the seconds, the result and the unix time
    the request went out."""
    req = TrainerUpdate(
        update_id=update_id,
        campaign_id=update_id,
        epoch=0,
        since=since,
        settings=TrainerSettings(algorithm="grpo"),
    )
    sent = time.time()
    t0 = time.perf_counter()
    result = await bus.request(bus.names.trainer_update(), req, TrainerUpdateResult, timeout=600)
    seconds = time.perf_counter() - t0
    if result.samples != n:
        raise RuntimeError(f"the service learned from {result.samples} samples, not {n}")
    return seconds, result, sent


def log_times(log_path: Path, update_id: str) -> dict[str, float]:
    """Unix times of the trainer's ``update_started`` (episodes read, both checkpoints loaded,
    batch built) and ``update_done`` (checkpoint stored, active advanced) log lines for
    ``update_id``."""
    out = {}
    for line in log_path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and event.get("update_id") == update_id:
                out[event["event"]] = dt.datetime.fromisoformat(event["timestamp"]).timestamp()
    return out


async def measure_service(
    bus: Bus, task: ToyTask, weights: bytes, s: Settings, log: Callable[[str], None]
) -> dict[str, Any]:
    """The running trainer service's first update (untimed warm-up), then ``s.service_repeats``
    timed updates, each against the bare update on the same episodes from the same base (the
    order of the two alternates). Returns seconds per repeat and the unix time of each request."""
    registry = CheckpointRegistry(bus)
    out: dict[str, Any] = {"service_s": [], "bare_s": [], "same": [], "load_s": [], "sent": {}}
    _, since = await fresh_episodes(bus, task, weights, 16, s, "warmup")
    out["first_update_s"], *_ = await service_update(bus, "warmup", since, 16)
    log(
        f"first trainer-service update (16 samples): {out['first_update_s']:.1f} s (untimed warm-up)"
    )
    for r in range(s.service_repeats):
        log(f"trainer service: repeat {r + 1}/{s.service_repeats}")
        update_id = f"e2e{r}"
        base = (await registry.pointers())[0].active
        assert base is not None
        t0 = time.perf_counter()
        base_weights = await registry.load(base)
        out["load_s"].append(time.perf_counter() - t0)
        episodes, since = await fresh_episodes(bus, task, weights, s.service_size, s, update_id)
        # The service sorts fresh episodes by id before learning; so do we.
        ordered = sorted(episodes, key=lambda e: e.episode_id)
        if r % 2 == 0:
            seconds, result, sent = await service_update(bus, update_id, since, s.service_size)
            bare, new_weights = timed_update(base_weights, ordered, config_for("grpo"))
        else:
            bare, new_weights = timed_update(base_weights, ordered, config_for("grpo"))
            seconds, result, sent = await service_update(bus, update_id, since, s.service_size)
        if result.parent_id != base:
            raise RuntimeError(f"the service updated {result.parent_id}, not {base}")
        out["sent"][update_id] = sent
        out["service_s"].append(seconds)
        out["bare_s"].append(bare)
        out["same"].append(checkpoint_id_of(new_weights) == result.checkpoint_id)
    return out


async def measure(s: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    """Everything: bare updates, then the service against the bare update on the same data."""
    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    with _common.nats_server("aios-bench-trainer-") as server:
        stack = _common.stack_with_checkpoint(server, "bench-trainer", "trainer bench")
        async with stack as (bus, weights, _):
            out["checkpoint_bytes"] = len(weights)
            env = {"NATS_URL": server.url, "AIOS_NAMESPACE": bus.names.namespace}
            # While the service boots: this process's episodes and its untimed first update.
            warm_up = asyncio.create_task(asyncio.to_thread(first_update, weights, s))
            started = time.perf_counter()
            service_log = server.data_dir / "trainer-service.log"
            async with _common.start_service(
                "services.trainer", env, {"service.ready"}, service_log
            ):
                out["service_start_s"] = time.perf_counter() - started
                task, episodes, out["bench_first_update_s"] = await warm_up
                log(
                    f"first update in this process: {out['bench_first_update_s']:.1f} s (untimed warm-up)"
                )
                out["bare"] = measure_bare(s, weights, episodes, log)
                out["service"] = svc = await measure_service(bus, task, weights, s, log)
            # The service has stopped: its log is complete.
            marks = {u: log_times(service_log, u) for u in svc["sent"]}
            svc["before_update_s"] = [
                m["update_started"] - svc["sent"][u] for u, m in marks.items()
            ]
            svc["update_to_done_s"] = [
                m["update_done"] - m["update_started"] for m in marks.values()
            ]
    return out


def build_rows(res: dict[str, Any], s: Settings) -> list[_common.Row]:
    bare, svc = res["bare"], res["service"]

    def rate(key: str) -> list[float]:
        n = int(key.split()[1])
        return [n / sec for sec in bare[key]]

    rows = []
    for n in s.sizes:
        grpo, ppo = rate(f"grpo {n} t1"), rate(f"ppo {n} t1")
        rows.append(
            _common.Row(
                f"{n} samples: GRPO vs PPO (1 thread)",
                "samples/s",
                _common.median(grpo),
                _common.median(ppo),
                samples={"ours": grpo, "baseline": ppo},
            )
        )
    for n in s.sizes[:1]:
        two, one = rate(f"grpo {n} t2"), rate(f"grpo {n} t1")
        rows.append(
            _common.Row(
                f"{n} samples, GRPO: 2 torch threads vs 1",
                "samples/s",
                _common.median(two),
                _common.median(one),
                samples={"ours": two, "baseline": one},
            )
        )
    rows.append(
        _common.Row(
            f"{s.service_size} samples, GRPO: trainer service over NATS vs bare update()",
            "s",
            _common.median(svc["service_s"]),
            _common.median(svc["bare_s"]),
            higher_is_better=False,
            samples={
                "ours": svc["service_s"],
                "baseline": svc["bare_s"],
                "service_before_update_s": svc["before_update_s"],
                "service_update_to_done_s": svc["update_to_done_s"],
                "checkpoint_load_s": svc["load_s"],
            },
        )
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    _, s, out = _common.bench_args("trainer", __doc__, "~20 s", full=FULL, quick=QUICK, argv=argv)
    console = Console()
    packages = ["torch", "nats-py", "msgspec"]
    res, machine, elapsed = _common.run(lambda log: measure(s, log), packages, console)
    rows = build_rows(res, s)
    title = "trainer: one update of the tiny student"
    _common.print_rows(title, rows, "contender", "baseline", console)
    cfg = config_for("grpo")
    svc = res["service"]
    med = {
        k: _common.median(svc[k])
        for k in ("service_s", "bare_s", "before_update_s", "update_to_done_s", "load_s")
    }
    summary = [
        "Baselines: PPO for the algorithm rows (ratio GRPO / PPO), 1 torch thread for the thread row (ratio 2 / 1), "
        "the bare update() for the service row (ratio bare / service: below 1 by the service's overhead).",
        *(f"{r.name}: {r.ratio:.2f}x" for r in rows),
        f"Trainer service overhead per update of {s.service_size} samples: {med['service_s'] - med['bare_s']:.2f} s "
        f"({med['service_s']:.2f} s end to end, {med['bare_s']:.2f} s in the bare update()).",
    ]
    for line in summary[1:]:
        console.print(line)
    steps = ", ".join(
        f"{cfg.update_epochs * math.ceil(n / cfg.minibatch_size)} at {n}" for n in s.sizes
    )
    reply = med["service_s"] - med["before_update_s"] - med["update_to_done_s"]
    notes = [
        *summary,
        f"Where the service's time went (medians, from its update_started / update_done log lines): "
        f"{med['before_update_s']:.2f} s from the request to update_started (read the episodes back from the "
        f"EPISODES stream, load base and reference from the registry, build_batch); "
        f"{med['update_to_done_s']:.2f} s from update_started to update_done (update(), serialise, store the new "
        f"checkpoint, advance active; the bare update() alone: {med['bare_s']:.2f} s); {reply:.2f} s to the reply.",
        f"Loading one checkpoint ({res['checkpoint_bytes'] / 2**20:.1f} MiB) from the registry into this process took "
        f"{med['load_s']:.2f} s; the service loads two per update (base, and the reference, which is the base unless "
        "the request names another).",
        f"The bare update() on the service's episodes, from its base, gave the checkpoint the service stored, bit for "
        f"bit: {'yes' if all(svc['same']) else 'NO'} ({sum(svc['same'])} of {len(svc['same'])}).",
        f"samples/s = samples in the batch / wall time of one update() call. An update makes {cfg.update_epochs} passes "
        f"over the batch in minibatches of {cfg.minibatch_size}, one Adam step each ({steps} samples).",
        f"Update configuration: the trainer service's for TrainerSettings() (lr {cfg.learning_rate}, clip "
        f"{cfg.clip_low}/{cfg.clip_high}, KL to the reference {cfg.kl_coef} ({cfg.kl_estimator}), {cfg.aggregation} "
        "aggregation). Bare updates all start from the initial tiny checkpoint (the reference: the same weights); "
        "the service's start from whatever is active. All episodes are acted by the initial checkpoint.",
        f"First update in a fresh process (untimed warm-up; mostly the first torch.optim.Adam importing torch._dynamo): "
        f"{res['bench_first_update_s']:.1f} s in this process on 16 samples (while the service was starting), "
        f"{svc['first_update_s']:.1f} s end to end for the trainer service's first update (16 samples). "
        f"The service process took {res['service_start_s']:.1f} s to start.",
        "Bare updates and service rows: median of the repeats (the service and the bare update take turns going "
        "first). The service, nats-server and this process share this machine's cores (and whatever else runs on it: "
        "see the load average).",
    ]
    _common.report(
        console,
        out,
        title="Trainer benchmark: one update of the tiny student, and the trainer service around it",
        rows=rows,
        ours="contender",
        baseline="baseline",
        machine=machine,
        settings={**asdict(s), "algorithm_e2e": "grpo", "torch_threads": "1 unless stated"},
        notes=notes,
        elapsed_s=elapsed,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
