"""The step loop, written once: an :class:`~aios_rl.envs.base.Environment` driven through a job.

Pure (no NATS): the policy is a function ``act(ActRequest) -> ActResponse``. The runner service
passes one that asks the sampler over the bus; benchmarks and tests pass one that calls a model
in the same process. A job's action prefix is replayed first (steps marked ``replayed``), then
every step asks the policy under the job's decoding regime, pinned to the checkpoint that
answered first, with a per-step seed fixed by the job's sampling seed (its ``seed`` unless a
continuation sets one: it opens its parent's environment and must not redraw its parent's
actions).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec

from contracts import ActRequest, ActResponse, RolloutJob, TrajectoryStep

from ..errors import AiosError
from .base import Environment

__all__ = ["Act", "StepLimitError", "run_steps", "step_seed"]

Act = Callable[[ActRequest], Awaitable[ActResponse]]
"""The policy: one request, one response (raises whatever its transport raises)."""


class StepLimitError(AiosError, RuntimeError):
    """The environment did not end within the runner's step limit."""


def step_seed(seed: int, step: int) -> int:
    """The sampling seed of one step: distinct per step, fixed by the job's seed."""
    return (seed * 1_000_003 + step) % (1 << 62)


async def run_steps(
    env: Environment,
    job: RolloutJob,
    act: Act,
    steps: list[TrajectoryStep],
    *,
    max_steps: int,
) -> str:
    """Drive ``env`` until it ends, appending one :class:`TrajectoryStep` per action to
    ``steps`` (so a crash keeps what was done); returns the checkpoint that acted (the job's
    when every step was replayed).

    Raises ``StepLimitError`` when ``env`` is not done after ``max_steps`` actions, and whatever
    ``act`` or the environment raise."""
    checkpoint = job.checkpoint_id
    while not env.done:
        i = len(steps)
        if i >= max_steps:
            raise StepLimitError(f"the environment did not end within {max_steps} steps")
        observation, candidates = env.observation, list(env.candidates)
        if i < len(job.prefix):
            action = job.prefix[i]
            step = TrajectoryStep(
                index=i,
                observation=observation,
                candidates=candidates,
                action=action,
                action_index=candidates.index(action) if action in candidates else None,
                replayed=True,
            )
        else:
            resp = await act(
                ActRequest(
                    episode_id=job.episode_id,
                    step=i,
                    observation=observation,
                    candidates=candidates,
                    regime=job.regime,
                    checkpoint_id=checkpoint,
                    seed=step_seed(job.seed if job.sampling_seed is None else job.sampling_seed, i),
                    want_hidden=job.want_hidden,
                )
            )
            # One episode, one checkpoint: later steps ask for the one that answered.
            checkpoint = resp.checkpoint_id or checkpoint
            action = resp.action
            step = TrajectoryStep(
                index=i,
                observation=observation,
                candidates=candidates,
                action=action,
                action_index=resp.action_index,
                logprob=resp.logprob,
                entropy=resp.entropy,
                value=resp.value,
                hidden=list(resp.hidden),
                top1_prob=resp.top1_prob,
                margin=resp.margin,
                token_entropies=list(resp.token_entropies),
                token_ids=list(resp.token_ids),
                token_logprobs=list(resp.token_logprobs),
            )
        await env.step(action)
        progress = float(getattr(env, "progress", 0.0) or 0.0)
        if progress and not step.replayed:
            step = msgspec.structs.replace(step, progress=progress)
        steps.append(step)
    return checkpoint
