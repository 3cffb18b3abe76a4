"""The comparison service: the pure episode and epoch rules, then the service on a real
nats-server (in-process, and as a subprocess killed mid-stream and started again)."""

from __future__ import annotations

import asyncio
import math
import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.msg import Msg
from nats.js.client import KV_PRE_TEMPLATE

from aios_rl.bus import Bus, RemoteError, provision
from aios_rl.comparison import (
    MAX_ABS_REWARD,
    CompareRule,
    TaskStats,
    add_episode,
    check_stats,
    decide,
    epoch_verdict,
    expire,
)
from contracts import (
    DeadLetter,
    Episode,
    EpochVerdict,
    EpochVerdictRequest,
    Names,
    Timings,
    decode,
    topology,
)
from contracts.subjects import BUCKET_COMPARISON, STREAM_EPISODES
from services.comparison.main import build
from services.comparison.settings import ComparisonSettings
from services.comparison.store import Store
from tests.support import next_item, running, settled_consumer, stored

CAND = "ck-cand"
BASE = "ck-base"
RULE = CompareRule(margin=0.05, min_reference_runs=1)
REPO = Path(__file__).resolve().parents[1]


def episode(
    eid: str,
    *,
    task: str = "t0",
    role: str = "rollout",
    ckpt: str | None = None,
    ref: str = BASE,
    reward: float = 0.5,
    outcome: str = "partial",
    env: str = "shell",
) -> Episode:
    """A rewarded episode: a rollout of CAND measured against BASE, or a reference run of BASE."""
    rollout = role == "rollout"
    return Episode(
        episode_id=eid,
        environment=env,  # type: ignore[arg-type]
        task_id=task,
        campaign_id="camp",
        epoch=1,
        checkpoint_id=ckpt or (CAND if role != "reference" else BASE),
        role=role,  # type: ignore[arg-type]
        reference_checkpoint=ref if rollout else "",
        outcome=outcome,  # type: ignore[arg-type]
        env_reward=reward,
        reward=reward,
        timings=Timings(started_at=1.0, stages={"rewarded": 2.0}),
    )


def reference(eid: str, reward: float, outcome: str = "partial", **kw: Any) -> Episode:
    return episode(eid, role="reference", reward=reward, outcome=outcome, **kw)


def stats_of(*eps: Episode) -> TaskStats | None:
    out: TaskStats | None = None
    for ep in eps:
        out = add_episode(out, ep, now=0.0)
    return out


# -- pure: statistics and the episode rule ---------------------------------------------------------


def test_stats_count_each_episode_once_and_keep_blocked_out_of_the_mean() -> None:
    a = reference("r1", 0.4)
    b = reference("r2", 0.8, "success")
    blocked = reference("r3", 0.0, "blocked")
    s = stats_of(a, b, blocked)
    assert s is not None
    assert (s.count, s.scored, s.outcomes) == (3, 2, {"partial": 1, "success": 1, "blocked": 1})
    assert s.reward_sum == pytest.approx(1.2) and s.reward_sq_sum == pytest.approx(0.8)
    assert s.mean == pytest.approx(0.6) and s.std == pytest.approx(0.2)
    assert s.mean_rank == pytest.approx(2.5)
    assert s.episode_ids == ["r1", "r2", "r3"]
    assert add_episode(s, a) is s, "a counted episode must not land twice"
    assert add_episode(s, msgspec.structs.replace(b, reward=0.1)) is s


def test_stats_reject_foreign_or_unrewarded_episodes() -> None:
    s = stats_of(reference("r1", 0.4))
    with pytest.raises(ValueError, match="does not belong"):
        add_episode(s, reference("r2", 0.4, task="other"))
    with pytest.raises(ValueError, match="finite reward"):
        add_episode(None, msgspec.structs.replace(reference("r3", 0.4), reward=None))


@pytest.mark.parametrize("reward", [1e200, -1e200, MAX_ABS_REWARD * 1.5, math.inf, math.nan])
def test_a_reward_beyond_the_limit_never_reaches_a_sum(reward: float) -> None:
    s = stats_of(reference("r1", 0.4))
    for ep in (reference("r2", reward), episode("e", reward=reward)):
        with pytest.raises(ValueError, match="reward"):
            add_episode(s, ep)
        with pytest.raises(ValueError, match="reward"):
            decide(ep, s, RULE)


def test_rewards_at_the_limit_keep_every_sum_and_square_finite() -> None:
    s = stats_of(*(reference(f"r{i}", MAX_ABS_REWARD * (-1) ** i) for i in range(5)))
    assert s is not None and check_stats(s) is s
    assert s.reward_sum == MAX_ABS_REWARD and s.reward_sq_sum == 5 * MAX_ABS_REWARD**2
    assert s.mean is not None and math.isfinite(s.mean) and s.std is not None


SOUND = TaskStats(
    task_id="t0",
    checkpoint_id=BASE,
    count=2,
    scored=1,
    reward_sum=0.5,
    reward_sq_sum=0.25,
    outcomes={"partial": 1, "blocked": 1},
    episode_ids=["a", "b"],
)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (dict(reward_sum=math.inf), "not finite"),
        (dict(reward_sq_sum=math.nan), "not finite"),
        (dict(reward_sum=1e300, reward_sq_sum=1e300), "beyond"),
        (dict(reward_sq_sum=-1.0), "negative"),
        (dict(scored=3), "counts"),
        (dict(count=-1), "counts"),
        (dict(episode_ids=["a"]), "episode ids"),
        (dict(outcomes={"partial": 2}), "outcomes"),
        (dict(outcomes={"partial": 1, "weird": 1}), "outcomes"),
        (dict(updated_at=math.inf), "not finite"),
    ],
)
def test_check_stats_refuses_what_the_rules_could_not_have_stored(
    change: dict[str, Any], why: str
) -> None:
    assert check_stats(SOUND) is SOUND
    with pytest.raises(ValueError, match=why):
        check_stats(msgspec.structs.replace(SOUND, **change))


REF_HALF = (reference("r1", 0.4), reference("r2", 0.6))  # mean 0.5, all partial (rank 2)


@pytest.mark.parametrize(
    ("reward", "outcome", "verdict"),
    [
        (0.7, "partial", "better"),
        (0.56, "partial", "better"),
        (0.55, "partial", "same"),  # exactly the margin: a tie, whatever float rounding says
        (0.45, "partial", "same"),
        (0.44, "partial", "worse"),
        (0.1, "success", "worse"),  # reward decides before outcome does
        (0.9, "failure", "better"),
    ],
)
def test_episode_verdict_by_reward_margin(reward: float, outcome: str, verdict: str) -> None:
    ep = episode("e", reward=reward, outcome=outcome)
    result = decide(ep, stats_of(*REF_HALF), RULE)
    assert result is not None
    assert result.verdict == verdict
    assert result.delta == pytest.approx(reward - 0.5)
    assert (result.reference_reward, result.reference_runs) == (pytest.approx(0.5), 2)
    assert result.reference_checkpoint == BASE


@pytest.mark.parametrize(
    ("refs", "reward", "outcome", "verdict"),
    [
        ([("partial", 0.5)] * 2, 0.5, "success", "better"),  # rank 3 vs 2
        ([("partial", 0.5)] * 2, 0.5, "failure", "worse"),  # rank 1 vs 2
        ([("partial", 0.5)] * 2, 0.52, "partial", "same"),
        ([("success", 1.0)] * 3, 0.98, "partial", "worse"),  # rank 2 vs 3
        ([("success", 0.8), ("partial", 0.7)], 0.76, "success", "same"),  # 3 - 2.5 is not > 0.5
        ([("success", 0.8), ("partial", 0.7)], 0.76, "failure", "worse"),  # 1 - 2.5 < -0.5
        ([("success", 0.5), ("failure", 0.5)], 0.5, "partial", "same"),  # 2 vs mean 2
        ([("success", 0.5), ("failure", 0.5), ("blocked", 0.0)], 0.5, "success", "better"),
    ],
)
def test_outcome_rank_breaks_ties_within_the_margin(
    refs: list[tuple[str, float]], reward: float, outcome: str, verdict: str
) -> None:
    ref = stats_of(*(reference(f"r{i}", r, o) for i, (o, r) in enumerate(refs)))
    result = decide(episode("e", reward=reward, outcome=outcome), ref, RULE)
    assert result is not None and result.verdict == verdict, result


def test_no_reference_checkpoint_and_blocked_episode_fail_at_once() -> None:
    result = decide(episode("e", ref=""), stats_of(*REF_HALF), RULE)
    assert result is not None
    assert (result.verdict, result.reason, result.reference_checkpoint) == (
        "comparison_failed",
        "no reference",
        None,
    )
    result = decide(episode("e", outcome="blocked", reward=0.0), stats_of(*REF_HALF), RULE)
    assert result is not None and result.verdict == "comparison_failed"
    assert "could not run" in result.reason


def test_rollout_waits_for_a_usable_reference_then_fails_on_expiry_never_worse() -> None:
    ep = episode("e", reward=0.0, outcome="failure")  # would be "worse" against any reference
    assert decide(ep, None, RULE) is None
    blocked = stats_of(reference("r1", 0.0, "blocked"), reference("r2", 0.0, "blocked"))
    assert decide(ep, blocked, RULE) is None, "blocked reference runs are no reference"

    nothing = expire(ep, None, RULE, waited_s=30)
    assert nothing.verdict == "comparison_failed"
    assert nothing.reason == f"no reference results for {BASE} on t0 within 30s"
    outage = expire(ep, blocked, RULE, waited_s=30)
    assert outage.verdict == "comparison_failed"
    assert outage.reason == "reference could not run: all 2 reference runs blocked"

    two = CompareRule(margin=0.05, min_reference_runs=2)
    one_run = stats_of(reference("r1", 0.5))
    assert decide(ep, one_run, two) is None
    short = expire(ep, one_run, two, waited_s=5)
    assert short.verdict == "comparison_failed" and "only 1 usable" in short.reason
    usable = expire(ep, stats_of(*REF_HALF), two, waited_s=5)
    assert usable.verdict == "worse", "a reference usable at expiry gives the real verdict"


def test_an_episode_is_never_its_own_reference() -> None:
    own = episode("e", ckpt=BASE, ref=BASE, reward=0.9, outcome="success")
    assert decide(own, stats_of(own), RULE) is None
    result = decide(own, stats_of(own, reference("r1", 0.5)), RULE)
    assert result is not None
    assert (result.verdict, result.reference_runs) == ("better", 1)
    assert result.reference_reward == pytest.approx(0.5)


@pytest.mark.parametrize(
    "bad",
    [
        dict(margin=-0.1),
        dict(min_reference_runs=0),
        dict(reference_deadline_s=0.0),
        dict(sweep_interval_s=0.0),
        dict(bootstrap_resamples=0),
        dict(concurrency=0),
    ],
)
def test_settings_reject_bad_values(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        ComparisonSettings(**bad)  # type: ignore[arg-type]


# -- pure: the epoch verdict -------------------------------------------------------------------------


def paired(
    deltas: list[float], *, ref_mean: float = 0.4
) -> tuple[list[TaskStats], list[TaskStats]]:
    """Per task ``k``: two reference runs around ``ref_mean`` and two candidate runs around
    ``ref_mean + deltas[k]`` (so the task's delta is exactly ``deltas[k]``)."""
    cands, refs = [], []
    for k, d in enumerate(deltas):
        task = f"task-{k:02d}"
        r = stats_of(
            reference(f"{task}-r1", ref_mean - 0.1, task=task),
            reference(f"{task}-r2", ref_mean + 0.1, task=task),
        )
        c = stats_of(
            episode(f"{task}-c1", task=task, reward=ref_mean + d - 0.05),
            episode(f"{task}-c2", task=task, reward=ref_mean + d + 0.05),
        )
        assert r is not None and c is not None
        cands.append(c)
        refs.append(r)
    return cands, refs


REQ = EpochVerdictRequest(candidate=CAND, reference=BASE, margin=0.05, confidence=0.95)


def verdict_of(deltas: list[float], req: EpochVerdictRequest = REQ, seed: int = 7) -> EpochVerdict:
    cands, refs = paired(deltas)
    return epoch_verdict(req, cands, refs, resamples=2000, seed=seed)


def test_clear_improvement_is_better() -> None:
    v = verdict_of([0.3, 0.35, 0.4, 0.25, 0.3, 0.45, 0.3, 0.35])
    assert v.verdict == "better", v.reason
    assert (v.tasks, v.wins, v.losses, v.ties) == (8, 8, 0, 0)
    assert v.sign_test_p == 0.0078125
    assert v.mean_delta == pytest.approx(0.3375)
    assert 0.25 <= v.ci_low < v.mean_delta < v.ci_high <= 0.45
    assert [d.task_id for d in v.deltas] == [f"task-{k:02d}" for k in range(8)]
    assert v.deltas[0].delta == pytest.approx(0.3)
    assert (v.deltas[0].candidate_runs, v.deltas[0].reference_runs) == (2, 2)
    assert v.deltas[0].reference_mean == pytest.approx(0.4)


def test_clear_degradation_is_worse() -> None:
    v = verdict_of([-0.3, -0.2, -0.35, -0.25, -0.3, -0.2, -0.1, -0.3])
    assert v.verdict == "worse", v.reason
    assert (v.wins, v.losses, v.sign_test_p) == (0, 8, 0.0078125)
    assert v.ci_high < 0


def test_noise_is_same() -> None:
    v = verdict_of([0.2, -0.2, 0.1, -0.15, 0.3, -0.25, 0.02, -0.01, 0.12, -0.1])
    assert v.verdict == "same", v.reason
    assert (v.wins, v.losses, v.ties, v.sign_test_p) == (4, 4, 2, 1.0)
    assert v.ci_low < 0 < v.ci_high


def test_evidence_must_clear_both_margin_and_confidence() -> None:
    # Five tasks all clearly better: the sign test cannot reach 0.05 (p = 1/16).
    few = verdict_of([0.4] * 5)
    assert (few.verdict, few.sign_test_p) == ("same", 0.0625)
    assert few.ci_low > 0.3, "the interval alone would have called it"
    # Six are enough.
    assert verdict_of([0.4] * 6).verdict == "better"
    # Every task is ahead, but each by less than the margin: all ties.
    small = verdict_of([0.04] * 8)
    assert (small.verdict, small.ties) == ("same", 8)
    # One huge win cannot outvote five small losses, although it lifts the mean past the margin.
    outlier = verdict_of([2.0, -0.1, -0.1, -0.1, -0.1, -0.1])
    assert outlier.mean_delta > 0.05 and outlier.verdict == "same"
    # A looser confidence lets five tasks decide.
    loose = msgspec.structs.replace(REQ, confidence=0.9)
    assert verdict_of([0.4] * 5, loose).verdict == "better"


def test_no_shared_task_is_comparison_failed() -> None:
    cands, _ = paired([0.3, 0.3])
    _, refs = paired([0.3, 0.3, 0.3])
    v = epoch_verdict(REQ, cands, refs[2:], resamples=100, seed=0)
    assert v.verdict == "comparison_failed" and v.tasks == 0
    assert "no task has scored results" in v.reason
    blocked = [stats_of(reference("x", 0.0, "blocked", task="task-00"))]
    assert blocked[0] is not None
    v = epoch_verdict(REQ, cands, blocked, resamples=100, seed=0)  # type: ignore[arg-type]
    assert v.verdict == "comparison_failed"


def test_requested_tasks_restrict_the_comparison() -> None:
    cands, refs = paired([0.4] * 8)
    req = msgspec.structs.replace(REQ, tasks=["task-01", "task-02", "task-09"])
    v = epoch_verdict(req, cands, refs, resamples=100, seed=0)
    assert [d.task_id for d in v.deltas] == ["task-01", "task-02"]
    assert (v.verdict, v.sign_test_p) == ("same", 0.5)


def test_bootstrap_is_seeded_and_deterministic() -> None:
    deltas = [0.3, -0.1, 0.25, 0.05, 0.4, 0.2, -0.05, 0.35]
    first = verdict_of(deltas)
    assert verdict_of(deltas) == first
    cands, refs = paired(deltas)
    random.Random(1).shuffle(cands)
    assert epoch_verdict(REQ, cands, refs, resamples=2000, seed=7) == first, "order must not matter"
    assert (verdict_of(deltas, seed=8).ci_low, verdict_of(deltas, seed=8).ci_high) != (
        first.ci_low,
        first.ci_high,
    )


@pytest.mark.parametrize(
    "bad",
    [dict(confidence=1.0), dict(confidence=0.0), dict(margin=-0.1), dict(veto_confidence=1.0)],
)
def test_epoch_verdict_rejects_bad_parameters(bad: dict[str, float]) -> None:
    cands, refs = paired([0.3])
    with pytest.raises(ValueError):
        epoch_verdict(msgspec.structs.replace(REQ, **bad), cands, refs, resamples=10, seed=0)


def test_epoch_verdict_leaves_out_statistics_that_are_not_sound() -> None:
    cands, refs = paired([0.3] * 6)
    poisoned = msgspec.structs.replace(cands[0], reward_sum=math.inf)
    with_poison = epoch_verdict(REQ, [poisoned, *cands[1:]], refs, resamples=200, seed=0)
    assert with_poison.tasks == 5
    assert all(math.isfinite(x) for x in (with_poison.mean_delta, with_poison.ci_low))


def mixed(shell: list[float], browser: list[float], orchestrator: list[float], **kw: float):
    """The verdict over three environments' tasks, each with its own per-task deltas."""
    deltas = shell + browser + orchestrator
    envs = (
        ["shell"] * len(shell) + ["browser"] * len(browser) + ["orchestrator"] * len(orchestrator)
    )
    req = msgspec.structs.replace(
        REQ, environments={f"task-{k:02d}": e for k, e in enumerate(envs)}, **kw
    )
    return verdict_of(deltas, req)


def test_one_environment_degrading_vetoes_the_others_gains() -> None:
    # Shell and orchestrator clearly better; browser clearly worse.
    v = mixed([0.4] * 12, [-0.3] * 7, [0.5] * 12)
    assert v.pooled == "better"  # pooled alone, the gains outvote the loss
    assert v.verdict == "worse" and v.vetoed_by == ["browser"], v.reason
    assert {e: x.verdict for e, x in v.per_env.items()} == {
        "browser": "worse",
        "orchestrator": "better",
        "shell": "better",
    }
    assert v.per_env["browser"].degraded and v.per_env["browser"].degradation_z < -3
    assert v.per_env["browser"].tasks == 7 and "vetoed: browser degraded" in v.reason
    # Two tasks of clear loss are enough: the degradation test counts episodes, where the
    # task-level sign test cannot reach significance on so few.
    few = mixed([0.4] * 12, [-0.3] * 2, [0.5] * 12)
    assert few.per_env["browser"].verdict == "same" and few.vetoed_by == ["browser"]
    assert few.verdict == "worse"
    # Losses within the veto margin never veto, however consistent.
    assert mixed([0.4] * 12, [-0.08] * 7, [0.5] * 12).verdict == "better"
    assert mixed([0.4] * 12, [-0.12] * 7, [0.5] * 12).verdict == "worse"
    assert mixed([0.4] * 12, [-0.12] * 7, [0.5] * 12, veto_margin=0.15).verdict == "better"


def _binary_stats(task: str, ckpt: str, successes: int, runs: int) -> TaskStats:
    eps = [
        episode(
            f"{task}-{ckpt}-{i}",
            task=task,
            ckpt=ckpt,
            role="rollout" if ckpt == CAND else "reference",
            reward=1.0 if i < successes else 0.0,
            outcome="success" if i < successes else "failure",
        )
        for i in range(runs)
    ]
    out = stats_of(*eps)
    assert out is not None
    return out


MIXED = ["shell"] * 3 + ["browser"] * 3 + ["orchestrator"] * 2
"""A mixed campaign's 8 tasks at the default scale."""


def _default_scale_epochs(browser_p: float, n: int, envs: list[str] = MIXED) -> list[EpochVerdict]:
    """``n`` epochs at the campaign defaults (8 tasks of ``envs``; 4 rollouts a task, 2
    reference runs): every environment's tasks succeed half the time under both policies,
    except the candidate's browser tasks, at ``browser_p``."""
    rng = random.Random(5)
    req = msgspec.structs.replace(REQ, environments={f"task-{k}": e for k, e in enumerate(envs)})
    out = []
    for _ in range(n):
        cands, refs = [], []
        for k, env in enumerate(envs):
            p = browser_p if env == "browser" else 0.5
            wins = sum(rng.random() < p for _ in range(4))
            cands.append(_binary_stats(f"task-{k}", CAND, wins, 4))
            refs.append(
                _binary_stats(f"task-{k}", BASE, sum(rng.random() < 0.5 for _ in range(2)), 2)
            )
        out.append(epoch_verdict(req, cands, refs, resamples=200, seed=0))
    return out


def _vetoed(verdicts: list[EpochVerdict], env: str = "browser") -> float:
    return sum(v.vetoed_by == [env] and v.verdict == "worse" for v in verdicts) / len(verdicts)


def test_the_veto_has_the_power_to_fire_at_the_default_scale() -> None:
    """A browser student whose success falls from 50 % to 5 % is caught at the campaign's
    default scale where the task-level test never catches it: in about half the epochs with 3
    browser tasks of a mixed campaign, in nearly all with 8 browser tasks; a student that did
    not change is vetoed in about 1 epoch in 20 (the veto's confidence, Bonferroni over the
    environments). Seeded: the measured shares are in the comments."""
    fallen = _default_scale_epochs(0.05, 200)
    assert _vetoed(fallen) >= 0.4  # 0.47
    assert not any(v.per_env["browser"].verdict == "worse" for v in fallen)
    assert _vetoed(_default_scale_epochs(0.05, 100, ["browser"] * 8)) >= 0.9  # 0.98
    unchanged = _default_scale_epochs(0.5, 200)
    assert sum(bool(v.vetoed_by) for v in unchanged) / 200 <= 0.08  # 0.05
    alone = _default_scale_epochs(0.5, 200, ["browser"] * 8)
    assert sum(bool(v.vetoed_by) for v in alone) / 200 <= 0.1


def test_without_environments_the_verdict_is_the_pooled_one() -> None:
    v = verdict_of([0.4] * 8 + [-0.3] * 7)
    assert v.per_env == {} and v.vetoed_by == [] and v.pooled is None
    with pytest.raises(ValueError):
        mixed([0.4], [], [], veto_margin=-1.0)


# -- the service on the bus ----------------------------------------------------------------------


def comparison_service(bus: Bus, names: Names, **kw: Any):
    settings = dict(sweep_interval_s=0.1, reference_deadline_s=30.0, concurrency=4)
    svc = build(bus, ComparisonSettings(namespace=names.namespace, **{**settings, **kw}))
    svc.fetch_timeout_s = 0.2  # idle pull loops notice stop() quickly
    return svc


async def publish(bus: Bus, ep: Episode, msg_id: str | None = None) -> int:
    return await bus.publish_durable(
        bus.names.episode("rewarded", ep.environment),
        ep,
        msg_id=msg_id or f"{ep.episode_id}:rewarded",
    )


async def take(
    queue: asyncio.Queue[Msg], n: int, names: Names, within: float = 10.0
) -> dict[str, Episode]:
    """The next ``n`` compared episodes, by id; fails on a repeated id."""
    out: dict[str, Episode] = {}
    for _ in range(n):
        msg = await next_item(queue, within)
        ep = decode(msg.data, msg.headers, Episode)
        assert ep.episode_id not in out, f"{ep.episode_id} was compared twice"
        assert msg.subject == names.episode("compared", ep.environment)
        assert (msg.headers or {})["Nats-Msg-Id"] == f"{ep.episode_id}:compared"
        out[ep.episode_id] = ep
    return out


async def compared_per_episode(bus: Bus) -> Counter[str]:
    """How many messages the stream holds on ``episode.compared.*`` for each episode id."""
    sub = await bus.js.subscribe(bus.names.episode("compared", "*"), ordered_consumer=True)
    counts: Counter[str] = Counter()
    try:
        info = await sub.consumer_info()
        if not info.num_pending and not (info.delivered and info.delivered.consumer_seq):
            return counts
        while True:
            msg = await sub.next_msg(timeout=5)
            counts[decode(msg.data, msg.headers, Episode).episode_id] += 1
            if msg.metadata.num_pending == 0:
                return counts
    finally:
        await sub.unsubscribe()


async def quiet(bus: Bus) -> None:
    """Wait until the comparison consumer has nothing left to hand out or to be acked."""
    info = await settled_consumer(bus, bus.names.stream(STREAM_EPISODES), "comparison")
    assert info.num_pending == 0 and info.num_ack_pending == 0, info


async def test_stats_compare_and_set_counts_each_episode_once_under_contention(
    bus: Bus, nats_url: str
) -> None:
    """Two writers (as two replicas would be) count the same 20 episodes at once."""
    from aios_rl.bus import connect

    eps = [reference(f"r{i}", i / 20) for i in range(20)]
    async with connect(nats_url, name="test-2", names=bus.names) as other:
        a, b = Store(bus), Store(other)
        results = await asyncio.gather(*(s.count(ep) for ep in eps for s in (a, b)))
    assert sum(added for _, added in results) == 20
    s = await Store(bus).stats("t0", BASE)
    assert s is not None
    assert (s.count, s.scored, sorted(s.episode_ids)) == (20, 20, sorted(e.episode_id for e in eps))
    assert s.reward_sum == pytest.approx(sum(i / 20 for i in range(20)))
    assert a.cas_conflicts + b.cas_conflicts > 0, "the writers never raced: the test proves nothing"


async def test_each_episode_is_compared_once_with_the_right_verdict(bus: Bus, names: Names) -> None:
    # Equal reference rewards: a rollout handled before the second reference run is counted
    # gets the same verdict as one handled after.
    early = [reference("e-r1", 0.5), reference("e-r2", 0.5)]
    early_rollouts = [
        episode("e-good", reward=0.9, outcome="success"),
        episode("e-same", reward=0.52),
        episode("e-bad", reward=0.1, outcome="failure"),
        episode("e-eval", role="eval", reward=0.7, env="browser"),
        episode("e-none", ref="", reward=0.7, env="orchestrator"),
    ]
    late_rollouts = [
        episode("l-good", task="t1", reward=0.9, outcome="success", env="browser"),
        episode("l-bad", task="t1", reward=0.0, outcome="failure"),
    ]
    late_ref = reference("l-r1", 0.5, task="t1")
    expected = {
        "e-good": "better",
        "e-same": "same",
        "e-bad": "worse",
        "e-none": "comparison_failed",
        "l-good": "better",
        "l-bad": "worse",
    }
    svc = comparison_service(bus, names)
    pending_subject = KV_PRE_TEMPLATE.format(bucket=names.bucket(BUCKET_COMPARISON)) + "pending.*"
    async with (
        stored(bus, names.episode("compared", "*")) as compared,
        stored(bus, pending_subject) as pending,
        running(svc),
    ):
        for ep in late_rollouts:  # before their reference: they must wait, not block
            await publish(bus, ep)
        waiting = {decode_pending(await next_item(pending)) for _ in late_rollouts}
        assert waiting == {"l-good", "l-bad"}
        for ep in [*early, *early_rollouts]:
            await publish(bus, ep)
        first = await take(compared, len(early) + len(early_rollouts), names)
        assert compared.empty(), "a waiting rollout came out before its reference"
        await publish(bus, late_ref)
        rest = await take(compared, 3, names)
        await quiet(bus)
    out = {**first, **rest}
    sent = [*early, *early_rollouts, *late_rollouts, late_ref]
    assert set(out) == {ep.episode_id for ep in sent}
    for ep in sent:
        got = out[ep.episode_id]
        assert "compared" in got.timings.stages and got.timings.stages["rewarded"] == 2.0
        assert msgspec.structs.replace(got, comparison=None, timings=ep.timings) == ep
        if ep.episode_id in expected:
            assert got.comparison is not None, ep.episode_id
            assert got.comparison.verdict == expected[ep.episode_id], got.comparison
        else:  # reference and eval runs pass through
            assert got.comparison is None, ep.episode_id
    assert out["l-good"].comparison.reference_reward == pytest.approx(0.5)  # type: ignore[union-attr]
    assert out["e-none"].comparison.reason == "no reference"  # type: ignore[union-attr]
    assert await compared_per_episode(bus) == Counter({ep.episode_id: 1 for ep in sent})
    store = Store(bus)
    assert await store.pending() == []
    base_t0, cand_t0 = await store.stats("t0", BASE), await store.stats("t0", CAND)
    assert base_t0 is not None and cand_t0 is not None
    assert (base_t0.count, cand_t0.count) == (2, 5)
    assert svc.status().consumers[0].processed == len(sent)


def decode_pending(msg: Msg) -> str:
    return msg.subject.rpartition(".")[2]


async def test_redelivered_and_duplicated_episodes_change_nothing(bus: Bus, names: Names) -> None:
    ref, roll = reference("d-r1", 0.5, task="d"), episode("d-x1", task="d", reward=0.9)
    waiting = episode("d-x2", task="w", ref="ck-later", reward=0.2)
    svc = comparison_service(bus, names, concurrency=1)  # in order: stream order is work order
    store = Store(bus)
    async with stored(bus, names.episode("compared", "*")) as compared, running(svc):
        seq = await publish(bus, ref)
        await publish(bus, roll)
        assert set(await take(compared, 2, names)) == {"d-r1", "d-x1"}
        before = (await store.stats("d", BASE), await store.stats("d", CAND))

        assert await publish(bus, ref) == seq, "the stream itself drops a same-id republish"
        await publish(bus, ref, msg_id="d-r1:rewarded:again")  # a stage that ran twice
        await publish(bus, roll, msg_id="d-x1:rewarded:again")
        await publish(bus, waiting)
        await publish(bus, waiting, msg_id="d-x2:rewarded:again")  # a duplicate while waiting
        sentinel = reference("d-s", 0.3, task="s")
        await publish(bus, sentinel)
        assert set(await take(compared, 1, names)) == {"d-s"}  # everything before it was handled
        assert compared.empty()
        assert [p.episode.episode_id for p in await store.pending()] == ["d-x2"]

        await publish(bus, reference("d-late", 0.5, task="w", ckpt="ck-later"))
        late = await take(compared, 2, names)
        await quiet(bus)
    assert late["d-x2"].comparison is not None and late["d-x2"].comparison.verdict == "worse"
    assert (await store.stats("d", BASE), await store.stats("d", CAND)) == before
    waited = await store.stats("w", CAND)
    assert waited is not None and waited.count == 1
    assert svc.status().consumers[0].processed == 8
    assert svc.status().extra["duplicates_dropped"] == 2, "copies of compared episodes: no work"
    assert await compared_per_episode(bus) == Counter(
        {"d-r1": 1, "d-x1": 1, "d-x2": 1, "d-s": 1, "d-late": 1}
    )
    assert await store.pending() == []


async def test_missing_reference_is_comparison_failed_after_the_deadline(
    bus: Bus, names: Names
) -> None:
    deadline = 0.8
    ghost = episode("m-ghost", task="g", ref="ck-ghost", reward=0.0, outcome="failure")
    down = episode("m-down", task="o", ref="ck-down", reward=0.0, outcome="failure")
    outage = [reference(f"m-o{i}", 0.0, "blocked", task="o", ckpt="ck-down") for i in range(2)]
    nobody = episode("m-none", task="n", ref="", reward=0.3)
    svc = comparison_service(bus, names, reference_deadline_s=deadline)
    async with stored(bus, names.episode("compared", "*")) as compared, running(svc):
        for ep in outage:
            await publish(bus, ep)
        t0 = time.time()
        for ep in (ghost, down, nobody):
            await publish(bus, ep)
        fast = await take(compared, 3, names)
        assert set(fast) == {"m-o0", "m-o1", "m-none"}, "only the waiting rollouts may wait"
        slow = await take(compared, 2, names, within=deadline + 5)
        # A reference run that arrives after the verdict changes nothing for the rollout.
        await publish(bus, reference("m-g1", 0.5, task="g", ckpt="ck-ghost"))
        assert set(await take(compared, 1, names)) == {"m-g1"}
        await quiet(bus)
    assert fast["m-none"].comparison is not None
    assert fast["m-none"].comparison.verdict == "comparison_failed"
    assert fast["m-none"].comparison.reason == "no reference"
    reasons = {}
    for eid in ("m-ghost", "m-down"):
        result = slow[eid].comparison
        assert result is not None and result.verdict == "comparison_failed", result
        assert slow[eid].timings.stages["compared"] - t0 >= deadline
        reasons[eid] = result.reason
    assert reasons["m-ghost"].startswith("no reference results for ck-ghost on g within")
    assert reasons["m-down"] == "reference could not run: all 2 reference runs blocked"
    counts = await compared_per_episode(bus)
    assert set(counts.values()) == {1} and len(counts) == 6
    assert await Store(bus).pending() == []


async def test_episode_without_reward_is_dead_lettered_and_the_service_goes_on(
    bus: Bus, names: Names
) -> None:
    bad = msgspec.structs.replace(episode("x-bad"), reward=None)
    good = reference("x-good", 0.5)
    svc = comparison_service(bus, names)
    async with (
        stored(bus, names.dlq(STREAM_EPISODES)) as dead,
        stored(bus, names.episode("compared", "*")) as compared,
        running(svc),
    ):
        await publish(bus, bad)
        await publish(bus, good)
        letter = decode((m := await next_item(dead)).data, m.headers, DeadLetter)
        assert set(await take(compared, 1, names)) == {"x-good"}
    assert (letter.reason, letter.service, letter.consumer) == (
        "rejected",
        "comparison",
        "comparison",
    )
    assert "without a finite reward" in letter.error
    assert await Store(bus).stats("t0", CAND) is None, "a rejected episode must not be counted"


async def test_a_huge_reward_is_dead_lettered_and_the_next_honest_episode_is_counted(
    bus: Bus, names: Names
) -> None:
    """A reward of 1e200 once made the sum of squares inf (stored as JSON null): the next honest
    episode of the task could not be counted and was dead-lettered in turn."""
    huge = reference("h-huge", 1e200, task="h")
    honest = reference("h-honest", 0.5, task="h")
    svc = comparison_service(bus, names)
    async with (
        stored(bus, names.dlq(STREAM_EPISODES)) as dead,
        stored(bus, names.episode("compared", "*")) as compared,
        running(svc),
    ):
        await publish(bus, huge)
        await publish(bus, honest)
        letter = decode((m := await next_item(dead)).data, m.headers, DeadLetter)
        assert set(await take(compared, 1, names)) == {"h-honest"}
        await quiet(bus)
        assert dead.empty()
    assert letter.reason == "rejected" and "h-huge" in letter.error and "reward" in letter.error
    s = await Store(bus).stats("h", BASE)
    assert s is not None and (s.count, s.reward_sum, s.reward_sq_sum) == (1, 0.5, 0.25)


async def test_corrupt_stored_values_are_reported_and_reset_never_a_dead_letter_loop(
    bus: Bus, names: Names
) -> None:
    """Garbage, a stats record holding null where a sum went inf, one beyond the reward limit,
    and a garbage pending record: each is logged and counted, then treated as absent (the
    statistics start again from the next episode; the pending record is dropped), and the
    service goes on: no honest episode is dead-lettered, the verdict endpoint still answers."""
    kv = await bus.js.key_value(names.bucket(BUCKET_COMPARISON))
    inf_sums = TaskStats(
        task_id="c2",
        checkpoint_id=BASE,
        count=1,
        scored=1,
        reward_sum=1e200,
        reward_sq_sum=math.inf,  # encoded as null: what the unbounded sums used to store
        outcomes={"partial": 1},
        episode_ids=["old"],
    )
    beyond = msgspec.structs.replace(inf_sums, task_id="c3", reward_sum=1e300, reward_sq_sum=1e300)
    assert b"null" in msgspec.json.encode(inf_sums)
    await kv.put(Names.key_task_stats("c1", BASE), b"\x00 not json")
    await kv.put(Names.key_task_stats("c2", BASE), msgspec.json.encode(inf_sums))
    await kv.put(Names.key_task_stats("c3", BASE), msgspec.json.encode(beyond))
    await kv.put(Names.key_task_stats("c4", CAND), b"{}")
    await kv.put(Names.key_pending("p-garbage"), b"garbage")
    sent = [reference(f"c{i}-r", 0.5, task=f"c{i}") for i in (1, 2, 3)]
    sent += [episode(f"c{i}-x", task=f"c{i}", reward=0.9, outcome="success") for i in (1, 2, 3)]
    svc = comparison_service(bus, names)
    async with (
        stored(bus, names.dlq(STREAM_EPISODES)) as dead,
        stored(bus, names.episode("compared", "*")) as compared,
        running(svc),
    ):
        for ep in sent:
            await publish(bus, ep)
        out = await take(compared, len(sent), names)
        verdict = await bus.request(
            names.comparison_verdict(),
            EpochVerdictRequest(candidate=CAND, reference=BASE),
            EpochVerdict,
            timeout=10,
        )
        await quiet(bus)
        store = Store(bus)
        async with asyncio.timeout(10):
            while await store.pending():  # the sweep drops the garbage record
                pass
        assert dead.empty(), "an honest episode was dead-lettered"
        extra = svc.status().extra
    for i in (1, 2, 3):
        comparison = out[f"c{i}-x"].comparison
        assert comparison is not None and comparison.verdict == "better", comparison
        for ckpt in (BASE, CAND):
            s = await store.stats(f"c{i}", ckpt)
            assert s is not None and s.count == 1 and check_stats(s) is s
    assert verdict.tasks == 3 and math.isfinite(verdict.mean_delta)
    assert extra["corrupt_values"] >= 5, extra


async def test_verdict_endpoint_over_real_stats(bus: Bus, names: Names) -> None:
    tasks = [f"v{k}" for k in range(6)]
    sent = []
    for k, task in enumerate(tasks):
        sent += [reference(f"{task}-r{i}", 0.2 + 0.2 * i, task=task) for i in range(2)]
        sent += [
            episode(f"{task}-c{i}", task=task, reward=0.7 + 0.2 * i + 0.01 * k, outcome="success")
            for i in range(2)
        ]
    svc = comparison_service(bus, names)
    subject = names.comparison_verdict()
    async with stored(bus, names.episode("compared", "*")) as compared, running(svc):
        for ep in sent:
            await publish(bus, ep)
        await take(compared, len(sent), names)
        better = await bus.request(subject, REQ, EpochVerdict, timeout=10)
        worse = await bus.request(
            subject, EpochVerdictRequest(candidate=BASE, reference=CAND), EpochVerdict, timeout=10
        )
        few = await bus.request(
            subject, msgspec.structs.replace(REQ, tasks=tasks[:3]), EpochVerdict, timeout=10
        )
        unknown = await bus.request(
            subject, EpochVerdictRequest(candidate="ck-x", reference=BASE), EpochVerdict, timeout=10
        )
        with pytest.raises(RemoteError) as err:
            await bus.request(
                subject, msgspec.structs.replace(REQ, confidence=1.5), EpochVerdict, timeout=10
            )
        store = Store(bus)
        cand_stats = await store.stats_of(CAND)
        ref_stats = await store.stats_of(BASE)
    assert (better.verdict, better.tasks, better.wins, better.sign_test_p) == (
        "better",
        6,
        6,
        0.03125,
    )
    assert [d.delta for d in better.deltas] == pytest.approx([0.5 + 0.01 * k for k in range(6)])
    assert better == epoch_verdict(REQ, cand_stats, ref_stats, resamples=2000, seed=0)
    assert (worse.verdict, worse.losses, worse.ci_high < 0) == ("worse", 6, True)
    assert (few.verdict, few.tasks, few.sign_test_p) == ("same", 3, 0.25)
    assert unknown.verdict == "comparison_failed"
    assert err.value.code == "422" and "confidence" in err.value.description


# -- kill and restart ------------------------------------------------------------------------------


class Process:
    """``python -m services.comparison`` as a child process; its log lines are kept, and
    ``ready`` is set once it logs ``service.ready``."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.ready = asyncio.Event()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            if '"service.ready"' in line:
                self.ready.set()

    @classmethod
    async def start(cls, nats_url: str, names: Names) -> Process:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIOS_")}
        env.update(
            NATS_URL=nats_url,
            AIOS_NAMESPACE=names.namespace,
            AIOS_REFERENCE_DEADLINE_S="60",
            AIOS_SWEEP_INTERVAL_S="0.2",
            AIOS_CONCURRENCY="4",
            AIOS_LOG_FORMAT="json",
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.comparison",
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            cwd=REPO,
        )
        return cls(proc)

    async def wait_ready(self, within: float = 20.0) -> None:
        done = asyncio.create_task(self.proc.wait())
        ready = asyncio.create_task(self.ready.wait())
        await asyncio.wait({done, ready}, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        done.cancel()
        assert self.ready.is_set(), "comparison did not start:\n" + "".join(self.lines)

    async def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(self.proc.wait(), 10) == -signal.SIGKILL
        await self.reader

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(self.proc.wait(), 15)
        await self.reader


async def short_ack_wait(bus: Bus, names: Names) -> None:
    """Make the comparison consumer hand back what a dead process held after 2 s, not 30 s.

    ``provision`` brings an existing consumer to the declared config (the server updates it), so
    a (re)started service resets this: call it again once the service is ready."""
    topo = topology(names)
    spec = msgspec.structs.replace(topo.consumer("comparison"), ack_wait_s=2.0)
    await provision(bus, msgspec.structs.replace(topo, consumers=[spec]))
    info = await bus.js.consumer_info(spec.stream, spec.durable)
    assert info.config.ack_wait == 2.0


async def test_killed_mid_stream_and_restarted_every_episode_is_compared_once(
    bus: Bus, names: Names, nats_url: str
) -> None:
    tasks = [f"k{n:02d}" for n in range(24)]
    rewards = {"success": 0.9, "partial": 0.5, "failure": 0.1}
    verdicts = {"success": "better", "partial": "same", "failure": "worse"}

    def rollouts(task: str) -> list[Episode]:
        return [episode(f"{task}-{o}", task=task, reward=r, outcome=o) for o, r in rewards.items()]

    def refs(task: str) -> list[Episode]:
        return [reference(f"{task}-r{i}", 0.5, task=task) for i in range(2)]

    # Half the tasks arrive whole; the other half's rollouts wait, across the kill, for
    # references published while no comparison process runs.
    first = [ep for t in tasks[:12] for ep in (*refs(t), *rollouts(t))]
    first += [ep for t in tasks[12:] for ep in rollouts(t)]
    second = [ep for t in tasks[12:] for ep in refs(t)]
    second += [episode(f"ev{n}", role="eval", reward=0.5, env="browser") for n in range(6)]
    expected = {f"{t}-{o}": v for t in tasks for o, v in verdicts.items()}
    total = len(first) + len(second)
    out: list[Episode] = []
    stream = names.stream(STREAM_EPISODES)
    async with stored(bus, names.episode("compared", "*")) as compared:
        # The first half waits on the stream before the process starts, and the process is
        # killed at its first output: a backlog it cannot have finished (published while it
        # ran, a fast machine could compare all of it before the kill).
        await short_ack_wait(bus, names)
        for ep in first:
            await publish(bus, ep)
        svc = await Process.start(nats_url, names)
        try:
            await svc.wait_ready()
            msg = await next_item(compared, 20)
            await svc.kill()
            out.append(decode(msg.data, msg.headers, Episode))
            at_kill = await bus.js.consumer_info(stream, "comparison")
            for ep in second:
                await publish(bus, ep)
            svc = await Process.start(nats_url, names)
            await svc.wait_ready()
            await short_ack_wait(bus, names)
            while len({ep.episode_id for ep in out}) < total:
                msg = await next_item(compared, 20)
                out.append(decode(msg.data, msg.headers, Episode))
            await quiet(bus)
            assert await Store(bus).pending() == []
        finally:
            await svc.stop()
    left = at_kill.num_pending + at_kill.num_ack_pending
    assert left > 0, "the process had finished the stream before it was killed"
    assert Counter(ep.episode_id for ep in out) == Counter(
        {ep.episode_id: 1 for ep in first + second}
    )
    assert await compared_per_episode(bus) == Counter({ep.episode_id: 1 for ep in first + second})
    for ep in out:
        if ep.episode_id in expected:
            assert ep.comparison is not None, ep.episode_id
            assert ep.comparison.verdict == expected[ep.episode_id], ep.comparison
        else:
            assert ep.comparison is None, ep.episode_id
    store = Store(bus)
    for task in tasks:
        base, cand = await store.stats(task, BASE), await store.stats(task, CAND)
        assert base is not None and cand is not None
        assert (base.count, cand.count) == (2, 3), task
