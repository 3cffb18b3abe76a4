"""Sampler handlers: resolve the checkpoint, check the request, batch it, answer.

A request that can never be answered (no candidates for a student that cannot write free text,
a temperature or top-p out of range) is refused with 422 before it joins a batch; a batch that
fails anyway is answered one request at a time by the batcher, so one bad request never fails
the others. Pointers that do not decode, or that name a checkpoint that does not load, are
reported (logged; ``pointers_corrupt`` / ``active_unloadable`` in the stats) and the last good
checkpoint stays active.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

from aios_rl.agents.wire import split_tool_calls, streamable, template_messages
from aios_rl.bus import Bus, BusError, PermanentError, ServiceError, get_logger
from aios_rl.state import KvWatch
from aios_rl.state.checkpoints import (
    CheckpointRegistry,
    CorruptCheckpointError,
    RegistryError,
    UnknownCheckpointError,
)
from aios_rl.student import ActOutput, Decision, Regime, StudentBackend, StudentError, load_student
from aios_rl.student.engine import EngineConfig, EngineError, LMEngine, engine_available
from aios_rl.student.serving import decision_for, response_for
from contracts import (
    ActRequest,
    ActResponse,
    CheckpointPointers,
    CompletionDelta,
    CompletionRequest,
    CompletionResponse,
)
from contracts.agents import TokenAlternative

from .logic import Batcher, LruCache
from .settings import SamplerSettings

Job = tuple[Decision, Regime, bool]


@contextlib.contextmanager
def _as_replies() -> Iterator[None]:
    """What serving a request raised, as the error reply it is: 404 an unknown checkpoint, 503
    the engine or the registry unavailable, 422 a request the student refuses."""
    try:
        yield
    except UnknownCheckpointError as exc:
        raise ServiceError("404", str(exc)) from exc
    except EngineError as exc:
        raise ServiceError("503", f"inference engine: {exc}") from exc
    except StudentError as exc:
        raise PermanentError(str(exc)) from exc
    except RegistryError as exc:
        raise ServiceError("503", f"registry unavailable: {exc}") from exc


class Sampler:
    """The models this process serves and the batcher in front of them."""

    def __init__(
        self,
        registry: CheckpointRegistry,
        settings: SamplerSettings,
        *,
        engine: LMEngine | None = None,
        bus: Bus | None = None,
    ) -> None:
        self.bus = bus
        """Where a streamed completion's deltas go (``None``: none are sent)."""
        self.registry = registry
        self.settings = settings
        self.cache: LruCache[StudentBackend] = LruCache(settings.cache_size)
        self.active: str | None = None
        self.reloads = 0
        self.batcher: Batcher[Job, ActOutput] = Batcher(
            self._run_batch, max_batch=settings.max_batch, max_wait_s=settings.max_wait_ms / 1000
        )
        self._loading: dict[str, asyncio.Task[StudentBackend]] = {}
        self._watch: KvWatch[CheckpointPointers] | None = None
        self._changed = asyncio.Condition()
        self.engine: LMEngine | None = engine
        """The inference engine, once a student it serves is loaded (see ``engine`` setting);
        given, a started engine shared with its owner (who closes it)."""
        self.owns_engine = engine is None
        self._engine_start: asyncio.Task[LMEngine] | None = None
        self._engine_failed = False
        self.unloadable = 0
        """New ``active`` checkpoints that did not load (the previous one stayed active)."""
        self.log = get_logger()

    async def model(self, checkpoint_id: str) -> StudentBackend:
        """The loaded model of a checkpoint (loaded once even under concurrent requests)."""
        cached = self.cache.get(checkpoint_id)
        if cached is not None:
            return cached
        task = self._loading.get(checkpoint_id)
        if task is None:
            task = self._loading[checkpoint_id] = asyncio.create_task(self._load(checkpoint_id))
        try:
            return await asyncio.shield(task)
        finally:
            if task.done():
                self._loading.pop(checkpoint_id, None)

    def _engine_serves(self, model: StudentBackend) -> bool:
        mode = self.settings.engine
        if mode == "inprocess" or not LMEngine.supports(model):
            return False
        if mode == "vllm":
            return True
        return model.name == "lm" and engine_available()

    async def _engine_for(self, model: StudentBackend) -> LMEngine:
        """The engine (started on first need, once) for ``model``'s base."""
        if self.engine is not None:
            return self.engine
        if self._engine_start is None:
            s = self.settings

            async def start() -> LMEngine:
                engine = LMEngine(
                    model.config.model_path,  # type: ignore[attr-defined]
                    EngineConfig(
                        kv_cache_gib=s.engine_kv_cache_gib,
                        max_model_len=s.engine_max_model_len,
                        seed=s.seed,
                    ),
                )
                self.log.info("sampler.engine_starting", base=str(engine.base_dir))
                await engine.start()
                self.log.info("sampler.engine_started", start_s=round(engine.start_s, 1))
                self.engine = engine
                return engine

            self._engine_start = asyncio.create_task(start())
        return await asyncio.shield(self._engine_start)

    async def _load(self, checkpoint_id: str) -> StudentBackend:
        data = await self.registry.load(checkpoint_id)
        model = await asyncio.to_thread(load_student, data)
        model.eval()
        if self._engine_serves(model) and not self._engine_failed:
            try:
                engine = await self._engine_for(model)
            except EngineError as exc:
                if self.settings.engine == "vllm":
                    raise
                # auto: the engine is an accelerator, not a requirement.
                self._engine_failed = True
                self.log.error("sampler.engine_unavailable", error=str(exc), serving="inprocess")
            else:
                await asyncio.to_thread(engine.register, checkpoint_id, model)
        self.cache.put(checkpoint_id, model, pin=self.active)
        self.log.info(
            "sampler.checkpoint_loaded", checkpoint_id=checkpoint_id, cached=len(self.cache)
        )
        return model

    async def _run_batch(self, checkpoint_id: str, jobs: list[Job]) -> list[ActOutput]:
        model = await self.model(checkpoint_id)
        want_hidden = any(h for _, _, h in jobs)
        return await asyncio.to_thread(
            model.act, [d for d, _, _ in jobs], [r for _, r, _ in jobs], want_hidden=want_hidden
        )

    async def follow_active(self) -> None:
        """Hot reload: load each new ``active`` as soon as the pointer moves, then switch.

        Pointers that do not decode are skipped by the watch; an ``active`` that is not stored
        or does not load is logged and counted, and the current one stays active until the
        pointers move again."""
        async with self.registry.watch() as updates:
            self._watch = updates
            async for pointers in updates:
                new = pointers.active
                if new is not None and new != self.active:
                    await self._switch(new)
                async with self._changed:
                    self._changed.notify_all()

    async def _switch(self, new: str) -> None:
        try:
            await self.model(new)
        except (UnknownCheckpointError, CorruptCheckpointError, StudentError) as exc:
            self.unloadable += 1
            self.log.error(
                "sampler.active_unloadable", checkpoint_id=new, error=str(exc), keeping=self.active
            )
            return
        old, self.active = self.active, new
        self.reloads += 1
        self.log.info("sampler.active_switched", old=old, new=new)

    async def until(self, predicate: Callable[[Sampler], bool]) -> None:
        """Wait until ``predicate(self)`` holds, checked after every pointers update handled
        (tests and tools use it to know a move took effect)."""
        async with self._changed:
            await self._changed.wait_for(lambda: predicate(self))

    def stats(self) -> dict[str, float]:
        b = self.batcher
        return {
            "batches": float(b.batches),
            "requests_batched": float(b.items),
            "mean_batch": (b.items / b.batches) if b.batches else 0.0,
            "batch_fallbacks": float(b.fallbacks),
            "batch_waits": float(b.waits),
            "cached_models": float(len(self.cache)),
            "reloads": float(self.reloads),
            "pointers_corrupt": float(self._watch.skipped if self._watch is not None else 0),
            "active_unloadable": float(self.unloadable),
            # What the served student can do: 1 when it writes free text (a request may offer no
            # candidates), 0 when it only chooses among candidates, -1 before it is loaded.
            "active_free_text": self._active_free_text(),
            **(
                {f"engine_{k}": v for k, v in self.engine.summary().items()}
                if self.engine is not None
                else {}
            ),
        }

    def _active_free_text(self) -> float:
        model = self.cache.peek(self.active) if self.active is not None else None
        if model is None:
            return -1.0
        return 1.0 if getattr(model, "supports_free_text", False) else 0.0

    async def act(self, req: ActRequest) -> ActResponse:
        checkpoint = self.active if req.checkpoint_id == "active" else req.checkpoint_id
        if checkpoint is None:
            raise ServiceError(
                "503", "no active checkpoint yet: the trainer stores the initial one at start-up"
            )
        with _as_replies():
            model = await self.model(checkpoint)
            try:
                decision, regime = decision_for(
                    req,
                    free_text=model.supports_free_text,
                    backend=model.name,
                    base_seed=self.settings.seed,
                )
            except ValueError as exc:
                raise PermanentError(str(exc)) from exc
            engine = self.engine
            if engine is not None and not decision.candidates and checkpoint in engine:
                # Free text from the engine: it batches every episode's requests itself.
                out = await engine.act(checkpoint, decision, regime, want_hidden=req.want_hidden)
            else:
                out = await self.batcher.submit(checkpoint, (decision, regime, req.want_hidden))
        return response_for(out, checkpoint_id=checkpoint, want_hidden=req.want_hidden)

    async def complete(self, req: CompletionRequest) -> CompletionResponse:
        """``policy.complete``: one chat completion of an agent's conversation, under the
        checkpoint the request names (``active`` resolved here; a gateway pins a concrete one
        per episode), rendered by the student's chat template; the answer carries the prompt's
        and the completion's token ids and each token's raw log-prob. 422 for a request out of
        range or a student that does not write text."""
        limit = self.settings.max_completion_tokens
        if not 0 <= req.temperature <= 2 or not 0 < req.top_p <= 1:
            raise PermanentError("temperature must be in [0, 2] and top_p in (0, 1]")
        if not 1 <= req.max_tokens <= limit:
            raise PermanentError(f"max_tokens must be from 1 to {limit}")
        if not 0 <= req.top_logprobs <= 20:
            raise PermanentError("top_logprobs must be from 0 to 20")
        checkpoint = self.active if req.checkpoint_id == "active" else req.checkpoint_id
        if checkpoint is None:
            raise ServiceError(
                "503", "no active checkpoint yet: the trainer stores the initial one at start-up"
            )
        with _as_replies():
            model = await self.model(checkpoint)
            complete = getattr(model, "complete", None)
            if complete is None:
                raise PermanentError(
                    f"the served student ({model.name}) does not write text: completions need "
                    "a language-model student (lm, hf)"
                )
            prompt = await asyncio.to_thread(
                model.chat_prompt_ids,  # type: ignore[attr-defined]
                template_messages(req.messages),
                req.tools,
            )
            # Temperature 0 is greedy: below the student's greedy threshold.
            regime = Regime(temperature=max(req.temperature, 1e-4), top_p=req.top_p)
            deltas = _Deltas(self.bus, req) if req.stream and self.bus is not None else None
            options = {
                "max_tokens": req.max_tokens,
                "stop": tuple(req.stop),
                "seed": req.seed,
                "top_logprobs": req.top_logprobs,
                "on_text": deltas.on_text if deltas is not None else None,
            }
            engine = self.engine
            try:
                if engine is not None and checkpoint in engine:
                    # The engine batches every agent's completions with the runners' actions.
                    out = await engine.complete(checkpoint, prompt, regime, **options)  # type: ignore[arg-type]
                else:
                    out = await asyncio.to_thread(complete, prompt, regime, **options)
            finally:
                if deltas is not None:
                    await deltas.close()
        alternatives = {t for alts in out.top_logprobs for t, _ in alts}
        texts = await asyncio.to_thread(
            model.token_texts,  # type: ignore[attr-defined]
            [*out.token_ids, *sorted(alternatives)],
        )
        decoded = dict(zip([*out.token_ids, *sorted(alternatives)], texts, strict=True))
        text, calls = (out.text, [])
        if req.tools:
            rest, calls = split_tool_calls(out.text, req.request_id)
            text = rest or ""
        return CompletionResponse(
            request_id=req.request_id,
            checkpoint_id=checkpoint,
            text=text,
            finish_reason="tool_calls" if calls else out.finish_reason,  # type: ignore[arg-type]
            tool_calls=calls,
            prompt_ids=list(prompt),
            token_ids=list(out.token_ids),
            token_logprobs=list(out.token_logprobs),
            token_texts=[decoded[t] for t in out.token_ids],
            top_logprobs=[
                [TokenAlternative(token_id=t, logprob=lp, text=decoded[t]) for t, lp in alts]
                for alts in out.top_logprobs
            ],
            token_entropies=[round(h, 6) for h in out.token_entropies],
        )


class _Deltas:
    """A streamed completion's text, published as it is written (``CompletionDelta`` on
    ``agent.stream.<request_id>``): what :func:`streamable` allows of each new text, in order,
    by one task (the model may write in a worker thread)."""

    def __init__(self, bus: Bus, req: CompletionRequest) -> None:
        self.bus, self.req = bus, req
        self.subject = bus.names.agent_stream(req.request_id)
        self.loop = asyncio.get_running_loop()
        self.texts: asyncio.Queue[str | None] = asyncio.Queue()
        self.stopped = False
        """Set once a publish failed: later texts are not queued (the answer carries them)."""
        self.task = asyncio.create_task(self._publish())

    def on_text(self, text: str) -> None:
        """The text written so far (from any thread); dropped once publishing has stopped."""
        if not self.stopped:
            self.loop.call_soon_threadsafe(self.texts.put_nowait, text)

    async def _publish(self) -> None:
        sent, index = "", 0
        while (text := await self.texts.get()) is not None:
            ready = streamable(text, stop=self.req.stop, tools=bool(self.req.tools))
            if len(ready) <= len(sent) or not ready.startswith(sent):
                continue
            delta = CompletionDelta(
                request_id=self.req.request_id, index=index, text=ready[len(sent) :]
            )
            try:
                await self.bus.publish(self.subject, delta)
            except BusError as exc:  # the answer still carries the whole text
                get_logger().warning("sampler.delta_lost", error=str(exc))
                self.stopped = True
                return
            sent, index = ready, index + 1

    async def close(self) -> None:
        """Publish what is queued, then stop."""
        self.texts.put_nowait(None)
        await self.task
