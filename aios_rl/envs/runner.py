"""What the one runner (``services/runner``) is configured with, for every environment, and the
episode it makes of a job (:func:`run_episode`: the runner service and the in-process kernel,
:mod:`aios_rl.local`, both run episodes through it). Pure: no NATS connection; the bus kit's
error classes say which failures are transient."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from aios_rl.bus import NoResponders, RemoteError, RequestTimeout, ServiceSettings, get_logger
from aios_rl.state.tasks import CorruptTaskError, TaskStoreUnavailableError, UnknownTaskError
from contracts import Episode, EvidenceRef, Outcome, RolloutJob, Timings, TrajectoryStep

from .base import EnvironmentHost, EnvResult
from .loop import Act, StepLimitError, run_steps

__all__ = ["RunnerSettings", "blocked_error", "completed_episode", "run_episode", "transient"]


@dataclass(frozen=True, kw_only=True)
class RunnerSettings(ServiceSettings):
    """Settings every runner has, whatever its environment (an environment's adapter may add
    its own fields in a subclass)."""

    env: str = ""
    """The environment this runner runs (a name in ``aios_rl.envs.registry``); required."""
    env_module: str = ""
    """A module to import first, for an environment of your own that registers itself there
    (``aios_rl.envs.registry.register``)."""
    concurrency: int = 8
    """Episodes run at once by one replica."""
    act_timeout_s: float = 30.0
    """Deadline for the sampler's answer to one step."""
    ack_wait_s: float = 0.0
    """Seconds before the jobs a dead replica held go to another (0: the contract's ack wait).
    Running episodes send heartbeats, so a short wait (e.g. 10) only speeds recovery. Give every
    replica the same value (env ``AIOS_ACK_WAIT_S``): the runner sets it on the shared consumer
    at start and other services' start-ups keep it; at 0 the runner restores the contract's. At
    least 1 s."""

    max_steps: int = 16
    """Most actions an episode may take (a job's ``max_steps`` is capped by this)."""
    task_cache: int = 512
    """Tasks kept decoded in memory."""
    agent_cmd: str = ""
    """Your agent: a command the runner starts for every job, which plays the job's episode
    itself through the agent gateway (``docs/agents.md``: ``OPENAI_BASE_URL``,
    ``OPENAI_API_KEY``, ``AIOS_EPISODE_ID``, ``AIOS_ENV_URL`` in its environment), instead of
    the runner asking ``policy.act`` for each step. Empty: the runner's own loop."""
    agent_name: str = "agent"
    """The agent's name (its token's) in the gateway's record."""
    agent_token: str = ""
    """The agent's token for the gateway (``aios-rl auth agent-token``; env
    ``AIOS_AGENT_TOKEN``), handed to the agent as ``OPENAI_API_KEY``."""
    agent_timeout_s: float = 600.0
    """Longest an agent may take over one episode (then it is stopped and the episode judged
    as it stands)."""
    agent_sandbox: bool = True
    """Run the agent in the shell environment's sandbox (``docs/agents.md``: its own uid, a
    read-only allow-list filesystem showing the interpreter, ``/usr`` and the agent's own
    directory, a private ``/tmp``, seccomp, per-process limits, the host's network so it
    reaches the gateway). Off: a plain process of the runner's user."""
    agent_memory_mb: int = 2048
    """The sandboxed agent's resident memory, all its processes together (MiB). Its address
    space is not limited as tightly (64 GiB a process): a JavaScript engine reserves gigabytes
    it never touches."""
    agent_expose: str = ""
    """More host paths the sandboxed agent may read (``:``-separated, absolute), beside the
    directories of the paths in ``agent_cmd`` (a script's project: the nearest folder above it,
    two levels at most, holding ``package.json`` or ``pyproject.toml``, else its own)."""
    max_sessions: int = 8
    """Episodes driven from outside (``env.open``) one replica holds at once; opening one more
    is refused (503) until one closes or idles out."""
    session_idle_s: float = 600.0
    """An episode driven from outside with no step for this long is closed."""

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {self.max_steps}.")
        if self.task_cache < 1:
            raise ValueError(f"task_cache must be at least 1, got {self.task_cache}.")
        if self.ack_wait_s != 0 and not self.ack_wait_s >= 1.0:
            raise ValueError(
                f"ack_wait_s must be 0 (the contract's) or at least 1 second, got {self.ack_wait_s}."
            )
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}.")
        if self.max_sessions < 0 or not self.session_idle_s > 0:
            raise ValueError("max_sessions must be >= 0 and session_idle_s > 0.")
        if self.agent_cmd and (self.max_sessions < 1 or not self.agent_token):
            raise ValueError(
                "agent_cmd needs max_sessions >= 1 (the agent's episodes are sessions) and "
                "agent_token (aios-rl auth agent-token NAME)."
            )
        if self.agent_memory_mb < 64:
            raise ValueError(f"agent_memory_mb must be at least 64, got {self.agent_memory_mb}.")
        if any(p and not p.startswith("/") for p in self.agent_expose.split(":")):
            raise ValueError(f"agent_expose holds a relative path: {self.agent_expose!r}.")
        if not self.agent_timeout_s > 0:
            raise ValueError(f"agent_timeout_s must be > 0, got {self.agent_timeout_s}.")


def completed_episode(
    job: RolloutJob,
    *,
    checkpoint: str,
    trajectory: list[TrajectoryStep],
    outcome: Outcome,
    reward: float,
    info: dict[str, str],
    started: float,
    evidence: list[EvidenceRef] | None = None,
) -> Episode:
    """The episode a runner made of ``job`` (ids, group, role, seed, regime, branch and reference
    carried over from the job)."""
    now = time.time()
    return Episode(
        episode_id=job.episode_id,
        environment=job.environment,
        task_id=job.task_id,
        campaign_id=job.campaign_id,
        epoch=job.epoch,
        checkpoint_id=checkpoint,
        group_id=job.group_id,
        role=job.role,
        seed=job.seed,
        sampling_seed=job.sampling_seed,
        regime=job.regime,
        branch=job.branch,
        trajectory=trajectory,
        outcome=outcome,
        env_reward=reward,
        timings=Timings(started_at=started, finished_at=now, stages={"completed": now}),
        info=info,
        reference_checkpoint=job.reference_checkpoint,
        evidence=list(evidence or []),
    )


def transient(exc: BaseException) -> bool:
    """Whether a failure is worth running the job again later rather than ending the episode:
    the policy starting or reloading (a ``503`` reply), no policy answering (no responders, a
    timeout), the task store unreachable."""
    if isinstance(exc, RemoteError):
        return exc.code == "503"
    return isinstance(exc, (RequestTimeout, NoResponders, TaskStoreUnavailableError))


ERROR_CHARS = 500
"""The most characters of a blocked episode's ``info["error"]``."""


def blocked_error(kind: str, exc: BaseException) -> str:
    """A blocked episode's ``info["error"]``: ``"<kind>: <exc>"`` (an environment's crash also
    names the exception's type), cut to ``ERROR_CHARS``."""
    what = f"{type(exc).__name__}: {exc}" if kind == "environment" else str(exc)
    return f"{kind}: {what}"[:ERROR_CHARS]


class _PolicyFailed(Exception):
    """The policy refused or failed a step (not transient): the episode is blocked."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.exc = exc


async def run_episode(
    host: EnvironmentHost[Any],
    job: RolloutJob,
    task_of: Callable[[str], Awaitable[Any]],
    act: Act,
    *,
    max_steps: int,
) -> Episode:
    """The episode ``job`` makes: its task (``task_of(job.task_id)``) opened on ``host``, the
    step loop run with ``act`` as the policy (at most ``min(job.max_steps, max_steps)`` steps),
    the environment's result, or a ``blocked`` episode saying why it could not run: an unknown
    or corrupt task, a policy that refused a step, no end within the step limit, an environment
    that crashed or could not set the task up.

    Raises what is :func:`transient` (the job should run again later), so a job is never lost
    and never half-done."""
    log = get_logger(episode_id=job.episode_id, campaign_id=job.campaign_id)
    started = time.time()
    steps: list[TrajectoryStep] = []
    info: dict[str, str] = {}
    checkpoint = job.checkpoint_id
    result: EnvResult | None = None

    async def policy(req):  # type: ignore[no-untyped-def]
        try:
            return await act(req)
        except Exception as exc:
            if transient(exc):
                raise
            raise _PolicyFailed(exc) from exc

    try:
        task = await task_of(job.task_id)
        info = dict(host.task_info(task))
        limit = max(1, min(job.max_steps, max_steps))
        env = await host.open(task, seed=job.seed, max_steps=limit)
        try:
            checkpoint = await run_steps(env, job, policy, steps, max_steps=limit)
            result = env.result()
        finally:
            await env.close()
    except _PolicyFailed as exc:
        log.warning("episode_blocked", error=str(exc))
        info["error"] = blocked_error("policy", exc)
    except (UnknownTaskError, CorruptTaskError) as exc:
        log.warning("episode_blocked", error=str(exc))
        info["error"] = blocked_error("task", exc)
    except StepLimitError as exc:
        log.warning("episode_blocked", error=str(exc))
        info["error"] = blocked_error("limit", exc)
    except Exception as exc:
        if transient(exc):
            raise
        # The environment crashed: a blocked episode, the job is done.
        log.exception("environment_crashed", error=str(exc))
        info["error"] = blocked_error("environment", exc)
    if result is not None:
        info.update(result.info)
        outcome, reward, evidence = result.outcome, result.reward, result.evidence
        if steps:
            steps[-1] = msgspec.structs.replace(steps[-1], step_reward=reward)
    else:
        outcome, reward, evidence = "blocked", 0.0, []
    return completed_episode(
        job,
        checkpoint=checkpoint,
        trajectory=steps,
        outcome=outcome,
        reward=reward,
        info=info,
        started=started,
        evidence=evidence,
    )
