"""Reward handlers: decode (done by the kit), fuse, publish."""

from __future__ import annotations

from aios_rl.bus import Bus, PermanentError, get_logger
from contracts import Episode

from .logic import reward_episode
from .settings import RewardSettings


def on_taught(bus: Bus, settings: RewardSettings):
    """Handler for ``episode.taught.>``: publish the rewarded episode on ``episode.rewarded.<env>``."""

    async def handle(ep: Episode) -> None:
        log = get_logger(episode_id=ep.episode_id, campaign_id=ep.campaign_id)
        try:
            rewarded = reward_episode(
                ep, weight=settings.teacher_weight, clip=settings.shaping_clip
            )
        except ValueError as exc:
            raise PermanentError(str(exc)) from exc
        await bus.publish_durable(
            bus.names.episode("rewarded", ep.environment),
            rewarded,
            msg_id=f"{ep.episode_id}:rewarded",
        )
        log.debug("episode.rewarded", reward=rewarded.reward)

    return handle
