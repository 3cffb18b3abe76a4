"""Agent-driven rollouts: for each job, the runner opens the episode as one driven from outside,
hands it to the agent gateway for the agent (pinned to the job's checkpoint), starts the user's
agent command with the two URLs it needs, waits for it, and makes the episode of what happened:
one trajectory step per chat completion the agent asked for (its tokens and log-probs as
served), credited by the environment's progress, judged by the environment as the runner's own
episodes are. Teacher, reward, comparison, replay, trainer and rollback then treat it as any
other episode.

The agent's environment variables: ``OPENAI_BASE_URL`` (the gateway's ``/v1``),
``OPENAI_API_KEY`` (its token), ``AIOS_EPISODE_ID``, ``AIOS_ENV_URL`` (the episode's
``/v1/episodes/<id>``: ``GET`` its state, ``POST .../step`` an action), ``AIOS_MODEL`` (the
checkpoint the job asked for; any model name is answered by it). An agent that ends before its
episode does leaves it ``blocked``; one that runs past ``agent_timeout_s`` is stopped (its
process group killed) and the episode judged the same way.

A continuation (a job that branches off another episode, ``job.branch``) runs the agent again
from the start in its parent's environment (the same seed): the gateway gives the agent its
parent's first ``len(job.prefix)`` answers again while it asks what its parent asked, then
samples under the continuation's regime and seeds; those replayed calls are replayed steps,
never trained on. An agent that asks anything else (its prompt depends on the clock, say) leaves
its parent's path there, and is sampled from that call on (``info["replayed_calls"]``).

By default the agent runs in the shell environment's sandbox (``agent_sandbox``), with the
host's network so it reaches the gateway; off, as a plain process of the runner's user
without the runner's NATS credentials."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shlex
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aios_rl.agents.episodes import agent_trajectory
from aios_rl.bus import Bus, get_logger
from aios_rl.envs.base import EnvResult
from aios_rl.envs.runner import RunnerSettings, completed_episode
from aios_rl.envs.shell.sandbox import Sandbox, SandboxConfig
from contracts import AgentCall, AgentEpisode, EnvClose, EnvOpen, RolloutJob, decode
from contracts.subjects import STREAM_AGENTS

from .sessions import SessionHandlers

__all__ = ["AgentDriver", "absolute_args", "agent_paths", "agent_sandbox"]

OUTPUT_KEPT = 2000
"""Characters of the agent's output kept on the episode (its tail)."""


AGENT_ADDRESS_SPACE = 64 * 1024**3
"""A sandboxed agent's address space per process: node reserves about 10 GiB for each
WebAssembly instance (its HTTP parser is one)."""

PROJECT_MARKERS = ("package.json", "pyproject.toml")
"""Files that mark a script's project (its dependencies beside it: ``node_modules``)."""


def absolute_args(command: list[str], cwd: Path | None = None) -> list[str]:
    """``command`` with each argument that names an existing path relative to ``cwd`` (the
    runner's working directory) made absolute: the agent runs elsewhere (in the sandbox, in a
    directory of its own)."""
    base = cwd or Path.cwd()
    out = []
    for arg in command:
        path = Path(arg)
        is_path = not path.is_absolute() and ("/" in arg or arg.startswith(".")) and arg != "."
        out.append(str((base / path).resolve()) if is_path and (base / path).exists() else arg)
    return out


def _interpreters(path: Path) -> bool:
    """``path`` lies in this interpreter's installation (its venv or base): the sandbox shows
    those already."""
    roots = {Path(sys.prefix), Path(sys.base_prefix)}
    return any(path.is_relative_to(r) or path.resolve().is_relative_to(r.resolve()) for r in roots)


def agent_paths(command: list[str], extra: str = "") -> tuple[Path, ...]:
    """The host paths an agent's sandbox shows, read-only: for each argument of ``command``
    that names an existing path outside this interpreter's installation, its project (the
    nearest folder at most two levels above it holding one of ``PROJECT_MARKERS``) or its own
    folder; and ``extra`` (``:``-separated)."""
    out: list[Path] = []
    for arg in command:
        path = Path(arg)
        if not path.is_absolute() or not path.exists() or _interpreters(path):
            continue
        folder = path if path.is_dir() else path.parent
        for up in (folder, *list(folder.parents)[:2]):
            if any((up / m).is_file() for m in PROJECT_MARKERS):
                folder = up
                break
        out.append(folder.resolve())
    out += [Path(p) for p in extra.split(":") if p]
    return tuple(dict.fromkeys(out))


def agent_sandbox(command: list[str], settings: RunnerSettings) -> Sandbox:
    """The sandbox an agent runs in: the shell environment's, with the host's network (the
    gateway), the agent's paths shown, its memory, and the episode's deadline as wall time and
    CPU time."""
    memory = settings.agent_memory_mb * 1024 * 1024
    return Sandbox(
        SandboxConfig(
            network=True,
            expose=agent_paths(command, settings.agent_expose),
            memory_bytes=memory,
            address_space_bytes=AGENT_ADDRESS_SPACE,
            wall_timeout_s=settings.agent_timeout_s,
            cpu_seconds=max(1, math.ceil(settings.agent_timeout_s)),
            max_processes=256,
        )
    )


class AgentDriver:
    """Runs each job's episode by the user's agent (see the module docstring)."""

    def __init__(
        self, bus: Bus, environment: str, settings: RunnerSettings, sessions: SessionHandlers
    ) -> None:
        self.bus, self.environment, self.settings, self.sessions = (
            bus,
            environment,
            settings,
            sessions,
        )
        self.command = absolute_args(shlex.split(settings.agent_cmd))
        self.sandbox = agent_sandbox(self.command, settings) if settings.agent_sandbox else None

    async def check(self) -> None:
        """Prove the agent's sandbox works here (raises ``SandboxUnavailable``); nothing to
        prove without one."""
        if self.sandbox is not None:
            await asyncio.to_thread(self.sandbox.check)

    async def _calls(self, episode_id: str) -> list[AgentCall]:
        """The calls the ``AGENTS`` stream recorded for ``episode_id``, in order."""
        calls = [
            decode(m.data, m.headers, AgentCall)
            async for m in self.bus.read_stream(
                self.bus.names.stream(STREAM_AGENTS), self.bus.names.agent_call(episode_id)
            )
        ]
        return sorted(calls, key=lambda c: c.index)

    async def _attach(self, job: RolloutJob, state: Any) -> AgentEpisode:
        """Hand the episode to the agent's gateway; a continuation (``job.branch``) with its
        parent's first ``len(job.prefix)`` calls to give again, then its own regime and seeds."""
        extra: dict[str, Any] = {}
        if job.branch is not None:
            parent = await self._calls(job.branch.parent_episode_id)
            extra = {
                "replay": parent[: len(job.prefix)],
                "regime": job.regime,
                "sampling_seed": job.seed if job.sampling_seed is None else job.sampling_seed,
            }
        return await self.bus.request(
            self.bus.names.agent_attach(),
            AgentEpisode(
                episode_id=job.episode_id,
                agent=self.settings.agent_name,
                checkpoint_id=job.checkpoint_id,
                env=state,
                **extra,
            ),
            AgentEpisode,
            timeout=30,
        )

    async def _run_agent(self, env: dict[str, str]) -> tuple[int | None, str]:
        """The agent's exit code (``None``: stopped at the deadline) and its output's tail."""
        if self.sandbox is not None:
            return await asyncio.to_thread(self._run_sandboxed, env)
        env = {**os.environ, **env}
        for secret in ("NATS_USER", "NATS_PASSWORD", "AIOS_AGENT_TOKEN"):
            env.pop(secret, None)  # the agent gets its token, not the runner's credentials
        proc = await asyncio.create_subprocess_exec(
            *self.command,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its children die with it
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), self.settings.agent_timeout_s)
            return proc.returncode, out.decode(errors="replace")[-OUTPUT_KEPT:]
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            return None, ""

    def _run_sandboxed(self, env: dict[str, str]) -> tuple[int | None, str]:
        assert self.sandbox is not None
        with tempfile.TemporaryDirectory(prefix="aios-agent-") as workdir:
            result = self.sandbox.run(self.command, Path(workdir), env=env)
        if result.timed_out:
            return None, result.output[-OUTPUT_KEPT:]
        tail = result.output[-OUTPUT_KEPT:]
        if result.blocked_reason:
            tail += f"\n[sandbox: {result.blocked_reason}]"
        return result.exit_code, tail

    async def run(self, job: RolloutJob) -> Any:
        """The episode ``job`` makes, played by the agent (not yet published)."""
        log = get_logger(episode_id=job.episode_id, campaign_id=job.campaign_id)
        started = time.time()
        max_steps = min(job.max_steps or self.settings.max_steps, self.settings.max_steps)
        state = await self.sessions.open(
            EnvOpen(
                environment=self.environment,
                episode_id=job.episode_id,
                task_id=job.task_id,
                seed=job.seed,
                max_steps=max_steps,
                agent=self.settings.agent_name,
            )
        )
        code: int | None = None
        output = ""
        try:
            attached = await self._attach(job, state)
            base = attached.gateway_url
            env = {
                "OPENAI_BASE_URL": f"{base}/v1",
                "OPENAI_API_KEY": self.settings.agent_token,
                "AIOS_EPISODE_ID": job.episode_id,
                "AIOS_ENV_URL": f"{base}/v1/episodes/{job.episode_id}",
                "AIOS_MODEL": job.checkpoint_id,
            }
            code, output = await self._run_agent(env)
        finally:
            if self.sessions.sessions.get(state.session) is not None:
                await self.sessions.close(EnvClose(session=state.session))
        held = self.sessions.closed.get(state.session)  # closed by the agent or just now
        session_result = held.result if held is not None else None
        info = {
            **(held.task_info if held is not None else {}),
            "driver": "agent",
            "agent": self.settings.agent_name,
            "agent_exit": "timeout" if code is None else str(code),
            "agent_output_tail": output[-500:],
        }
        result = session_result or EnvResult(
            outcome="blocked",
            reward=0.0,
            info={"reason": "the agent stopped before the episode ended"},
        )
        calls = await self._calls(job.episode_id)
        if job.branch is not None:
            info["replayed_calls"] = str(sum(c.replayed for c in calls))
            info["prefix_calls"] = str(len(job.prefix))
        try:
            checkpoint, steps = agent_trajectory(calls, held.moves if held is not None else [])
        except ValueError as exc:
            log.warning("agent_episode_without_calls", error=str(exc))
            checkpoint, steps = job.checkpoint_id, []
            result = EnvResult(outcome="blocked", reward=0.0, info={"reason": str(exc)})
        return completed_episode(
            job,
            checkpoint=checkpoint,
            trajectory=steps,
            outcome=result.outcome,
            reward=result.reward,
            info={**info, **result.info},
            started=started,
            evidence=list(result.evidence),
        )
