"""Rollout jobs and the policy's act request/reply."""

from __future__ import annotations

from ._base import Message
from .episode import BranchInfo, DecodingRegime
from .vocab import Environment, EpisodeRole

__all__ = ["JOB_MAX_STEPS", "ActRequest", "ActResponse", "RolloutJob", "job_max_steps"]

JOB_MAX_STEPS: dict[str, int] = {"browser": 32}
"""The step budget of a job per built-in environment when it is not the default (16): a browser
flow that logs in, buys and fills a delivery form takes 20 to 22 actions. Runners cap it by
their own ``max_steps``, environments by the task's."""


def job_max_steps(environment: str) -> int:
    """The step budget a job of ``environment`` asks for."""
    return JOB_MAX_STEPS.get(environment, 16)


class RolloutJob(Message, frozen=True, kw_only=True):
    """Run one episode of ``task_id`` under ``checkpoint_id``.

    The episode id is fixed by the sender, so a job redelivered after a crash produces the same
    episode and downstream de-duplication holds. ``prefix`` is a list of actions replayed
    deterministically before sampling resumes under ``regime`` (branching)."""

    SCHEMA = "rollout_job.v1"

    job_id: str
    episode_id: str
    environment: Environment
    task_id: str
    campaign_id: str = ""
    epoch: int = 0
    group_id: str = ""
    role: EpisodeRole = "rollout"
    checkpoint_id: str = "active"
    """A checkpoint id, or ``active`` for whatever the pointer names when the episode starts."""
    seed: int = 0
    """The environment's seed; also the policy's unless ``sampling_seed`` is set."""
    sampling_seed: int | None = None
    """The seed of the policy's draws (per step, through ``step_seed``) when it must differ from
    the environment's: a continuation opens its parent's environment (same ``seed``) and samples
    afresh after the prefix."""
    regime: DecodingRegime = DecodingRegime()
    prefix: list[str] = []
    branch: BranchInfo | None = None
    max_steps: int = 16
    deadline: float = 0.0
    """Unix seconds after which the result is no longer awaited (0: none)."""
    split: str = "train"
    reference_checkpoint: str = ""
    """Copied onto the episode: what comparison measures it against."""
    want_hidden: bool = False
    """Ask the sampler for the hidden-state projection at every sampled step (kept on the
    trajectory for RAIL's context)."""


class ActRequest(Message, frozen=True, kw_only=True):
    """Ask the student for an action on one observation."""

    SCHEMA = "act_request.v1"

    episode_id: str
    step: int
    observation: str
    candidates: list[str] = []
    """The actions the environment offers; empty means free text."""
    regime: DecodingRegime = DecodingRegime()
    checkpoint_id: str = "active"
    seed: int | None = None
    want_hidden: bool = False
    """Also return a short projection of the policy's hidden state (for RAIL's context)."""


class ActResponse(Message, frozen=True, kw_only=True):
    """The student's action, with what the trainer and RAIL need to know about it."""

    SCHEMA = "act_response.v1"

    action: str
    action_index: int | None = None
    logprob: float = 0.0
    entropy: float = 0.0
    value: float | None = None
    checkpoint_id: str = ""
    hidden: list[float] = []
    top1_prob: float = 0.0
    """Probability of the most likely candidate under the policy (0 for free text)."""
    margin: float = 0.0
    """Its lead over the second most likely (0 for free text)."""
    token_entropies: list[float] = []
    """Text students: the next-token entropy at each token of the chosen action (``entropy``
    is their mean for free text); empty for the tiny student."""
    token_ids: list[int] = []
    """Text students writing free text: the action's token ids as sampled (ending with the
    end-of-sequence token when the action ended there); token-level training learns from
    exactly these."""
    token_logprobs: list[float] = []
    """The log-prob of each of ``token_ids`` under the sampler that wrote them (the inference
    engine's, or the in-process model's): the rollout policy of truncated importance
    weighting."""
