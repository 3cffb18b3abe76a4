"""Teacher gateway handlers: follow the control key, ask the backend, publish the taught episode."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

from aios_rl.bus import Bus, NoResponders, RemoteError, RequestTimeout, get_logger
from aios_rl.state import KvWatch
from aios_rl.state.control import ControlStore, CorruptControlError
from contracts import (
    ControlSnapshot,
    DecodeError,
    Episode,
    GatewaySettings,
    Names,
    TeacherRequest,
    TeacherSignal,
)

from .logic import (
    NO_BACKEND,
    DigestLimits,
    LruCache,
    accept,
    build_request,
    cache_key,
    checked_settings,
    taught,
    wants_teacher,
    without_answer,
)
from .settings import GatewayServiceSettings


class Gateway:
    """The gateway's state: the run-time settings it follows, its answer cache and counters."""

    def __init__(self, bus: Bus, settings: GatewayServiceSettings) -> None:
        self.bus = bus
        self.settings = settings
        self.key = Names.key_control("gateway", settings.control_id)
        self.config = GatewaySettings(
            backend=settings.default_backend,
            timeout_s=settings.default_timeout_s,
            success_sample_rate=settings.default_success_sample_rate,
        )
        self.config_version = 0
        self.limits = DigestLimits(
            max_steps=settings.max_steps,
            max_observation_chars=settings.max_observation_chars,
            max_candidates=settings.max_candidates,
            max_action_chars=settings.max_action_chars,
            max_statement_chars=settings.max_statement_chars,
            max_report_chars=settings.max_report_chars,
        )
        self.cache: LruCache[TeacherSignal] = LruCache(settings.cache_size)
        self.counts: Counter[str] = Counter()
        self._in_flight: dict[str, asyncio.Future[TeacherSignal]] = {}
        self._watch: KvWatch[ControlSnapshot] | None = None
        self._loaded = asyncio.Event()
        self._changed = asyncio.Condition()
        self.log = get_logger()

    # -- run-time settings -------------------------------------------------------------------------
    async def follow_control(self) -> None:
        """Load the control key (creating it from the defaults if missing), then apply every
        write to it for the life of the service: a new backend, timeout or sample rate takes
        effect for the next episode, no restart.

        A key holding something that is not a snapshot is reported (logged; counted in the
        stats as ``control_corrupt``), left as it is, and the gateway runs on its defaults (at
        start) or its last good settings until a valid snapshot is written."""
        store = ControlStore(self.bus)
        try:
            await self._apply(await store.load_or_init(self.key, lambda: self.config))
        except CorruptControlError as exc:
            self.log.error(
                "gateway.control_corrupt", key=self.key, error=str(exc), keeping="defaults"
            )
            await self._applied()
        async with store.watch(self.key) as updates:
            self._watch = updates
            async for snapshot in updates:
                await self._apply(snapshot)

    async def _apply(self, snapshot: ControlSnapshot) -> None:
        # The watch yields every revision once, in order (its first is the one just loaded:
        # applying it again changes nothing), so no version check: a key deleted and created
        # anew starts again at version 1 and must still apply.
        try:
            config = checked_settings(snapshot.state)
        except ValueError as exc:
            self.log.error(
                "gateway.control_rejected",
                key=self.key,
                version=snapshot.version,
                error=str(exc),
                keeping=self.config.backend,
            )
        else:
            if config != self.config or not self._loaded.is_set():
                self.log.info(
                    "gateway.control_applied",
                    key=self.key,
                    version=snapshot.version,
                    backend=config.backend,
                    timeout_s=config.timeout_s,
                    success_sample_rate=config.success_sample_rate,
                )
            self.config = config
        self.config_version = snapshot.version
        await self._applied()

    async def _applied(self) -> None:
        self._loaded.set()
        async with self._changed:
            self._changed.notify_all()

    async def until(self, predicate: Callable[[Gateway], bool]) -> None:
        """Wait until ``predicate(self)`` holds, checked whenever a control write has been
        handled (tests and tools use it to know a write to the key took effect)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._loaded.is_set() and predicate(self))

    # -- episodes ------------------------------------------------------------------------------------
    async def on_completed(self, ep: Episode) -> None:
        """Handler for ``episode.completed.>``: decide, ask (within the timeout), publish
        ``episode.taught.<env>`` whatever the answer."""
        await self._loaded.wait()
        config = self.config
        if config.backend == NO_BACKEND or not wants_teacher(
            ep, success_sample_rate=config.success_sample_rate, seed=self.settings.sample_seed
        ):
            status, signal = "skipped", None
        else:
            request = build_request(ep, config.backend, self.limits)
            signal = await self.ask(config.backend, request, config.timeout_s)
            status = signal.status
        self.counts[status] += 1
        out = taught(ep, status, signal, now=time.time())
        await self.bus.publish_durable(
            self.bus.names.episode("taught", ep.environment),
            out,
            msg_id=f"{ep.episode_id}:taught",
        )
        self.log.debug(
            "gateway.taught",
            episode_id=ep.episode_id,
            status=status,
            backend=config.backend if signal else None,
        )

    async def ask(self, backend: str, request: TeacherRequest, timeout_s: float) -> TeacherSignal:
        """The backend's judgement of ``request``: from the cache when an identical request was
        answered before (or is being answered right now), else from the backend within
        ``timeout_s``. Never raises for the backend's sake: a silent backend gives a ``timeout``
        signal, an absent or failing one an ``error`` signal."""
        key = cache_key(backend, request)
        cached = self.cache.get(key)
        if cached is not None:
            self.counts["cache_hits"] += 1
            return cached
        pending = self._in_flight.get(key)
        if pending is not None:
            await asyncio.wait([pending])  # our own cancellation leaves the leader's request be
            if not pending.cancelled() and pending.exception() is None:
                self.counts["cache_hits"] += 1
                return pending.result()
            # the identical request in flight failed: ask for ourselves
        future: asyncio.Future[TeacherSignal] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = future
        try:
            signal = await self._request(backend, request, timeout_s)
        except BaseException:
            future.cancel()
            raise
        finally:
            self._in_flight.pop(key, None)
        future.set_result(signal)
        if signal.status == "ok":
            self.cache.put(key, signal)
        return signal

    async def _request(
        self, backend: str, request: TeacherRequest, timeout_s: float
    ) -> TeacherSignal:
        self.counts["requests"] += 1
        subject = self.bus.names.teacher_request(backend)
        started = time.monotonic()
        try:
            reply = await self.bus.request(subject, request, TeacherSignal, timeout=timeout_s)
        except RequestTimeout:
            return without_answer(
                "timeout", backend, f"no answer within {timeout_s:g}s", time.monotonic() - started
            )
        except NoResponders:
            return without_answer("error", backend, f"no teacher-{backend} service is running", 0.0)
        except RemoteError as exc:
            return without_answer(
                "error",
                backend,
                f"teacher-{backend} failed: {exc.code} {exc.description}",
                time.monotonic() - started,
            )
        except DecodeError as exc:
            return without_answer(
                "error",
                backend,
                f"teacher-{backend} answered something that is not a TeacherSignal: {exc}",
                time.monotonic() - started,
            )
        return accept(reply, request, backend)

    def stats(self) -> dict[str, float]:
        out = {f"status_{k}": float(v) for k, v in self.counts.items() if k not in _COUNTERS}
        out.update({k: float(self.counts[k]) for k in _COUNTERS})
        out["cache_size"] = float(len(self.cache))
        out["in_flight"] = float(len(self._in_flight))
        out["control_version"] = float(self.config_version)
        # Revisions of the control key that were not snapshots (the one found at start included).
        out["control_corrupt"] = float(self._watch.skipped if self._watch is not None else 0)
        return out


_COUNTERS = ("requests", "cache_hits")
