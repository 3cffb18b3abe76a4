"""Evaluating a checkpoint: rollout jobs with role ``eval`` through the real runners, and what
their episodes say, with confidence intervals.

:func:`summarize` is pure: success and partial rates with Wilson score intervals, mean reward
with a percentile bootstrap interval (seeded), both from :mod:`aios_rl.stats`.
:func:`run_eval` publishes one job per task on ``rollout.job.<env>`` and gathers the
``episode.completed.<env>`` episodes back; ``eval`` episodes pass through the pipeline like any
other but never train the student (the trainer, replay lanes and comparison take ``rollout``
episodes only).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contracts import DecodingRegime, Episode, RolloutJob, job_max_steps

from ..bus import Bus
from ..stats import Interval, bootstrap_mean, wilson

__all__ = ["EVAL_REGIME", "EvalSummary", "run_eval", "summarize"]

EVAL_REGIME = DecodingRegime(temperature=0.1)
"""Near-greedy decoding: what the policy would do, seeded so a run repeats."""


@dataclass(frozen=True)
class EvalSummary:
    """What an evaluation measured."""

    episodes: int
    success: Interval
    partial: Interval
    reward: Interval
    blocked: int
    outcomes: dict[str, int]

    def rows(self) -> list[tuple[str, str]]:
        return [
            ("episodes", str(self.episodes)),
            ("success rate", self.success.pct()),
            ("partial rate", self.partial.pct()),
            ("mean reward", self.reward.num()),
            ("blocked", str(self.blocked)),
        ]


def summarize(episodes: Sequence[Episode]) -> EvalSummary:
    """Rates and mean reward of ``episodes`` with 95 % intervals. Raises ``ValueError`` for none."""
    if not episodes:
        raise ValueError("no episodes to summarise")
    n = len(episodes)
    outcomes: dict[str, int] = {}
    for ep in episodes:
        outcomes[ep.outcome] = outcomes.get(ep.outcome, 0) + 1
    return EvalSummary(
        episodes=n,
        success=wilson(outcomes.get("success", 0), n),
        partial=wilson(outcomes.get("partial", 0), n),
        reward=bootstrap_mean([ep.env_reward for ep in episodes]),
        blocked=outcomes.get("blocked", 0),
        outcomes=outcomes,
    )


async def run_eval(
    bus: Bus,
    environment: str,
    checkpoint: str,
    task_ids: Sequence[str],
    *,
    run_id: str,
    split: str = "heldout",
    regime: DecodingRegime = EVAL_REGIME,
    seed: int = 0,
    timeout_s: float = 600.0,
    on_episode: Callable[[Episode], None] | None = None,
) -> list[Episode]:
    """Run ``checkpoint`` once on each task through the ``environment``'s runners and return the
    episodes (in task order). Episode ids are ``<run_id>-<i>``: running the same ``run_id`` again
    is de-duplicated by JetStream, so give each evaluation its own. Raises ``TimeoutError`` when
    not every episode arrived within ``timeout_s``, naming how many did."""
    ids = {f"{run_id}-{i}": i for i in range(len(task_ids))}
    got: dict[str, Episode] = {}
    done = asyncio.Event()

    async def on_completed(msg: object, _raw: object) -> None:
        if isinstance(msg, Episode) and msg.episode_id in ids and msg.episode_id not in got:
            got[msg.episode_id] = msg
            if on_episode is not None:
                on_episode(msg)
            if len(got) == len(ids):
                done.set()

    sub = await bus.subscribe(bus.names.episode("completed", environment), on_completed)
    try:
        deadline = time.time() + timeout_s
        for episode_id, i in ids.items():
            job = RolloutJob(
                job_id=episode_id,
                episode_id=episode_id,
                environment=environment,  # type: ignore[arg-type]
                task_id=task_ids[i],
                campaign_id=run_id,
                role="eval",
                checkpoint_id=checkpoint,
                seed=seed * 100_003 + i,
                regime=regime,
                split=split,
                deadline=deadline,
                max_steps=job_max_steps(environment),
            )
            await bus.publish_durable(bus.names.rollout_job(environment), job, msg_id=episode_id)
        try:
            await asyncio.wait_for(done.wait(), timeout_s)
        except TimeoutError:
            raise TimeoutError(
                f"{len(got)} of {len(ids)} {environment} episodes arrived within {timeout_s:.0f}s"
            ) from None
    finally:
        await sub.unsubscribe()
    return [got[episode_id] for episode_id in ids]
