"""An agent's episode as the trainer learns from it (pure): one trajectory step per chat
completion the agent asked for, carrying the prompt's and the completion's token ids and the
log-probs they were sampled with, each credited with the progress the environment measured for
the actions the agent took after it.

The calls come from the ``AGENTS`` stream (``AgentCall``, in order); the moves are the actions
the agent took in its environment episode, with when they were taken. A move is credited to the
last call answered before it (a move before any call, to the first call): the completion that
led to it. A continuation's calls that gave its parent's answers again (``AgentCall.replayed``)
are replayed steps: kept for the record, never trained on (the parent's episode trains on
them), credited with nothing. A step's entropy is its tokens' mean."""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from contracts import AgentCall, ChatMessage, TrajectoryStep

__all__ = ["EnvMove", "agent_trajectory", "observation_of"]


@dataclass(frozen=True)
class EnvMove:
    """One action an agent took in its environment episode, as the runner saw it."""

    at: float
    """When it was taken (Unix seconds)."""
    action: str
    progress: float = 0.0
    """What it did toward solving the task, as the environment measured it."""


def observation_of(messages: Sequence[ChatMessage]) -> str:
    """What the agent showed the student last: its last message that is not the assistant's."""
    for m in reversed(messages):
        if m.role != "assistant" and m.content:
            return m.content
    return ""


def _action(call: AgentCall) -> str:
    r = call.response
    if not r.tool_calls:
        return r.text
    calls = json.dumps([msgspec.to_builtins(c) for c in r.tool_calls], separators=(",", ":"))
    return f"{r.text}\n{calls}" if r.text else calls


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def agent_trajectory(
    calls: Sequence[AgentCall], moves: Sequence[EnvMove] = ()
) -> tuple[str, list[TrajectoryStep]]:
    """The checkpoint that answered and one step per call, in the calls' order. Raises
    ``ValueError`` for no calls, sampled calls of two checkpoints (an episode is pinned to one)
    or a gap in the calls' indices (one was lost)."""
    ordered = sorted(calls, key=lambda c: c.index)
    if not ordered:
        raise ValueError("the agent asked the student nothing")
    if [c.index for c in ordered] != list(range(len(ordered))):
        raise ValueError(f"calls missing: indices {[c.index for c in ordered]}")
    served = {c.response.checkpoint_id for c in ordered if not c.replayed} or {
        ordered[-1].response.checkpoint_id
    }
    if len(served) != 1:
        raise ValueError(f"one episode answered by {len(served)} checkpoints: {sorted(served)}")
    answered = [c.at for c in ordered]
    credit = [0.0] * len(ordered)
    for m in moves:
        credit[max(0, bisect.bisect_right(answered, m.at) - 1)] += m.progress
    steps = [
        TrajectoryStep(
            index=i,
            observation=observation_of(c.request.messages),
            action=_action(c),
            logprob=sum(c.response.token_logprobs),
            entropy=_mean(c.response.token_entropies),
            token_entropies=list(c.response.token_entropies),
            token_ids=list(c.response.token_ids),
            token_logprobs=list(c.response.token_logprobs),
            prompt_ids=list(c.response.prompt_ids),
            progress=0.0 if c.replayed else round(credit[i], 6),
            replayed=c.replayed,
        )
        for i, c in enumerate(ordered)
    ]
    return served.pop(), steps
