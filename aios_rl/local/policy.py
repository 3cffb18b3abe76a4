"""A student called directly as the policy of the step loop: the sampler's answer without the
bus (the same :mod:`aios_rl.student.serving` mapping), so the kernel's episodes are the stack's."""

from __future__ import annotations

import asyncio

from contracts import ActRequest, ActResponse

from ..errors import AiosError
from ..student.base import StudentBackend
from ..student.engine import LMEngine
from ..student.serving import decision_for, response_for

__all__ = ["LocalPolicy", "UnknownLocalCheckpointError"]


class UnknownLocalCheckpointError(AiosError, LookupError):
    """A request named a checkpoint the local policy does not hold."""


class LocalPolicy:
    """One or more students by checkpoint id, one of them ``active`` (what a request for
    ``"active"`` gets), answering ``ActRequest`` one call at a time.

    The student runs on the event loop's thread between two awaits: episodes overlap their
    environments' work (sandboxed commands, Chromium pages) while the student's calls are
    serialised, as one sampler's would be."""

    def __init__(
        self,
        model: StudentBackend,
        *,
        checkpoint_id: str = "local",
        base_seed: int = 0,
        engine: LMEngine | None = None,
    ) -> None:
        self.models: dict[str, StudentBackend] = {checkpoint_id: model}
        self.active = checkpoint_id
        self.base_seed = base_seed
        """The sampler's ``seed`` setting: seeds a request that carries none."""
        self.engine = engine
        """A started inference engine writing free-text actions (as the sampler's ``engine``
        setting does); the students here keep training in place, so each act serves the
        weights as they are now (a new adapter whenever they changed)."""
        self._served: dict[str, tuple[tuple[int, ...], str]] = {}
        self._adapters = 0
        self.calls = 0

    @property
    def model(self) -> StudentBackend:
        """The active student."""
        return self.models[self.active]

    def add(self, checkpoint_id: str, model: StudentBackend, *, active: bool = False) -> None:
        """Hold ``model`` as ``checkpoint_id`` (and make it active)."""
        self.models[checkpoint_id] = model
        if active:
            self.active = checkpoint_id

    def _engine_key(self, checkpoint: str, model: StudentBackend) -> str:
        """The engine's name for ``model``'s weights now: a new adapter is written when an
        update changed them (torch counts in-place changes of every tensor)."""
        assert self.engine is not None
        version = tuple(p._version for p in model.parameters() if p.requires_grad)
        served = self._served.get(checkpoint)
        if served is not None and served[0] == version:
            return served[1]
        self._adapters += 1
        key = f"{checkpoint}#{self._adapters}"
        self.engine.register(key, model)
        if served is not None:
            self.engine.forget(served[1])
        self._served[checkpoint] = (version, key)
        return key

    async def act(self, req: ActRequest) -> ActResponse:
        """The student's answer to ``req``. Raises ``UnknownLocalCheckpointError`` for a
        checkpoint it does not hold and ``ValueError`` for a request that can never be answered
        (see :func:`aios_rl.student.serving.check_request`)."""
        checkpoint = self.active if req.checkpoint_id in ("", "active") else req.checkpoint_id
        model = self.models.get(checkpoint)
        if model is None:
            raise UnknownLocalCheckpointError(
                f"checkpoint {checkpoint!r} is not held here (held: {sorted(self.models)})"
            )
        decision, regime = decision_for(
            req, free_text=model.supports_free_text, backend=model.name, base_seed=self.base_seed
        )
        if self.engine is not None and not decision.candidates and LMEngine.supports(model):
            out = await self.engine.act(
                self._engine_key(checkpoint, model), decision, regime, want_hidden=req.want_hidden
            )
        else:
            out = model.act([decision], regime, want_hidden=req.want_hidden)[0]
        self.calls += 1
        await asyncio.sleep(0)  # let the other episodes' environments go on
        return response_for(out, checkpoint_id=checkpoint, want_hidden=req.want_hidden)
