"""Replay handlers: route a compared episode into its lane, trim lanes, serve samples, and rebuild
the index from the ``REPLAY`` stream at start-up.

One process holds the index, so the service runs as a single instance (see ``main.py``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import msgspec

from aios_rl.bus import Bus, PermanentError, ServiceError, StoredMessage, get_logger
from aios_rl.state.checkpoints import (
    CheckpointRegistry,
    CorruptCheckpointError,
    UnknownCheckpointError,
)
from contracts import (
    LANES,
    DecodeError,
    Episode,
    ReplayBatch,
    ReplaySampleRequest,
    decode,
)
from contracts.subjects import SCHEMA_HEADER, STREAM_REPLAY

from .logic import (
    TRAINABLE_LANES,
    IndexEntry,
    ReplayIndex,
    lane_for,
    plan_sample,
    purge_points,
    retention_excess,
    validate_request,
)
from .settings import ReplaySettings

__all__ = ["ReplayState", "on_compared", "rebuild", "sample", "stats"]

_STAGE = "replay"
"""The stage name in ``Nats-Msg-Id`` (``<episode_id>:replay``) and in ``timings.stages``."""


class _Stored(msgspec.Struct, kw_only=True):
    """The few fields of a stored episode the index needs (decoding the whole one is slower)."""

    episode_id: str
    environment: str
    task_id: str
    checkpoint_id: str = ""


_stored_decoder = msgspec.json.Decoder(_Stored)


@dataclass
class ReplayState:
    """What one replay process holds: the index, its counters and the checkpoint depth cache."""

    index: ReplayIndex = field(default_factory=ReplayIndex)
    loaded: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the index holds everything the stream held at start-up."""
    skipped: int = 0
    """Reference and eval episodes seen (never stored)."""
    duplicates: int = 0
    """Episodes seen again after they were already in a lane (nothing published)."""
    trimmed: int = 0
    """Messages deleted by lane retention."""
    unreadable: int = 0
    """Stream messages the rebuild could not index (logged, left in the stream)."""
    checkpoint_seqs: dict[str, int] = field(default_factory=dict)
    """Checkpoint id -> lineage depth, for the checkpoints found in KV (metadata never changes)."""
    trim_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    registry: CheckpointRegistry | None = None


def stats(state: ReplayState) -> dict[str, float]:
    """Lane sizes and counters for ``Service.stats``."""
    out: dict[str, float] = {f"lane.{lane}": float(n) for lane, n in state.index.counts().items()}
    out.update(
        skipped=float(state.skipped),
        duplicates=float(state.duplicates),
        trimmed=float(state.trimmed),
        unreadable=float(state.unreadable),
        index_ready=1.0 if state.loaded.is_set() else 0.0,
    )
    return out


async def _wait_loaded(state: ReplayState, timeout: float) -> None:
    if not state.loaded.is_set():
        async with asyncio.timeout(timeout):
            await state.loaded.wait()


async def _trim(bus: Bus, settings: ReplaySettings, state: ReplayState, lane: str) -> None:
    """Delete the oldest messages of ``lane`` beyond its limit, from the stream and the index."""
    stream = bus.names.stream(STREAM_REPLAY)
    limit = settings.lane_limits()[lane]
    if state.index.counts()[lane] <= limit:
        return
    async with state.trim_lock:
        entries = {e.seq: e for e in state.index.entries(lane)}
        victims = [entries[seq] for seq in retention_excess(entries, limit)]
        # A purge per subject: nats-py's delete_msg always erases securely (~10 ms a message).
        for env, keep_from in purge_points(victims).items():
            await bus.js.purge_stream(stream, subject=bus.names.replay(lane, env), seq=keep_from)  # type: ignore[arg-type]
        for e in victims:
            state.index.remove(e.seq)
        state.trimmed += len(victims)
    if victims:
        get_logger(lane=lane).info("lane.trimmed", deleted=len(victims), limit=limit)


def on_compared(bus: Bus, settings: ReplaySettings, state: ReplayState):
    """Handler for ``episode.compared.>``: publish a training rollout to ``replay.<lane>.<env>``
    unless its episode id is already held in a lane (whatever the de-dup window), then trim the
    lane. An episode already trimmed away is not remembered: a copy of it would be stored again."""

    async def handle(ep: Episode) -> None:
        lane = lane_for(ep)
        if lane is None:
            state.skipped += 1
            return
        await _wait_loaded(state, settings.rebuild_timeout_s)
        if ep.episode_id in state.index:
            state.duplicates += 1
            return
        stages = {**ep.timings.stages, _STAGE: time.time()}
        routed = msgspec.structs.replace(
            ep, lane=lane, timings=msgspec.structs.replace(ep.timings, stages=stages)
        )
        seq = await bus.publish_durable(
            bus.names.replay(lane, ep.environment), routed, msg_id=f"{ep.episode_id}:{_STAGE}"
        )
        entry = IndexEntry(
            seq=seq,
            episode_id=ep.episode_id,
            lane=lane,
            environment=ep.environment,
            task_id=ep.task_id,
            checkpoint_id=ep.checkpoint_id,
        )
        # A copy handled concurrently published under the same Nats-Msg-Id, got the same seq
        # back from the stream's de-duplication, and indexed it first.
        if not state.index.add(entry):
            state.duplicates += 1
            return
        get_logger(episode_id=ep.episode_id).debug("routed", lane=lane, seq=seq)
        await _trim(bus, settings, state, lane)

    return handle


async def _checkpoint_seqs(bus: Bus, state: ReplayState, ids: list[str]) -> dict[str, int]:
    """Lineage depth of each checkpoint in ``ids`` found in KV; the others are left out (depth 0)."""
    if state.registry is None:
        state.registry = CheckpointRegistry(bus)
    registry = state.registry

    async def look_up(cid: str) -> None:
        try:
            meta = await registry.meta(cid)
        except UnknownCheckpointError:
            return  # not stored, or not a valid checkpoint id (empty, ...): unknown
        except CorruptCheckpointError as exc:
            get_logger(checkpoint_id=cid).warning("checkpoint_meta_unreadable", error=str(exc))
            return
        state.checkpoint_seqs[cid] = meta.seq

    await asyncio.gather(*(look_up(c) for c in ids if c not in state.checkpoint_seqs))
    return state.checkpoint_seqs


def sample(bus: Bus, settings: ReplaySettings, state: ReplayState):
    """Endpoint ``replay.sample``: a ``ReplaySampleRequest`` answered by a ``ReplayBatch``."""
    stream = bus.names.stream(STREAM_REPLAY)

    async def fetch(entry: IndexEntry) -> Episode | None:
        raw = await bus.stored(stream, entry.seq)
        if raw is None:
            # Trimmed between the plan and the fetch, or dropped by the stream's own limits.
            state.index.remove(entry.seq)
            return None
        return decode(raw.data, raw.headers, Episode)

    async def answer(req: ReplaySampleRequest) -> ReplayBatch:
        try:
            validate_request(req, max_size=settings.max_sample_size)
        except ValueError as exc:
            raise PermanentError(str(exc)) from exc
        try:
            async with asyncio.timeout(settings.sample_timeout_s):
                await _wait_loaded(state, settings.sample_timeout_s)
                seqs = (
                    await _checkpoint_seqs(bus, state, state.index.checkpoint_ids())
                    if req.min_checkpoint_seq > 0
                    else {}
                )
                plan = plan_sample(state.index, req, seqs)
                fetched = await asyncio.gather(*(fetch(e) for e in plan))
        except TimeoutError as exc:
            raise ServiceError(
                "504", f"no batch within {settings.sample_timeout_s}s (index loading or slow)"
            ) from exc
        episodes = []
        counts = dict.fromkeys(TRAINABLE_LANES, 0)
        for entry, ep in zip(plan, fetched, strict=True):
            if ep is not None:
                episodes.append(ep)
                counts[entry.lane] += 1
        return ReplayBatch(episodes=episodes, lane_counts=counts)

    return answer


def rebuild(bus: Bus, settings: ReplaySettings, state: ReplayState):
    """Background task: read the whole ``REPLAY`` stream into the index, apply retention, then
    mark the index loaded. A stream that cannot be read in time fails the service."""
    stream = bus.names.stream(STREAM_REPLAY)
    log = get_logger(stream=stream)

    def index_one(msg: StoredMessage) -> None:
        seq = msg.seq
        parts = bus.names.strip(msg.subject).split(".")
        lane = parts[1] if len(parts) == 3 else ""
        try:
            if lane not in LANES:
                raise ValueError(f"subject {msg.subject!r} names no lane")
            if (msg.headers or {}).get(SCHEMA_HEADER) != Episode.SCHEMA:
                raise DecodeError("wrong_schema", f"expected {Episode.SCHEMA}")
            stored = _stored_decoder.decode(msg.data)
        except (ValueError, DecodeError, msgspec.DecodeError) as exc:
            state.unreadable += 1
            log.warning("index.unreadable", seq=seq, subject=msg.subject, error=str(exc))
            return
        state.index.add(
            IndexEntry(
                seq=seq,
                episode_id=stored.episode_id,
                lane=lane,  # type: ignore[arg-type]
                environment=stored.environment,
                task_id=stored.task_id,
                checkpoint_id=stored.checkpoint_id,
            )
        )

    async def run() -> None:
        started = time.monotonic()
        async with asyncio.timeout(settings.rebuild_timeout_s):
            async for msg in bus.read_stream(stream, bus.names.replay("*", "*")):
                index_one(msg)
            for lane in LANES:
                await _trim(bus, settings, state, lane)
        state.loaded.set()
        log.info(
            "index.rebuilt",
            entries=len(state.index),
            lanes=state.index.counts(),
            in_s=round(time.monotonic() - started, 3),
        )

    run.__name__ = "rebuild_index"
    return run
