"""The agent gateway's rules, pure: whose token a request carries, which checkpoint a model name
means, which checkpoint an episode is pinned to and whose episode it is.

**Tokens.** An agent authenticates with ``Authorization: Bearer <token>``
(:class:`~aios_rl.agents.tokens.Tokens`: only digests kept, compared in constant time).

**Episodes.** A request tagged with an episode (the ``X-Aios-Episode`` header, else the body's
``user`` field), or an environment episode the agent opened, belongs to it: the first request of
an episode claims it for its agent (:func:`claim`), and its first completion pins it to the
checkpoint its ``model`` names at that moment (``active`` / ``last_stable`` resolved once), so a
pointer that moves mid-episode never mixes two policies in one trajectory; another agent's
request for that episode is refused (403). An episode idle longer than ``idle_s`` is forgotten:
its next request starts it afresh. What the gateway keeps of an episode
(``AgentEpisodeState``) lives in a KV bucket (``store.EpisodeStore``), so any replica answers
any request.

**Continuations.** A runner may hand over an episode that branches off another
(``AgentEpisode.replay``): while the agent asks, call by call, what the parent asked (the same
messages and tools), it gets the parent's recorded answers again (:func:`replayed_answer`); from
the first call that asks anything else on, calls are sampled under the episode's own regime and
seeds (:func:`sampling_of`), so a branch explores from the state its parent reached.
"""

from __future__ import annotations

from aios_rl.agents.wire import WireError
from aios_rl.envs.loop import step_seed
from contracts import (
    AgentEpisodeState,
    ChatMessage,
    CheckpointPointers,
    CompletionResponse,
)

__all__ = [
    "EPISODE_HEADER",
    "claim",
    "live",
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


def live(state: AgentEpisodeState | None, now: float, idle_s: float) -> AgentEpisodeState | None:
    """``state`` unless it has been idle longer than ``idle_s`` (then forgotten: ``None``)."""
    if state is None or now - state.last > idle_s:
        return None
    return state


def claim(
    state: AgentEpisodeState | None, episode_id: str, agent: str, now: float, idle_s: float
) -> AgentEpisodeState:
    """Episode ``episode_id`` for ``agent``: ``state`` (403 when another agent's), or a new one
    when there is none or it was idle past ``idle_s``."""
    current = live(state, now, idle_s)
    if current is None:
        return AgentEpisodeState(agent=agent)
    if current.agent != agent:
        raise WireError(
            f"episode {episode_id} belongs to another agent", code="episode_not_yours", status=403
        )
    return current


def replayed_answer(
    state: AgentEpisodeState,
    index: int,
    messages: list[ChatMessage],
    tools: list[dict[str, object]],
) -> CompletionResponse | None:
    """The recorded answer call ``index`` of a continuation gets again: its parent's call
    ``index`` when it asked the same (messages and tools) and every call before it was replayed
    too; ``None`` otherwise (the agent has left its parent's path: every later call is
    sampled)."""
    if index >= len(state.replay) or index != state.replayed:
        return None
    call = state.replay[index]
    if call.request.messages != messages or call.request.tools != tools:
        return None
    return call.response


def sampling_of(
    state: AgentEpisodeState | None, index: int, temperature: float, top_p: float, seed: int | None
) -> tuple[float, float, int | None]:
    """(temperature, top_p, seed) call ``index`` is sampled with: the episode's regime and
    seeds where the runner gave them (a continuation: what its strategy chose, a seed per call
    of its own), else what the agent asked."""
    if state is not None and state.regime is not None:
        temperature, top_p = state.regime.temperature, state.regime.top_p
    if state is not None and state.sampling_seed is not None:
        seed = step_seed(state.sampling_seed, index)
    return temperature, top_p, seed
