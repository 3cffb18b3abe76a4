"""The campaign drives the whole loop on a real nats-server: jobs -> runner -> reward ->
comparison -> replay / campaign -> verdict -> pointer decision -> trainer update."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import sys
import time
from collections.abc import AsyncIterator

import msgspec
import pytest
import torch

from aios_rl.bus import Bus, BusError, RemoteError
from aios_rl.comparison import verdict_request
from aios_rl.rollouts.epoch import sample_tasks, split_counts
from aios_rl.state.checkpoints import CheckpointRegistry
from aios_rl.state.ledger import Ledger
from aios_rl.student import new_student
from aios_rl.student.train import UpdateConfig, build_batch, update
from contracts import (
    BranchingSettings,
    CampaignEvent,
    CampaignSpec,
    CampaignState,
    CampaignStatus,
    DecodingRegime,
    Episode,
    Names,
    ResumeCampaign,
    StartCampaign,
    StatusCampaign,
    TaskIndex,
    TrainerSettings,
)
from contracts.subjects import OBJECTS_TASKS
from services.campaign.handlers import Campaigns
from services.campaign.logic import decide
from services.campaign.main import build as build_campaign
from services.campaign.settings import CampaignSettings
from services.comparison.main import build as build_comparison
from services.comparison.settings import ComparisonSettings
from services.replay.main import build as build_replay
from services.replay.settings import ReplaySettings
from services.reward.main import build as build_reward
from services.reward.settings import RewardSettings
from services.sampler.main import build as build_sampler
from services.sampler.settings import SamplerSettings
from services.trainer.main import build as build_trainer
from services.trainer.settings import TrainerServiceSettings

from .support import eventually, rolled_back, running
from .toy_runner import build_toy_runner
from .toytask import COLOURS, ToyTask

# -- pure ---------------------------------------------------------------------------------------------


def test_split_counts_and_sampling_are_deterministic() -> None:
    assert split_counts(10, {"shell": 0.5, "browser": 0.3, "orchestrator": 0.2}) == {
        "shell": 5,
        "browser": 3,
        "orchestrator": 2,
    }
    assert split_counts(3, {"a": 1, "b": 1}) == {"a": 2, "b": 1}
    with pytest.raises(ValueError):
        split_counts(3, {"a": 0})
    spec = CampaignSpec(campaign_id="c", environments={"shell": 1.0}, tasks_per_epoch=5, seed=3)
    pool = {"shell": ["t1", "t2", "t3"]}
    first = sample_tasks(spec, 0, pool)
    assert first == sample_tasks(spec, 0, pool) and len(first) == 5
    assert set(first[:3]) == {
        "shell/t1",
        "shell/t2",
        "shell/t3",
    }  # no repeat before the pool is used up
    assert first != sample_tasks(spec, 1, pool)
    with pytest.raises(ValueError, match="no shell tasks"):
        sample_tasks(spec, 0, {"shell": []})


def test_decide_rolls_back_on_worse_and_to_last_stable_on_a_streak() -> None:
    spec = CampaignSpec(campaign_id="c", degradation_streak_limit=2, stable_epochs_to_promote=2)
    first = decide("same", degradation_streak=0, stable_streak=0, spec=spec, first=True)
    assert (first.decision, first.train) == ("hold", True)
    bad = decide("worse", degradation_streak=0, stable_streak=1, spec=spec, first=False)
    assert (bad.decision, bad.degradation_streak, bad.train) == ("rollback_pre_update", 1, False)
    held = decide("same", degradation_streak=1, stable_streak=0, spec=spec, first=True)
    assert held.degradation_streak == 1  # re-collecting under the restored policy keeps the streak
    again = decide("worse", degradation_streak=1, stable_streak=0, spec=spec, first=False)
    assert again.decision == "rollback_last_stable"
    ok = decide("better", degradation_streak=0, stable_streak=0, spec=spec, first=False)
    assert (ok.decision, ok.stable_streak) == ("hold", 1)
    assert (
        decide("same", degradation_streak=0, stable_streak=1, spec=spec, first=False).decision
        == "promote"
    )
    failed = decide(
        "comparison_failed", degradation_streak=1, stable_streak=1, spec=spec, first=False
    )
    assert (failed.decision, failed.degradation_streak, failed.stable_streak) == ("hold", 1, 1)


def test_the_epoch_verdict_names_each_tasks_environment_and_worse_rolls_the_whole_student_back() -> (
    None
):
    spec = CampaignSpec(
        campaign_id="mix", environments={"shell": 0.5, "browser": 0.25, "orchestrator": 0.25}
    )
    state = CampaignState(
        spec=spec,
        epoch=3,
        candidate="c1",
        reference="c0",
        tasks=["shell/s1", "browser/b1", "orchestrator/o1", "shell/s2"],
    )
    req = verdict_request(state)
    assert (req.candidate, req.reference, req.epoch) == ("c1", "c0", 3)
    assert req.tasks == ["b1", "o1", "s1", "s2"]
    assert req.environments == {"s1": "shell", "s2": "shell", "b1": "browser", "o1": "orchestrator"}
    # A vetoed verdict is "worse" (tests/test_comparison.py): one rollback for the whole student.
    plan = decide("worse", degradation_streak=0, stable_streak=2, spec=spec, first=False)
    assert plan.decision == "rollback_pre_update" and not plan.train


# -- the loop -----------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def stack(bus: Bus, nats_url: str, names: Names) -> AsyncIterator[None]:
    common = {"nats_url": nats_url, "namespace": names.namespace}
    trainer_svc, trainer = build_trainer(bus, TrainerServiceSettings(**common))
    await trainer.ensure_initial()
    sampler_svc, _ = build_sampler(bus, SamplerSettings(**common))
    campaign_svc, campaigns = build_campaign(bus, CampaignSettings(**common, recheck_s=0.5))
    services = [
        trainer_svc,
        sampler_svc,
        build_reward(bus, RewardSettings(**common)),
        build_comparison(bus, ComparisonSettings(**common, reference_deadline_s=60)),
        build_replay(bus, ReplaySettings(**common)),
        build_toy_runner(bus),
        campaign_svc,
    ]
    for svc in services:
        svc.fetch_timeout_s = 0.2
    store = await bus.js.object_store(names.bucket(OBJECTS_TASKS))
    await store.put(
        Names.object_task_index("orchestrator", "train"),
        msgspec.json.encode(
            TaskIndex(environment="orchestrator", split="train", task_ids=list(COLOURS))
        ),
    )
    async with contextlib.AsyncExitStack() as es:
        for svc in services:
            await es.enter_async_context(running(svc))
        try:
            yield
        finally:
            await campaigns.close()


async def run_campaign(bus: Bus, spec: CampaignSpec, timeout: float) -> list:
    finished = asyncio.Event()

    async def on_event(msg, raw) -> None:
        if (
            isinstance(msg, CampaignEvent)
            and msg.campaign_id == spec.campaign_id
            and msg.kind in ("finished", "failed")
        ):
            finished.set()

    sub = await bus.subscribe(bus.names.campaign_event("finished"), on_event)
    status = await bus.request(
        bus.names.campaign_cmd("start"), StartCampaign(spec=spec), CampaignStatus, timeout=10
    )
    assert status.state == "running"
    await asyncio.wait_for(finished.wait(), timeout)
    await sub.unsubscribe()
    return await Ledger(bus).records(spec.campaign_id)


def spec_for(cid: str, epochs: int, trainer: TrainerSettings, **kw) -> CampaignSpec:
    kw.setdefault("group_size", 4)
    kw.setdefault("tasks_per_epoch", 8)
    return CampaignSpec(
        campaign_id=cid,
        environments={"orchestrator": 1.0},
        epochs=epochs,
        trainer=trainer,
        episode_deadline_s=60,
        **kw,
    )


@pytest.mark.slow
async def test_campaign_runs_epochs_and_trains(bus: Bus, nats_url: str, names: Names) -> None:
    async with stack(bus, nats_url, names):
        registry = CheckpointRegistry(bus)
        initial = (await registry.pointers())[0].active
        records = await run_campaign(
            bus, spec_for("learn", 3, TrainerSettings(learning_rate=1e-2, seed=1)), 120
        )
        pointers = (await registry.pointers())[0]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "aios_rl.cli",
            "campaign",
            "status",
            "learn",
            "--nats-url",
            nats_url,
            "--namespace",
            names.namespace,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "COLUMNS": "200"},
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    assert "campaign learn: finished, epoch 2" in text
    assert text.count("48/48") == 3 and records[0].new_checkpoint[:8] in text
    assert [r.epoch for r in records] == [0, 1, 2]
    for r in records:
        assert (r.scheduled, r.received, r.missing) == (48, 48, 0)
        assert r.per_env["orchestrator"].episodes == 32
        assert r.phase == "done" and (r.new_checkpoint or rolled_back(r)), r
    assert records[0].new_checkpoint  # the first epoch is its own reference: it always trains
    assert records[0].active_checkpoint == initial and records[0].verdict == "same"
    assert records[1].active_checkpoint == records[0].new_checkpoint
    assert records[1].reference_checkpoint == initial
    assert all(r.verdict in ("better", "same", "worse", "comparison_failed") for r in records)
    lineage = [m.checkpoint_id for m in await registry.lineage(pointers.active)]
    assert lineage[-1] == initial


def pretrained_weights() -> bytes:
    torch.manual_seed(0)
    task, model = ToyTask(seed=5), new_student(seed=2)
    config = UpdateConfig(learning_rate=3e-3, update_epochs=2, minibatch_size=64)
    for i in range(60):
        update(
            model,
            None,
            build_batch(task.rollouts(model, groups=16, group_size=4, tag=str(i)), config=config),
            config,
        )
        if task.success_rate(model, n=200) >= 0.95:
            break
    assert task.success_rate(model, n=400) >= 0.9
    return model.to_bytes()


@pytest.mark.slow
async def test_destructive_updates_roll_back_to_pre_update_then_last_stable(
    bus: Bus, nats_url: str, names: Names
) -> None:
    registry = CheckpointRegistry(bus)
    good = await registry.store(
        pretrained_weights(), parent_id=None, created_by="pretrained", algorithm="init"
    )
    await registry.init(good.checkpoint_id)
    async with stack(bus, nats_url, names):
        # A near-perfect policy's groups carry almost no advantage, so a big learning rate alone
        # may change nothing; a huge entropy bonus reliably flattens it to chance (~25%).
        destructive = TrainerSettings(learning_rate=0.05, update_epochs=6, entropy_coef=5.0, seed=3)
        records = await run_campaign(
            bus,
            spec_for(
                "protect",
                4,
                destructive,
                degradation_streak_limit=2,
                group_size=8,
                reference_runs=4,
            ),
            180,
        )
        pointers = (await registry.pointers())[0]
    decisions = [r.decision for r in records]
    verdicts = [r.verdict for r in records]
    assert decisions == ["hold", "rollback_pre_update", "hold", "rollback_last_stable"], (
        verdicts,
        [r.verdict_detail for r in records],
    )
    assert verdicts[1] == verdicts[3] == "worse"
    assert records[1].active_checkpoint == records[0].new_checkpoint != good.checkpoint_id
    moves = {(m.pointer, m.new) for m in records[1].pointer_moves}
    assert ("active", good.checkpoint_id) in moves
    assert pointers.active == good.checkpoint_id and pointers.last_stable == good.checkpoint_id
    assert records[1].new_checkpoint is None  # no training after a rollback


@pytest.mark.slow
async def test_dapo_filter_drops_tied_groups_and_draws_new_tasks_in_their_place(
    bus: Bus, nats_url: str, names: Names
) -> None:
    registry = CheckpointRegistry(bus)
    good = await registry.store(
        pretrained_weights(), parent_id=None, created_by="pretrained", algorithm="init"
    )
    await registry.init(good.checkpoint_id)
    async with stack(bus, nats_url, names):
        # A near-perfect policy, near-greedy: every group succeeds four times out of four.
        records = await run_campaign(
            bus,
            spec_for(
                "dapo",
                1,
                TrainerSettings(seed=0),
                tasks_per_epoch=3,
                rollout_strategy="dapo-filter",
                regime=DecodingRegime(temperature=0.1),
                branching=BranchingSettings(resample_cap=2),
            ),
            120,
        )
        state = await Campaigns(bus, CampaignSettings()).state("dapo")
    (r,) = records
    assert state is not None and len(state.tasks) == 3 + 2 == len(set(state.tasks))
    assert [o.kind for o in state.orders] == ["task", "task"]  # the cap: 2 of 3 tied replaced
    assert r.scheduled == r.received == 5 * (4 + 2)  # each new task with its reference runs
    assert [g.dropped for g in r.groups] == [True] * 5 and all(g.after == 0 for g in r.groups)
    assert sorted(state.dropped_groups) == sorted(g.group_id for g in r.groups)
    assert r.rollouts.strategy == "dapo-filter" and r.rollouts.base == 20
    assert r.new_checkpoint is None  # every group dropped: nothing to learn from


# -- outages and failures -------------------------------------------------------------------------


def test_transient_errors_are_told_from_permanent_ones() -> None:
    from aios_rl.bus import (
        BusError,
        ConnectError,
        NoResponders,
        PermanentError,
        RemoteError,
        RequestTimeout,
    )
    from aios_rl.state.control import ControlContentionError, ControlUnavailableError
    from aios_rl.state.ledger import CorruptLedgerError, LedgerUnavailableError
    from services.campaign.handlers import NoActiveCheckpoint, transient

    for exc in (
        RequestTimeout("t"),
        NoResponders("n"),
        ConnectError("c"),
        BusError("b"),
        RemoteError("503", "starting"),
        RemoteError("504", "slow"),
        ControlUnavailableError("nats down"),
        LedgerUnavailableError("nats down"),
        ControlContentionError("busy", key="k"),
        NoActiveCheckpoint("no active yet"),
        TimeoutError(),
        ConnectionResetError(),
    ):
        assert transient(exc), exc
    for exc in (
        RemoteError("422", "bad update"),
        RemoteError("409", "stale"),
        PermanentError("never"),
        CorruptLedgerError("garbage"),
        ValueError("no shell tasks"),
        KeyError("bug"),
    ):
        assert not transient(exc), exc


def test_episode_deadlines_leave_room_for_a_killed_runners_jobs() -> None:
    from services.campaign.logic import ACK_WAITS_PER_DEADLINE, episode_deadline_s

    assert episode_deadline_s(300, [60.0, 30.0]) == 300  # already three ack waits and more
    assert episode_deadline_s(120, [60.0]) == ACK_WAITS_PER_DEADLINE * 60
    assert episode_deadline_s(45, []) == 45
    # The built-in runners' ack waits fit the deadlines the commands use.
    from contracts.subjects import RUNNER_ACK_WAIT_S

    assert episode_deadline_s(300, list(RUNNER_ACK_WAIT_S.values())) == 300


async def _status(bus: Bus, cid: str) -> CampaignStatus:
    return await bus.request(
        bus.names.campaign_cmd("status"), StatusCampaign(campaign_id=cid), CampaignStatus, timeout=5
    )


async def _until(bus: Bus, cid: str, states: set[str], timeout: float) -> CampaignStatus:
    """The campaign's status once its state is one of ``states`` (asked every half second:
    events published during an outage may be missed, the status is not)."""

    async def probe() -> CampaignStatus | None:
        with contextlib.suppress(BusError):
            status = await _status(bus, cid)
            if status.state in states:
                return status
        return None

    return await eventually(probe, within=timeout, every=0.5, what=f"{cid} in {states}")


@pytest.mark.slow
async def test_a_campaign_survives_a_nats_server_outage(tmp_path, names: Names) -> None:
    from aios_rl.bus import connect, provision
    from aios_rl.stack.natsd import NatsServer

    server = NatsServer(tmp_path / "nats").start()
    try:
        async with connect(server.url, name="test", names=names) as bus:
            await provision(bus)
            epoch_1 = asyncio.Event()

            async def on_event(msg, raw) -> None:
                if isinstance(msg, CampaignEvent) and msg.campaign_id == "outage" and msg.epoch:
                    epoch_1.set()

            await bus.subscribe(bus.names.campaign_event(">"), on_event)
            async with stack(bus, server.url, names):
                spec = spec_for("outage", 3, TrainerSettings(learning_rate=1e-2, seed=1))
                await bus.request(
                    bus.names.campaign_cmd("start"),
                    StartCampaign(spec=spec),
                    CampaignStatus,
                    timeout=10,
                )
                await asyncio.wait_for(epoch_1.wait(), 120)  # work in every service's hands
                outage_at = time.time()
                server.stop()
                await asyncio.sleep(
                    8
                )  # the outage (past the 5 s request timeouts): inflicted, not a wait
                server.start()
                status = await _until(bus, "outage", {"finished", "failed"}, 240)
                records = await Ledger(bus).records("outage")
    finally:
        server.stop()
    assert status.state == "finished", (status.failure, status.last_error)
    # The outage hit a running campaign (whether the campaign itself saw an error depends on
    # what it was doing in those seconds: waiting on a pull consumer sees none) and it went on:
    # an epoch began after the server came back.
    assert any(r.timings.get("collect", 0.0) > outage_at + 8 for r in records), [
        r.timings for r in records
    ]
    assert [r.epoch for r in records] == [0, 1, 2]
    # Each epoch trained, unless the gate rolled its student back (the veto can fire on noise).
    assert all(r.phase == "done" and (r.new_checkpoint or rolled_back(r)) for r in records), [
        (r.verdict, r.decision, r.verdict_detail) for r in records
    ]


@pytest.mark.slow
async def test_a_campaign_that_cannot_go_on_fails_with_a_reason_and_resumes(
    bus: Bus, nats_url: str, names: Names
) -> None:
    failed = asyncio.Event()
    reasons: list[str] = []

    async def on_failed(msg, raw) -> None:
        if isinstance(msg, CampaignEvent) and msg.campaign_id == "nowork":
            reasons.append(msg.reason)
            failed.set()

    await bus.subscribe(bus.names.campaign_event("failed"), on_failed)
    async with stack(bus, nats_url, names):
        spec = CampaignSpec(
            campaign_id="nowork",
            environments={"orchestrator": 1.0},
            split="heldout",  # no task of this split is stored: retrying cannot fix that
            tasks_per_epoch=4,
            epochs=1,
            episode_deadline_s=60,
        )
        await bus.request(
            bus.names.campaign_cmd("start"), StartCampaign(spec=spec), CampaignStatus, timeout=10
        )
        await asyncio.wait_for(failed.wait(), 60)
        status = await _status(bus, "nowork")
        assert status.state == "failed" and "no orchestrator tasks" in status.failure
        assert "no orchestrator tasks" in reasons[0]
        with pytest.raises(RemoteError, match="404"):
            await bus.request(
                bus.names.campaign_cmd("resume"),
                ResumeCampaign(campaign_id="nope"),
                CampaignStatus,
                timeout=10,
            )
        # The cause fixed (tasks stored), a resume takes it up where it stood and it finishes.
        store = await bus.js.object_store(names.bucket(OBJECTS_TASKS))
        await store.put(
            Names.object_task_index("orchestrator", "heldout"),
            msgspec.json.encode(
                TaskIndex(environment="orchestrator", split="heldout", task_ids=list(COLOURS))
            ),
        )
        resumed = await bus.request(
            bus.names.campaign_cmd("resume"),
            ResumeCampaign(campaign_id="nowork"),
            CampaignStatus,
            timeout=10,
        )
        assert resumed.state == "running" and resumed.failure == ""
        final = await _until(bus, "nowork", {"finished", "failed"}, 120)
    assert final.state == "finished", final.failure


def test_arrivals_stay_finite_whatever_the_rewards() -> None:
    from contracts import EpochArrivals
    from services.campaign.logic import MAX_ABS_REWARD, add_arrival

    arrivals = EpochArrivals(campaign_id="c", epoch=0)
    for i, reward in enumerate([1.7e308, 1.7e308, float("inf"), float("nan"), -1e300, 0.5]):
        ep = Episode(
            episode_id=f"e{i}",
            environment="orchestrator",
            task_id="t",
            campaign_id="c",
            env_reward=reward,
            outcome="success",
        )
        updated = add_arrival(arrivals, ep)
        assert updated is not None
        arrivals = updated
    stats = arrivals.per_env["orchestrator"]
    assert stats.episodes == 6 and math.isfinite(stats.reward_sum)
    assert stats.reward_sum == MAX_ABS_REWARD + MAX_ABS_REWARD - MAX_ABS_REWARD + 0.5
    # What is stored decodes again (an inf would have become null).
    assert msgspec.json.decode(msgspec.json.encode(arrivals), type=EpochArrivals) == arrivals
