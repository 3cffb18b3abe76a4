"""Run one episode per job through the environment's adapter, and publish it.

A job whose episode cannot run still produces a ``blocked`` episode, so a job is never lost:
an unknown or corrupt task, an environment that crashed or cannot set the task up, an
environment that does not end within the step limit, a policy error other than "unavailable".
What is transient is retried with back-off by the kit instead (the handler raises): the sampler
starting or reloading (503), no sampler answering (no responders, timeout), the task store
unreachable. The job is acked only after ``episode.completed.<env>`` is published (the kit acks
when the handler returns), de-duplicated by the episode id."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from aios_rl.bus import Bus, get_logger
from aios_rl.envs.base import EnvironmentHost, EnvSpec
from aios_rl.envs.runner import RunnerSettings, run_episode
from aios_rl.state.tasks import TaskStore
from contracts import ActRequest, ActResponse, RolloutJob

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
        self.sessions: Any = None
        """Episodes driven from outside (``sessions.SessionHandlers``), when served."""
        self.agent: Any = None
        """The user's agent (``agent.AgentDriver``) when it plays the jobs (``agent_cmd``)."""

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
        if self.agent is not None:  # the user's agent plays it
            ep = await self.agent.run(job)
        else:
            ep = await run_episode(
                self.host, job, self.task, self.act, max_steps=self.settings.max_steps
            )
        outcome = ep.outcome
        # De-duplicated by the episode id: a job redelivered after a crash publishes the same
        # episode again harmlessly. The kit acks the job when this handler returns.
        await self.bus.publish_durable(
            self.bus.names.episode("completed", ep.environment),
            ep,
            msg_id=f"{ep.episode_id}:completed",
        )
        self.episodes += 1
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        log.info(
            "episode",
            env=self.spec.name,
            outcome=outcome,
            reward=ep.env_reward,
            steps=len(ep.trajectory),
        )

    def stats(self) -> dict[str, float]:
        held = self.sessions.sessions if self.sessions is not None else None
        return {
            "episodes": float(self.episodes),
            "tasks_cached": float(len(self.tasks)),
            **(
                {
                    "sessions_open": float(len(held)),
                    "sessions_opened": float(held.opened),
                    "sessions_expired": float(held.expired),
                }
                if held is not None
                else {}
            ),
            **{f"outcome_{k}": float(v) for k, v in self.outcomes.items()},
        }
