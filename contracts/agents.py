"""Agents users already have, driven through an OpenAI-compatible endpoint: one chat completion
asked of the student (``policy.complete``) and what it answered, token by token.

An agent's conversation arrives as OpenAI chat messages; the sampler renders them with the
student's chat template into prompt token ids, samples the completion under the checkpoint the
request names, and answers the token ids and their log-probs with the text, so the step that
records the call trains on exactly what was sampled."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ._base import Message
from .episode import DecodingRegime, EvidenceRef
from .vocab import Environment, Outcome

__all__ = [
    "AgentCall",
    "AgentEpisode",
    "AgentEpisodeState",
    "ChatMessage",
    "CompletionDelta",
    "CompletionRequest",
    "CompletionResponse",
    "EnvClose",
    "EnvOpen",
    "EnvState",
    "EnvStep",
    "FinishReason",
    "FunctionCall",
    "TokenAlternative",
    "ToolCall",
]

FinishReason = Literal["stop", "length", "tool_calls"]
"""Why a completion ended: the end of its turn or a stop string, ``max_tokens``, or the tool
calls it wrote."""


class FunctionCall(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    arguments: str = "{}"
    """JSON text, as the model wrote it (OpenAI's wire format keeps it a string)."""


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message of an agent's conversation (OpenAI's roles; ``developer`` arrives as
    ``system``)."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    """Text; ``None`` for an assistant turn that only calls tools."""
    name: str | None = None
    tool_calls: list[ToolCall] = []
    """An assistant turn's calls."""
    tool_call_id: str | None = None
    """A tool message: the call it answers."""


class CompletionRequest(Message, frozen=True, kw_only=True):
    """One chat completion asked of the student under one checkpoint."""

    SCHEMA = "completion_request.v1"

    request_id: str
    checkpoint_id: str
    """The checkpoint that answers (concrete: the gateway resolves ``active`` / ``last_stable``
    once per episode, so an episode never mixes two)."""
    messages: list[ChatMessage]
    episode_id: str = ""
    """The episode the call belongs to (recorded under it); empty: not recorded."""
    agent: str = ""
    """The agent (its token's name) that asked."""
    tools: list[dict[str, Any]] = []
    """OpenAI tool definitions (``{"type": "function", "function": {...}}``), given to the chat
    template as they are."""
    temperature: float = 1.0
    """0: greedy."""
    top_p: float = 1.0
    max_tokens: int = 256
    stop: list[str] = []
    """The completion ends before the first of these it writes (not included)."""
    seed: int | None = None
    top_logprobs: int = 0
    """Alternatives to report per token (0-20)."""
    stream: bool = False
    """Publish the text as it is written (``CompletionDelta`` on ``agent.stream.<request_id>``)
    before answering the whole completion."""


class TokenAlternative(msgspec.Struct, frozen=True, kw_only=True):
    token_id: int
    logprob: float
    text: str = ""
    """The token decoded on its own."""


class CompletionResponse(Message, frozen=True, kw_only=True):
    """What the student wrote, as sampled: the text and its tokens with their log-probs under
    the raw policy (temperature 1, what the trainer recomputes)."""

    SCHEMA = "completion_response.v1"

    request_id: str
    checkpoint_id: str
    text: str
    """The completion, decoded (without the stop string or the end-of-turn token)."""
    finish_reason: FinishReason = "stop"
    tool_calls: list[ToolCall] = []
    prompt_ids: list[int] = []
    """The rendered prompt's token ids (the conversation through the chat template)."""
    token_ids: list[int] = []
    """The sampled tokens, as the trainer learns from them (ending with the end-of-turn token
    when the turn ended there)."""
    token_logprobs: list[float] = []
    token_texts: list[str] = []
    """Each of ``token_ids`` decoded on its own (what ``logprobs`` entries show)."""
    top_logprobs: list[list[TokenAlternative]] = []
    """Per token, the most likely alternatives when asked for."""
    token_entropies: list[float] = []
    """Per token, the entropy (nats) of the raw next-token distribution it was drawn from
    (exact from the student's logits; an engine's, from its top log-probs: a lower bound):
    where an episode was uncertain, for strategies that branch there."""


class CompletionDelta(Message, frozen=True, kw_only=True):
    """Text a completion has written since its last delta (``CompletionRequest.stream``): the
    deltas of a request, in ``index`` order, concatenate to a prefix of its final text (text
    that a stop string could still cut, or a tool call could turn out to be, is held back until
    the answer)."""

    SCHEMA = "completion_delta.v1"

    request_id: str
    index: int
    text: str


class AgentCall(Message, frozen=True, kw_only=True):
    """One chat completion an agent asked for within an episode, as served: what the trainer
    turns into a step of the episode's token-level trajectory (kept on the ``AGENTS`` stream,
    ``agent.call.<episode_id>``, in order)."""

    SCHEMA = "agent_call.v1"

    episode_id: str
    index: int
    """The call's place in its episode (0, 1, ...)."""
    agent: str
    """The agent (its token's name) that asked."""
    request: CompletionRequest
    response: CompletionResponse
    at: float = 0.0
    """When it was answered (Unix seconds)."""
    replayed: bool = False
    """The answer is a recorded one given again: the call of a continuation that replays its
    parent's turns (``AgentEpisode.replay``), not sampled and never trained on."""


# -- environments driven from outside ---------------------------------------------------------------


class EnvOpen(Message, frozen=True, kw_only=True):
    """Open an episode of ``environment`` for an agent that drives it from outside
    (``env.open.<environment>``, answered by one of its runners)."""

    SCHEMA = "env_open.v1"

    environment: Environment
    episode_id: str
    task_id: str = ""
    """A stored task; empty: one drawn from ``split`` by ``seed``."""
    split: str = ""
    seed: int = 0
    """Seeds the episode (and the draw from ``split``)."""
    max_steps: int = 0
    """Steps the episode may take; 0: the runner's ``max_steps``."""
    agent: str = ""


class EnvStep(Message, frozen=True, kw_only=True):
    """Take one action (``env.step.<environment>.<instance>``: the runner that holds the
    episode)."""

    SCHEMA = "env_step.v1"

    session: str
    action: str


class EnvClose(Message, frozen=True, kw_only=True):
    """End an episode and release it (``env.close.<environment>.<instance>``); the answer is its
    last state."""

    SCHEMA = "env_close.v1"

    session: str


class EnvState(Message, frozen=True, kw_only=True):
    """An episode driven from outside, as it stands: what the agent sees and, once done, how the
    environment judged it (the same outcome, reward and evidence as a runner's episode)."""

    SCHEMA = "env_state.v1"

    session: str
    instance: str
    """The runner holding the episode: its steps and close go to
    ``env.step.<environment>.<instance>`` / ``env.close.<environment>.<instance>``."""
    episode_id: str
    environment: Environment
    task_id: str
    observation: str = ""
    candidates: list[str] = []
    """The actions offered now; empty: free text."""
    steps: int = 0
    max_steps: int = 0
    done: bool = False
    progress: float = 0.0
    """What the last step did toward solving the task, as the environment measured it."""
    outcome: Outcome | None = None
    """Once done: the environment's verdict."""
    reward: float | None = None
    info: dict[str, str] = {}
    evidence: list[EvidenceRef] = []
    task_info: dict[str, str] = {}


class AgentEpisode(Message, frozen=True, kw_only=True):
    """A runner hands an episode to the agent it starts (``agent.attach``, answered by the agent
    gateway with the same message): the episode is that agent's, its completions are answered by
    ``checkpoint_id`` whatever model the agent names, and its environment episode is ``env``."""

    SCHEMA = "agent_episode.v1"

    episode_id: str
    agent: str
    checkpoint_id: str = ""
    """The checkpoint the rollout job asked for; empty, ``active`` or ``last_stable``: the one
    ``active`` names at the episode's first completion."""
    env: EnvState | None = None
    gateway_url: str = ""
    """In the answer: the gateway's base URL (``<url>/v1`` is the agent's OpenAI base URL)."""
    replay: list[AgentCall] = []
    """A continuation (a branch of another episode): its parent's first calls, as recorded.
    The agent's call ``i`` asking what the parent's call ``i`` asked (the same messages and
    tools) gets the parent's answer again (recorded ``replayed``); the first call that asks
    anything else, and every call after it, is sampled."""
    regime: DecodingRegime | None = None
    """How the episode's sampled calls are drawn (temperature, top_p), whatever the agent asks;
    ``None``: as the agent asks."""
    sampling_seed: int | None = None
    """Seeds the sampled calls (call ``i``: ``step_seed(sampling_seed, i)``), whatever the
    agent asks; ``None``: the agent's ``seed``."""


class AgentEpisodeState(msgspec.Struct, frozen=True, kw_only=True):
    """What the agent gateway keeps of one open agent episode, in the KV bucket
    ``agent_episodes`` (key ``episode.<episode_id>``), so any replica of the gateway answers
    any request of it and a restarted gateway loses none: whose it is, the checkpoint it is
    pinned to, its calls so far, the environment episode it drives, and for a continuation
    the parent's calls still to be given again."""

    agent: str
    """The agent (its token's name) that owns it."""
    checkpoint_id: str = ""
    """The checkpoint that answers its calls (empty until its first completion pins it)."""
    calls: int = 0
    """Calls recorded so far (the next one's index)."""
    last: float = 0.0
    """Its last request (Unix seconds): idle longer than the gateway's ``episode_idle_s``, it
    is forgotten and its next request starts it afresh."""
    env: EnvState | None = None
    """The environment episode it drives, as it stood after its last step."""
    attached: bool = False
    """Handed over by a runner (``agent.attach``): its calls are answered by the pinned
    checkpoint whatever model the agent names."""
    replay: list[AgentCall] = []
    """A continuation: its parent's calls still to be given again (emptied when the agent asks
    something its parent did not)."""
    regime: DecodingRegime | None = None
    """How its sampled calls are drawn, whatever the agent asks (``None``: as it asks)."""
    sampling_seed: int | None = None
    """Seeds its sampled calls, call by call (``None``: the agent's ``seed``)."""
    replayed: int = 0
    """Calls answered from ``replay`` so far."""
