"""Where the agent gateway keeps its episodes: the KV bucket ``agent_episodes``, one
``AgentEpisodeState`` per episode (key ``episode.<id>``), every change a compare-and-set, so
replicas of the gateway share them and a restarted one forgets none. A store that cannot be
reached is a 503 to the agent, never a guess."""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from aios_rl.agents.wire import WireError
from aios_rl.bus import Bus
from aios_rl.state import CorruptError, EntryDecoder, Kv, StateError, compare_and_set
from contracts import AgentEpisodeState
from contracts.subjects import BUCKET_AGENT_EPISODES

from .logic import claim, live

__all__ = ["EpisodeStore"]


class EpisodeStore:
    """The gateway's episodes (see the module docstring)."""

    def __init__(self, bus: Bus, *, idle_s: float, clock: Callable[[], float] = time.time) -> None:
        self.kv = Kv(bus, bus.names.bucket(BUCKET_AGENT_EPISODES))
        self.names = bus.names
        self.idle_s, self.clock = idle_s, clock
        self._decode = EntryDecoder(
            AgentEpisodeState, CorruptError, "agent episode", "an agent episode's state"
        )

    def _key(self, episode_id: str) -> str:
        try:
            return self.names.key_agent_episode(episode_id)
        except ValueError:
            raise WireError(
                f"episode id {episode_id!r}: use letters, digits, '-' or '_'", param="user"
            ) from None

    async def get(self, episode_id: str) -> AgentEpisodeState | None:
        """The episode as it stands (``None``: none, or forgotten after ``idle_s``)."""
        key = self._key(episode_id)
        try:
            entry = await self.kv.latest(key)
            state = (
                EntryDecoder(AgentEpisodeState, CorruptError, "agent episode", "one")(entry)
                if entry
                else None
            )
        except StateError as exc:
            raise WireError(f"the episode store: {exc}", status=503) from exc
        return live(state, self.clock(), self.idle_s)

    async def update(
        self,
        episode_id: str,
        agent: str,
        change: Callable[[AgentEpisodeState], AgentEpisodeState] = lambda s: s,
    ) -> AgentEpisodeState:
        """Claim ``episode_id`` for ``agent`` (403 when another agent's) and store
        ``change(state)`` with its last request now; returns what was stored. ``change`` may run
        more than once (a lost compare-and-set runs it again on the newest state), so it must be
        pure; what it raises ends the update with nothing written."""
        key = self._key(episode_id)
        now = self.clock()

        def apply(current: AgentEpisodeState | None) -> AgentEpisodeState:
            state = claim(current, episode_id, agent, now, self.idle_s)
            return msgspec.structs.replace(change(state), last=now)

        try:
            cas = await compare_and_set(
                self.kv,
                key,
                apply,
                decode=self._decode,
                encode=msgspec.json.encode,
            )
        except StateError as exc:
            raise WireError(f"the episode store: {exc}", status=503) from exc
        assert cas.value is not None
        return cas.value
