"""Run one shell episode per job: load the task, reset the environment, replay the job's action
prefix, then ask the policy for each action until the episode ends, and publish it.

A job whose episode cannot run (unknown task, the environment crashed, the sandbox failed) still
produces a ``blocked`` episode: a job is never lost. A sampler that is unavailable (503: starting
or reloading) is transient: the job is retried with back-off, not blocked. The episode is acked
only after ``episode.completed.shell`` is published (the kit acks when the handler returns)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

import msgspec

from aios_rl.bus import Bus, NoResponders, RemoteError, RequestTimeout, get_logger
from aios_rl.envs.runner import publish_episode
from aios_rl.envs.shell.episode import EpisodeResult, ShellEnvConfig, ShellEpisode
from aios_rl.envs.shell.sandbox import Executor
from aios_rl.envs.shell.store import TaskStore, TaskStoreError, TaskStoreUnavailableError
from contracts import (
    ActRequest,
    ActResponse,
    RolloutJob,
    ShellTask,
    TrajectoryStep,
)

from .settings import ShellRunnerSettings


def work_root(base: str) -> Path:
    """This process's folder for task directories under ``base`` (default
    ``$TMPDIR/aios-shell-runner``), after removing the folders of runner processes that are gone."""
    root = Path(base) if base else Path(tempfile.gettempdir()) / "aios-shell-runner"
    root.mkdir(parents=True, exist_ok=True)
    for entry in root.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            os.kill(int(entry.name), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except PermissionError:
            pass  # a live process of another user
    mine = root / str(os.getpid())
    mine.mkdir(exist_ok=True)
    return mine


def step_seed(seed: int, step: int) -> int:
    """The sampling seed of one step: distinct per step, fixed by the job's seed."""
    return (seed * 1_000_003 + step) % (1 << 62)


class Runner:
    def __init__(self, bus: Bus, settings: ShellRunnerSettings, executor: Executor) -> None:
        self.bus = bus
        self.settings = settings
        self.executor = executor
        self.store = TaskStore(bus)
        self.config = ShellEnvConfig(
            max_steps=settings.max_steps,
            observation_chars=settings.observation_chars,
            allow_free_text=settings.allow_free_text,
        )
        self.work_root = work_root(settings.work_dir)
        self.tasks: OrderedDict[str, ShellTask] = OrderedDict()
        self.episodes = 0
        self.outcomes: dict[str, int] = {}

    async def task(self, task_id: str) -> ShellTask:
        task = self.tasks.get(task_id)
        if task is None:
            task = await self.store.get(task_id)
            self.tasks[task_id] = task
            while len(self.tasks) > self.settings.task_cache:
                self.tasks.popitem(last=False)
        else:
            self.tasks.move_to_end(task_id)
        return task

    async def run(self, job: RolloutJob) -> None:
        log = get_logger(episode_id=job.episode_id, campaign_id=job.campaign_id)
        started = time.time()
        steps: list[TrajectoryStep] = []
        info: dict[str, str] = {}
        checkpoint = job.checkpoint_id
        result: EpisodeResult | None = None
        task: ShellTask | None = None
        try:
            task = await self.task(job.task_id)
            info = {
                "task_statement": task.statement,
                "family": task.family,
                "phase": str(task.phase),
                "split": task.split,
            }
            max_steps = max(1, min(job.max_steps, self.settings.max_steps))
            env = await asyncio.to_thread(
                ShellEpisode,
                task,
                self.executor,
                config=self.config,
                seed=job.seed,
                max_steps=max_steps,
                work_root=self.work_root,
            )
            try:
                while not env.done:
                    i = len(steps)
                    observation, candidates = env.observation, env.candidates
                    if i < len(job.prefix):
                        action, act = job.prefix[i], None
                    else:
                        act = await self.bus.request(
                            self.bus.names.policy_act(),
                            ActRequest(
                                episode_id=job.episode_id,
                                step=i,
                                observation=observation,
                                candidates=candidates,
                                regime=job.regime,
                                checkpoint_id=checkpoint,
                                seed=step_seed(job.seed, i),
                            ),
                            ActResponse,
                            timeout=self.settings.act_timeout_s,
                        )
                        # One episode, one checkpoint: later steps ask for the one that answered.
                        checkpoint = act.checkpoint_id or checkpoint
                        action = act.action
                    await asyncio.to_thread(env.step, action)
                    steps.append(
                        TrajectoryStep(
                            index=i,
                            observation=observation,
                            candidates=candidates,
                            action=action,
                            action_index=(
                                act.action_index
                                if act is not None
                                else (candidates.index(action) if action in candidates else None)
                            ),
                            logprob=act.logprob if act is not None else 0.0,
                            entropy=act.entropy if act is not None else 0.0,
                            value=act.value if act is not None else None,
                            replayed=act is None,
                        )
                    )
                result = env.result
            finally:
                await asyncio.to_thread(env.close)
        except RemoteError as exc:
            if exc.code == "503":
                raise  # the sampler is starting or reloading: the kit retries the job
            log.warning("episode_blocked", error=str(exc))
            info["error"] = f"policy: {exc}"[:500]
        except TaskStoreUnavailableError:
            raise  # NATS trouble, not the job's: retried
        except TaskStoreError as exc:
            log.warning("episode_blocked", error=str(exc))
            info["error"] = f"task: {exc}"[:500]
        except (RequestTimeout, NoResponders):
            raise  # no sampler answered in time: retried with back-off
        except Exception as exc:  # the environment crashed: a blocked episode
            log.exception("environment_crashed", error=str(exc))
            info["error"] = f"environment: {type(exc).__name__}: {exc}"[:500]
        if result is not None:
            info.update(result.info())
            outcome, reward = result.outcome, result.reward
            if steps:
                steps[-1] = msgspec.structs.replace(steps[-1], step_reward=reward)
        else:
            outcome, reward = "blocked", 0.0
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
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        log.info("shell_episode", outcome=outcome, reward=reward, steps=len(steps))
