"""The shell environment behind the ``Environment`` protocol: :class:`~.episode.ShellEpisode`
(pure, blocking) run in a worker thread, commands in the sandbox."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from contracts import ShellTask

from ..base import EnvResult, EnvSpec
from ..runner import RunnerSettings
from .episode import ShellEnvConfig, ShellEpisode
from .sandbox import Executor, SandboxConfig, policy_executor
from .store import SHELL_TASKS

__all__ = ["SPEC", "ShellEnv", "ShellHost", "ShellRunnerSettings", "work_root"]

_PROGRESS_CACHE = 100_000
"""Code states whose potential a host keeps (cleared past this: about 15 MB)."""


@dataclass(frozen=True, kw_only=True)
class ShellRunnerSettings(RunnerSettings):
    """Run shell bug-fix episodes: each step's action asked of the sampler, commands run in the
    sandbox (``AIOS_ALLOW_UNSANDBOXED=1`` is the only way to run without one). ``ack_wait_s`` 0
    keeps the contract's (``contracts.subjects.RUNNER_ACK_WAIT_S``)."""

    env: str = "shell"
    """The environment this runner runs."""
    concurrency: int = 2
    """Episodes run at once by one replica (test runs are CPU-bound: about one per core)."""
    max_steps: int = 12
    """Most actions an episode may take (a job's ``max_steps`` is capped by this)."""
    command_timeout_s: float = 60.0
    """Wall-clock limit of one sandboxed command (a test run or a free-text command)."""
    cpu_seconds: int = 30
    """CPU seconds per sandboxed process."""
    memory_mb: int = 1024
    """Address space per sandboxed process, and their resident total, in MiB."""
    max_processes: int = 64
    """Processes and threads a sandboxed command may have at once."""
    disk_mb: int = 128
    """Size of the in-memory filesystem a command sees as its task directory, in MiB: what one
    episode can write (see docs/sandbox.md)."""
    max_files: int = 20_000
    """Files and directories a command may create (task directory, /tmp, /dev/shm)."""
    observation_chars: int = 2400
    """Command output kept in an observation."""
    allow_free_text: bool = True
    """Run actions that are not candidates as shell commands (students that write text)."""
    work_dir: str = ""
    """Where episodes' task directories go (default ``$TMPDIR/aios-shell-runner``): one folder
    per runner process; at start a runner removes the folders of processes that are gone (a
    killed runner cannot clean up after itself)."""


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


def executor_for(settings: ShellRunnerSettings) -> Executor:
    """The sandbox for policy commands, checked (raises ``SandboxUnavailable`` otherwise)."""
    return policy_executor(
        SandboxConfig(
            cpu_seconds=settings.cpu_seconds,
            memory_bytes=settings.memory_mb << 20,
            max_processes=settings.max_processes,
            wall_timeout_s=settings.command_timeout_s,
            disk_bytes=settings.disk_mb << 20,
            max_files=settings.max_files,
        )
    )


class ShellEnv:
    """One shell episode; every blocking call runs in a worker thread."""

    def __init__(self, episode: ShellEpisode) -> None:
        self.episode = episode

    @property
    def observation(self) -> str:
        return self.episode.observation

    @property
    def candidates(self) -> list[str]:
        return self.episode.candidates

    @property
    def done(self) -> bool:
        return self.episode.done

    @property
    def progress(self) -> float:
        """The last step's progress (``ShellEpisode.progress``)."""
        return self.episode.progress

    async def step(self, action: str) -> None:
        await asyncio.to_thread(self.episode.step, action)

    def result(self) -> EnvResult:
        result = self.episode.result
        assert result is not None, "result() before the episode ended"
        return EnvResult(result.outcome, result.reward, result.info())

    async def close(self) -> None:
        await asyncio.to_thread(self.episode.close)


class ShellHost:
    """One runner process's sandbox and task-directory folder."""

    def __init__(
        self,
        settings: ShellRunnerSettings,
        executor: Executor | None = None,
        config: ShellEnvConfig | None = None,
    ) -> None:
        """``config``: the episodes' configuration when not the one ``settings`` give (an
        ablation of the observation or the offered edits)."""
        self.settings = settings
        self.executor = executor or executor_for(settings)
        self.config = config or ShellEnvConfig(
            max_steps=settings.max_steps,
            observation_chars=settings.observation_chars,
            allow_free_text=settings.allow_free_text,
        )
        self.work_root = work_root(settings.work_dir)
        self.progress_cache: dict[str, float] = {}
        """Potentials of code states seen by this host's episodes (``ShellEpisode``)."""

    async def open(self, task: ShellTask, *, seed: int, max_steps: int) -> ShellEnv:
        episode = await asyncio.to_thread(
            ShellEpisode,
            task,
            self.executor,
            config=self.config,
            seed=seed,
            max_steps=max_steps,
            work_root=self.work_root,
            progress_cache=self._cache(),
        )
        return ShellEnv(episode)

    def _cache(self) -> dict[str, float]:
        if len(self.progress_cache) > _PROGRESS_CACHE:
            self.progress_cache.clear()
        return self.progress_cache

    def task_info(self, task: ShellTask) -> dict[str, str]:
        return {
            "task_statement": task.statement,
            "family": task.family,
            "phase": str(task.phase),
            "split": task.split,
        }

    async def aclose(self) -> None:
        await asyncio.to_thread(shutil.rmtree, self.work_root, True)


SPEC = EnvSpec(
    name="shell",
    tasks=SHELL_TASKS,
    host=ShellHost,
    settings=ShellRunnerSettings,
    description="Runs shell bug-fix episodes in the sandbox.",
)
