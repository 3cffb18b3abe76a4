"""A runner for the toy contextual-decision task (``tests/toytask.py``), for tests of the
whole loop before a real environment is in: it pulls ``rollout.job.orchestrator``, asks the
sampler for the action, and publishes the rewarded-by-rule episode straight to
``episode.taught`` (these tests run without a teacher)."""

from __future__ import annotations

import random
import time

from aios_rl.bus import Bus, Service
from contracts import ActRequest, ActResponse, Episode, RolloutJob, Timings, TrajectoryStep

from .toytask import BUTTONS, ToyTask


def build_toy_runner(bus: Bus) -> Service:
    rule = ToyTask().rule
    svc = Service(bus, name="toy-runner", version="0.0.1", fetch_timeout_s=0.2)

    async def run(job: RolloutJob) -> None:
        colour = job.task_id
        buttons = list(BUTTONS)
        random.Random(job.seed).shuffle(buttons)
        observation = f"the light shows {colour}"
        started = time.time()
        act = await bus.request(
            bus.names.policy_act(),
            ActRequest(
                episode_id=job.episode_id,
                step=0,
                observation=observation,
                candidates=buttons,
                regime=job.regime,
                checkpoint_id=job.checkpoint_id,
                seed=job.seed,
            ),
            ActResponse,
            timeout=30,
        )
        reward = 1.0 if act.action == rule[colour] else 0.0
        ep = Episode(
            episode_id=job.episode_id,
            environment="orchestrator",
            task_id=job.task_id,
            campaign_id=job.campaign_id,
            epoch=job.epoch,
            checkpoint_id=act.checkpoint_id,
            group_id=job.group_id,
            role=job.role,
            seed=job.seed,
            regime=job.regime,
            reference_checkpoint=job.reference_checkpoint,
            trajectory=[
                TrajectoryStep(
                    index=0,
                    observation=observation,
                    candidates=buttons,
                    action=act.action,
                    action_index=act.action_index,
                    logprob=act.logprob,
                    entropy=act.entropy,
                    value=act.value,
                )
            ],
            outcome="success" if reward else "failure",
            env_reward=reward,
            teacher_status="skipped",
            timings=Timings(started_at=started, finished_at=time.time()),
        )
        await bus.publish_durable(
            bus.names.episode("taught", "orchestrator"), ep, msg_id=f"{ep.episode_id}:taught"
        )

    svc.consume("orchestrator-runner", RolloutJob, run, concurrency=8)
    return svc
