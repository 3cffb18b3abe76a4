"""Sampler and trainer as separate processes on a real nats-server: an update moves ``active``,
the sampler serves the new weights without a restart, an older checkpoint stays servable by id,
and the same seed and data give the same checkpoint."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest

from aios_rl.bus import Bus, RemoteError
from aios_rl.state.checkpoints import CheckpointRegistry
from contracts import (
    ActRequest,
    ActResponse,
    ComparisonResult,
    Episode,
    Names,
    TrainerSettings,
    TrainerUpdate,
    TrainerUpdateResult,
    TrajectoryStep,
)

from .toytask import ToyTask


async def _start(
    module: str, nats_url: str, names: Names, **env: str
) -> asyncio.subprocess.Process:
    full = {
        **os.environ,
        "NATS_URL": nats_url,
        "AIOS_NAMESPACE": names.namespace,
        "AIOS_LOG_FORMAT": "json",
        **env,
    }
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        env=full,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def _act(bus: Bus, req: ActRequest) -> ActResponse:
    return await bus.request(bus.names.policy_act(), req, ActResponse, timeout=10)


async def _until_serving(bus: Bus, deadline: float) -> ActResponse:
    """Wait until the trainer made a checkpoint active and the sampler serves it."""
    from aios_rl.bus import discover

    probe = ActRequest(episode_id="probe", step=0, observation="hello", candidates=["a", "b"])
    async with asyncio.timeout(deadline):
        async for pointers in CheckpointRegistry(bus).watch():
            if pointers.active:
                break
        while not any(
            v.name == "sampler" for v in await discover(bus.nc, namespace=bus.names.namespace)
        ):
            pass  # each discovery round waits for replies: no busy loop
        while (
            True
        ):  # the sampler loads the active checkpoint (about a second): ask until it answers
            try:
                return await _act(bus, probe)
            except RemoteError as exc:
                if exc.code != "503":
                    raise


async def _rollouts(bus: Bus, campaign: str, groups: int = 12, size: int = 4) -> list[Episode]:
    """Toy-task episodes acted by the sampler itself, published as compared."""
    task = ToyTask(seed=3)
    episodes = []
    for g in range(groups):
        colour, d = task.context()
        for k in range(size):
            eid = f"{campaign}-g{g}-k{k}"
            r = await _act(
                bus,
                ActRequest(
                    episode_id=eid, step=0, observation=d.observation, candidates=list(d.candidates)
                ),
            )
            reward = 1.0 if r.action == task.rule[colour] else 0.0
            ep = Episode(
                episode_id=eid,
                environment="orchestrator",
                task_id=colour,
                campaign_id=campaign,
                epoch=0,
                checkpoint_id=r.checkpoint_id,
                group_id=f"{campaign}-g{g}",
                outcome="success" if reward else "failure",
                env_reward=reward,
                reward=reward,
                comparison=ComparisonResult(
                    verdict="better" if reward else "worse", reference_checkpoint=r.checkpoint_id
                ),
                trajectory=[
                    TrajectoryStep(
                        index=0,
                        observation=d.observation,
                        candidates=list(d.candidates),
                        action=r.action,
                        action_index=r.action_index,
                        logprob=r.logprob,
                    )
                ],
            )
            await bus.publish_durable(
                bus.names.episode("compared", "orchestrator"), ep, msg_id=f"{eid}:compared"
            )
            episodes.append(ep)
    return episodes


@pytest.mark.slow
async def test_update_moves_active_and_the_sampler_hot_reloads(
    bus: Bus, nats_url: str, names: Names
) -> None:
    procs = [
        await _start("services.trainer", nats_url, names),
        await _start("services.sampler", nats_url, names),
    ]
    try:
        first = await _until_serving(bus, 60)
        registry = CheckpointRegistry(bus)
        initial = (await registry.pointers())[0].active
        assert first.checkpoint_id == initial
        since = time.time() - 1
        await _rollouts(bus, "camp1")
        probe = ActRequest(
            episode_id="fixed",
            step=3,
            observation="the light shows red",
            candidates=["press alpha", "press bravo", "press charlie", "press delta"],
        )
        before = await _act(bus, probe)

        result = await bus.request(
            names.trainer_update(),
            TrainerUpdate(
                update_id="u1",
                campaign_id="camp1",
                epoch=0,
                since=since,
                settings=TrainerSettings(
                    learning_rate=1e-2, update_epochs=4, seed=1, warm_optimizer=True
                ),
            ),
            TrainerUpdateResult,
            timeout=120,
        )
        assert result.parent_id == initial and result.checkpoint_id != initial
        assert result.metrics["optimizer_warm"] == 0.0  # the first update: a fresh Adam
        assert result.samples > 0 and "loss" in result.metrics and "clip_fraction" in result.metrics
        pointers = (await registry.pointers())[0]
        assert (pointers.active, pointers.pre_update_ref) == (result.checkpoint_id, initial)
        assert (await registry.meta(result.checkpoint_id)).created_by == "u1"

        # Hot reload: the running sampler serves the new active without a restart.
        async with asyncio.timeout(5):
            while (now := await _act(bus, probe)).checkpoint_id != result.checkpoint_id:
                pass  # each request is a real round trip; the watch delivers the move within moments
        assert now.logprob != before.logprob
        # The older checkpoint is still served by id, exactly as before.
        old = await _act(bus, ActRequest(**{**_fields(probe), "checkpoint_id": initial}))
        assert old.checkpoint_id == initial and old.logprob == pytest.approx(
            before.logprob, abs=1e-6
        )
        assert old.action == before.action

        # The next update starts from the weights this one left: Adam's moments carry over.
        again = await bus.request(
            names.trainer_update(),
            TrainerUpdate(
                update_id="u1b",
                campaign_id="camp1",
                epoch=0,  # the same episodes again: what matters here is where it starts
                since=since,
                settings=TrainerSettings(learning_rate=1e-2, seed=1, warm_optimizer=True),
            ),
            TrainerUpdateResult,
            timeout=120,
        )
        assert again.parent_id == result.checkpoint_id
        assert again.metrics["optimizer_warm"] == 1.0

        # Nothing to learn from is a typed error, not a crash.
        with pytest.raises(RemoteError) as err:
            await bus.request(
                names.trainer_update(),
                TrainerUpdate(update_id="u2", campaign_id="nobody", since=time.time()),
                TrainerUpdateResult,
                timeout=60,
            )
        assert err.value.code == "422"
        # Unknown checkpoint ids are a 404 from the sampler.
        with pytest.raises(RemoteError) as err:
            await _act(bus, ActRequest(**{**_fields(probe), "checkpoint_id": "0123456789abcdef"}))
        assert err.value.code == "404"
        # A free-text request to a student that only chooses: a 422 that names its capability,
        # and the sampler's status says what the served student can do.
        with pytest.raises(RemoteError) as err:
            await _act(bus, ActRequest(**{**_fields(probe), "candidates": []}))
        assert err.value.code == "422" and "cannot write free text" in err.value.description
        from aios_rl.bus import discover

        views = await discover(bus.nc, namespace=names.namespace)
        (view,) = [v for v in views if v.name == "sampler"]
        assert view.extra["active_free_text"] == 0.0  # the tiny student chooses only
        assert view.metadata["free_text"] == "status.extra.active_free_text"
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            assert await asyncio.wait_for(p.wait(), 30) == 0


def _fields(req: ActRequest) -> dict:
    return {f: getattr(req, f) for f in req.__struct_fields__}
