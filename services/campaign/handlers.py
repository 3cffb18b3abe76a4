"""The campaign driver: one task per running campaign walks its epochs through
collect -> compare -> decide -> train -> done. Every transition is written to KV ``control``
and the ledger before it takes effect, and every effect is idempotent (fixed job and episode
ids, compare-and-set pointer moves with ``expect_active``, deterministic trainer updates), so a
campaign killed in any phase resumes where it was without doing anything twice."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable

import msgspec

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
from aios_rl.comparison import verdict_request
from aios_rl.errors import AiosError
from aios_rl.rail.plan import decision_orders, realized_traces, round_asks
from aios_rl.rollouts import RAIL, group_contrasts, tied
from aios_rl.rollouts import validate as validate_strategy
from aios_rl.rollouts.epoch import (
    epoch_groups,
    group_id,
    next_round,
    plan_jobs,
    plan_next,
    rollouts_before,
    round_runs,
    sample_tasks,
    scheduled_ids,
)
from aios_rl.state import ContentionError, CorruptError, UnavailableError
from aios_rl.state.checkpoints import CheckpointRegistry, InvalidMoveError, StalePointersError
from aios_rl.state.control import ControlStore
from aios_rl.state.ledger import Ledger
from aios_rl.state.tasks import task_ids
from contracts import (
    BranchOrder,
    CampaignEvent,
    CampaignSpec,
    CampaignState,
    CampaignStatus,
    ControlSnapshot,
    Episode,
    EpochRecord,
    EpochVerdict,
    Names,
    PointerMove,
    RailDecisions,
    ResumeCampaign,
    StartCampaign,
    StatusCampaign,
    StopCampaign,
    TrainerUpdate,
    TrainerUpdateResult,
)
from contracts.subjects import STREAM_ROLLOUTS, runner_name

from .logic import decide, episode_deadline_s
from .settings import CampaignSettings
from .store import Arrivals, Rollouts


class NoActiveCheckpoint(AiosError, RuntimeError):
    """Nothing is active yet (the trainer has not stored its first checkpoint): transient."""


def transient(exc: BaseException) -> bool:
    """Whether retrying may fix ``exc``: NATS unreachable or slow, a service not answering or
    restarting (an error reply 5xx), state briefly unavailable or contended, nothing active yet.
    Anything else (a corrupt value, a refused request, a bug) is not."""
    if isinstance(exc, RemoteError):
        return exc.code.startswith("5")
    if isinstance(exc, PermanentError):
        return False
    return isinstance(
        exc,
        BusError
        | UnavailableError
        | ContentionError
        | NoActiveCheckpoint
        | TimeoutError
        | ConnectionError,
    )


class Campaigns:
    """Every campaign this process drives."""

    def __init__(self, bus: Bus, settings: CampaignSettings) -> None:
        self.bus = bus
        self.settings = settings
        self.control = ControlStore(bus)
        self.ledger = Ledger(bus)
        self.registry = CheckpointRegistry(bus)
        self.arrivals = Arrivals(bus)
        self.rollouts = Rollouts(bus)
        self.drivers: dict[str, asyncio.Task[None]] = {}
        self.wakeups: dict[str, asyncio.Event] = {}
        self.unrecorded: dict[str, tuple[int, str]] = {}
        """Campaign -> (transient errors not yet counted in its state, the last one)."""
        self._stopped = asyncio.Event()
        self.log = get_logger()

    # -- durable state ------------------------------------------------------------------------------
    @staticmethod
    def key(campaign_id: str) -> str:
        return Names.key_control("campaign", campaign_id)

    async def state(self, campaign_id: str) -> CampaignState | None:
        snap, _ = await self.control.load(self.key(campaign_id))
        return snap.state if snap is not None and isinstance(snap.state, CampaignState) else None

    async def save(
        self, campaign_id: str, fn: Callable[[CampaignState], CampaignState]
    ) -> CampaignState:
        def apply(s):
            if not isinstance(s, CampaignState):
                raise TypeError(f"control key {self.key(campaign_id)} holds no campaign")
            return fn(s)

        snap: ControlSnapshot = await self.control.update(self.key(campaign_id), apply)
        assert isinstance(snap.state, CampaignState)
        return snap.state

    async def record(
        self, state: CampaignState, kind: str = "phase", *, reason: str = "", **changes: object
    ) -> EpochRecord:
        """Rewrite the epoch's ledger line with ``changes`` (and the state's phase)."""
        spec = state.spec
        current = await self.ledger.get(spec.campaign_id, state.epoch) or EpochRecord(
            campaign_id=spec.campaign_id, epoch=state.epoch
        )
        timings = dict(current.timings)
        timings.setdefault(state.phase, time.time())
        rec = msgspec.structs.replace(
            current,
            phase=state.phase,
            timings=timings,
            degradation_streak=state.degradation_streak,
            **changes,
        )
        await self.ledger.put(rec, kind=kind, reason=reason)
        return rec

    # -- commands -----------------------------------------------------------------------------------
    async def start(self, cmd: StartCampaign) -> CampaignStatus:
        spec = cmd.spec
        try:
            validate_strategy(spec)
        except ValueError as exc:
            raise ServiceError("422", str(exc)) from exc
        if spec.epochs < 1 or spec.tasks_per_epoch < 1 or spec.group_size < 1:
            raise ServiceError("422", "epochs, tasks_per_epoch and group_size must be at least 1")
        snap = await self.control.load_or_init(
            self.key(spec.campaign_id), lambda: CampaignState(spec=spec)
        )
        assert isinstance(snap.state, CampaignState)
        if snap.state.spec != spec:
            raise ServiceError("409", f"campaign {spec.campaign_id} exists with another spec")
        if snap.state.state in ("stopping", "stopped", "failed"):
            return await self.resume(ResumeCampaign(campaign_id=spec.campaign_id))
        if snap.state.state == "running":
            self.ensure_driver(spec.campaign_id)
        return await self.status(StatusCampaign(campaign_id=spec.campaign_id))

    async def resume(self, cmd: ResumeCampaign) -> CampaignStatus:
        """Take a stopped or failed campaign up where it stood (a running one is only made sure
        to have a driver). 404 for an unknown campaign, 409 for a finished one."""
        state = await self.state(cmd.campaign_id)
        if state is None:
            raise ServiceError("404", f"no campaign {cmd.campaign_id}")
        if state.state == "finished":
            raise ServiceError("409", f"campaign {cmd.campaign_id} has finished")
        if state.state in ("stopping", "stopped", "failed"):
            was = state.state
            state = await self.save(
                cmd.campaign_id,
                lambda s: msgspec.structs.replace(
                    s, state="running", failure="", retries=0, last_error=""
                ),
            )
            self.unrecorded.pop(cmd.campaign_id, None)
            await self.record(state, kind="resumed", reason=f"resumed from {was}")
            self.log.info("campaign_resumed", campaign_id=cmd.campaign_id, was=was)
        self.ensure_driver(cmd.campaign_id)
        return await self.status(StatusCampaign(campaign_id=cmd.campaign_id))

    async def stop(self, cmd: StopCampaign) -> CampaignStatus:
        state = await self.state(cmd.campaign_id)
        if state is None:
            raise ServiceError("404", f"no campaign {cmd.campaign_id}")
        if state.state == "running":
            await self.save(cmd.campaign_id, lambda s: msgspec.structs.replace(s, state="stopping"))
            self.wake(cmd.campaign_id)
        return await self.status(StatusCampaign(campaign_id=cmd.campaign_id))

    async def status(self, cmd: StatusCampaign) -> CampaignStatus:
        state = await self.state(cmd.campaign_id)
        if state is None:
            return CampaignStatus(campaign_id=cmd.campaign_id)
        return CampaignStatus(
            campaign_id=cmd.campaign_id,
            state=state.state,
            epoch=state.epoch,
            phase=state.phase,
            records=await self.ledger.records(cmd.campaign_id),
            failure=state.failure,
            retries=state.retries,
            last_error=state.last_error,
            trainer=state.spec.trainer,
        )

    # -- arrivals -----------------------------------------------------------------------------------
    async def on_compared(self, ep: Episode) -> None:
        if not ep.campaign_id:
            return
        if ep.role == "rollout" and ep.group_id:
            await self.rollouts.put(ep)  # before it counts: planning reads it once it has
        if await self.arrivals.add(ep):
            self.wake(ep.campaign_id)

    def wake(self, campaign_id: str) -> None:
        self.wakeups.setdefault(campaign_id, asyncio.Event()).set()

    # -- drivers ------------------------------------------------------------------------------------
    async def resume_all(self) -> None:
        """At start-up: take over every campaign that was running (or stopping)."""
        for snap in await self.control.all("campaign"):
            if isinstance(snap.state, CampaignState) and snap.state.state in (
                "running",
                "stopping",
            ):
                self.ensure_driver(snap.state.spec.campaign_id)
        await (
            asyncio.Event().wait()
        )  # the drivers run as their own tasks; live as long as the service

    def ensure_driver(self, campaign_id: str) -> None:
        task = self.drivers.get(campaign_id)
        if task is None or task.done():
            self.drivers[campaign_id] = asyncio.create_task(
                self.drive(campaign_id), name=f"campaign-{campaign_id}"
            )

    async def close(self) -> None:
        for t in self.drivers.values():
            t.cancel()
        await asyncio.gather(*self.drivers.values(), return_exceptions=True)

    async def drive(self, campaign_id: str) -> None:
        """Run the campaign's phases until it finishes, stops or fails. A transient error (NATS
        unreachable, a service restarting) is retried with back-off from the phase it hit; only
        an error retrying cannot fix (or ``retry_limit`` transient ones in a row) fails it."""
        log = self.log.bind(campaign_id=campaign_id)
        pause, in_a_row = self.settings.retry_initial_s, 0
        while True:
            try:
                if await self._step(campaign_id, log):
                    return
                pause, in_a_row = self.settings.retry_initial_s, 0
                if campaign_id in self.unrecorded:  # retries NATS was too down to record
                    await self._record_retries(campaign_id)
            except asyncio.CancelledError:
                raise
            except CorruptError as exc:
                # Its own state does not decode: nothing can be recorded for it, and driving
                # it on would only repeat this. Reported; status answers with the error.
                log.error("campaign_state_corrupt", error=str(exc)[:500])
                return
            except Exception as exc:
                in_a_row += 1
                limit = self.settings.retry_limit
                if transient(exc) and (limit == 0 or in_a_row < limit):
                    log.warning("campaign_retrying", error=repr(exc), attempt=in_a_row, in_s=pause)
                    await self._note_retry(campaign_id, exc)
                    await self._pause(campaign_id, pause)
                    pause = min(pause * 2, self.settings.retry_max_s)
                    continue
                reason = (
                    f"{type(exc).__name__}: {exc}"
                    if not transient(exc)
                    else f"gave up after {in_a_row} transient errors in a row; the last: {exc!r}"
                )
                log.exception("campaign_failed", reason=reason)
                if await self._fail(campaign_id, reason[:1000]):
                    return
                await self._pause(campaign_id, pause)  # could not even record it: NATS is down

    async def _step(self, campaign_id: str, log) -> bool:  # type: ignore[no-untyped-def]
        """One phase of the campaign; ``True`` when the driver is done with it."""
        state = await self.state(campaign_id)
        if state is None or state.state not in ("running", "stopping"):
            return True
        if state.state == "stopping":  # stop at a phase boundary; start resumes from here
            state = await self.save(
                campaign_id, lambda s: msgspec.structs.replace(s, state="stopped")
            )
            await self.record(state, kind="stopped")
            log.info("campaign_stopped", epoch=state.epoch, phase=state.phase)
            return True
        step = {
            "collect": self.collect,
            "compare": self.compare,
            "decide": self.decide,
            "train": self.train,
            "done": self.finish_epoch,
        }[state.phase]
        await step(state)
        return False

    async def _note_retry(self, campaign_id: str, exc: BaseException) -> None:
        """Count the retry in the campaign's state and announce it. Best effort: NATS may be
        the thing that is down; what cannot be recorded now is recorded after the recovery."""
        count, _ = self.unrecorded.get(campaign_id, (0, ""))
        self.unrecorded[campaign_id] = (count + 1, repr(exc)[:500])
        with contextlib.suppress(Exception):
            await self._record_retries(campaign_id)

    async def _record_retries(self, campaign_id: str) -> None:
        count, error = self.unrecorded[campaign_id]
        state = await self.save(
            campaign_id,
            lambda s: msgspec.structs.replace(s, retries=s.retries + count, last_error=error),
        )
        del self.unrecorded[campaign_id]
        with contextlib.suppress(Exception):
            await self.bus.publish_durable(
                self.bus.names.campaign_event("retrying"),
                CampaignEvent(
                    kind="retrying",
                    campaign_id=campaign_id,
                    epoch=state.epoch,
                    at=time.time(),
                    reason=error,
                ),
                msg_id=f"{campaign_id}:retrying:{state.retries}",
            )

    async def _fail(self, campaign_id: str, reason: str) -> bool:
        """Mark the campaign failed with ``reason`` and announce it; ``False`` when that could
        not be written (then the driver tries again after a pause)."""
        try:
            state = await self.save(
                campaign_id,
                lambda s: msgspec.structs.replace(s, state="failed", failure=reason),
            )
            await self.record(state, kind="failed", reason=reason)
        except Exception as exc:
            self.log.warning("campaign_fail_not_recorded", campaign_id=campaign_id, error=repr(exc))
            return False
        return True

    async def _pause(self, campaign_id: str, seconds: float) -> None:
        """Back off ``seconds`` before retrying, or less if the campaign is woken (stopped)."""
        wake = self.wakeups.setdefault(campaign_id, asyncio.Event())
        wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await wake.wait()

    async def _deadline_s(self, spec: CampaignSpec) -> float:
        """The spec's episode deadline, stretched to a few ack waits of the runners it uses
        (as they are in force: a deployment may set its own)."""
        stream = self.bus.names.stream(STREAM_ROLLOUTS)
        waits = [
            w
            for env in spec.environments
            if (w := await self.bus.ack_wait(stream, runner_name(env))) is not None
        ]
        deadline = episode_deadline_s(spec.episode_deadline_s, waits)
        if deadline > spec.episode_deadline_s:
            self.log.warning(
                "episode_deadline_stretched",
                campaign_id=spec.campaign_id,
                asked_s=spec.episode_deadline_s,
                used_s=deadline,
                runner_ack_waits_s=waits,
            )
        return deadline

    async def _task_ids(self, env: str, split: str) -> list[str]:
        return await task_ids(self.bus, env, split)

    async def collect(self, state: CampaignState) -> None:
        """Run the epoch's rounds: publish a round's jobs, wait for its episodes, let the
        strategy plan the next round from what arrived; until a round plans nothing or the
        deadline passes. Every round's orders are saved before its jobs go out."""
        spec = state.spec
        cid = spec.campaign_id
        if not state.tasks:
            available = {env: await self._task_ids(env, spec.split) for env in spec.environments}
            tasks = sample_tasks(spec, state.epoch, available)
            pointers, _ = await self.registry.pointers()
            if pointers.active is None:
                raise NoActiveCheckpoint("no active checkpoint yet: is the trainer running?")
            candidate = pointers.active
            reference = pointers.pre_update_ref or candidate
            now = time.time()
            state = await self.save(
                cid,
                lambda s: msgspec.structs.replace(
                    s,
                    tasks=tasks,
                    base_tasks=len(tasks),
                    candidate=candidate,
                    reference=reference,
                    epoch_started_at=now,
                    round=0,
                    round_started_at=now,
                    orders=[],
                    dropped_groups=[],
                    jobs_published=False,
                ),
            )
            await self.record(
                state,
                kind="started" if state.epoch == 0 else "phase",
                active_checkpoint=candidate,
                reference_checkpoint=reference,
                scheduled=len(round_runs(spec, state, 0)),
            )
        wake = self.wakeups.setdefault(cid, asyncio.Event())
        while True:
            started = state.round_started_at or state.epoch_started_at
            deadline = started + await self._deadline_s(spec)
            if not state.jobs_published:
                parents = await self.rollouts.all(cid, state.epoch) if state.round else {}
                jobs = plan_jobs(spec, state, deadline=deadline, parents=parents)
                for job in jobs:
                    await self.bus.publish_durable(
                        self.bus.names.rollout_job(job.environment), job, msg_id=job.job_id
                    )
                state = await self.save(
                    cid, lambda s: msgspec.structs.replace(s, jobs_published=True)
                )
                self.log.info(
                    "jobs_published",
                    campaign_id=cid,
                    epoch=state.epoch,
                    round=state.round,
                    jobs=len(jobs),
                )
            scheduled = scheduled_ids(spec, state)
            while True:
                arrivals, _ = await self.arrivals.get(cid, state.epoch)
                got = scheduled & set(arrivals.episode_ids)
                current = await self.state(cid)
                if current is not None and current.state == "stopping":
                    return  # the driver loop records the stop; arrivals keep being counted
                if len(got) == len(scheduled) or time.time() >= deadline:
                    break
                wake.clear()
                try:
                    async with asyncio.timeout(
                        min(self.settings.recheck_s, max(0.0, deadline - time.time()))
                    ):
                        await wake.wait()
                except TimeoutError:
                    pass  # re-read: arrivals counted by another replica do not wake this one
            if len(got) < len(scheduled):
                break  # the deadline passed: no more rounds, what arrived is the epoch
            await self._publish_traces(state)
            nxt = await self._plan(state)
            if nxt is None:
                break
            orders, new_tasks = nxt
            state = await self.save(
                cid, functools.partial(next_round, orders=orders, tasks=new_tasks, at=time.time())
            )
            await self.record(state, scheduled=len(scheduled_ids(spec, state)))
            self.log.info(
                "round_planned",
                campaign_id=cid,
                epoch=state.epoch,
                round=state.round,
                strategy=spec.rollout_strategy,
                branches=sum(o.count for o in orders if o.kind == "branch"),
                fresh=sum(o.count for o in orders if o.kind == "fresh"),
                new_tasks=len(new_tasks),
            )
        await self._publish_traces(state)
        summaries = await self.rollouts.all(cid, state.epoch)
        groups = epoch_groups(state, summaries)
        dropped = (
            [g.group_id for g in groups if tied(g)]
            if spec.rollout_strategy == "dapo-filter"
            else []
        )
        account = msgspec.structs.replace(
            arrivals.account,
            strategy=spec.rollout_strategy,
            rounds=state.round,
            wall_s=round(time.time() - state.epoch_started_at, 3),
        )
        state = await self.save(
            cid, lambda s: msgspec.structs.replace(s, phase="compare", dropped_groups=dropped)
        )
        await self.record(
            state,
            scheduled=len(scheduled),
            received=len(got),
            missing=len(scheduled) - len(got),
            per_env=arrivals.per_env,
            lane_counts=dict(arrivals.verdicts),
            rollouts=account,
            groups=group_contrasts(
                (s for s in summaries.values() if s.episode_id in scheduled), dropped=dropped
            ),
        )

    async def _plan_rail(self, state: CampaignState) -> tuple[list[BranchOrder], list[str]] | None:
        """Ask the RAIL service, one request per task with budget left, whether and where to
        branch next round. Raises ``BusError`` when it does not answer (the driver retries)."""
        spec = state.spec
        asks = round_asks(state, await self.rollouts.all(spec.campaign_id, state.epoch))
        if asks is None:
            return None
        answers = await asyncio.gather(
            *(
                self.bus.request(
                    self.bus.names.rail_decide(),
                    req,
                    RailDecisions,
                    timeout=self.settings.rail_timeout_s,
                )
                for _, _, req in asks
            )
        )
        orders = decision_orders(state.round + 1, asks, answers, state.orders)
        return (orders, []) if orders else None

    async def _publish_traces(self, state: CampaignState) -> None:
        """One ``RailTrace`` per RAIL decision of the state's current round whose continuations
        are back: ``y = I(Y_b) - I(Y_0)``, ``Y_0`` the group before the round, ``Y_b`` with the
        decision's continuations (de-duplicated by the decision id)."""
        spec = state.spec
        if not any(o.round == state.round and o.decision is not None for o in state.orders):
            return
        before = rollouts_before(spec, state, state.round)
        traces = realized_traces(
            spec,
            epoch=state.epoch,
            rnd=state.round,
            orders=state.orders,
            tasks=state.tasks,
            before=before,
            summaries=await self.rollouts.all(spec.campaign_id, state.epoch),
            at=time.time(),
        )
        for trace in traces:
            await self.bus.publish_durable(
                self.bus.names.rail_trace(), trace, msg_id=f"rail:{trace.decision_id}"
            )

    async def _plan(self, state: CampaignState) -> tuple[list[BranchOrder], list[str]] | None:
        """The next round's orders and the new tasks they bring, ``None`` when it plans none."""
        spec = state.spec
        if spec.rollout_strategy == "uniform":
            return None
        if spec.rollout_strategy in RAIL:
            return await self._plan_rail(state)
        summaries = await self.rollouts.all(spec.campaign_id, state.epoch)
        available: dict[str, list[str]] = {}
        if spec.rollout_strategy == "dapo-filter":
            available = {env: await self._task_ids(env, spec.split) for env in spec.environments}
        return plan_next(state, summaries, available)

    async def compare(self, state: CampaignState) -> None:
        spec = state.spec
        verdict: EpochVerdict | None = None
        if state.candidate != state.reference:
            req = verdict_request(state)
            try:
                verdict = await self.bus.request(
                    self.bus.names.comparison_verdict(),
                    req,
                    EpochVerdict,
                    timeout=self.settings.verdict_timeout_s,
                )
            except BusError as exc:  # an outage is never a degradation
                verdict = EpochVerdict(
                    verdict="comparison_failed",
                    candidate=req.candidate,
                    reference=req.reference,
                    reason=f"comparison service: {exc}",
                )
        state = await self.save(
            spec.campaign_id, lambda s: msgspec.structs.replace(s, phase="decide")
        )
        if verdict is None:
            await self.record(
                state,
                verdict="same",
                verdict_detail="first epoch of this policy: it is its own reference",
            )
        else:
            detail = (
                f"{verdict.wins} wins / {verdict.losses} losses / {verdict.ties} ties over {verdict.tasks} tasks; "
                f"mean delta {verdict.mean_delta:+.3f} [{verdict.ci_low:+.3f}, {verdict.ci_high:+.3f}], "
                f"sign test p={verdict.sign_test_p:.3f}. {verdict.reason}"
            ).strip()
            await self.record(state, verdict=verdict.verdict, verdict_detail=detail)

    async def decide(self, state: CampaignState) -> None:
        spec = state.spec
        rec = await self.ledger.get(spec.campaign_id, state.epoch)
        verdict = rec.verdict if rec and rec.verdict else "comparison_failed"
        plan = decide(
            verdict,
            degradation_streak=state.degradation_streak,
            stable_streak=state.stable_streak,
            spec=spec,
            first=state.candidate == state.reference,
        )
        moves: list[PointerMove] = []
        target = {
            "rollback_pre_update": "pre_update_ref",
            "rollback_last_stable": "last_stable",
        }.get(plan.decision)
        try:
            if target is not None:
                moved = await self.registry.rollback(
                    target,
                    f"{spec.campaign_id} epoch {state.epoch}: verdict {verdict}",  # type: ignore[arg-type]
                    expect_active=state.candidate,
                )
                moves = list(moved.moves)
            elif plan.decision == "promote":
                moved = await self.registry.promote(
                    f"{spec.campaign_id} epoch {state.epoch}: stable", expect_active=state.candidate
                )
                moves = list(moved.moves)
        except StalePointersError:
            # Active is no longer the candidate: the move was applied before a restart.
            self.log.info(
                "decision_already_applied", campaign_id=spec.campaign_id, epoch=state.epoch
            )
        except InvalidMoveError as exc:
            self.log.warning(
                "decision_not_applicable", campaign_id=spec.campaign_id, error=str(exc)
            )
        next_phase = "train" if plan.train else "done"
        state = await self.save(
            spec.campaign_id,
            lambda s: msgspec.structs.replace(
                s,
                phase=next_phase,
                degradation_streak=plan.degradation_streak,
                stable_streak=plan.stable_streak,
            ),
        )
        changes: dict[str, object] = {"decision": plan.decision}
        if moves or not (rec and rec.pointer_moves):
            changes["pointer_moves"] = moves
        await self.record(state, kind="decided", **changes)

    async def train(self, state: CampaignState) -> None:
        spec = state.spec
        dropped = set(state.dropped_groups)
        groups = [
            g
            for i in range(len(state.tasks))
            if (g := group_id(spec.campaign_id, state.epoch, i)) not in dropped
        ]
        if not groups:  # every group tied (dapo-filter): nothing to learn from this epoch
            self.log.info(
                "update_skipped",
                campaign_id=spec.campaign_id,
                epoch=state.epoch,
                reason="every group dropped",
            )
            state = await self.save(
                spec.campaign_id, lambda s: msgspec.structs.replace(s, phase="done")
            )
            await self.record(state, new_checkpoint=None, reason="every group dropped")
            return
        update = TrainerUpdate(
            update_id=f"{spec.campaign_id}-e{state.epoch}",
            campaign_id=spec.campaign_id,
            epoch=state.epoch,
            base_checkpoint=state.candidate or "",
            settings=spec.trainer,
            source="mixed" if spec.trainer.offline_fraction > 0 else "online",
            group_ids=groups,
            since=state.epoch_started_at - 1.0,
        )
        new_checkpoint: str | None = None
        for attempt in range(1, self.settings.train_attempts + 1):
            try:
                result = await self.bus.request(
                    self.bus.names.trainer_update(),
                    update,
                    TrainerUpdateResult,
                    timeout=self.settings.train_timeout_s,
                )
                new_checkpoint = result.checkpoint_id
                break
            except RemoteError as exc:
                if exc.code in ("409", "422"):  # stale base or nothing to learn: skip this update
                    self.log.warning(
                        "update_skipped",
                        campaign_id=spec.campaign_id,
                        epoch=state.epoch,
                        error=str(exc),
                    )
                    break
                if exc.code != "503" or attempt == self.settings.train_attempts:
                    raise
            except (RequestTimeout, NoResponders) as exc:
                # The trainer died or is restarting; the update is deterministic and idempotent
                # (same id, data and seed give the same checkpoint), so asking again is safe.
                if attempt == self.settings.train_attempts:
                    raise
                self.log.warning(
                    "trainer_unavailable",
                    campaign_id=spec.campaign_id,
                    attempt=attempt,
                    error=str(exc),
                )
            with contextlib.suppress(TimeoutError):  # a pause between attempts
                async with asyncio.timeout(self.settings.train_retry_s):
                    await self._stopped.wait()  # returns early only if the driver is shutting down
        state = await self.save(
            spec.campaign_id, lambda s: msgspec.structs.replace(s, phase="done")
        )
        await self.record(state, new_checkpoint=new_checkpoint)

    async def finish_epoch(self, state: CampaignState) -> None:
        spec = state.spec
        last = state.epoch + 1 >= spec.epochs
        if last:
            state = await self.save(
                spec.campaign_id, lambda s: msgspec.structs.replace(s, state="finished")
            )
            await self.record(state, kind="finished")
            self.log.info("campaign_finished", campaign_id=spec.campaign_id, epochs=state.epoch + 1)
            return
        await self.save(
            spec.campaign_id,
            lambda s: msgspec.structs.replace(
                s,
                epoch=s.epoch + 1,
                phase="collect",
                tasks=[],
                candidate=None,
                reference=None,
                jobs_published=False,
                epoch_started_at=0.0,
            ),
        )
