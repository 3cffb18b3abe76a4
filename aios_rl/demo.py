"""``aios-rl demo``: the README's main job.

Starts the whole stack as separate processes on an embedded NATS, drives a short run through it,
prints a summary and shuts everything down. Until the campaign service lands, the run is a
scripted batch of taught shell episodes pushed through the services that exist (reward today),
each stage checked at the other end.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from contracts import Episode, Names, TeacherHint, TeacherSignal, Timings, TrajectoryStep, decode

from .bus import Bus, connect, provision
from .discovery import discover
from .natsd import NatsServer
from .stack import SERVICES
from .supervisor import Supervisor, plan

__all__ = ["run_demo", "scripted_episodes"]


def scripted_episodes(n: int, seed: int = 0) -> list[Episode]:
    """``n`` taught shell episodes with mixed outcomes and teacher signals (deterministic)."""
    rng = random.Random(seed)
    outcomes = [("success", 1.0), ("partial", 0.5), ("failure", 0.0), ("blocked", 0.0)]
    out: list[Episode] = []
    for i in range(n):
        outcome, env_reward = outcomes[rng.randrange(len(outcomes))]
        signal = None
        if outcome != "success" or rng.random() < 0.2:
            score = {"success": 0.8, "partial": 0.2, "failure": -0.5, "blocked": -0.9}[
                outcome
            ] + rng.uniform(-0.1, 0.1)
            signal = TeacherSignal(
                backend="oracle",
                verdict="incorrect" if score < 0 else "correct",
                score=score,
                hints=[TeacherHint(step=1, better_action="apply edit 2")],
            )
        steps = [
            TrajectoryStep(
                index=0,
                observation="$ pytest -q\n1 failed",
                action="run tests",
                candidates=["run tests", "show file"],
            ),
            TrajectoryStep(
                index=1,
                observation="def clamp(x, lo, hi): ...",
                action="apply edit 1",
                candidates=["apply edit 1", "apply edit 2"],
            ),
        ]
        now = time.time()
        out.append(
            Episode(
                episode_id=f"demo-{seed}-{i:04d}",
                environment="shell",
                task_id=f"task-{i % 6}",
                campaign_id="demo",
                group_id=f"g{i % 6}",
                trajectory=steps,
                outcome=outcome,
                env_reward=env_reward,  # type: ignore[arg-type]
                teacher_status="ok" if signal else "skipped",
                teacher_signal=signal,
                timings=Timings(
                    started_at=now, finished_at=now, stages={"completed": now, "taught": now}
                ),
            )
        )
    return out


async def _wait_for_services(bus: Bus, wanted: set[str], deadline_s: float) -> None:
    async with asyncio.timeout(deadline_s):
        while True:
            seen = {
                v.name for v in await discover(bus.nc, namespace=bus.names.namespace, window=0.2)
            }
            if wanted <= seen:
                return


async def _drive(bus: Bus, n: int, console: Console) -> list[Episode]:
    names = bus.names
    episodes = scripted_episodes(n)
    received: dict[str, Episode] = {}
    done = asyncio.Event()

    async def on_rewarded(raw) -> None:
        ep = decode(raw.data, raw.headers, Episode)
        received[ep.episode_id] = ep
        if len(received) >= n:
            done.set()

    sub = await bus.nc.subscribe(names.episode("rewarded", "*"), cb=on_rewarded)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        pub = progress.add_task("published (episode.taught)", total=n)
        rew = progress.add_task("rewarded  (episode.rewarded)", total=n)
        for ep in episodes:
            await bus.publish_durable(
                names.episode("taught", ep.environment), ep, msg_id=f"{ep.episode_id}:taught"
            )
            progress.advance(pub)
        async with asyncio.timeout(60):
            while not done.is_set():
                progress.update(rew, completed=len(received))
                try:
                    async with asyncio.timeout(0.2):
                        await done.wait()
                except TimeoutError:
                    continue
        progress.update(rew, completed=len(received))
    await sub.unsubscribe()
    return [received[e.episode_id] for e in episodes]


def _summary(console: Console, episodes: list[Episode], elapsed: float) -> None:
    table = Table(title="aios-rl demo: episodes through the pipeline")
    for col in ("outcome", "episodes", "mean env reward", "mean teacher shaping", "mean reward"):
        table.add_column(col, justify="right" if col != "outcome" else "left")
    for outcome in ("success", "partial", "failure", "blocked"):
        group = [e for e in episodes if e.outcome == outcome]
        if not group:
            continue
        shaping = [e.reward_breakdown.shaping for e in group if e.reward_breakdown]
        table.add_row(
            outcome,
            str(len(group)),
            f"{statistics.fmean(e.env_reward for e in group):.3f}",
            f"{statistics.fmean(shaping):+.3f}",
            f"{statistics.fmean(e.reward or 0 for e in group):.3f}",
        )
    console.print(table)
    console.print(f"{len(episodes)} episodes rewarded in {elapsed:.1f}s")


def run_demo(args: argparse.Namespace) -> int:
    console = Console()
    data = Path(args.data_dir)
    if (data / "nats").exists():
        shutil.rmtree(data / "nats")
    data.mkdir(parents=True, exist_ok=True)
    log_path = data / "services.log"

    async def main() -> int:
        with NatsServer(data / "nats") as server, open(log_path, "w") as log_file:  # noqa: ASYNC230 - opened once at start-up
            console.print(
                f"[bold]aios-rl demo[/]: embedded NATS at {server.url}; service logs in {log_path}"
            )
            replicas = plan(SERVICES)
            sup = Supervisor(
                replicas,
                env={"NATS_URL": server.url, "AIOS_LOG_FORMAT": "json"},
                out=sys.stdout if args.verbose else log_file,
            )
            runner = asyncio.create_task(sup.run())
            try:
                async with connect(server.url, name="aios-rl-demo", names=Names()) as bus:
                    await provision(bus)
                    started = time.monotonic()
                    await _wait_for_services(bus, {r.service.name for r in replicas}, 60)
                    console.print(f"services up: {', '.join(r.label for r in replicas)}")
                    episodes = await _drive(bus, args.episodes, console)
                    _summary(console, episodes, time.monotonic() - started)
            finally:
                sup.stop()
                await runner
        console.print("stack stopped cleanly")
        return 0

    return asyncio.run(main())
