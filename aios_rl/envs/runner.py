"""What the one runner (``services/runner``) is configured with, for every environment, and the
episode it makes of a job. Pure: no NATS."""

from __future__ import annotations

import time
from dataclasses import dataclass

from aios_rl.bus import ServiceSettings
from contracts import Episode, EvidenceRef, Outcome, RolloutJob, Timings, TrajectoryStep

__all__ = ["RunnerSettings", "completed_episode"]


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
