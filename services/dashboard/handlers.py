"""The dashboard's bus side: watchers that feed the ``View`` and wake the page's pushes.

Everything here reads: KV watches (ledger, checkpoints, control), an ordered consumer on
``episode.compared.>`` (starting a little before the newest, so the feed is not empty on a
running stack), and a periodic read of what has no watch (``$SRV`` discovery, consumer lag,
replay lane and dead-letter counts from stream subjects). A watcher that fails logs, waits and
starts again; it never stops the service.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec

from aios_rl.bus import Bus, discover, get_logger
from aios_rl.state import family
from aios_rl.state.checkpoints import CheckpointRegistry
from aios_rl.state.control import ControlStore
from aios_rl.state.ledger import Ledger
from contracts import (
    CheckpointMeta,
    CheckpointPointers,
    Episode,
    Names,
    RailState,
)
from contracts.codec import DecodeError, Message
from contracts.subjects import (
    STREAM_DLQ,
    STREAM_EPISODES,
    STREAM_RAIL,
    STREAM_REPLAY,
    STREAM_ROLLOUTS,
)

from .logic import ServiceRow, View

__all__ = ["DashboardState", "watchers"]

log = get_logger(service="dashboard")

DURABLE_STREAMS = (STREAM_ROLLOUTS, STREAM_EPISODES, STREAM_RAIL, STREAM_REPLAY, STREAM_DLQ)
"""The streams whose durable consumers' lag the services table shows."""


@dataclass
class DashboardState:
    """The view and the condition the page's event streams wait on."""

    view: View
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    base_url: str = ""
    listening: asyncio.Event = field(default_factory=asyncio.Event)
    skipped: int = 0
    """Messages that did not decode (logged, skipped)."""

    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def wait_change(self, version: int, timeout: float) -> int:
        """Wait until the view's version is past ``version`` (or ``timeout`` passed); returns
        the version now."""
        async with self.changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self.changed.wait_for(lambda: self.view.version != version), timeout
                )
        return self.view.version


async def _forever(name: str, run: Callable[[], Awaitable[None]], retry_s: float = 2.0) -> None:
    """Run ``run`` again whenever it ends or fails (logged), until cancelled."""
    while True:
        try:
            await run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a reader must never stop the dashboard
            log.warning(
                "dashboard.reader_failed", reader=name, error=f"{type(exc).__name__}: {exc}"
            )
        await asyncio.sleep(retry_s)


def watchers(
    bus: Bus, state: DashboardState, *, refresh_s: float, history_s: float
) -> list[Callable[[], Awaitable]]:
    """The service's background tasks (each runs until cancelled); the episode feed starts
    with what was compared in the last ``history_s`` seconds."""
    view = state.view
    names = bus.names

    async def ledger() -> None:
        async with Ledger(bus).watch() as updates:
            async for record in updates:
                view.on_epoch(record)
                await state.notify()

    async def heldout() -> None:
        async with Ledger(bus).watch_heldout() as updates:
            async for score in updates:
                view.on_heldout(score)
                await state.notify()

    async def lineage() -> None:
        async with CheckpointRegistry(bus).watch_all() as updates:
            async for item in updates:
                if isinstance(item, CheckpointPointers):
                    view.on_pointers(item)
                elif isinstance(item, CheckpointMeta):
                    view.on_meta(item)
                await state.notify()

    async def rail() -> None:
        every_rail = family(Names.key_control("rail", "any"))
        async with ControlStore(bus).watch(every_rail) as updates:
            async for snap in updates:
                if isinstance(snap.state, RailState):
                    view.on_rail({"key": snap.key, **msgspec.to_builtins(snap.state)})
                    await state.notify()

    async def episodes() -> None:
        queue: asyncio.Queue[Message | DecodeError] = asyncio.Queue()

        async def on_msg(msg: Message | DecodeError, _raw: object) -> None:
            queue.put_nowait(msg)

        since = dt.datetime.fromtimestamp(time.time() - history_s, dt.UTC)
        sub = await bus.replay(
            names.episode("compared", "*"),
            on_msg,
            stream=names.stream(STREAM_EPISODES),
            since=since,
        )
        try:
            while True:
                msg = await queue.get()
                if not isinstance(msg, Episode):
                    state.skipped += 1
                    log.warning("dashboard.episode_skipped", error=str(msg))
                    continue
                view.on_episode(msg)
                if queue.empty():
                    await state.notify()
        finally:
            await bus.unsubscribe(sub)

    async def subject_counts(base: str) -> dict[str, int]:
        counts = await bus.subject_counts(names.stream(base))
        return {names.strip(s): n for s, n in counts.items()}

    async def periodic() -> None:
        while True:
            services = await discover(bus.nc, namespace=names.namespace, window=0.2)
            lag: dict[str, int] = {}
            for stream in DURABLE_STREAMS:
                lag |= await bus.consumer_lag(names.stream(stream))
            view.on_services(
                [
                    ServiceRow(
                        name=s.name,
                        instance=s.id,
                        version=s.version,
                        healthy=True,
                        detail=", ".join(e.name for e in s.endpoints),
                        lag=sum(lag.get(c.consumer, 0) for c in s.consumers),
                    )
                    for s in services
                ]
            )
            lanes: dict[str, dict[str, int]] = {}
            for subject, n in (await subject_counts(STREAM_REPLAY)).items():
                parts = subject.split(".")
                if len(parts) == 3:
                    lanes.setdefault(parts[1], {})[parts[2]] = n
            view.on_lanes(lanes)
            dead = {
                subject.split(".", 1)[1]: n
                for subject, n in (await subject_counts(STREAM_DLQ)).items()
                if "." in subject
            }
            view.on_dead_letters(dead)
            await state.notify()
            await asyncio.sleep(refresh_s)

    return [
        lambda n=name, f=fn: _forever(n, f)
        for name, fn in (
            ("ledger", ledger),
            ("heldout", heldout),
            ("lineage", lineage),
            ("rail", rail),
            ("episodes", episodes),
            ("periodic", periodic),
        )
    ]
