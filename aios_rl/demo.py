"""``aios-rl demo``: the README's main job.

The whole stack as separate processes on an embedded NATS; orchestrator decision tasks generated
and stored; the held-out success of the initial student measured through the sampler; a short
campaign (collect -> compare -> decide -> train, every service in the loop); the held-out success
of the policy each epoch ran; a summary table; a clean shutdown.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from contracts import (
    ActRequest,
    ActResponse,
    CampaignEvent,
    CampaignSpec,
    CampaignStatus,
    Episode,
    Names,
    OrchestratorTask,
    StartCampaign,
    TrainerSettings,
)

from .bus import Bus, connect, provision
from .checkpoints import CheckpointRegistry
from .discovery import discover
from .envs.orchestrator import generate, outcome_of
from .envs.store import put_tasks
from .ledger import Ledger
from .natsd import NatsServer
from .report import epoch_table
from .stack import SERVICES
from .supervisor import Supervisor, plan

__all__ = ["evaluate", "run_demo"]


async def _wait_for_services(bus: Bus, wanted: set[str], deadline_s: float) -> None:
    async with asyncio.timeout(deadline_s):
        while not wanted <= {
            v.name for v in await discover(bus.nc, namespace=bus.names.namespace, window=0.2)
        }:
            pass  # each discovery round waits for replies: no busy loop


async def _active_checkpoint(bus: Bus, deadline_s: float) -> str:
    async with asyncio.timeout(deadline_s):
        async for pointers in CheckpointRegistry(bus).watch():
            if pointers.active:
                return pointers.active
    raise RuntimeError("unreachable")


async def evaluate(bus: Bus, checkpoint: str, tasks: list[OrchestratorTask]) -> float:
    """Mean reward of ``checkpoint`` on ``tasks``, acting through the sampler (seeded)."""

    async def one(i: int, t: OrchestratorTask) -> float:
        req = ActRequest(
            episode_id=f"eval-{t.task_id}",
            step=0,
            observation=t.observation,
            candidates=t.candidates,
            checkpoint_id=checkpoint,
            seed=i,
        )
        act = await bus.request(bus.names.policy_act(), req, ActResponse, timeout=60)
        return outcome_of(t, act.action)[1]

    rewards = await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks)))
    return sum(rewards) / len(rewards)


async def _campaign(bus: Bus, spec: CampaignSpec, console: Console) -> None:
    per_epoch = spec.tasks_per_epoch * (spec.group_size + spec.reference_runs)
    finished = asyncio.Event()
    phase_line = {"text": "starting"}
    compared: set[str] = set()

    async def on_event(msg, raw) -> None:
        if isinstance(msg, CampaignEvent) and msg.campaign_id == spec.campaign_id:
            r = msg.record
            phase_line["text"] = f"epoch {msg.epoch}: {r.phase if r else msg.kind}"
            if r is not None and r.verdict and msg.kind == "decided":
                phase_line["text"] += f" (verdict {r.verdict}, {r.decision})"
            if msg.kind in ("finished", "failed", "stopped"):
                finished.set()

    async def on_compared(msg, raw) -> None:
        if isinstance(msg, Episode) and msg.campaign_id == spec.campaign_id:
            compared.add(msg.episode_id)  # a republished duplicate is counted once

    subs = [
        await bus.subscribe(bus.names.campaign_event(">"), on_event),
        await bus.subscribe(bus.names.episode("compared", "*"), on_compared),
    ]
    await bus.request(
        bus.names.campaign_cmd("start"), StartCampaign(spec=spec), CampaignStatus, timeout=30
    )
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[phase]}"),
        console=console,
    ) as progress:
        bar = progress.add_task("episodes compared", total=per_epoch * spec.epochs, phase="")
        async with asyncio.timeout(900):
            while not finished.is_set():
                progress.update(bar, completed=len(compared), phase=phase_line["text"])
                try:
                    async with asyncio.timeout(0.25):
                        await finished.wait()
                except TimeoutError:
                    continue
        progress.update(bar, completed=len(compared), phase=phase_line["text"])
    for sub in subs:
        await sub.unsubscribe()


def run_demo(args: argparse.Namespace) -> int:
    console = Console()
    data = Path(args.data_dir)
    if (data / "nats").exists():
        shutil.rmtree(data / "nats")
    data.mkdir(parents=True, exist_ok=True)
    log_path = data / "services.log"

    async def main() -> int:
        with NatsServer(data / "nats") as server, open(log_path, "w") as log_file:  # noqa: ASYNC230 - opened once
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
                    await _wait_for_services(bus, {r.service.name for r in replicas}, 120)
                    console.print(
                        f"{len(replicas)} services up: {', '.join(r.label for r in replicas)}"
                    )
                    train, heldout = (
                        generate(args.tasks, split="train"),
                        generate(10_000, split="heldout"),
                    )
                    await put_tasks(bus, "orchestrator", "train", train)
                    await put_tasks(bus, "orchestrator", "heldout", heldout)
                    initial = await _active_checkpoint(bus, 60)
                    before = await evaluate(bus, initial, heldout)
                    console.print(
                        f"{len(train)} train / {len(heldout)} held-out orchestrator tasks stored; "
                        f"initial student {initial[:12]} scores {before:.2f} on held-out"
                    )
                    spec = CampaignSpec(
                        campaign_id=f"demo-{int(time.time())}",
                        environments={"orchestrator": 1.0},
                        tasks_per_epoch=16,
                        group_size=4,
                        epochs=args.epochs,
                        episode_deadline_s=120,
                        trainer=TrainerSettings(learning_rate=1e-2, update_epochs=4, seed=0),
                    )
                    await _campaign(bus, spec, console)
                    records = await Ledger(bus).records(spec.campaign_id)
                    scores = {
                        r.epoch: await evaluate(bus, r.active_checkpoint, heldout)
                        for r in records
                        if r.active_checkpoint
                    }
                    final = (await CheckpointRegistry(bus).pointers())[0].active or initial
                    after = await evaluate(bus, final, heldout)
                    console.print(
                        epoch_table(records, title=f"campaign {spec.campaign_id}", heldout=scores)
                    )
                    console.print(
                        f"held-out mean reward: initial {before:.2f} -> final {after:.2f} "
                        f"(active {final[:12]}); {time.monotonic() - started:.0f}s"
                    )
            finally:
                sup.stop()
                await runner
        console.print("stack stopped cleanly")
        return 0

    return asyncio.run(main())
