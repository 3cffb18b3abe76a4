"""The agent gateway's requests: check the token and the body, pin the episode, ask the
sampler's ``policy.complete``, record the call on the ``AGENTS`` stream, answer in OpenAI's
format. Every refusal is a :class:`~aios_rl.agents.wire.WireError` the web side turns into
OpenAI's error object; nothing here crashes on a bad request."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from aios_rl.agents.tokens import Tokens
from aios_rl.agents.wire import ChatRequest, WireError, parse_chat_request
from aios_rl.bus import (
    Bus,
    BusError,
    NoResponders,
    PermanentError,
    RemoteError,
    RequestTimeout,
    ServiceError,
    get_logger,
)
from aios_rl.state import StateError
from aios_rl.state.checkpoints import CheckpointRegistry, UnknownCheckpointError
from contracts import (
    AgentCall,
    AgentEpisode,
    AgentEpisodeState,
    CheckpointPointers,
    CompletionDelta,
    CompletionRequest,
    CompletionResponse,
    EnvClose,
    EnvOpen,
    EnvState,
    EnvStep,
)

from .logic import replayed_answer, resolve_model, sampling_of
from .settings import AgentGatewaySettings
from .store import EpisodeStore

__all__ = ["Answer", "Gateway", "Pending"]


@dataclass(frozen=True)
class Pending:
    """A completion asked for and checked, not yet written."""

    req: ChatRequest
    request: CompletionRequest
    agent: str
    episode_id: str
    recorded: CompletionResponse | None
    """A continuation's replayed answer (nothing is sampled)."""
    created: int


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
        self.episodes = EpisodeStore(bus, idle_s=settings.episode_idle_s, clock=clock)
        self.listening = asyncio.Event()
        self.base_url = ""
        self.completions = 0
        self.recorded = 0
        self.replayed = 0
        self.refused = 0
        self.background: set[asyncio.Task[Answer]] = set()
        """Streamed completions still running (kept to their end whoever listens)."""
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
        """``POST /v1/chat/completions``, served whole (:meth:`prepare`, then :meth:`serve`)."""
        return await self.serve(
            await self.prepare(body, authorization=authorization, episode=episode)
        )

    async def prepare(
        self, body: bytes, *, authorization: str | None, episode: str | None
    ) -> Pending:
        """A chat completion asked for, checked (token, body, episode, pin): everything that
        can refuse it before anything is written."""
        agent = self.tokens().agent(authorization)
        req = parse_chat_request(body, max_tokens_cap=self.settings.max_tokens)
        episode_id = (episode or req.user or "").strip()
        pinned: AgentEpisodeState | None = None
        if episode_id:
            try:
                self.bus.names.agent_call(episode_id)
            except ValueError:
                raise WireError(
                    f"episode id {episode_id!r}: use letters, digits, '-' or '_'",
                    param="user",
                ) from None
            pinned = await self.episodes.update(episode_id, agent)
            if not pinned.checkpoint_id:  # its first completion pins it
                # A runner's episode: whatever model the agent's code names, the active one.
                concrete = await self._checkpoint("active" if pinned.attached else req.model)
                pinned = await self.episodes.update(
                    episode_id,
                    agent,
                    lambda s: (
                        s if s.checkpoint_id else msgspec.structs.replace(s, checkpoint_id=concrete)
                    ),
                )
            checkpoint = pinned.checkpoint_id
            if not pinned.attached and req.model not in ("active", "last_stable", checkpoint):
                raise WireError(
                    f"episode {episode_id} is pinned to checkpoint {checkpoint}: ask for it, "
                    "active or last_stable",
                    param="model",
                )
        else:
            checkpoint = await self._checkpoint(req.model)
        index = pinned.calls if pinned is not None else 0
        temperature, top_p, seed = sampling_of(pinned, index, req.temperature, req.top_p, req.seed)
        request = CompletionRequest(
            request_id=uuid.uuid4().hex,
            checkpoint_id=checkpoint,
            messages=req.messages,
            episode_id=episode_id,
            agent=agent,
            tools=req.tools,
            temperature=temperature,
            top_p=top_p,
            max_tokens=req.max_tokens or self.settings.max_tokens,
            stop=list(req.stop),
            seed=seed,
            top_logprobs=req.top_logprobs if req.logprobs else 0,
        )
        recorded = replayed_answer(pinned, index, req.messages, req.tools) if pinned else None
        return Pending(req, request, agent, episode_id, recorded, int(self.clock()))

    async def serve(self, p: Pending, on_text: Callable[[str], None] | None = None) -> Answer:
        """The completion :meth:`prepare` checked, written and recorded. ``on_text`` gets its
        text as it is written (deltas, in order; what is not sent that way is in the answer);
        a continuation's replayed answer and an answer with log-probs come whole."""
        request = p.request
        if p.recorded is not None:
            # A continuation retracing its parent: the parent's answer, not a new sample.
            response = msgspec.structs.replace(p.recorded, request_id=request.request_id)
        else:
            live = on_text if not p.req.logprobs else None
            response = await self._complete(request, live)
            self.completions += 1
        if p.episode_id:
            await self._record(
                p.episode_id, p.agent, request, response, replayed=p.recorded is not None
            )
        return Answer(p.req, response, f"chatcmpl-{request.request_id}", p.created)

    async def _complete(
        self, request: CompletionRequest, on_text: Callable[[str], None] | None = None
    ) -> CompletionResponse:
        sub = None
        if on_text is not None:
            request = msgspec.structs.replace(request, stream=True)
            expected = 0

            async def delta(msg: object, _raw: object) -> None:
                nonlocal expected
                if isinstance(msg, CompletionDelta) and msg.index == expected:
                    expected += 1
                    on_text(msg.text)

            sub = await self.bus.subscribe(self.bus.names.agent_stream(request.request_id), delta)
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
        finally:
            if sub is not None:
                await self.bus.unsubscribe(sub)

    async def _record(
        self,
        episode_id: str,
        agent: str,
        request: CompletionRequest,
        response: CompletionResponse,
        *,
        replayed: bool = False,
    ) -> None:
        taken = await self.episodes.update(
            episode_id,
            agent,
            lambda s: msgspec.structs.replace(
                s,
                calls=s.calls + 1,
                replayed=s.replayed + int(replayed),
                # A sampled call of a continuation: it left its parent's path (or came to its
                # end), so every call from here on is sampled, whatever it asks.
                replay=s.replay if replayed else [],
            ),
        )
        index = taken.calls - 1
        call = AgentCall(
            episode_id=episode_id,
            index=index,
            agent=agent,
            request=request,
            response=response,
            at=self.clock(),
            replayed=replayed,
        )
        try:
            await self.bus.publish_durable(
                self.bus.names.agent_call(episode_id), call, msg_id=f"{episode_id}:{index}"
            )
        except BusError as exc:
            # The answer is not given unrecorded: the agent's turn would be lost to training.
            raise WireError(f"the call could not be recorded: {exc}", status=503) from exc
        self.recorded += 1
        self.replayed += int(replayed)
        get_logger(episode_id=episode_id).debug(
            "agent.call_recorded", agent=agent, index=index, tokens=len(response.token_ids)
        )

    def stats(self) -> dict[str, float]:
        return {
            "completions": float(self.completions),
            "replayed": float(self.replayed),
            "recorded": float(self.recorded),
            "refused": float(self.refused),
            "listening": 1.0 if self.listening.is_set() else 0.0,
        }

    # -- episodes runners hand to agents -----------------------------------------------------

    async def attach(self, req: AgentEpisode) -> AgentEpisode:
        """``agent.attach``: a runner hands episode ``req.episode_id`` to the agent it starts:
        the agent's (422 when another agent's), pinned to the job's checkpoint (a concrete id;
        else ``active`` at its first completion), driving ``req.env``."""
        concrete = "" if req.checkpoint_id in ("", "active", "last_stable") else req.checkpoint_id

        def attached(s: AgentEpisodeState) -> AgentEpisodeState:
            if s.checkpoint_id and concrete and s.checkpoint_id != concrete:
                raise WireError(
                    f"episode {req.episode_id} is pinned to {s.checkpoint_id}, not {concrete}"
                )
            fresh = s.calls == 0  # how its calls are answered is set before the first
            return msgspec.structs.replace(
                s,
                checkpoint_id=s.checkpoint_id or concrete,
                env=req.env or s.env,
                attached=True,
                replay=list(req.replay) if fresh else s.replay,
                regime=req.regime if fresh else s.regime,
                sampling_seed=req.sampling_seed if fresh else s.sampling_seed,
            )

        try:
            self.bus.names.agent_call(req.episode_id)
            await self.episodes.update(req.episode_id, req.agent, attached)
        except ValueError as exc:
            raise PermanentError(str(exc)) from exc
        except WireError as exc:
            if exc.status == 503:
                raise ServiceError("503", exc.message) from exc
            raise PermanentError(exc.message) from exc
        return msgspec.structs.replace(req, gateway_url=self.base_url, replay=[])

    # -- environments driven from outside ------------------------------------------------------

    async def env_open(
        self, environment: str, body: bytes, *, authorization: str | None
    ) -> EnvState:
        """``POST /v1/environments/{environment}/episodes``: open an episode of ``environment``
        (``{"task_id": ...}`` or ``{"split": ..., "seed": ...}``, ``max_steps``, and an
        ``episode_id`` of the agent's choosing, else one is made) on one of its runners; the
        episode is the agent's."""
        agent = self.tokens().agent(authorization)
        doc = _object(body)
        try:
            req = msgspec.convert(
                {"episode_id": uuid.uuid4().hex, **doc, "environment": environment, "agent": agent},
                EnvOpen,
            )
            self.bus.names.agent_call(req.episode_id)
        except (msgspec.ValidationError, ValueError) as exc:
            raise WireError(f"an environment episode: {exc}") from None
        pinned = await self.episodes.update(req.episode_id, agent)
        if pinned.env is not None and not pinned.env.done:
            raise WireError(f"episode {req.episode_id} drives an environment already", status=409)
        state = await self._env(self.bus.names.env_open(environment), req, environment)
        await self._keep(req.episode_id, agent, state)
        return state

    async def _owned(self, episode_id: str, authorization: str | None) -> tuple[str, EnvState]:
        """The agent asking and the environment episode it drives (401, 403, 404)."""
        agent = self.tokens().agent(authorization)
        if await self.episodes.get(episode_id) is None:
            raise WireError(f"no open episode {episode_id}", status=404)
        pinned = await self.episodes.update(episode_id, agent)
        if pinned.env is None:
            raise WireError(f"episode {episode_id} drives no environment", status=404)
        return agent, pinned.env

    async def env_step(
        self, episode_id: str, body: bytes, *, authorization: str | None
    ) -> EnvState:
        """``POST /v1/episodes/{episode_id}/step`` with ``{"action": "..."}``."""
        agent, held = await self._owned(episode_id, authorization)
        action = _object(body).get("action")
        if not isinstance(action, str):
            raise WireError("action must be a string", param="action")
        names = self.bus.names
        state = await self._env(
            names.env_step(held.environment, held.instance),
            EnvStep(session=held.session, action=action),
            held.environment,
        )
        await self._keep(episode_id, agent, state)
        return state

    async def env_state(self, episode_id: str, *, authorization: str | None) -> EnvState:
        """``GET /v1/episodes/{episode_id}``: the episode as it stood after its last step."""
        return (await self._owned(episode_id, authorization))[1]

    async def env_close(self, episode_id: str, *, authorization: str | None) -> EnvState:
        """``DELETE /v1/episodes/{episode_id}``: end it; its last state (the result, once done)."""
        agent, held = await self._owned(episode_id, authorization)
        names = self.bus.names
        state = await self._env(
            names.env_close(held.environment, held.instance),
            EnvClose(session=held.session),
            held.environment,
        )
        await self._keep(episode_id, agent, state)
        return state

    async def _keep(self, episode_id: str, agent: str, state: EnvState) -> None:
        await self.episodes.update(
            episode_id, agent, lambda s: msgspec.structs.replace(s, env=state)
        )

    async def _env(
        self, subject: str, msg: EnvOpen | EnvStep | EnvClose, environment: str
    ) -> EnvState:
        try:
            return await self.bus.request(
                subject, msg, EnvState, timeout=self.settings.request_timeout_s
            )
        except RemoteError as exc:
            status = {"422": 400, "404": 404, "503": 503}.get(exc.code, 502)
            raise WireError(f"the {environment} runner: {exc.description}", status=status) from exc
        except NoResponders as exc:
            raise WireError(
                f"no runner serves environment {environment!r} (or holds this episode any more)",
                status=404,
            ) from exc
        except RequestTimeout as exc:
            raise WireError(f"the {environment} runner did not answer: {exc}", status=504) from exc


def _object(body: bytes) -> dict[str, object]:
    try:
        doc = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise WireError("the body is not JSON") from None
    if not isinstance(doc, dict):
        raise WireError("the body must be a JSON object")
    return doc
