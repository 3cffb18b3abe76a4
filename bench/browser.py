"""Browser environment benchmark: episodes per second of the context pool (one long-lived
Chromium, a fresh browser context per episode) against a fresh Chromium per episode, how the
real runner service scales with replicas, and what one runner holds in memory.

Measured in one run, on MiniWoB++ tasks (every task of ``MINIWOB_TASKS`` in turn, seeds 0, 1,
...; no sites service needed), with a scripted policy that takes the first candidate at every
step, episodes of at most 4 steps, screenshots of failed episodes off:

1. In this process, no NATS: ``BrowserHost`` (one Chromium, a fresh context per episode) against
   the baseline, a Chromium launched for each episode and closed after it (through the same
   Playwright driver, so only the browser's launch differs). The same episodes, two at a time
   for both (a runner's default concurrency), the two taking turns round by round; episodes per
   second, median over rounds.
2. The real runner service through NATS: 1, 2 and 4 replicas of
   ``python -m services.runner`` with ``AIOS_ENV=browser`` as subprocesses (each its own
   Chromium, concurrency 2), on an embedded nats-server; jobs published on
   ``rollout.job.browser``, episodes counted on ``episode.completed.browser``, the policy a
   scripted ``policy.act`` endpoint in this process. Replicas are added one phase after the
   other (1, then 2, then 4); every phase first runs warm-up jobs (a new replica launches its
   Chromium on its first episode), then times a batch. Compared with n times one replica's rate:
   the ratio is the scaling efficiency.
3. Memory per runner: the resident set of each replica's process plus its children (the
   Playwright driver and every Chromium process), after each phase, against the same sum after
   the first phase's warm-up (does a long-lived Chromium grow with the episodes it ran?).

Run from the repo root:

    .venv/bin/python bench/browser.py            # ~2-3 min; results in bench/results/browser.md
    .venv/bin/python bench/browser.py --quick    # ~40 s smoke run
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run as a script: `bench` importable

import psutil
from rich.console import Console

from aios_rl.bus import Bus, Service, connect, discover, provision
from aios_rl.envs.browser.adapter import CHROMIUM_ARGS, BrowserHost, BrowserRunnerSettings
from aios_rl.envs.browser.miniwob import MINIWOB_TASKS
from aios_rl.envs.browser.store import BrowserTaskStore, browser_task_id
from aios_rl.stack.natsd import NatsServer
from bench import _common
from contracts import ActRequest, ActResponse, BrowserTask, Episode, Names, RolloutJob


@dataclass(frozen=True)
class Settings:
    max_steps: int
    concurrency: int
    """Episodes at once, in this process (part 1) and in each replica (part 2)."""
    pool_episodes: int
    """Episodes per round and side in part 1."""
    pool_rounds: int
    replicas: tuple[int, ...]
    warmup_jobs: int
    """Warm-up jobs per replica at the start of each phase of part 2."""
    jobs_per_replica: int
    """Timed jobs per replica in each phase of part 2."""


FULL = Settings(
    max_steps=4,
    concurrency=2,
    pool_episodes=16,
    pool_rounds=2,
    replicas=(1, 2, 4),
    warmup_jobs=2,
    jobs_per_replica=16,
)
QUICK = Settings(
    max_steps=4,
    concurrency=2,
    pool_episodes=4,
    pool_rounds=1,
    replicas=(1, 2),
    warmup_jobs=1,
    jobs_per_replica=4,
)


def make_tasks(n: int, max_steps: int) -> list[BrowserTask]:
    """``n`` MiniWoB tasks: every task of ``MINIWOB_TASKS`` in turn, seed 0 first, then 1 ..."""
    out = []
    for i in range(n):
        t = BrowserTask(
            task_id="",
            kind="miniwob",
            flow=MINIWOB_TASKS[i % len(MINIWOB_TASKS)],
            seed=i // len(MINIWOB_TASKS),
            max_steps=max_steps,
        )
        fields = {f: getattr(t, f) for f in t.__struct_fields__}
        out.append(BrowserTask(**{**fields, "task_id": browser_task_id(t)}))
    return out


def runner_settings(s: Settings) -> BrowserRunnerSettings:
    return BrowserRunnerSettings(
        nats_url="", concurrency=s.concurrency, max_steps=s.max_steps, screenshots=False
    )


# -- part 1: the context pool against a fresh Chromium per episode ------------------------------


class FreshChromiumHost(BrowserHost):
    """The baseline: a host that launches its Chromium through a shared Playwright driver and
    serves one episode; :meth:`close_browser` ends that Chromium."""

    def __init__(self, settings: BrowserRunnerSettings, playwright: Any) -> None:
        super().__init__(settings)
        self._pw = playwright  # BrowserHost.browser() launches with this driver, once

    async def close_browser(self) -> None:
        if self._browser is not None:
            await self._browser.close()
            self._browser = None


async def episode(host: BrowserHost, task: BrowserTask, max_steps: int) -> tuple[str, int]:
    """One episode of the first-candidate policy: (outcome, steps)."""
    env = await host.open(task, seed=task.seed, max_steps=max_steps)
    try:
        while not env.done:
            cands = env.candidates
            await env.step(cands[0] if cands else "scroll down")
        result = env.result()
    finally:
        await env.close()
    return result.outcome, env.steps


async def fresh_episode(
    settings: BrowserRunnerSettings, playwright: Any, task: BrowserTask, max_steps: int
) -> tuple[str, int]:
    host = FreshChromiumHost(settings, playwright)
    try:
        return await episode(host, task, max_steps)
    finally:
        await host.close_browser()


async def concurrently(
    tasks: list[BrowserTask], concurrency: int, run_one: Callable[[BrowserTask], Any]
) -> tuple[float, list[tuple[str, int]]]:
    """Run ``run_one`` on every task, ``concurrency`` at a time: (seconds, results)."""
    queue = list(enumerate(tasks))
    results: list[Any] = [None] * len(tasks)

    async def worker() -> None:
        while queue:
            i, task = queue.pop(0)
            results[i] = await run_one(task)

    started = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        for _ in range(concurrency):
            tg.create_task(worker())
    return time.perf_counter() - started, results


async def measure_pool(s: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    settings = runner_settings(s)
    tasks = make_tasks(s.pool_episodes, s.max_steps)
    rates: dict[str, list[float]] = {"ours": [], "baseline": []}
    busy: dict[str, list[float]] = {"ours": [], "baseline": []}
    outcomes: dict[str, int] = {}
    steps = 0
    launch_s: list[float] = []
    host = BrowserHost(settings)
    try:
        await concurrently(tasks[:2], s.concurrency, lambda t: episode(host, t, s.max_steps))
        async with async_playwright() as playwright:  # started once, for every launch
            for _ in range(3):  # what one launch costs, alone
                started = time.perf_counter()
                browser = await playwright.chromium.launch(
                    executable_path=settings.chromium, headless=True, args=list(CHROMIUM_ARGS)
                )
                launch_s.append(time.perf_counter() - started)
                await browser.close()
            for r in range(s.pool_rounds):
                sides = [
                    ("ours", lambda t: episode(host, t, s.max_steps)),
                    ("baseline", lambda t: fresh_episode(settings, playwright, t, s.max_steps)),
                ]
                for key, run_one in sides if r % 2 == 0 else reversed(sides):
                    log(f"pool round {r + 1}/{s.pool_rounds}: {key}, {len(tasks)} episodes")
                    mark = cpu_mark()
                    elapsed, results = await concurrently(tasks, s.concurrency, run_one)
                    busy[key].append(cores_busy(mark, cpu_mark()))
                    rates[key].append(len(tasks) / elapsed)
                    if key == "ours":
                        for outcome, n in results:
                            outcomes[outcome] = outcomes.get(outcome, 0) + 1
                            steps += n
    finally:
        await host.aclose()
    return {
        **rates,
        "outcomes": outcomes,
        "steps_per_episode": steps / (len(tasks) * s.pool_rounds),
        "launch_s": launch_s,
        "cores_busy": busy,
        "pool_launches": host.launches,
    }


# -- part 2 and 3: the runner service with 1, 2, 4 replicas --------------------------------------


def policy_service(bus: Bus) -> Service:
    """``policy.act``: the first candidate, at once."""
    svc = Service(bus, name="bench-policy", version="0.0.1")

    async def act(req: ActRequest) -> ActResponse:
        return ActResponse(action=req.candidates[0], action_index=0, checkpoint_id="scripted")

    svc.endpoint("act", bus.names.policy_act(), ActRequest, act, concurrency=16)
    return svc


class Completions:
    """Counts the episodes published on ``episode.completed.browser`` by id."""

    def __init__(self) -> None:
        self.seen: dict[str, Episode] = {}
        self.changed = asyncio.Event()

    async def on_message(self, msg: object, _raw: object) -> None:
        if isinstance(msg, Episode):
            self.seen[msg.episode_id] = msg
            self.changed.set()

    async def wait_for(self, ids: list[str], timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while not all(i in self.seen for i in ids):
                self.changed.clear()
                await self.changed.wait()


def cpu_mark() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores."""
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    total = sum(t)
    return total - idle, total


def cores_busy(start: tuple[float, float], end: tuple[float, float]) -> float:
    """How many cores the whole machine kept busy between two :func:`cpu_mark`s."""
    return (end[0] - start[0]) / (end[1] - start[1]) * psutil.cpu_count()


def memory(pid: int) -> dict[str, float]:
    """MiB held by process ``pid`` and its children (the Playwright driver, Chromium): the
    resident sets summed (shared pages counted in each process) and the proportional sets."""
    procs = [psutil.Process(pid)]
    procs += procs[0].children(recursive=True)
    rss = pss = 0.0
    chromium = 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            info = p.memory_full_info()
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
            chromium += "chrom" in p.name().lower()
    return {"rss_mib": rss / 2**20, "pss_mib": pss / 2**20, "chromium_procs": chromium}


async def run_jobs(
    bus: Bus, done: Completions, tasks: list[BrowserTask], tag: str, n: int, timeout: float
) -> tuple[float, list[Episode]]:
    jobs = []
    for i in range(n):
        t = tasks[i % len(tasks)]
        jobs.append(
            RolloutJob(
                job_id=f"{tag}-{i}",
                episode_id=f"{tag}-{i}",
                environment="browser",
                task_id=t.task_id,
                seed=t.seed,
                max_steps=t.max_steps,
            )
        )
    started = time.perf_counter()
    for j in jobs:
        await bus.publish_durable(bus.names.rollout_job("browser"), j, msg_id=j.job_id)
    await done.wait_for([j.episode_id for j in jobs], timeout)
    return time.perf_counter() - started, [done.seen[j.episode_id] for j in jobs]


async def episodes_by_pid(bus: Bus, expected: int) -> dict[int, int]:
    """Episodes each runner process has published so far (its ``episodes`` stat, through
    service discovery), asked again until they add up to ``expected`` (a runner counts an
    episode just after publishing it); the last answer after ten tries."""
    counts: dict[int, int] = {}
    for _ in range(10):  # each discovery waits out its own reply window: no sleep needed
        views = await discover(bus.nc, namespace=bus.names.namespace)
        counts = {v.pid: int(v.extra["episodes"]) for v in views if v.pid and "episodes" in v.extra}
        if sum(counts.values()) >= expected:
            break
    return counts


async def measure_runners(
    s: Settings, server: NatsServer, log: Callable[[str], None]
) -> dict[str, Any]:
    names = Names(f"bench{uuid.uuid4().hex[:10]}")
    out: dict[str, Any] = {"phases": {}}
    tasks = make_tasks(s.jobs_per_replica * max(s.replicas), s.max_steps)
    env = {
        "NATS_URL": server.url,
        "AIOS_NAMESPACE": names.namespace,
        "AIOS_ENV": "browser",
        "AIOS_CONCURRENCY": str(s.concurrency),
        "AIOS_MAX_STEPS": str(s.max_steps),
        "AIOS_SCREENSHOTS": "false",
    }
    async with connect(server.url, name="bench-browser", names=names) as bus:
        await provision(bus)
        await BrowserTaskStore(bus).put_all(tasks)
        done = Completions()
        sub = await bus.subscribe(names.episode("completed", "browser"), done.on_message)
        try:
            async with _common.running(policy_service(bus)), contextlib.AsyncExitStack() as stack:
                procs: list[asyncio.subprocess.Process] = []
                for n in s.replicas:
                    started = time.perf_counter()
                    while len(procs) < n:
                        path = server.data_dir / f"runner-{len(procs)}.log"
                        proc = await stack.enter_async_context(
                            _common.start_service("services.runner", env, {"service.ready"}, path)
                        )
                        procs.append(proc)
                    up_s = time.perf_counter() - started
                    await run_jobs(bus, done, tasks, f"warm{n}", s.warmup_jobs * n, 120)
                    before = await episodes_by_pid(bus, len(done.seen))
                    if n == s.replicas[0]:
                        out["memory_warm"] = [memory(p.pid) for p in procs]
                    jobs = s.jobs_per_replica * n
                    log(f"runner: {n} replica(s) up in {up_s:.1f} s; {jobs} timed jobs")
                    mark = cpu_mark()
                    elapsed, episodes = await run_jobs(bus, done, tasks, f"n{n}", jobs, 240)
                    busy = cores_busy(mark, cpu_mark())
                    after = await episodes_by_pid(bus, len(done.seen))
                    outcomes: dict[str, int] = {}
                    for e in episodes:
                        outcomes[e.outcome] = outcomes.get(e.outcome, 0) + 1
                    out["phases"][n] = {
                        "rate": jobs / elapsed,
                        "seconds": elapsed,
                        "cores_busy": busy,
                        "jobs": jobs,
                        "outcomes": outcomes,
                        "steps_per_episode": sum(len(e.trajectory) for e in episodes) / jobs,
                        "episodes_per_replica": [
                            after.get(p.pid, 0) - before.get(p.pid, 0) for p in procs
                        ],
                        "memory": [memory(p.pid) for p in procs],
                        "episodes_in_all": [after.get(p.pid, 0) for p in procs],
                    }
        finally:
            await sub.unsubscribe()
    return out


async def measure(s: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    log("part 1: context pool vs a fresh Chromium per episode (in this process)")
    pool = await measure_pool(s, log)
    log("part 2: the runner service with " + ", ".join(map(str, s.replicas)) + " replicas")
    with _common.nats_server("aios-bench-browser-") as server:
        runners = await measure_runners(s, server, log)
    return {"pool": pool, "runners": runners}


def build_rows(res: dict[str, Any], s: Settings) -> list[_common.Row]:
    pool, runners = res["pool"], res["runners"]
    phases = runners["phases"]
    one = phases[s.replicas[0]]["rate"] / s.replicas[0]
    rows = [
        _common.Row(
            f"episodes, {s.concurrency} at a time: one Chromium, a context each "
            "(vs a Chromium launched per episode)",
            "episodes/s",
            _common.median(pool["ours"]),
            _common.median(pool["baseline"]),
            samples={"ours": pool["ours"], "baseline": pool["baseline"]},
        )
    ]
    for n, p in phases.items():
        rows.append(
            _common.Row(
                f"runner service, {n} replica{'s' if n > 1 else ''} (vs {n} x 1 replica, linear)",
                "episodes/s",
                p["rate"],
                n * one,
            )
        )
    warm = runners["memory_warm"][0]
    for n, p in phases.items():
        rows.append(
            _common.Row(
                f"memory per runner, RSS (process + driver + Chromium), mean of {n} after the "
                f"{n}-replica phase (vs runner 1 after its warm-up)",
                "MiB",
                statistics.fmean([m["rss_mib"] for m in p["memory"]]),
                warm["rss_mib"],
                higher_is_better=False,
                samples={"ours": [m["rss_mib"] for m in p["memory"]]},
            )
        )
    first = phases[s.replicas[0]]
    rows.append(
        _common.Row(
            f"memory of runner 1, PSS (process + driver + Chromium), alone after "
            f"{first['episodes_in_all'][0]} episodes (vs after its warm-up)",
            "MiB",
            first["memory"][0]["pss_mib"],
            warm["pss_mib"],
            higher_is_better=False,
        )
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    _, s, out = _common.bench_args("browser", __doc__, "~40 s", full=FULL, quick=QUICK, argv=argv)
    console = Console()
    res, machine, elapsed = _common.run(
        lambda log: measure(s, log), ["msgspec", "nats-py", "playwright", "miniwob"], console
    )
    rows = build_rows(res, s)
    _common.print_rows("browser: episodes/s and memory", rows, "measured", "baseline", console)
    pool, runners = res["pool"], res["runners"]
    phases = runners["phases"]
    notes = [
        "Ratios: measured / baseline for episodes per second (for the replica rows this is the "
        "scaling efficiency, throughput(n) / (n x throughput(1))); baseline / measured for "
        "memory (below 1: the runner grew since its warm-up).",
        f"Machine: {machine['cores_usable']} usable cores. One replica (concurrency "
        f"{s.concurrency}) already keeps {phases[s.replicas[0]]['cores_busy']:.2f} cores busy "
        "(whole machine, from psutil.cpu_times), so more replicas on this machine cannot add "
        "throughput: they share the same cores, and each episode costs more CPU as more "
        "processes compete (CPU-s per episode below). The scaling rows measure this 2-core "
        "machine's limit, not the runner's design; how far replicas scale on more cores is not "
        "measured here. The load averages in the header count this run's own threads "
        "(Chromium's, the runners'), and decay slowly from any run just before.",
        f"Part 1 (in this process, no NATS): {s.pool_episodes} episodes per side and round, "
        f"{s.pool_rounds} round(s), {s.concurrency} at a time, first-candidate policy, "
        f"max {s.max_steps} steps ({pool['steps_per_episode']:.2f} steps per episode, outcomes "
        + ", ".join(f"{k} {v}" for k, v in sorted(pool["outcomes"].items()))
        + "). The baseline launches Chromium through the same Playwright driver "
        f"(one launch alone: median {_common.median(pool['launch_s']):.2f} s); the pool "
        f"launched Chromium {pool['pool_launches']} time(s) in all. Cores busy (whole machine, "
        f"median): pool {_common.median(pool['cores_busy']['ours']):.2f}, fresh Chromium "
        f"{_common.median(pool['cores_busy']['baseline']):.2f}.",
        "Part 2: replicas are subprocesses `python -m services.runner` with AIOS_ENV=browser "
        f"(concurrency {s.concurrency} each, screenshots off) on an embedded nats-server; the "
        "policy is a scripted `policy.act` endpoint in the bench process (first candidate), so "
        "no sampler or student cost is included. Phases add replicas ("
        + ", then ".join(map(str, s.replicas))
        + f"); each phase runs {s.warmup_jobs} warm-up job(s) per replica, then times "
        f"{s.jobs_per_replica} jobs per replica from the first publish to the last "
        "episode.completed.browser.",
        "Per phase: "
        + "; ".join(
            f"{n} replica(s): {p['jobs']} jobs in {p['seconds']:.1f} s, "
            f"{p['cores_busy']:.2f} cores busy "
            f"({p['cores_busy'] * p['seconds'] / p['jobs']:.2f} CPU-s per episode), split "
            f"{p['episodes_per_replica']}, {p['steps_per_episode']:.2f} steps/episode, "
            + ", ".join(f"{k} {v}" for k, v in sorted(p["outcomes"].items()))
            for n, p in phases.items()
        )
        + ".",
        "Memory: psutil, each replica's process plus all its children (Playwright's node driver "
        "and every Chromium process). RSS sums count shared pages once per process, so they "
        "overstate; PSS shares them out. Per replica at the end: "
        + ", ".join(
            f"{m['rss_mib']:.0f} MiB RSS / {m['pss_mib']:.0f} MiB PSS "
            f"({m['chromium_procs']} Chromium processes)"
            for m in phases[s.replicas[-1]]["memory"]
        )
        + f" (PSS of all {s.replicas[-1]} together: "
        + f"{sum(m['pss_mib'] for m in phases[s.replicas[-1]]['memory']):.0f} MiB; episodes each "
        + f"had run: {phases[s.replicas[-1]]['episodes_in_all']}). Measured between phases, with "
        "no episode in flight: the renderers of pages open during an episode are not in it.",
    ]
    for line in notes[2:5]:
        console.print(line)
    _common.report(
        console,
        out,
        title="Browser benchmark: the context pool, runner replicas and memory per runner",
        rows=rows,
        ours="measured",
        baseline="baseline",
        machine=machine,
        settings={**asdict(s), "tasks": "MINIWOB_TASKS in turn", "policy": "first candidate"},
        notes=notes,
        elapsed_s=elapsed,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
