"""What every environment runner shares: its settings, the episode it makes of a job, and how
that episode is published (durably, de-duplicated, before the job is acked)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aios_rl.bus import Bus, Service, ServiceSettings
from contracts import Episode, Outcome, RolloutJob, Timings, TrajectoryStep

__all__ = [
    "RunnerSettings",
    "completed_episode",
    "publish_completed",
    "publish_episode",
    "runner_service",
]


@dataclass(frozen=True, kw_only=True)
class RunnerSettings(ServiceSettings):
    """Settings every runner has."""

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

    def __post_init__(self) -> None:
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
        regime=job.regime,
        branch=job.branch,
        trajectory=trajectory,
        outcome=outcome,
        env_reward=reward,
        timings=Timings(started_at=started, finished_at=now, stages={"completed": now}),
        info=info,
        reference_checkpoint=job.reference_checkpoint,
    )


async def publish_completed(bus: Bus, ep: Episode) -> None:
    """Publish ``ep`` on ``episode.completed.<env>`` (de-duplicated by its id: a job redelivered
    after a crash publishes the same episode again harmlessly). Ack the job after this."""
    await bus.publish_durable(
        bus.names.episode("completed", ep.environment), ep, msg_id=f"{ep.episode_id}:completed"
    )


async def publish_episode(
    bus: Bus,
    job: RolloutJob,
    *,
    checkpoint: str,
    trajectory: list[TrajectoryStep],
    outcome: Outcome,
    reward: float,
    info: dict[str, str],
    started: float,
) -> Episode:
    """:func:`completed_episode`, then :func:`publish_completed`: what a runner does last, before
    the kit acks the job. Returns the episode."""
    ep = completed_episode(
        job,
        checkpoint=checkpoint,
        trajectory=trajectory,
        outcome=outcome,
        reward=reward,
        info=info,
        started=started,
    )
    await publish_completed(bus, ep)
    return ep


def runner_service(
    bus: Bus,
    settings: RunnerSettings,
    *,
    name: str,
    version: str,
    description: str,
    run: Callable[[RolloutJob], Awaitable[None]],
    stats: Callable[[], dict[str, float]],
) -> Service:
    """A runner's service: the shared durable consumer ``name`` (as declared in the topology) fed
    to ``run`` with the settings' concurrency and ack wait, and ``stats`` on the stats endpoint."""
    svc = Service(
        bus,
        name=name,
        version=version,
        shutdown_grace_s=settings.shutdown_grace_s,
        description=description,
    )
    svc.consume(
        name,
        RolloutJob,
        run,
        concurrency=settings.concurrency,
        ack_wait_s=settings.ack_wait_s or None,
    )
    svc.stats(stats)
    return svc
