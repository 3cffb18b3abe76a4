"""Comparison handlers: count, decide (pure logic), publish; resolve waiting rollouts.

Every episode goes out on ``episode.compared.<env>`` once: statistics are counted before the
publish (so whoever sees a compared episode can already ask for a verdict that includes it), the
publish carries ``Nats-Msg-Id = <episode_id>:compared`` (concurrent duplicates collapse in the
stream) and is followed by a ``compared.<episode_id>`` mark (duplicates arriving later are dropped
before any work).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

from aios_rl.bus import Bus, BusError, PermanentError, get_logger
from aios_rl.comparison import (
    CompareRule,
    PendingComparison,
    checked_reward,
    decide,
    epoch_verdict,
    expire,
    mark_compared,
    with_comparison,
)
from aios_rl.state import StateError
from contracts import (
    ComparisonResult,
    Episode,
    EpochVerdict,
    EpochVerdictRequest,
    Names,
)

from .settings import ComparisonSettings
from .store import Store

__all__ = ["ComparisonState", "on_rewarded", "stats", "sweep", "verdict"]


@dataclass
class ComparisonState:
    """What the handlers of one process share: the bucket and some counters."""

    store: Store
    counters: Counter[str] = field(default_factory=Counter)


def _rule(settings: ComparisonSettings) -> CompareRule:
    return CompareRule(margin=settings.margin, min_reference_runs=settings.min_reference_runs)


def _validate(ep: Episode) -> None:
    """Raises ``ValueError`` for an episode that can never be compared: a reward that is
    missing, not finite or beyond ``MAX_ABS_REWARD``, or ids that cannot be KV key tokens."""
    checked_reward(ep)
    Names.key_compared(ep.episode_id)
    Names.key_task_stats(ep.task_id, ep.checkpoint_id)
    if ep.reference_checkpoint:
        Names.key_task_stats(ep.task_id, ep.reference_checkpoint)


async def _emit(
    bus: Bus, state: ComparisonState, ep: Episode, result: ComparisonResult | None
) -> None:
    """Publish ``ep`` with ``result`` on ``episode.compared.<env>`` unless it went out before."""
    if await state.store.was_compared(ep.episode_id):
        state.counters["already_compared"] += 1
        return
    out = with_comparison(ep, result)
    await bus.publish_durable(
        bus.names.episode("compared", ep.environment), out, msg_id=f"{ep.episode_id}:compared"
    )
    await state.store.mark_compared(ep.episode_id, mark_compared(result))
    state.counters["passed_through" if result is None else result.verdict] += 1
    get_logger(episode_id=ep.episode_id, campaign_id=ep.campaign_id).debug(
        "comparison.published",
        role=ep.role,
        verdict=None if result is None else result.verdict,
        reason=None if result is None else result.reason,
    )


async def _resolve(
    bus: Bus, state: ComparisonState, rule: CompareRule, pending: PendingComparison, now: float
) -> None:
    """Publish a waiting rollout if its reference is usable now or its deadline has passed."""
    ep = pending.episode
    if await state.store.was_compared(ep.episode_id):
        await state.store.drop_pending(ep.episode_id)  # resolved elsewhere; this is a leftover
        return
    ref = await state.store.stats(ep.task_id, ep.reference_checkpoint)
    result = decide(ep, ref, rule)
    if result is None:
        if now < pending.deadline:
            return
        result = expire(ep, ref, rule, waited_s=now - pending.since)
        state.counters["expired"] += 1
    await _emit(bus, state, ep, result)
    await state.store.drop_pending(ep.episode_id)
    state.counters["pending_resolved"] += 1


async def _wake(
    bus: Bus, state: ComparisonState, rule: CompareRule, task_id: str, checkpoint_id: str
) -> None:
    """Resolve the rollouts waiting for ``checkpoint_id``'s results on ``task_id``."""
    now = time.time()
    for p in await state.store.pending():
        if (p.episode.task_id, p.episode.reference_checkpoint) == (task_id, checkpoint_id):
            await _resolve(bus, state, rule, p, now)


def on_rewarded(bus: Bus, settings: ComparisonSettings, state: ComparisonState):
    """Handler for ``episode.rewarded.>``: count the episode, then publish it compared (a
    rollout whose reference is usable), passed through (reference, eval) or record it pending."""
    rule = _rule(settings)
    store = state.store

    async def settle_rollout(ep: Episode) -> None:
        ref = (
            await store.stats(ep.task_id, ep.reference_checkpoint)
            if ep.reference_checkpoint
            else None
        )
        result = decide(ep, ref, rule)
        if result is not None:
            await _emit(bus, state, ep, result)
            return
        now = time.time()
        if await store.add_pending(
            PendingComparison(episode=ep, since=now, deadline=now + settings.reference_deadline_s)
        ):
            state.counters["pending_recorded"] += 1
        # The reference may have become usable between the read above and the record: whoever
        # counted it scanned the pendings before ours existed. Look again, so none is missed.
        result = decide(ep, await store.stats(ep.task_id, ep.reference_checkpoint), rule)
        if result is not None:
            await _emit(bus, state, ep, result)
            await store.drop_pending(ep.episode_id)

    async def handle(ep: Episode) -> None:
        try:
            _validate(ep)
        except ValueError as exc:
            raise PermanentError(str(exc)) from exc
        if await store.was_compared(ep.episode_id):
            state.counters["duplicates_dropped"] += 1
            return
        stats, added = await store.count(ep)
        if ep.role == "rollout":
            await settle_rollout(ep)
        else:
            await _emit(bus, state, ep, None)
        if added and ep.outcome != "blocked" and stats.scored == rule.min_reference_runs:
            # These results just became a usable reference: wake the rollouts waiting for them.
            # (Later runs need not scan; a wake-up lost to a crash is the sweep's job.)
            await _wake(bus, state, rule, ep.task_id, ep.checkpoint_id)

    return handle


def sweep(bus: Bus, settings: ComparisonSettings, state: ComparisonState):
    """Background task: every ``sweep_interval_s``, resolve the pending rollouts whose deadline
    passed (``comparison_failed``) or whose reference became usable without waking them."""
    rule = _rule(settings)
    log = get_logger(service="comparison")
    limit = asyncio.Semaphore(settings.concurrency)

    async def resolve(p: PendingComparison, now: float) -> None:
        async with limit:
            await _resolve(bus, state, rule, p, now)

    async def run() -> None:
        me = asyncio.current_task()
        # The kit cancels this task at shutdown. On Python 3.11 a cancel that lands while nats-py
        # sits in ``asyncio.wait_for`` on an already-answered request is swallowed (the task
        # stays "cancelling" but runs on, and the service never stops): look at the request
        # count on every round instead of relying on the CancelledError alone.
        while me is None or not me.cancelling():
            try:
                pendings = await state.store.pending()
                now = time.time()
                await asyncio.gather(*(resolve(p, now) for p in pendings))
            except (BusError, StateError) as exc:
                # NATS unreachable or slow: everything is still in the bucket, try next round.
                state.counters["sweep_errors"] += 1
                log.warning("comparison.sweep_failed", error=repr(exc))
            state.counters["sweeps"] += 1
            await asyncio.sleep(settings.sweep_interval_s)  # a period, not a wait for a condition
        raise asyncio.CancelledError

    run.__name__ = "comparison-sweep"
    return run


def verdict(bus: Bus, settings: ComparisonSettings, state: ComparisonState):
    """Endpoint ``comparison.verdict``: the paired epoch verdict from the stored statistics."""
    store = state.store

    async def answer(req: EpochVerdictRequest) -> EpochVerdict:
        try:
            Names.key_task_stats_of(req.candidate)
            Names.key_task_stats_of(req.reference)
            for task in req.tasks:
                Names.key_task_stats(task, req.candidate)
            if not req.margin >= 0 or not 0.0 < req.confidence < 1.0:
                raise ValueError(
                    f"margin must be >= 0 and confidence in (0, 1), got {req.margin} and "
                    f"{req.confidence}"
                )
        except ValueError as exc:
            raise PermanentError(str(exc)) from exc
        candidate = (
            await store.stats_for(sorted(set(req.tasks)), req.candidate)
            if req.tasks
            else await store.stats_of(req.candidate)
        )
        reference = await store.stats_for([s.task_id for s in candidate], req.reference)
        state.counters["verdicts"] += 1
        return epoch_verdict(
            req,
            candidate,
            reference,
            resamples=settings.bootstrap_resamples,
            seed=settings.bootstrap_seed,
        )

    return answer


def stats(state: ComparisonState) -> dict[str, float]:
    """Counters for ``aios-rl services`` (this process only)."""
    return {
        **{k: float(v) for k, v in state.counters.items()},
        "cas_conflicts": float(state.store.cas_conflicts),
        "corrupt_values": float(state.store.corrupt_values),
    }
