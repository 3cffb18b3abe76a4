"""Run one orchestrator episode per job: load the task, ask the policy, simulate the outcome,
publish the episode. A job whose episode cannot run still produces a ``blocked`` episode: a job
is never lost. A sampler that is unavailable (no responders, timeout, 503) is transient: the job
is retried with back-off, not blocked."""

from __future__ import annotations

import time

from aios_rl.bus import Bus, RemoteError, get_logger
from aios_rl.envs.orchestrator import outcome_of
from aios_rl.envs.runner import publish_episode
from aios_rl.envs.store import TaskNotFound, get_task
from contracts import (
    ActRequest,
    ActResponse,
    OrchestratorTask,
    RolloutJob,
    TrajectoryStep,
)

from .settings import OrchestratorRunnerSettings


class Runner:
    def __init__(self, bus: Bus, settings: OrchestratorRunnerSettings) -> None:
        self.bus = bus
        self.settings = settings
        self.tasks: dict[str, OrchestratorTask] = {}
        self.episodes = 0

    async def task(self, task_id: str) -> OrchestratorTask:
        if task_id not in self.tasks:
            self.tasks[task_id] = await get_task(
                self.bus, "orchestrator", task_id, OrchestratorTask
            )
        return self.tasks[task_id]

    async def run(self, job: RolloutJob) -> None:
        log = get_logger(episode_id=job.episode_id, campaign_id=job.campaign_id)
        started = time.time()
        steps: list[TrajectoryStep] = []
        info: dict[str, str] = {}
        checkpoint = job.checkpoint_id
        try:
            task = await self.task(job.task_id)
            act = await self.bus.request(
                self.bus.names.policy_act(),
                ActRequest(
                    episode_id=job.episode_id,
                    step=0,
                    observation=task.observation,
                    candidates=task.candidates,
                    regime=job.regime,
                    checkpoint_id=job.checkpoint_id,
                    seed=job.seed,
                ),
                ActResponse,
                timeout=self.settings.act_timeout_s,
            )
            checkpoint = act.checkpoint_id
            outcome, reward = outcome_of(task, act.action)
            steps.append(
                TrajectoryStep(
                    index=0,
                    observation=task.observation,
                    candidates=task.candidates,
                    action=act.action,
                    action_index=act.action_index,
                    logprob=act.logprob,
                    entropy=act.entropy,
                    value=act.value,
                    step_reward=reward,
                )
            )
            info = {"kind": task.kind, "decision": act.action}
        except RemoteError as exc:
            if exc.code == "503":
                raise  # the sampler is starting or reloading: the kit retries the job with back-off
            log.warning("episode_blocked", error=str(exc))
            outcome, reward, info = "blocked", 0.0, {"error": str(exc)[:500]}
        except TaskNotFound as exc:
            log.warning("episode_blocked", error=str(exc))
            outcome, reward, info = "blocked", 0.0, {"error": str(exc)[:500]}
        await publish_episode(  # the kit acks the job when this handler returns
            self.bus,
            job,
            checkpoint=checkpoint,
            trajectory=steps,
            outcome=outcome,
            reward=reward,
            info=info,
            started=started,
        )
        self.episodes += 1
