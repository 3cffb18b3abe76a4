"""Run one episode per job through the environment's adapter, and publish it.

A job whose episode cannot run still produces a ``blocked`` episode, so a job is never lost:
an unknown or corrupt task, an environment that crashed or cannot set the task up, an
environment that does not end within the step limit, a policy error other than "unavailable".
What is transient is retried with back-off by the kit instead (the handler raises): the sampler
starting or reloading (503), no sampler answering (no responders, timeout), the task store
unreachable. The job is acked only after ``episode.completed.<env>`` is published (the kit acks
when the handler returns), de-duplicated by the episode id."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import msgspec

from aios_rl.bus import Bus, NoResponders, RemoteError, RequestTimeout, get_logger
from aios_rl.envs.base import EnvironmentHost, EnvResult, EnvSpec
from aios_rl.envs.loop import StepLimitError, run_steps
from aios_rl.envs.runner import RunnerSettings, completed_episode
from aios_rl.state.tasks import (
    CorruptTaskError,
    TaskStore,
    TaskStoreUnavailableError,
    UnknownTaskError,
)
from contracts import ActRequest, ActResponse, RolloutJob, TrajectoryStep

__all__ = ["Runner"]


class Runner:
    """The handler of one runner process: its environment's host, a task cache, counters."""

    def __init__(
        self,
        bus: Bus,
        spec: EnvSpec[Any],
        settings: RunnerSettings,
        host: EnvironmentHost[Any],
    ) -> None:
        self.bus = bus
        self.spec = spec
        self.settings = settings
        self.host = host
        self.store: TaskStore[Any] = TaskStore(bus, spec.tasks)
        self.tasks: OrderedDict[str, Any] = OrderedDict()
        self.episodes = 0
        self.outcomes: dict[str, int] = {}

    async def task(self, task_id: str) -> Any:
        """The task ``task_id`` (decoded once, then cached; least recently used goes first)."""
        task = self.tasks.get(task_id)
        if task is None:
            task = await self.store.get(task_id)
            self.tasks[task_id] = task
            while len(self.tasks) > self.settings.task_cache:
                self.tasks.popitem(last=False)
        else:
            self.tasks.move_to_end(task_id)
        return task

    async def act(self, req: ActRequest) -> ActResponse:
        return await self.bus.request(
            self.bus.names.policy_act(), req, ActResponse, timeout=self.settings.act_timeout_s
        )

    async def run(self, job: RolloutJob) -> None:
        """Consumer handler: one job, one published episode (or a raise: retried)."""
        log = get_logger(episode_id=job.episode_id, campaign_id=job.campaign_id)
        started = time.time()
        steps: list[TrajectoryStep] = []
        info: dict[str, str] = {}
        checkpoint = job.checkpoint_id
        result: EnvResult | None = None
        try:
            task = await self.task(job.task_id)
            info = dict(self.host.task_info(task))
            max_steps = max(1, min(job.max_steps, self.settings.max_steps))
            env = await self.host.open(task, seed=job.seed, max_steps=max_steps)
            try:
                checkpoint = await run_steps(env, job, self.act, steps, max_steps=max_steps)
                result = env.result()
            finally:
                await env.close()
        except RemoteError as exc:
            if exc.code == "503":
                raise  # the sampler is starting or reloading: the kit retries the job
            log.warning("episode_blocked", error=str(exc))
            info["error"] = f"policy: {exc}"[:500]
        except (RequestTimeout, NoResponders, TaskStoreUnavailableError):
            raise  # no sampler answered in time, or NATS trouble: retried with back-off
        except (UnknownTaskError, CorruptTaskError) as exc:
            log.warning("episode_blocked", error=str(exc))
            info["error"] = f"task: {exc}"[:500]
        except StepLimitError as exc:
            log.warning("episode_blocked", error=str(exc))
            info["error"] = f"limit: {exc}"[:500]
        except Exception as exc:  # the environment crashed: a blocked episode, the job is done
            log.exception("environment_crashed", error=str(exc))
            info["error"] = f"environment: {type(exc).__name__}: {exc}"[:500]
        if result is not None:
            info.update(result.info)
            outcome, reward, evidence = result.outcome, result.reward, result.evidence
            if steps:
                steps[-1] = msgspec.structs.replace(steps[-1], step_reward=reward)
        else:
            outcome, reward, evidence = "blocked", 0.0, []
        ep = completed_episode(
            job,
            checkpoint=checkpoint,
            trajectory=steps,
            outcome=outcome,
            reward=reward,
            info=info,
            started=started,
            evidence=evidence,
        )
        # De-duplicated by the episode id: a job redelivered after a crash publishes the same
        # episode again harmlessly. The kit acks the job when this handler returns.
        await self.bus.publish_durable(
            self.bus.names.episode("completed", ep.environment),
            ep,
            msg_id=f"{ep.episode_id}:completed",
        )
        self.episodes += 1
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        log.info("episode", env=self.spec.name, outcome=outcome, reward=reward, steps=len(steps))

    def stats(self) -> dict[str, float]:
        return {
            "episodes": float(self.episodes),
            "tasks_cached": float(len(self.tasks)),
            **{f"outcome_{k}": float(v) for k, v in self.outcomes.items()},
        }
