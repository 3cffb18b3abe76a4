"""The ``agentbench_os`` environment behind the ``Environment`` protocol: AgentBench's
OS-interaction bench (:mod:`.os`) on a machine of the episode's own (:mod:`.machine`, on an
image of :mod:`.images`). Free-text actions only (a student that writes text: ``--student hf``);
each step is one turn of the agent.

An episode: the machine starts on the task's image and the agent's shell logs in (AgentBench
opens it with the container); the task's ``init`` scripts run as AgentBench runs them (``docker
exec``: their exit status is not checked, failures are noted in the result's ``info``); the
``start`` script is typed into the agent's shell; then each turn's ``bash`` code is
typed into that shell and its output shown (cut as AgentBench cuts it), until an ``answer`` or
``finish``, an invalid action, or the round limit. The verdict is AgentBench's: ``match`` against
the answer, or the ``check`` scripts run on the machine (``None`` entries run ``example``).

Outcome: ``success`` (reward 1) when the judge accepts, else ``failure`` (0); ``blocked`` when
the machine cannot be made (the runner turns a raise in ``open`` into that). The observation is
the conversation so far, its last ``observation_chars`` when longer.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from contracts import AgentBenchOsTask, OsScript

from ...state.tasks import TaskKind
from ..base import EnvResult, EnvSpec
from ..runner import RunnerSettings
from .conversation import Conversation
from .images import image_root
from .machine import Machine, MachineLimits, Shell
from .os import (
    INSTRUCTIONS,
    ROUND_LIMIT,
    judge_check,
    judge_match,
    os_task_id,
    parse_os_action,
    problem,
    script_argv,
    shown_output,
)

__all__ = ["OS_TASKS", "SPEC", "OsEnv", "OsHost", "OsRunnerSettings"]

ENVIRONMENT = "agentbench_os"

OS_TASKS = TaskKind(ENVIRONMENT, AgentBenchOsTask, os_task_id)


@dataclass(frozen=True, kw_only=True)
class OsRunnerSettings(RunnerSettings):
    """Run AgentBench OS episodes, each on a machine of its own (needs root, and the task's
    image built: ``aios-rl agentbench images build default``)."""

    env: str = ENVIRONMENT
    concurrency: int = 2
    max_steps: int = ROUND_LIMIT
    observation_chars: int = 6000
    """Most characters of the conversation an observation holds (its end)."""
    images_dir: str = ""
    """Where the built images are (default: ``AIOS_RL_IMAGES`` or /var/lib/aios-rl/...)."""
    memory_mb: int = 1024
    """The machine's memory (AgentBench's containers get 1 GiB)."""
    command_timeout_s: float = 60.0
    """Longest one turn's commands, or one init or check script, may run."""


class OsEnv(Conversation):
    """One episode of one task on its machine (made by :meth:`OsHost.open`)."""

    def __init__(
        self,
        task: AgentBenchOsTask,
        machine: Machine,
        shell: Shell,
        *,
        max_steps: int,
        chars: int,
        timeout_s: float,
        notes: dict[str, str],
    ) -> None:
        super().__init__([INSTRUCTIONS, problem(task)], chars)
        self.task = task
        self.machine = machine
        self.shell = shell
        self.max_steps = max_steps
        self.timeout_s = timeout_s
        self.notes = notes
        self.rounds = 0
        self.answer: str | None = None
        self.ending = ""

    async def step(self, action: str) -> None:
        if self.done:
            raise RuntimeError("the episode is over")
        self.rounds += 1
        parsed = parse_os_action(action)
        self.turns.append(action.strip())
        if parsed.kind == "invalid":
            self.ending = "invalid action"
            self.verdict = False
            return
        if parsed.kind == "answer":
            self.ending = "answer" if parsed.content is not None else "finish"
            await self._judge(parsed.content)
            return
        output = await asyncio.to_thread(
            self.shell.run, parsed.content or "", hard_s=self.timeout_s
        )
        self.turns.append(shown_output(output))
        if self.rounds >= self.max_steps:
            self.ending = "round limit"
            self.verdict = False

    def _run_script(self, script: OsScript, params: list[str]) -> tuple[int, str]:
        try:
            argv = script_argv(script, params)
        except ValueError as exc:
            self.notes["check_error"] = str(exc)
            return 1, ""
        return self.machine.exec(argv, timeout_s=self.timeout_s)

    async def _judge(self, answer: str | None) -> None:
        self.answer = answer
        if self.task.match is not None:
            self.verdict = judge_match(answer, self.task.match)
            return
        self.verdict = await asyncio.to_thread(
            judge_check, answer, self.task.check, self.task.example, self._run_script
        )

    def result(self) -> EnvResult:
        assert self.verdict is not None, "result() before the episode ended"
        peak = self.machine.cgroup.memory_peak() if self.machine.cgroup else 0
        info = {
            **({"memory_peak_mb": str(peak >> 20)} if peak else {}),
            "rounds": str(self.rounds),
            "ending": self.ending,
            "answer": (self.answer or "")[:300],
            "image": self.task.image,
            **self.notes,
        }
        return EnvResult("success" if self.verdict else "failure", float(self.verdict), info)

    async def close(self) -> None:
        await asyncio.to_thread(self.machine.close)


def _hostname(task: AgentBenchOsTask, seed: int) -> str:
    """Deterministic per task and seed (replays see the same machine), 12 hex digits as
    Docker's container names."""
    return hashlib.sha256(f"{task.task_id}:{seed}".encode()).hexdigest()[:12]


class OsHost:
    """Makes one machine per episode; nothing shared but the images on disk."""

    def __init__(self, settings: OsRunnerSettings) -> None:
        if os.geteuid() != 0:
            raise PermissionError(
                "the agentbench_os environment needs root: its machines map 65536 uids, mount "
                "an overlay and make a cgroup"
            )
        self.settings = settings
        self.limits = MachineLimits(
            memory_bytes=settings.memory_mb << 20,
            exec_timeout_s=settings.command_timeout_s,
        )

    def _open(self, task: AgentBenchOsTask, seed: int) -> tuple[Machine, Shell, dict[str, str]]:
        home = Path(self.settings.images_dir) if self.settings.images_dir else None
        machine = Machine(image_root(task.image, home), self.limits, hostname=_hostname(task, seed))
        machine.start()
        try:
            # The agent's shell first, as AgentBench opens it with the container: what init
            # scripts write to ~/.bashrc or /etc/profile does not reach its login.
            shell = machine.shell()
            notes: dict[str, str] = {}
            for n, script in enumerate(task.init):
                try:
                    code, out = machine.exec(script_argv(script, []))
                except ValueError as exc:
                    code, out = 1, str(exc)
                if code != 0:
                    notes[f"init_{n}"] = f"exit {code}: {out[-200:]}"
            if task.start is not None:
                shell.run(task.start.code, hard_s=self.settings.command_timeout_s)
            return machine, shell, notes
        except BaseException:
            machine.close()
            raise

    async def open(self, task: AgentBenchOsTask, *, seed: int, max_steps: int) -> OsEnv:
        machine, shell, notes = await asyncio.to_thread(self._open, task, seed)
        return OsEnv(
            task,
            machine,
            shell,
            max_steps=min(max_steps, ROUND_LIMIT),
            chars=self.settings.observation_chars,
            timeout_s=self.settings.command_timeout_s,
            notes=notes,
        )

    def task_info(self, task: AgentBenchOsTask) -> dict[str, str]:
        return {
            "task_statement": task.description,
            "image": task.image,
            "split": task.split,
            "source": task.source,
        }

    async def aclose(self) -> None:
        return None


SPEC = EnvSpec(
    name=ENVIRONMENT,
    tasks=OS_TASKS,
    host=OsHost,
    settings=OsRunnerSettings,
    description="Runs AgentBench OS-interaction episodes, each on a machine of its own.",
)
