"""The agent gateway's requests: check the token and the body, pin the episode, ask the
sampler's ``policy.complete``, record the call on the ``AGENTS`` stream, answer in OpenAI's
format. Every refusal is a :class:`~aios_rl.agents.wire.WireError` the web side turns into
OpenAI's error object; nothing here crashes on a bad request."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from aios_rl.agents.tokens import Tokens
from aios_rl.agents.wire import ChatRequest, WireError, parse_chat_request
from aios_rl.bus import Bus, BusError, NoResponders, RemoteError, RequestTimeout, get_logger
from aios_rl.state import StateError
from aios_rl.state.checkpoints import CheckpointRegistry, UnknownCheckpointError
from contracts import AgentCall, CheckpointPointers, CompletionRequest, CompletionResponse

from .logic import Episodes, resolve_model
from .settings import AgentGatewaySettings

__all__ = ["Answer", "Gateway"]


@dataclass(frozen=True)
class Answer:
    """A served completion and what the answer's envelope needs."""

    request: ChatRequest
    response: CompletionResponse
    completion_id: str
    created: int


class Gateway:
    """The state of one gateway process."""

    def __init__(
        self,
        bus: Bus,
        settings: AgentGatewaySettings,
        tokens: Callable[[], Tokens],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.bus, self.settings, self.tokens, self.clock = bus, settings, tokens, clock
        self.registry = CheckpointRegistry(bus)
        self.episodes = Episodes(
            max_open=settings.max_open_episodes, idle_s=settings.episode_idle_s
        )
        self.listening = asyncio.Event()
        self.base_url = ""
        self.completions = 0
        self.recorded = 0
        self.refused = 0
        self.log = get_logger()

    async def _pointers(self) -> CheckpointPointers | None:
        try:
            pointers, _ = await self.registry.pointers()
        except StateError:
            return None
        return pointers

    async def models(self, authorization: str | None) -> dict[str, object]:
        """``GET /v1/models``: ``active``, ``last_stable`` and the checkpoints they name now."""
        self.tokens().agent(authorization)
        pointers = await self._pointers()
        ids = ["active", "last_stable"]
        if pointers is not None:
            ids += [c for c in dict.fromkeys((pointers.active, pointers.last_stable)) if c]
        return {
            "object": "list",
            "data": [
                {"id": i, "object": "model", "created": 0, "owned_by": "aios-rl"} for i in ids
            ],
        }

    async def _checkpoint(self, model: str) -> str:
        """The concrete checkpoint ``model`` names now (404 / 503 when none)."""
        concrete = resolve_model(model, await self._pointers())
        if concrete is None:
            raise WireError(
                f"no {model} checkpoint yet: the trainer stores the initial one at start-up",
                code="model_not_ready",
                status=503,
            )
        if model not in ("active", "last_stable"):
            try:
                await self.registry.meta(concrete)
            except UnknownCheckpointError:
                raise WireError(
                    f"no checkpoint {model!r}: name a checkpoint id, active or last_stable",
                    param="model",
                    code="model_not_found",
                    status=404,
                ) from None
            except StateError as exc:
                raise WireError(f"the checkpoint registry: {exc}", status=503) from exc
        return concrete

    async def chat(self, body: bytes, *, authorization: str | None, episode: str | None) -> Answer:
        """``POST /v1/chat/completions``, served (streamed or not, the web side decides)."""
        agent = self.tokens().agent(authorization)
        req = parse_chat_request(body, max_tokens_cap=self.settings.max_tokens)
        episode_id = (episode or req.user or "").strip()
        if episode_id:
            try:
                self.bus.names.agent_call(episode_id)
            except ValueError:
                raise WireError(
                    f"episode id {episode_id!r}: use letters, digits, '-' or '_'",
                    param="user",
                ) from None
            if self.episodes.get(episode_id) is None:
                concrete = await self._checkpoint(req.model)
                pinned = self.episodes.claim(episode_id, agent, lambda: concrete, self.clock())
            else:
                pinned = self.episodes.claim(episode_id, agent, lambda: "", self.clock())
            checkpoint = pinned.checkpoint_id
            if req.model not in ("active", "last_stable", checkpoint):
                raise WireError(
                    f"episode {episode_id} is pinned to checkpoint {checkpoint}: ask for it, "
                    "active or last_stable",
                    param="model",
                )
        else:
            checkpoint = await self._checkpoint(req.model)
        request = CompletionRequest(
            request_id=uuid.uuid4().hex,
            checkpoint_id=checkpoint,
            messages=req.messages,
            episode_id=episode_id,
            agent=agent,
            tools=req.tools,
            temperature=req.temperature,
            top_p=req.top_p,
            max_tokens=req.max_tokens or self.settings.max_tokens,
            stop=list(req.stop),
            seed=req.seed,
            top_logprobs=req.top_logprobs if req.logprobs else 0,
        )
        response = await self._complete(request)
        self.completions += 1
        if episode_id:
            await self._record(episode_id, agent, request, response)
        return Answer(req, response, f"chatcmpl-{request.request_id}", int(self.clock()))

    async def _complete(self, request: CompletionRequest) -> CompletionResponse:
        try:
            return await self.bus.request(
                self.bus.names.policy_complete(),
                request,
                CompletionResponse,
                timeout=self.settings.request_timeout_s,
            )
        except RemoteError as exc:
            status = {"422": 400, "404": 404}.get(exc.code, 503)
            raise WireError(f"the student: {exc.description}", status=status) from exc
        except (NoResponders, RequestTimeout) as exc:
            raise WireError(f"the sampler did not answer: {exc}", status=503) from exc

    async def _record(
        self, episode_id: str, agent: str, request: CompletionRequest, response: CompletionResponse
    ) -> None:
        index = self.episodes.call_index(episode_id)
        call = AgentCall(
            episode_id=episode_id,
            index=index,
            agent=agent,
            request=request,
            response=response,
            at=self.clock(),
        )
        try:
            await self.bus.publish_durable(
                self.bus.names.agent_call(episode_id), call, msg_id=f"{episode_id}:{index}"
            )
        except BusError as exc:
            # The answer is not given unrecorded: the agent's turn would be lost to training.
            raise WireError(f"the call could not be recorded: {exc}", status=503) from exc
        self.recorded += 1
        get_logger(episode_id=episode_id).debug(
            "agent.call_recorded", agent=agent, index=index, tokens=len(response.token_ids)
        )

    def stats(self) -> dict[str, float]:
        return {
            "completions": float(self.completions),
            "recorded": float(self.recorded),
            "refused": float(self.refused),
            "open_episodes": float(len(self.episodes)),
            "listening": 1.0 if self.listening.is_set() else 0.0,
        }
