"""Restart safety of the whole stack: ``aios-rl up`` runs every service as a process; in a
campaign over the shell and orchestrator environments the campaign is SIGKILLed mid-collect, the
shell runner mid-episode (jobs in hand) and the trainer mid-update; the supervisor restarts them
and the campaign ends with every scheduled episode in the ledger, each counted once.

The runner's jobs come back after its ack wait, set short for this stack (``AIOS_ACK_WAIT_S``)
instead of the contract's 300 s, and kept by the campaign's restart (which provisions again)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from aios_rl.bus import Bus, discover
from aios_rl.envs.orchestrator import generate
from aios_rl.envs.registry import task_store
from aios_rl.envs.shell.episode import SUBMIT
from aios_rl.envs.shell.generate import generate as generate_shell
from aios_rl.envs.shell.store import ShellTaskStore as TaskStore
from aios_rl.envs.shell.verify import RunCache, default_cache_dir
from aios_rl.stack import SERVICES
from aios_rl.state.ledger import Ledger
from contracts import (
    ActRequest,
    CampaignEvent,
    CampaignSpec,
    CampaignStatus,
    Episode,
    StartCampaign,
    TrainerSettings,
)
from contracts.subjects import STREAM_ROLLOUTS

from .support import rolled_back, stack_env, up_stack

RUNNER = "shell-runner"
RUNNER_ACK_WAIT_S = 5.0
"""The runner's ack wait in this stack: jobs a killed runner held come back after it."""


async def _pid(bus: Bus, service: str, deadline: float = 60) -> int:
    async with asyncio.timeout(deadline):
        while True:
            for v in await discover(bus.nc, namespace="", window=0.2):
                if v.name == service and v.pid:
                    return v.pid


async def _within(event: asyncio.Event, seconds: float, what: str) -> None:
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        raise AssertionError(f"not within {seconds} s: {what}") from None


@pytest.mark.slow
async def test_killing_campaign_runner_and_trainer_mid_epoch_loses_and_duplicates_nothing(
    tmp_path: Path,
) -> None:
    env = {
        **stack_env(),
        "AIOS_TRAIN_TIMEOUT_S": "20",
        "AIOS_TRAIN_RETRY_S": "1",
        "AIOS_ACK_WAIT_S": str(RUNNER_ACK_WAIT_S),  # read by the runner only
    }
    spec = CampaignSpec(
        campaign_id="restart",
        environments={"orchestrator": 0.5, "shell": 0.5},
        tasks_per_epoch=8,
        group_size=4,
        epochs=3,
        episode_deadline_s=240,
        trainer=TrainerSettings(learning_rate=1e-2, seed=0),
    )
    async with up_stack(tmp_path, env=env) as up, up.connect("test-restart") as bus:
        wanted = {s.name for s in SERVICES if s.replicas > 0}
        async with asyncio.timeout(90):
            while not wanted <= {v.name for v in await discover(bus.nc, namespace="", window=0.2)}:
                pass  # each discovery round waits for replies
        await task_store(bus, "orchestrator").put_all(generate(40))
        shell_tasks = await asyncio.to_thread(
            generate_shell, 12, 0, "train", cache=RunCache(default_cache_dir())
        )
        await TaskStore(bus).put_all(shell_tasks)
        runner_pid = await _pid(bus, RUNNER)
        killed: list[str] = []
        finished = asyncio.Event()
        kill_queue: asyncio.Queue[str] = asyncio.Queue()
        collecting_1 = asyncio.Event()  # epoch 1 is collecting: the runner may be killed
        collected_1 = asyncio.Event()
        runner_killed = asyncio.Event()
        at_kill: dict[str, float] = {}

        async def on_act(msg, raw) -> None:
            # The shell runner sent this request (its steps offer ``submit``) for a job it
            # holds, unacked until the episode ends.
            if not isinstance(msg, ActRequest) or not collecting_1.is_set() or RUNNER in killed:
                return
            if SUBMIT not in msg.candidates:
                return  # the orchestrator runner's
            os.kill(runner_pid, signal.SIGKILL)
            killed.append(RUNNER)
            at_kill["at"] = time.monotonic()
            info = await bus.js.consumer_info(bus.names.stream(STREAM_ROLLOUTS), RUNNER)
            at_kill["held"] = float(info.num_ack_pending or 0)
            at_kill["ack_wait_s"] = float(info.config.ack_wait or 0)
            runner_killed.set()

        async def on_compared(msg, raw) -> None:
            if (
                isinstance(msg, Episode)
                and msg.campaign_id == spec.campaign_id
                and "campaign" not in killed
            ):
                killed.append("campaign")
                kill_queue.put_nowait("campaign")

        async def on_event(msg, raw) -> None:
            if not isinstance(msg, CampaignEvent) or msg.campaign_id != spec.campaign_id:
                return
            if msg.record and msg.epoch == 1 and msg.record.phase == "collect":
                collecting_1.set()
            if msg.record and msg.epoch == 1 and msg.record.phase == "compare":
                at_kill.setdefault("collected", time.monotonic())
                collected_1.set()
            if (
                msg.record
                and msg.epoch == 1
                and msg.record.phase == "train"
                and "trainer" not in killed
            ):
                killed.append("trainer")
                kill_queue.put_nowait("trainer")
            if msg.kind in ("finished", "failed"):
                finished.set()

        await bus.subscribe(bus.names.episode("compared", "*"), on_compared)
        await bus.subscribe(bus.names.campaign_event(">"), on_event)
        await bus.subscribe(bus.names.policy_act(), on_act)
        await bus.request(
            bus.names.campaign_cmd("start"),
            StartCampaign(spec=spec),
            CampaignStatus,
            timeout=30,
        )

        async def killer() -> None:
            while True:
                service = await kill_queue.get()
                os.kill(await _pid(bus, service), signal.SIGKILL)

        kill_task = asyncio.create_task(killer())
        await _within(runner_killed, 150, "the runner killed during epoch 1's collect")
        # Its jobs come back after the short ack wait (the contract's 120 s would fail this).
        await _within(collected_1, 60, "epoch 1 collected after the runner's kill")
        await asyncio.wait_for(finished.wait(), 400)
        kill_task.cancel()
        records = await Ledger(bus).records(spec.campaign_id)
        info = await bus.js.stream_info(
            bus.names.stream("EPISODES"), subjects_filter=bus.names.episode("compared", "*")
        )
        compared = sum((info.state.subjects or {}).values())
    text = up.log()
    assert killed == ["campaign", RUNNER, "trainer"], text[-3000:]
    for label in ("campaign.1", f"{RUNNER}.1", "trainer.1"):
        assert f"{label} exited with code -9" in text, label
    # Killed with jobs in hand, under the stack's ack wait (the campaign's restart kept it).
    assert at_kill["held"] >= 1, at_kill
    assert at_kill["ack_wait_s"] == RUNNER_ACK_WAIT_S, at_kill
    # The epoch waited for them: redelivered only after the ack wait.
    assert at_kill["collected"] - at_kill["at"] >= RUNNER_ACK_WAIT_S - 1, at_kill
    assert [r.epoch for r in records] == [0, 1, 2]
    for r in records:
        assert (r.scheduled, r.received, r.missing) == (48, 48, 0), r
        assert r.new_checkpoint or rolled_back(r), r
    assert compared == 3 * 48  # every episode compared exactly once in the stream
