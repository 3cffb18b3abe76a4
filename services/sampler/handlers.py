"""Sampler handlers: resolve the checkpoint, batch the request, answer."""

from __future__ import annotations

import asyncio

from aios_rl.bus import PermanentError, ServiceError, get_logger
from aios_rl.state.checkpoints import CheckpointRegistry, RegistryError, UnknownCheckpointError
from aios_rl.student import ActOutput, Decision, Regime, StudentBackend, StudentError, load_student
from contracts import ActRequest, ActResponse

from .logic import Batcher, LruCache, derive_seed
from .settings import SamplerSettings

Job = tuple[Decision, Regime, bool]


class Sampler:
    """The models this process serves and the batcher in front of them."""

    def __init__(self, registry: CheckpointRegistry, settings: SamplerSettings) -> None:
        self.registry = registry
        self.settings = settings
        self.cache: LruCache[StudentBackend] = LruCache(settings.cache_size)
        self.active: str | None = None
        self.reloads = 0
        self.batcher: Batcher[Job, ActOutput] = Batcher(
            self._run_batch, max_batch=settings.max_batch, max_wait_s=settings.max_wait_ms / 1000
        )
        self._loading: dict[str, asyncio.Task[StudentBackend]] = {}
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

    async def _load(self, checkpoint_id: str) -> StudentBackend:
        data = await self.registry.load(checkpoint_id)
        model = await asyncio.to_thread(load_student, data)
        model.eval()
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
        """Hot reload: load each new ``active`` as soon as the pointer moves, then switch."""
        async for pointers in self.registry.watch():
            new = pointers.active
            if new is None or new == self.active:
                continue
            await self.model(new)
            old, self.active = self.active, new
            self.reloads += 1
            self.log.info("sampler.active_switched", old=old, new=new)

    def stats(self) -> dict[str, float]:
        b = self.batcher
        return {
            "batches": float(b.batches),
            "requests_batched": float(b.items),
            "mean_batch": (b.items / b.batches) if b.batches else 0.0,
            "cached_models": float(len(self.cache)),
            "reloads": float(self.reloads),
        }

    async def act(self, req: ActRequest) -> ActResponse:
        checkpoint = self.active if req.checkpoint_id == "active" else req.checkpoint_id
        if checkpoint is None:
            raise ServiceError(
                "503", "no active checkpoint yet: the trainer stores the initial one at start-up"
            )
        try:
            regime = Regime(req.regime.temperature, req.regime.top_p)
            seed = (
                req.seed
                if req.seed is not None
                else derive_seed(req.episode_id, req.step, self.settings.seed)
            )
            decision = Decision(req.observation, tuple(req.candidates), seed=seed)
            out = await self.batcher.submit(checkpoint, (decision, regime, req.want_hidden))
        except UnknownCheckpointError as exc:
            raise ServiceError("404", str(exc)) from exc
        except StudentError as exc:
            raise PermanentError(str(exc)) from exc
        except RegistryError as exc:
            raise ServiceError("503", f"registry unavailable: {exc}") from exc
        return ActResponse(
            action=out.action,
            action_index=out.action_index,
            logprob=out.logprob,
            entropy=out.entropy,
            value=out.value,
            checkpoint_id=checkpoint,
            hidden=out.hidden if req.want_hidden else [],
        )
