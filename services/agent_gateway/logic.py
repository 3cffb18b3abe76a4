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

**Continuations.** A runner may hand over an episode that branches off another
(``AgentEpisode.replay``): while the agent asks, call by call, what the parent asked (the same
messages and tools), it gets the parent's recorded answers again (:func:`replayed_answer`); from
the first call that asks anything else on, calls are sampled under the episode's own regime and
seeds (:func:`sampling_of`), so a branch explores from the state its parent reached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from aios_rl.agents.wire import WireError
from aios_rl.envs.loop import step_seed
from contracts import (
    AgentCall,
    ChatMessage,
    CheckpointPointers,
    CompletionResponse,
    DecodingRegime,
    EnvState,
)

__all__ = [
    "EPISODE_HEADER",
    "Episodes",
    "Pinned",
    "replayed_answer",
    "resolve_model",
    "sampling_of",
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
    replay: list[AgentCall] = field(default_factory=list)
    """A continuation's parent's calls still to be given again (emptied when the agent asks
    something else)."""
    regime: DecodingRegime | None = None
    sampling_seed: int | None = None
    replayed: int = 0
    """Calls answered from ``replay`` so far."""


def replayed_answer(
    pinned: Pinned, index: int, messages: list[ChatMessage], tools: list[dict[str, object]]
) -> CompletionResponse | None:
    """The recorded answer call ``index`` of a continuation gets again: the parent's call
    ``index`` when it asked the same (messages and tools); ``None`` otherwise, and then the
    replay is over (every later call is sampled: the agent has left its parent's path)."""
    if index >= len(pinned.replay) or index != pinned.replayed:
        pinned.replay = []
        return None
    call = pinned.replay[index]
    if call.request.messages != messages or call.request.tools != tools:
        pinned.replay = []
        return None
    pinned.replayed += 1
    return call.response


def sampling_of(
    pinned: Pinned | None, index: int, temperature: float, top_p: float, seed: int | None
) -> tuple[float, float, int | None]:
    """(temperature, top_p, seed) call ``index`` is sampled with: the episode's regime and
    seeds where the runner gave them (a continuation: what its strategy chose, a seed per call
    of its own), else what the agent asked."""
    if pinned is not None and pinned.regime is not None:
        temperature, top_p = pinned.regime.temperature, pinned.regime.top_p
    if pinned is not None and pinned.sampling_seed is not None:
        seed = step_seed(pinned.sampling_seed, index)
    return temperature, top_p, seed


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
