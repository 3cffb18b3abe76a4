"""Trainer handlers: read the update's episodes, learn, store and advance through the registry."""

from __future__ import annotations

import asyncio
import contextlib
import time

from aios_rl.bus import Bus, BusError, PermanentError, ServiceError, get_logger
from aios_rl.state.checkpoints import (
    CheckpointRegistry,
    RegistryError,
    StalePointersError,
    UnknownCheckpointError,
)
from aios_rl.student import StudentBackend, StudentError, load_student, new_student
from aios_rl.student.train import (
    DivergedError,
    EmptyBatchError,
    OptimizerMemory,
    train_step,
    update_config,
)
from contracts import (
    DecodeError,
    Episode,
    ReplayBatch,
    ReplaySampleRequest,
    TrainerUpdate,
    TrainerUpdateResult,
    decode,
)
from contracts.subjects import STREAM_EPISODES

from .logic import select_online, split_offline
from .settings import TrainerServiceSettings


class Trainer:
    """Runs updates one at a time for this process."""

    def __init__(self, bus: Bus, settings: TrainerServiceSettings) -> None:
        self.bus = bus
        self.settings = settings
        self.registry = CheckpointRegistry(bus)
        self.updates = 0
        self.memory = OptimizerMemory()
        """Adam's moments after this process's last update (``warm_optimizer``): used by the
        next update that starts from the weights it left."""
        self.log = get_logger()

    async def ensure_initial(self) -> None:
        """Store a freshly initialised student and make it active when nothing is (idempotent:
        the same seed gives the same bytes, and ``init`` is a no-op once something is active)."""
        pointers, _ = await self.registry.pointers()
        if pointers.active is not None:
            return
        weights = await asyncio.to_thread(self._initial_weights)
        meta = await self.registry.store(
            weights,
            parent_id=None,
            created_by="init",
            algorithm="init",
            backend=self.settings.backend,
        )
        await self.registry.init(meta.checkpoint_id, reason="initial checkpoint")
        self.log.info("initial_checkpoint_stored", checkpoint_id=meta.checkpoint_id)

    def _initial_weights(self) -> bytes:
        s = self.settings
        if s.backend == "hf":
            return new_student(
                "hf", seed=s.init_seed, model_path=s.model_path, lora_rank=s.lora_rank
            ).to_bytes()
        return new_student(s.backend, seed=s.init_seed).to_bytes()

    async def _load(self, checkpoint_id: str) -> StudentBackend:
        data = await self.registry.load(checkpoint_id)
        return await asyncio.to_thread(load_student, data)

    async def read_fresh(self, req: TrainerUpdate) -> list[Episode]:
        """Compared episodes published since ``req.since``, read up to the stream's end as it
        was when the update began (at most ``max_episodes``)."""
        names = self.bus.names
        out: list[Episode] = []
        try:
            stored = self.bus.read_stream(
                names.stream(STREAM_EPISODES),
                names.episode("compared", "*"),
                since=req.since or None,
            )
            async with asyncio.timeout(self.settings.read_timeout_s), contextlib.aclosing(stored):
                async for m in stored:
                    try:
                        out.append(decode(m.data, m.headers, Episode))
                    except DecodeError as exc:
                        self.log.warning("undecodable_episode", seq=m.seq, error=str(exc))
                    if len(out) >= self.settings.max_episodes:
                        break
        except TimeoutError as exc:
            raise ServiceError(
                "504", f"reading episodes took longer than {self.settings.read_timeout_s}s"
            ) from exc
        except BusError as exc:
            raise ServiceError("503", f"cannot read the episodes: {exc}") from exc
        return out

    async def update(self, req: TrainerUpdate) -> TrainerUpdateResult:
        log = self.log.bind(update_id=req.update_id, campaign_id=req.campaign_id, epoch=req.epoch)
        try:
            pointers, _ = await self.registry.pointers()
            base = req.base_checkpoint or pointers.active
            if base is None:
                raise ServiceError("409", "no active checkpoint to update")
            model = await self._load(base)
            reference = await self._load(req.reference_checkpoint or base)
        except UnknownCheckpointError as exc:
            raise ServiceError("404", str(exc)) from exc
        except (RegistryError, StudentError) as exc:
            raise ServiceError("503", f"cannot load the checkpoints: {exc}") from exc
        config = update_config(req.settings)
        fresh: list[Episode] = []
        better: list[Episode] = []
        worse: list[Episode] = []
        if req.source in ("online", "mixed"):
            fresh, better, worse = select_online(req, await self.read_fresh(req))
        neutral: list[Episode] = []
        positive: list[Episode] = []
        negative: list[Episode] = []
        if req.source in ("offline", "mixed"):
            try:
                batch = await self.bus.request(
                    self.bus.names.replay_sample(),
                    ReplaySampleRequest(size=req.settings.offline_batch, seed=req.settings.seed),
                    ReplayBatch,
                    timeout=30.0,
                )
            except BusError as exc:
                raise ServiceError("503", f"replay did not serve a batch: {exc}") from exc
            neutral, positive, negative = split_offline(batch.episodes)
        log.info(
            "update_started",
            base=base,
            algorithm=config.algorithm,
            fresh=len(fresh),
            offline=len(neutral) + len(positive) + len(negative),
        )
        started = time.perf_counter()
        try:
            metrics, samples = await asyncio.to_thread(
                train_step,
                model,
                reference,
                fresh + neutral,
                config,
                positive=better + positive,
                negative=worse + negative,
                memory=self.memory if req.settings.warm_optimizer else None,
            )
        except EmptyBatchError as exc:
            raise PermanentError(
                f"update {req.update_id}: no episodes to learn from ({req.source}; "
                f"{len(fresh)} fresh rollouts matched)"
            ) from exc
        except DivergedError as exc:
            raise PermanentError(
                f"update {req.update_id} diverged: {exc}; nothing was stored"
            ) from exc
        metrics["update_s"] = time.perf_counter() - started
        weights = await asyncio.to_thread(model.to_bytes)
        meta = await self.registry.store(
            weights,
            parent_id=base,
            created_by=req.update_id,
            algorithm=config.algorithm,
            backend=model.name,
            metrics=metrics,
        )
        try:
            await self.registry.advance(
                meta.checkpoint_id, f"update {req.update_id}", expect_active=base
            )
        except StalePointersError as exc:
            raise ServiceError(
                "409", f"active moved while update {req.update_id} ran: {exc}"
            ) from exc
        self.updates += 1
        log.info("update_done", checkpoint_id=meta.checkpoint_id, loss=metrics.get("loss"))
        return TrainerUpdateResult(
            update_id=req.update_id,
            checkpoint_id=meta.checkpoint_id,
            parent_id=base,
            samples=samples,
            metrics=metrics,
        )
