"""The rail service's handlers: one :class:`~aios_rl.rail.Controller` per campaign, loaded on
first use from what was stored (state in KV ``control``, scorer weights in the ``rail`` Object
Store, traces read back from the ``RAIL`` stream), saved after every change. A controller's
decisions and learning are serialised by a lock of its own."""

from __future__ import annotations

import asyncio

import msgspec

from aios_rl.bus import Bus, get_logger
from aios_rl.rail import Controller
from aios_rl.state import Objects
from aios_rl.state.control import ControlStore
from contracts import Names, RailState
from contracts.rail import RailDecideRequest, RailDecisions, RailSettings, RailTrace
from contracts.subjects import OBJECTS_RAIL, STREAM_RAIL

from .settings import RailServiceSettings

__all__ = ["Rail"]

_trace = msgspec.json.Decoder(RailTrace)


class Rail:
    """Every campaign's controller this process serves."""

    def __init__(self, bus: Bus, settings: RailServiceSettings) -> None:
        self.bus = bus
        self.settings = settings
        self.control = ControlStore(bus)
        self.objects = Objects(bus, bus.names.bucket(OBJECTS_RAIL))
        self.controllers: dict[str, Controller] = {}
        self.locks: dict[str, asyncio.Lock] = {}
        self.decisions = 0
        self.traces = 0
        self.log = get_logger()

    @staticmethod
    def key(campaign_id: str) -> str:
        return Names.key_control("rail", campaign_id)

    async def _controller(self, campaign_id: str, settings: RailSettings | None) -> Controller:
        """The campaign's controller, loaded (or made) on first use."""
        c = self.controllers.get(campaign_id)
        if c is not None:
            return c
        snap, _ = await self.control.load(self.key(campaign_id))
        state = snap.state if snap is not None and isinstance(snap.state, RailState) else None
        online = frozen = None
        if state is not None and state.scorer_object:
            online = await self.objects.get(state.scorer_object)
        if state is not None and state.frozen_object:
            frozen = await self.objects.get(state.frozen_object)
        chosen = settings or (state.settings if state else None) or RailSettings()
        c = Controller(
            campaign_id, chosen, seed=self.settings.seed, state=state, online=online, frozen=frozen
        )
        if state is None or state.settings is None:
            c.meta = msgspec.structs.replace(c.meta, settings=chosen)
        if state is not None and state.traces_seen:
            # The traces it had learned from: the campaign's first ``traces_seen`` in stream
            # order (one trace at a time, acked after the state is saved). Later ones come
            # again from the durable consumer and are learned from then.
            c.restore((await self._stored_traces(campaign_id))[: state.traces_seen])
            self.log.info(
                "rail_restored",
                campaign_id=campaign_id,
                mode=c.mode,
                traces=len(c.traces),
                scorer_version=c.meta.scorer_version,
            )
        self.controllers[campaign_id] = c
        return c

    async def _stored_traces(self, campaign_id: str) -> list[RailTrace]:
        out: list[RailTrace] = []
        async with asyncio.timeout(self.settings.restore_timeout_s):
            async for m in self.bus.read_stream(
                self.bus.names.stream(STREAM_RAIL), self.bus.names.rail_trace()
            ):
                try:
                    t = _trace.decode(m.data)
                except msgspec.DecodeError:
                    continue
                if t.campaign_id == campaign_id:
                    out.append(t)
        return out

    async def _save(self, c: Controller, *, weights: bool) -> None:
        """Store the controller's state, and its scorers' weights when they changed (each
        version under its own name, so a stored state never points at half-written weights)."""
        m = c.state()
        if weights:
            name = f"{c.campaign_id}.v{m.scorer_version}"
            await self.objects.put(name, c.weights())
            frozen = c.frozen_weights()
            frozen_name = m.frozen_object
            if frozen is not None and m.promotions:
                frozen_name = f"{c.campaign_id}.frozen{m.promotions}"
                await self.objects.put(frozen_name, frozen)
            m = msgspec.structs.replace(m, scorer_object=name, frozen_object=frozen_name)
            c.meta = m
        await self.control.update(self.key(c.campaign_id), lambda _: m, init=lambda: m)

    def _lock(self, campaign_id: str) -> asyncio.Lock:
        return self.locks.setdefault(campaign_id, asyncio.Lock())

    async def decide(self, req: RailDecideRequest) -> RailDecisions:
        async with self._lock(req.campaign_id):
            c = await self._controller(req.campaign_id, req.settings)
            out = c.decide(req)
            await self._save(c, weights=False)
        self.decisions += 1
        return out

    async def on_trace(self, trace: RailTrace) -> None:
        if not trace.campaign_id:
            return
        async with self._lock(trace.campaign_id):
            c = await self._controller(trace.campaign_id, None)
            mode, promotions = c.mode, c.meta.promotions
            new, refit = await asyncio.to_thread(c.observe, trace)
            if not new:
                return
            changed = refit or c.meta.promotions != promotions
            await self._save(c, weights=changed)
        self.traces += 1
        if c.mode != mode:
            self.log.info(
                "rail_mode",
                campaign_id=trace.campaign_id,
                mode=c.mode,
                was=mode,
                sign_agreement=round(c.meta.sign_agreement, 3),
                traces=c.meta.traces_seen,
            )

    def stats(self) -> dict[str, float]:
        return {
            "decisions": float(self.decisions),
            "traces": float(self.traces),
            "controllers": float(len(self.controllers)),
            "live": float(sum(c.mode == "live" for c in self.controllers.values())),
        }
