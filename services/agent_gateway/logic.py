"""The agent gateway's rules, pure: whose token a request carries, which checkpoint a model name
means, which checkpoint an episode is pinned to and whose episode it is.

**Tokens.** An agent authenticates with ``Authorization: Bearer <token>``
(:class:`~aios_rl.agents.tokens.Tokens`: only digests kept, compared in constant time).

**Episodes.** A request tagged with an episode (the ``X-Aios-Episode`` header, else the body's
``user`` field), or an environment episode the agent opened, belongs to it: the first request of
an episode claims it for its agent, and its first completion pins it to the checkpoint its
``model`` names at that moment (``active`` / ``last_stable`` resolved
once), so a pointer that moves mid-episode never mixes two policies in one trajectory; another
agent's request for that episode is refused (403). Episodes idle longer than ``idle_s`` are
forgotten, and at most ``max_open`` are kept (the longest idle go first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from aios_rl.agents.wire import WireError
from contracts import CheckpointPointers, EnvState

__all__ = [
    "EPISODE_HEADER",
    "Episodes",
    "Pinned",
    "resolve_model",
]

EPISODE_HEADER = "x-aios-episode"
"""The request header that tags a request with its episode."""


def resolve_model(model: str, pointers: CheckpointPointers | None) -> str | None:
    """The checkpoint ``model`` names: ``active`` and ``last_stable`` through the pointers,
    anything else as a checkpoint id (``None``: the pointer is not set yet)."""
    if model in ("active", "last_stable"):
        return getattr(pointers, model, None) if pointers is not None else None
    return model


@dataclass
class Pinned:
    """An open episode: its agent, its checkpoint (empty until its first completion), its calls
    so far, and the environment episode it drives, if any (its latest state)."""

    agent: str
    checkpoint_id: str
    calls: int = 0
    last: float = 0.0
    env: EnvState | None = None
    attached: bool = False
    """Handed over by a runner (``agent.attach``): its completions are the pinned checkpoint's
    whatever model the agent names (an agent's code names its own)."""


class Episodes:
    """Open episodes, bounded (see the module docstring)."""

    def __init__(self, *, max_open: int = 10_000, idle_s: float = 3600.0) -> None:
        self.max_open, self.idle_s = max_open, idle_s
        self._open: OrderedDict[str, Pinned] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def get(self, episode_id: str) -> Pinned | None:
        return self._open.get(episode_id)

    def claim(
        self, episode_id: str, agent: str, checkpoint: Callable[[], str], now: float
    ) -> Pinned:
        """``episode_id`` for ``agent``: the open episode (403 when another agent's), or a new
        one pinned to ``checkpoint()`` (empty: pinned at its first completion)."""
        self._forget_idle(now)
        pinned = self._open.get(episode_id)
        if pinned is not None and pinned.agent != agent:
            raise WireError(
                f"episode {episode_id} belongs to another agent",
                code="episode_not_yours",
                status=403,
            )
        if pinned is None:
            pinned = Pinned(agent=agent, checkpoint_id=checkpoint())
            self._open[episode_id] = pinned
            while len(self._open) > self.max_open:
                self._open.popitem(last=False)
        pinned.last = now
        self._open.move_to_end(episode_id)
        return pinned

    def call_index(self, episode_id: str) -> int:
        """The next call's index in ``episode_id`` (counted as taken)."""
        pinned = self._open[episode_id]
        pinned.calls += 1
        return pinned.calls - 1

    def _forget_idle(self, now: float) -> None:
        while self._open:
            first = next(iter(self._open.values()))
            if now - first.last <= self.idle_s:
                return
            self._open.popitem(last=False)
