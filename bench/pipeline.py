"""Pipeline benchmark: episodes per second of the whole stack against the same episodes run in
one process without NATS, at the same concurrency, side by side in one run; where an episode's
time goes (per-stage latency) and where the CPU goes (per process).

What runs:

- **the stack** (ours): the embedded stack every training command uses
  (``aios_rl.stack.embedded.stack``: a ``nats-server -js`` with users, every service its own OS
  process under the supervisor): campaign, trainer, sampler, orchestrator-runner,
  teacher-gateway, teacher-oracle, reward, comparison, replay and rail. The shell and browser
  runners and the sites service are scaled to 0: no episode of theirs runs here. Each repeat
  starts a one-epoch campaign on the orchestrator train tasks (``tasks`` tasks, ``group_size``
  rollouts and ``reference_runs`` reference runs of each: every episode the campaign schedules)
  and times it from the start command to the last episode published on
  ``episode.compared.orchestrator`` (collected, taught, rewarded and compared). The campaign
  then trains and finishes untimed before anything else runs.
- **in process** (the baseline): the same number of episodes of the same tasks, through the
  in-process kernel (``aios_rl.local.Rollouts``: the runner's episode function and the
  orchestrator adapter) with the same student (the stack's active checkpoint, loaded here)
  answering with the sampler's mapping (``LocalPolicy``), ``concurrency`` episodes at a time;
  no NATS, no teacher, reward or comparison stage.

Concurrency: the stack runs ``runner_replicas`` x ``runner_concurrency`` episodes at once (the
runner's consumer loops); the baseline the same number. Measured with 1 and 2 runner replicas,
each on a fresh stack, to see whether more runners help once the cores are full (the cores
kept busy, CPU seconds of every process over wall seconds, are in the notes). The orchestrator environment is cheap
(every step is a pure function of the task and the decisions), so what is measured is the cost
of the architecture: bus round trips per step, serialization, JetStream acks, the stages.

Per-stage latency (p50 / p99 over every timed episode) from each episode's timestamps: the time
the ROLLOUTS stream stored the job on ``rollout.job.orchestrator`` (queued: the server's clock,
before any runner can pull it; a core subscriber here can hear of the job after a runner started
it), ``timings.started_at``,
``finished_at`` and ``timings.stages`` (completed, taught, rewarded, compared), and the time this
process received the compared episode. CPU seconds per process: ``psutil`` over the
supervisor's children (and nats-server), between the start command and the last compared
episode.

``--student minilm``: the same with a minilm student (a frozen all-MiniLM-L6-v2 encoder under a
small head, about two orders of magnitude more model work per step): fewer episodes, one runner
scale, results in ``bench/results/pipeline-minilm.{md,json}``. There the model, not the
architecture, is most of the cost.

Run from the repo root:

    .venv/bin/python bench/pipeline.py            # ~1.5 min; writes bench/results/pipeline.{md,json}
    .venv/bin/python bench/pipeline.py --quick    # ~15 s smoke run (stack start-up included)
    .venv/bin/python bench/pipeline.py --student minilm   # writes bench/results/pipeline-minilm.*
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run as a script: `bench` importable

import psutil
import torch
from rich.console import Console
from sampler import batch_counters

from aios_rl.bus import Bus
from aios_rl.envs.orchestrator import generate
from aios_rl.envs.orchestrator.adapter import OrchestratorHost
from aios_rl.envs.registry import task_store
from aios_rl.local import LocalPolicy, Rollouts, eval_jobs, runner_settings
from aios_rl.stack.embedded import active_checkpoint, stack
from aios_rl.state.checkpoints import CheckpointRegistry
from aios_rl.stats import quantile
from aios_rl.student import load_student
from bench import _common
from contracts import (
    CampaignEvent,
    CampaignSpec,
    CampaignStatus,
    DecodingRegime,
    Episode,
    OrchestratorTask,
    RolloutJob,
    StartCampaign,
)
from contracts.subjects import STREAM_ROLLOUTS


@dataclass(frozen=True)
class Settings:
    """What one run measures. Every loop is bounded."""

    tasks: int
    """Orchestrator train tasks per epoch (the campaign's ``tasks_per_epoch``)."""
    group_size: int
    """Rollouts per task."""
    reference_runs: int
    """Reference runs per task (episodes too: the campaign schedules them with the rollouts)."""
    repeats: int
    """Timed epochs of each side (the order alternates)."""
    runner_replicas: int = 1
    """Orchestrator runner processes of the stack (set per scale from ``scales``)."""
    scales: tuple[int, ...] = (1, 2)
    """Runner replica counts measured, each on a fresh stack (the first is the headline)."""
    runner_concurrency: int = 8
    """Episodes each runner replica runs at once (the service's default)."""
    temperature: float = 1.0
    """Decoding temperature of every episode (the campaign's default regime)."""
    timeout_s: float = 600.0
    """Deadline of one epoch of the stack, start to finish."""
    student: str = "tiny"
    """The student backend of the stack's initial checkpoint (the trainer's ``--backend``)."""

    @property
    def episodes(self) -> int:
        return self.tasks * (self.group_size + self.reference_runs)

    @property
    def concurrency(self) -> int:
        return self.runner_replicas * self.runner_concurrency


FULL = Settings(tasks=48, group_size=4, reference_runs=2, repeats=5)
QUICK = Settings(tasks=4, group_size=4, reference_runs=2, repeats=1, scales=(1,))
MINILM_FULL = Settings(
    tasks=16, group_size=4, reference_runs=2, repeats=2, scales=(1,), student="minilm"
)
MINILM_QUICK = Settings(
    tasks=2, group_size=4, reference_runs=2, repeats=1, scales=(1,), student="minilm"
)

STAGES = ("queued", "started", "completed", "taught", "rewarded", "compared", "received")
"""An episode's timestamps in pipeline order (``received``: this process got it compared)."""
SPANS = (
    ("queued", "started", "queue wait (job published -> runner starts it)"),
    ("started", "completed", "run (runner: every step asked of the sampler)"),
    ("completed", "taught", "teach (gateway, oracle teacher)"),
    ("taught", "rewarded", "reward"),
    ("rewarded", "compared", "compare (waits for the task's reference runs)"),
    ("compared", "received", "compared -> seen by a subscriber"),
    ("queued", "received", "end to end (job published -> compared seen)"),
)


# -- CPU per process --------------------------------------------------------------------------


def process_label(p: psutil.Process) -> str:
    """``services.runner --env orchestrator`` -> ``orchestrator-runner``; ``nats-server``."""
    try:
        cmd = p.cmdline()
    except psutil.Error:
        return f"pid {p.pid}"
    if cmd and "python" in Path(cmd[0]).name and "-m" in cmd:
        module, *args = cmd[cmd.index("-m") + 1 :]
        name = module.removeprefix("services.").replace("_", "-").replace(".", "-")
        if "--env" in args:
            name = f"{args[args.index('--env') + 1]}-runner"
        return name
    return Path(cmd[0]).name if cmd else f"pid {p.pid}"


def cpu_by_process() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process (the bench and the supervisor) and of
    each of its children, summed per label (replicas together)."""
    me = psutil.Process()
    out: dict[str, float] = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        label = "bench + supervisor (this process)" if p.pid == me.pid else process_label(p)
        out[label] = out.get(label, 0.0) + t.user + t.system
    return out


# -- the stack --------------------------------------------------------------------------------


class Watch:
    """What this process sees of the pipeline: when each job was published, each compared
    episode, and the campaign events."""

    def __init__(self) -> None:
        self.queued: dict[str, float] = {}
        self.compared: dict[str, tuple[Episode, float]] = {}
        self.ended: dict[str, asyncio.Event] = {}
        self.end_kind: dict[str, str] = {}
        self.all_compared: dict[str, asyncio.Event] = {}
        self.expected: dict[str, int] = {}
        self.mean_batch: dict[str, float] = {}
        """Campaign -> the sampler's mean batch size while its episodes ran."""

    async def on_job(self, msg: object, raw: object) -> None:
        """``raw`` comes from the ROLLOUTS stream: its metadata says when the job was stored."""
        if isinstance(msg, RolloutJob):
            stored = raw.metadata.timestamp  # type: ignore[attr-defined]
            self.queued.setdefault(msg.episode_id, stored.timestamp())

    async def on_compared(self, msg: object, _raw: object) -> None:
        now = time.time()
        if not isinstance(msg, Episode) or msg.episode_id in self.compared:
            return
        self.compared[msg.episode_id] = (msg, now)
        cid = msg.campaign_id
        got = sum(1 for ep, _ in self.compared.values() if ep.campaign_id == cid)
        if cid in self.expected and got >= self.expected[cid]:
            self.all_compared[cid].set()

    async def on_event(self, msg: object, _raw: object) -> None:
        if isinstance(msg, CampaignEvent) and msg.kind in ("finished", "failed", "stopped"):
            self.end_kind[msg.campaign_id] = msg.kind
            self.ended.setdefault(msg.campaign_id, asyncio.Event()).set()

    def expect(self, campaign_id: str, episodes: int) -> None:
        self.expected[campaign_id] = episodes
        self.all_compared[campaign_id] = asyncio.Event()
        self.ended.setdefault(campaign_id, asyncio.Event())


def spec_for(campaign_id: str, s: Settings, tasks: int) -> CampaignSpec:
    return CampaignSpec(
        campaign_id=campaign_id,
        environments={"orchestrator": 1.0},
        tasks_per_epoch=tasks,
        group_size=s.group_size,
        reference_runs=s.reference_runs,
        epochs=1,
        seed=len(campaign_id),
    )


async def stack_epoch(
    bus: Bus, watch: Watch, s: Settings, tag: str, tasks: int
) -> tuple[float, dict[str, float], list[Episode]]:
    """One epoch of a fresh campaign: the seconds from the start command to the last compared
    episode, CPU seconds per process meanwhile, and its compared episodes; returns once the
    campaign has finished (trained) too."""
    cid = f"bench-{tag}-{uuid.uuid4().hex[:6]}"
    n = tasks * (s.group_size + s.reference_runs)
    watch.expect(cid, n)
    batches0, items0 = await batch_counters(bus)
    cpu0 = cpu_by_process()
    t0 = time.perf_counter()
    status = await bus.request(
        bus.names.campaign_cmd("start"),
        StartCampaign(spec=spec_for(cid, s, tasks)),
        CampaignStatus,
        timeout=30,
    )
    if status.state == "failed":
        raise RuntimeError(f"campaign {cid} failed to start: {status}")
    async with asyncio.timeout(s.timeout_s):
        ended = asyncio.create_task(watch.ended[cid].wait())
        compared = asyncio.create_task(watch.all_compared[cid].wait())
        await asyncio.wait({ended, compared}, return_when=asyncio.FIRST_COMPLETED)
        if not compared.done():
            compared.cancel()
            raise RuntimeError(
                f"campaign {cid} ended ({watch.end_kind.get(cid)}) before every episode was "
                "compared"
            )
        elapsed = time.perf_counter() - t0
        cpu1 = cpu_by_process()
        batches1, items1 = await batch_counters(bus)
        await ended
    if watch.end_kind.get(cid) != "finished":
        raise RuntimeError(f"campaign {cid} ended {watch.end_kind.get(cid)}")
    cpu = {k: cpu1.get(k, 0.0) - cpu0.get(k, 0.0) for k in cpu1}
    watch.mean_batch[cid] = (items1 - items0) / max(1.0, batches1 - batches0)
    return elapsed, cpu, [ep for ep, _ in watch.compared.values() if ep.campaign_id == cid]


def stamps_of(watch: Watch, episodes: list[Episode]) -> list[dict[str, float]]:
    """Each episode's timestamps by stage name (``STAGES``)."""
    out = []
    for ep in episodes:
        st = {
            "queued": watch.queued.get(ep.episode_id, float("nan")),
            "started": ep.timings.started_at,
            **ep.timings.stages,
            "received": watch.compared[ep.episode_id][1],
        }
        out.append({k: v for k, v in st.items() if k in STAGES})
    return out


# -- in process -------------------------------------------------------------------------------


async def in_process_epoch(
    rollouts: Rollouts, tasks: list[OrchestratorTask], s: Settings, seed: int
) -> tuple[float, float, int]:
    """The same number of episodes of ``tasks`` in this process, through the in-process kernel
    (the runner's episode function, the sampler's mapping): (seconds, CPU seconds of this
    process, steps)."""
    per_task = s.group_size + s.reference_runs
    regime = DecodingRegime(temperature=s.temperature)
    jobs = [
        j
        for k in range(per_task)
        for j in eval_jobs(
            tasks,
            "orchestrator",
            f"inproc-{seed}-{k}-",
            seed_base=seed * 10_000 + k * len(tasks),
            regime=regime,
            split="train",
        )
    ]
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    episodes = await rollouts.run(jobs)
    elapsed = time.perf_counter() - t0
    return elapsed, time.process_time() - cpu0, sum(len(ep.trajectory) for ep in episodes)


# -- the run ----------------------------------------------------------------------------------


async def measure(s: Settings, log: Callable[[str], None]) -> dict[int, dict]:
    """Every runner scale of ``s.scales``, each on a fresh stack: runner replicas -> results."""
    torch.set_num_threads(1)  # as the sampler serves (its torch_threads default)
    out = {}
    for replicas in s.scales:
        log(f"orchestrator-runner x {replicas} (concurrency {s.runner_concurrency} each)")
        out[replicas] = await measure_scale(dataclasses.replace(s, runner_replicas=replicas), log)
    return out


async def measure_scale(s: Settings, log: Callable[[str], None]) -> dict:
    """Warm-up, then ``s.repeats`` timed epochs of each side, on one fresh stack."""
    train = generate(max(s.tasks, 16), seed=0, split="train")
    res: dict = {"stack": [], "inproc": [], "stamps": [], "cpu": [], "steps_stack": []}
    with tempfile.TemporaryDirectory(prefix="aios-bench-pipeline-") as tmp:
        async with stack(
            None,
            namespace="",
            data_dir=Path(tmp),
            needs=set(),
            echo=log,
            fresh=True,
            name="bench-pipeline",
            scale={
                "shell-runner": 0,
                "browser-runner": 0,
                "sites": 0,
                "orchestrator-runner": s.runner_replicas,
            },
            service_args={
                "orchestrator-runner": ["--concurrency", str(s.runner_concurrency)],
                "trainer": ["--backend", s.student],
            },
        ) as st:
            bus = st.bus
            await task_store(bus, "orchestrator").put_all(train)
            watch = Watch()
            subs = [
                await bus.replay(
                    bus.names.rollout_job("orchestrator"),
                    watch.on_job,
                    stream=bus.names.stream(STREAM_ROLLOUTS),
                    since=dt.datetime.now(dt.UTC),
                ),
                await bus.subscribe(
                    bus.names.episode("compared", "orchestrator"), watch.on_compared
                ),
                await bus.subscribe(bus.names.campaign_event(">"), watch.on_event),
            ]
            try:
                active = await active_checkpoint(bus, 60)
                model = load_student(await CheckpointRegistry(bus).load(active))
                model.eval()
                host = OrchestratorHost(runner_settings("orchestrator"))
                by_id = {t.task_id: t for t in train}
                actor = Rollouts(
                    {"orchestrator": host}, by_id, LocalPolicy(model), workers=s.concurrency
                )
                log("warm-up: one small epoch through the stack, one in process (untimed)")
                warm = min(2, s.tasks)
                await stack_epoch(bus, watch, s, "warm", warm)
                res["warm_episodes"] = warm * (s.group_size + s.reference_runs)
                await in_process_epoch(actor, train[: s.tasks], s, seed=999)
                for r in range(s.repeats):
                    for side in ("stack", "inproc") if r % 2 == 0 else ("inproc", "stack"):
                        if side == "stack":
                            elapsed, cpu, eps = await stack_epoch(bus, watch, s, f"r{r}", s.tasks)
                            res["stack"].append(elapsed)
                            res["cpu"].append(cpu)
                            res["stamps"].extend(stamps_of(watch, eps))
                            res["steps_stack"].append(sum(len(ep.trajectory) for ep in eps))
                            res.setdefault("mean_batch", []).append(
                                watch.mean_batch[eps[0].campaign_id]
                            )
                            res.setdefault("tasks_stack", []).append(
                                sorted({ep.task_id for ep in eps})
                            )
                            log(
                                f"repeat {r + 1}/{s.repeats}: stack {s.episodes} episodes in "
                                f"{elapsed:.2f} s ({s.episodes / elapsed:.1f}/s)"
                            )
                        else:
                            # The campaign samples its tasks; the baseline runs the same ones
                            # when it ran after a stack epoch, else the first ``tasks``.
                            last = res.get("tasks_stack", [])
                            tasks = [by_id[t] for t in last[-1]] if last else train[: s.tasks]
                            tasks = (tasks + train)[: s.tasks]
                            elapsed, cpu_s, steps = await in_process_epoch(actor, tasks, s, r)
                            res["inproc"].append(elapsed)
                            res.setdefault("cpu_inproc", []).append(cpu_s)
                            res.setdefault("steps_inproc", []).append(steps)
                            log(
                                f"repeat {r + 1}/{s.repeats}: in process {s.episodes} episodes "
                                f"in {elapsed:.2f} s ({s.episodes / elapsed:.1f}/s)"
                            )
            finally:
                for sub in subs:
                    await sub.unsubscribe()
            if st.log_path is not None:
                res["log_lines"] = log_lines(st.log_path)
    return res


def log_lines(path: Path) -> dict[str, int]:
    """Lines each service wrote to the stack's log (replicas together), for the whole run."""
    out: dict[str, int] = {}
    with path.open(errors="replace") as f:
        for line in f:
            label, sep, _ = line.partition(" | ")
            if sep:
                name = label.strip().rsplit(".", 1)[0]
                out[name] = out.get(name, 0) + 1
    return out


def span_values(stamps: list[dict[str, float]], a: str, b: str) -> list[float]:
    """``b - a`` in milliseconds for every episode that has both stamps."""
    return [
        (st[b] - st[a]) * 1000
        for st in stamps
        if a in st and b in st and st[a] == st[a] and st[b] == st[b]  # not NaN
    ]


def build_rows(res: dict, s: Settings) -> list[_common.Row]:
    """Episodes/s, steps/s and CPU per episode of one scale (``s.runner_replicas``)."""
    n = s.episodes
    stack_rates = [n / t for t in res["stack"]]
    inproc_rates = [n / t for t in res["inproc"]]
    steps_stack = [k / t for k, t in zip(res["steps_stack"], res["stack"], strict=True)]
    steps_inproc = [k / t for k, t in zip(res["steps_inproc"], res["inproc"], strict=True)]
    cpu_stack = [sum(c.values()) / n * 1000 for c in res["cpu"]]
    cpu_inproc = [c / n * 1000 for c in res["cpu_inproc"]]
    at = f"runner x {s.runner_replicas}, {s.concurrency} episodes at once"
    return [
        _common.Row(
            f"episodes/s ({at})",
            "episodes/s",
            _common.median(stack_rates),
            _common.median(inproc_rates),
            samples={"ours": stack_rates, "baseline": inproc_rates},
        ),
        _common.Row(
            f"policy steps/s ({at})",
            "steps/s",
            _common.median(steps_stack),
            _common.median(steps_inproc),
            samples={"ours": steps_stack, "baseline": steps_inproc},
        ),
        _common.Row(
            f"CPU per episode, every process ({at})",
            "ms",
            _common.median(cpu_stack),
            _common.median(cpu_inproc),
            higher_is_better=False,
            samples={"ours": cpu_stack, "baseline": cpu_inproc},
        ),
    ]


def cores_busy(res: dict) -> tuple[float, float]:
    """Median cores kept busy (CPU seconds / wall seconds): the stack's processes, and this one
    for the in-process side."""
    stack_busy = [sum(c.values()) / t for c, t in zip(res["cpu"], res["stack"], strict=True)]
    inproc_busy = [c / t for c, t in zip(res["cpu_inproc"], res["inproc"], strict=True)]
    return _common.median(stack_busy), _common.median(inproc_busy)


def stage_table(res: dict) -> tuple[str, dict[str, dict[str, float]]]:
    lines = ["| span | episodes | p50 (ms) | p99 (ms) |", "|---|---:|---:|---:|"]
    out = {}
    for a, b, name in SPANS:
        v = span_values(res["stamps"], a, b)
        if not v:
            lines.append(f"| {name} | 0 | - | - |")
            continue
        p50, p99 = quantile(v, 0.50), quantile(v, 0.99)
        out[name] = {"episodes": len(v), "p50_ms": p50, "p99_ms": p99}
        lines.append(
            f"| {name} | {len(v)} | {_common.fmt_number(p50)} | {_common.fmt_number(p99)} |"
        )
    return "\n".join(lines), out


def cpu_table(res: dict, s: Settings) -> tuple[str, dict[str, float]]:
    labels = sorted({k for c in res["cpu"] for k in c})
    per = {
        k: _common.median([c.get(k, 0.0) for c in res["cpu"]]) / s.episodes * 1000 for k in labels
    }
    total = sum(per.values()) or 1.0
    lines = ["| process | CPU per episode (ms) | share |", "|---|---:|---:|"]
    for k, v in sorted(per.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {k} | {_common.fmt_number(v)} | {v / total:.0%} |")
    inproc = _common.median(res["cpu_inproc"]) / s.episodes * 1000
    lines.append(f"| in process (the whole baseline) | {_common.fmt_number(inproc)} | |")
    return "\n".join(lines), per


def main(argv: list[str] | None = None) -> int:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument(
        "--student", choices=("tiny", "minilm"), default="tiny", help="the student (default tiny)"
    )
    known, rest = pre.parse_known_args(argv)
    minilm = known.student == "minilm"
    _, s, out = _common.bench_args(
        "pipeline-minilm" if minilm else "pipeline",
        __doc__,
        "~1 min" if minilm else "~15 s",
        full=MINILM_FULL if minilm else FULL,
        quick=MINILM_QUICK if minilm else QUICK,
        argv=rest,
        parents=[pre],
    )
    console = Console()
    by_scale, machine, elapsed = _common.run(
        lambda log: measure(s, log), ["torch", "nats-py", "msgspec", "psutil"], console
    )
    scaled = {n: dataclasses.replace(s, runner_replicas=n) for n in s.scales}
    rows = [r for n in s.scales for r in build_rows(by_scale[n], scaled[n])]
    _common.print_rows("pipeline: the stack vs in process", rows, "stack", "in process", console)
    head, res = scaled[s.scales[0]], by_scale[s.scales[0]]
    stages_md, stages = stage_table(res)
    cpu_md, cpu = cpu_table(res, head)
    console.print(stages_md)
    console.print(cpu_md)
    ratios = "; ".join(
        f"runner x {n} ({scaled[n].concurrency} at once): "
        f"{build_rows(by_scale[n], scaled[n])[0].ratio:.2f}x"
        for n in s.scales
    )
    busy = "; ".join(
        f"runner x {n}: stack {cores_busy(by_scale[n])[0]:.2f}, in process "
        f"{cores_busy(by_scale[n])[1]:.2f}"
        for n in s.scales
    )
    notes = [
        f"Stack / in process, episodes per second at equal concurrency: {ratios}.",
        f"Cores kept busy (CPU seconds of every process / wall seconds, of "
        f"{os.cpu_count()}): {busy}.",
        f"Each side runs {s.episodes} orchestrator episodes per repeat ({s.tasks} train tasks x "
        f"({s.group_size} rollouts + {s.reference_runs} reference runs)), temperature "
        f"{s.temperature:g}; {s.repeats} repeats per scale, the order alternating; medians "
        "over repeats.",
        "Stack: the start command of a one-epoch campaign -> the last of its episodes on "
        "episode.compared (collected, taught by the oracle teacher, rewarded, compared); the "
        "campaign's training afterwards is not timed. In process: the runner's step loop and "
        "the orchestrator adapter with the same checkpoint acting in this process, no NATS, no "
        "teacher / reward / comparison stage.",
        f"Stack processes: orchestrator-runner x {', '.join(map(str, s.scales))} (a fresh stack "
        f"per scale; concurrency {s.runner_concurrency} each), one of every other service; "
        "shell-runner, browser-runner and sites scaled to 0. Services log JSON at info level to "
        "the store's services.log through the supervisor (this process).",
        f"Log lines the services wrote (runner x {head.runner_replicas}, whole run: warm-up and "
        f"{res['warm_episodes'] + s.repeats * s.episodes} stack episodes): "
        + ", ".join(
            f"{k} {v}" for k, v in sorted(res.get("log_lines", {}).items(), key=lambda kv: -kv[1])
        )
        + ".",
        "The sampler's mean batch size while the stack's episodes ran (per repeat): "
        + "; ".join(
            f"runner x {n}: " + ", ".join(f"{b:.1f}" for b in by_scale[n]["mean_batch"])
            for n in s.scales
        )
        + ".",
        "CPU per episode (every process): the sum over nats-server, every service process and "
        "this one (bench + supervisor) between the start command and the last compared "
        "episode; in process: this process only. The per-stage and per-process tables below "
        f"are for runner x {head.runner_replicas}.",
    ]
    settings = {**asdict(s), "episodes": s.episodes}
    del settings["runner_replicas"]
    _common.report(
        console,
        out,
        title="Pipeline benchmark: the stack vs the same episodes in one process"
        + ("" if s.student == "tiny" else f", {s.student} student"),
        rows=rows,
        ours="stack",
        baseline="in process",
        machine=machine,
        settings=settings,
        notes=notes,
        elapsed_s=elapsed,
    )
    with out.open("a") as f:
        f.write(
            f"\n## Per-stage latency (stack, runner x {head.runner_replicas}, every timed "
            f"episode)\n\n{stages_md}\n\n## CPU per process (stack, runner x "
            f"{head.runner_replicas}, median over repeats)\n\n{cpu_md}\n"
        )
    json_path = out.with_suffix(".json")
    payload = json.loads(json_path.read_text())
    payload["stages"] = stages
    payload["cpu_per_episode_ms"] = cpu
    payload["raw"] = {
        str(n): {k: v for k, v in r.items() if k != "stamps"} for n, r in by_scale.items()
    }
    json_path.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("AIOS_LOG_LEVEL", "info")
    sys.exit(main())
