"""RAIL, pure: the context layout, the actions, the realized gain, the recency-weighted Huber
loss, the promotion rule at its boundaries, the utility gate, and the controller's phases."""

from __future__ import annotations

import math
import random

import msgspec
import pytest
import torch

from aios_rl.rail import Controller, actions, build_context, candidate_states, realized_gain
from aios_rl.rail.replay import prior_mean, quality, replay
from aios_rl.rail.scorer import (
    Scorer,
    agreement,
    demote,
    fit,
    gate,
    promote,
    recency_weights,
    weighted_huber,
)
from aios_rl.rollouts import reward_contrast
from aios_rl.stats import wilson
from contracts import CONTEXT_DIM, CONTEXT_LAYOUT, DecodingRegime, RolloutSummary
from contracts.rail import HOT, NEUTRAL, RailCandidate, RailDecideRequest, RailSettings, RailTrace


def rollout(eid: str, **kw: object) -> RolloutSummary:
    fields: dict[str, object] = {
        "campaign_id": "c",
        "epoch": 0,
        "group_id": "g",
        "task_id": "t",
        "environment": "shell",
        "actions": ["a", "b", "c", "d"],
        "entropies": [1.0, 0.5, 1.2, 0.9],
        "widths": [4, 4, 1, 2],
        "top1": [0.4, 0.7, 1.0, 0.6],
        "margins": [0.1, 0.5, 1.0, 0.2],
        "hidden": [[0.1 * i] * 8 for i in range(4)],
    }
    fields.update(kw)
    return RolloutSummary(episode_id=eid, **fields)  # type: ignore[arg-type]


def test_the_context_is_26_named_numbers_computed_as_documented() -> None:
    assert CONTEXT_DIM == len(CONTEXT_LAYOUT) == 26
    a = rollout("a", reward=1.0, outcome="success")
    b = rollout("b", reward=0.0)
    z = build_context(a, 1, [a, b], budget=8, max_steps=16, epoch=10)
    named = dict(zip(CONTEXT_LAYOUT, z, strict=True))
    assert named["entropy"] == pytest.approx(0.5 / math.log(4))
    assert named["entropy_rise"] == pytest.approx((0.5 - 1.0) / math.log(4))
    assert (named["top1"], named["margin"]) == (0.7, 0.5)
    assert named["group_mean"] == 0.5 and named["group_var"] == pytest.approx(0.25)
    assert named["group_success"] == 0.5 and named["group_tied"] == 0.0
    assert named["source_reward"] == 1.0
    assert named["progress"] == pytest.approx(1 / 16) and named["steps_left"] == pytest.approx(
        3 / 16
    )
    assert named["group_size"] == pytest.approx(2 / 8) and named["budget_left"] == pytest.approx(
        6 / 8
    )
    assert [named[f"env_{e}"] for e in ("shell", "browser", "orchestrator", "other")] == [
        1,
        0,
        0,
        0,
    ]
    assert named["policy_age"] == pytest.approx(0.5)
    assert [named[f"hidden_{i}"] for i in range(8)] == pytest.approx([0.1] * 8)
    tied = build_context(
        b, 3, [b, rollout("c", environment="mine")], budget=8, max_steps=16, epoch=0
    )
    assert tied[CONTEXT_LAYOUT.index("group_tied")] == 1.0
    other = build_context(
        rollout("x", environment="mine", hidden=[]), 1, [], budget=4, max_steps=16, epoch=0
    )
    assert other[CONTEXT_LAYOUT.index("env_other")] == 1.0 and other[-8:] == [0.0] * 8
    assert all(math.isfinite(x) for x in [*z, *tied, *other])
    # Hindsight off: what only the finished rollout tells reads 0, the rest is unchanged.
    blind = build_context(a, 1, [a, b], budget=8, max_steps=16, epoch=10, hindsight=False)
    hindsight = {"source_reward", "steps_left"}
    assert [blind[CONTEXT_LAYOUT.index(k)] for k in sorted(hindsight)] == [0.0, 0.0]
    assert [x for k, x in zip(CONTEXT_LAYOUT, blind, strict=True) if k not in hindsight] == [
        x for k, x in zip(CONTEXT_LAYOUT, z, strict=True) if k not in hindsight
    ]


def test_candidate_states_skip_steps_without_a_choice_and_taken_ones() -> None:
    a = rollout("a")  # entropies / log K: t1 0.36, t2 has no choice, t3 1.30
    child = rollout("a-s1b0", parent_episode_id="a", branch_step=1, entropies=[0, 0, 1.0, 0.1])
    got = [(s.episode_id, t) for s, t in candidate_states([a, child], {("a", 3)}, limit=5)]
    assert got == [("a", 1), ("a-s1b0", 3)]  # child's step 2 has width 1; a's 3 is taken
    assert len(candidate_states([a, child], set(), limit=1)) == 1


def test_actions_and_the_realized_gain() -> None:
    s = RailSettings()
    assert [(x.budget, x.regime.temperature) for x in actions(s, 2, budget_only=True)] == [
        (1, 1.0),
        (2, 1.0),
    ]
    assert len(actions(s, 8, budget_only=False)) == 3 * 3 and actions(s, 0, budget_only=False) == []
    assert realized_gain([0.0, 0.0], [1.0]) == pytest.approx(reward_contrast([0, 0, 1]))
    assert realized_gain([0.0, 1.0], [0.5, 0.5]) == pytest.approx(0.125 - 0.25)


def test_recency_weighted_huber_by_hand() -> None:
    w = recency_weights(3, half_life=1.0)
    assert w.tolist() == pytest.approx([0.25, 0.5, 1.0])  # oldest first
    pred, target = torch.tensor([0.0, 0.0, 0.0]), torch.tensor([0.2, 2.0, -1.0])
    # Huber (delta 0.5): 0.5*0.04 = 0.02; 0.5*(2 - 0.25) = 0.875; 0.5*(1 - 0.25) = 0.375.
    expected = (0.25 * 0.02 + 0.5 * 0.875 + 1.0 * 0.375) / 1.75
    assert float(weighted_huber(pred, target, w)) == pytest.approx(expected)


def test_the_promotion_rule_at_its_boundaries() -> None:
    bar = {"min_traces": 16, "margin": 0.05, "z": 1.28}
    assert not promote(15, 15, **bar)  # too few, however good
    # Over 16 traces the lower bound clears 0.55 from 12 agreeing (75 %), not at 11 (69 %).
    assert wilson(12, 16, 1.28).low > 0.55 > wilson(11, 16, 1.28).low
    assert promote(12, 16, **bar) and not promote(11, 16, **bar)
    # The bar tightens with few traces: 62.5 % is enough over 160, not over 16.
    assert promote(100, 160, **bar) and not promote(10, 16, **bar) and not promote(95, 160, **bar)
    assert demote(6, 16, **bar) and not demote(7, 16, **bar) and not demote(0, 15, **bar)
    free = {**bar, "min_traces": 0}  # no prediction yet: neither way, whatever the bar
    assert not promote(0, 0, **free) and not demote(0, 0, **{**free, "margin": 0.6})
    assert agreement([0.1, -0.1, 0.0, 0.2], [0.05, 0.0, 0.0, -0.1]) == (3, 4)
    assert gate(0.01, 0.0) and not gate(0.0, 0.0) and not gate(0.04, 0.05)


def test_a_fitted_scorer_learns_which_actions_pay() -> None:
    rng = random.Random(0)
    z, a, y = [], [], []
    for _ in range(256):
        ctx = [rng.random() for _ in range(CONTEXT_DIM)]
        budget = rng.choice([1, 2, 4])
        tied = ctx[7] > 0.5  # a tied group gains when branched; others lose
        z.append(ctx)
        a.append([budget / 4, 1.0, 1.0])
        y.append((0.05 if tied else -0.03) * budget / 4)
    s = Scorer(seed=1)
    loss = fit(s, z, a, y, half_life=1e6, steps=300)
    pred = s.predict(z, a)
    k, n = agreement(pred, y)
    assert loss < 0.05 and k / n > 0.9


def request(round_: int, budget_left: int = 6) -> RailDecideRequest:
    cands = [
        RailCandidate(episode_id=f"e{i}", step=1, context=[0.2 * i, *([0.0] * (CONTEXT_DIM - 1))])
        for i in range(3)
    ]
    return RailDecideRequest(
        campaign_id="c", round=round_, group_id=f"g{round_}", environment="shell",
        budget_left=budget_left, candidates=cands,
    )  # fmt: skip


def trace(
    i: int, predicted: float, realized: float, *, fitted: bool = True, mode: str = "shadow"
) -> RailTrace:
    return RailTrace(
        decision_id=f"d{i}", campaign_id="c", environment="shell", context=[0.0] * CONTEXT_DIM,
        budget=1, realized_gain=realized, predicted_gain=predicted, fitted=fitted, mode=mode,  # type: ignore[arg-type]
        frozen_gain=predicted / 2 if mode == "live" else None,
    )  # fmt: skip


def test_shadow_decides_by_the_heuristic_and_predicts_silently() -> None:
    c = Controller("c", RailSettings())
    (d1,) = c.decide(request(1)).decisions
    (d3,) = c.decide(request(3)).decisions
    assert d1.branch and d1.decided_by == "heuristic" and d1.mode == "shadow"
    assert d1.episode_id == "e2"  # the highest entropy
    assert (d1.budget, d3.budget) == (1, 4) and not d1.fitted
    assert c.decide(request(3, budget_left=3)).decisions[0].budget == 2
    assert c.decide(request(1, budget_left=0)).decisions == []
    assert sum(c.state().actions["shell"].values()) == 3


def test_promotion_freezes_a_copy_and_live_decisions_pass_the_gate() -> None:
    s = RailSettings(min_traces=8, refit_every=4, fit_steps=20, exploration=0.0, eta=10.0)
    c = Controller("c", s)
    for i in range(7):  # good out-of-sample predictions, but too few
        assert c.observe(trace(i, 0.1, 0.2)) == (True, i % 4 == 3)
    assert c.mode == "shadow" and c.observe(trace(0, 0.1, 0.2)) == (False, False)  # a duplicate
    c.observe(trace(7, -0.1, -0.2))
    assert c.mode == "live" and c.state().promotions == 1 and c.frozen is not None
    assert c.state().scorer_version == 2
    (d,) = c.decide(request(1)).decisions
    assert d.mode == "live" and not d.branch and d.budget == 0  # nothing clears eta = 10
    c.settings = RailSettings(min_traces=8, exploration=0.0, eta=-10.0, regimes=[NEUTRAL, HOT])
    (d,) = c.decide(request(2)).decisions
    assert d.branch and d.decided_by == "rail" and d.frozen_gain is not None
    # Live predictions that keep getting the sign wrong demote it.
    for i in range(100, 116):
        c.observe(trace(i, 0.1, -0.2, mode="live"))
    assert c.mode == "shadow" and c.state().demotions == 1
    st = c.state()
    assert st.live_traces == 16 and st.mae_online == pytest.approx(0.3)
    assert st.mae_frozen == pytest.approx(0.25) and st.agreement_online == 0.0


def test_a_frozen_controller_stops_refitting_once_live() -> None:
    s = RailSettings(min_traces=4, refit_every=2, fit_steps=5, freeze_after_promotion=True)
    c = Controller("c", s)
    for i in range(4):
        c.observe(trace(i, 0.1, 0.2))
    assert c.mode == "live"
    version = c.state().scorer_version
    for i in range(10, 20):
        c.observe(trace(i, 0.1, 0.2, mode="live"))
    assert c.state().scorer_version == version


def test_a_restored_controller_decides_like_the_one_it_replaces() -> None:
    s = RailSettings(min_traces=4, refit_every=2, fit_steps=10, exploration=0.0, eta=-1.0)
    c = Controller("c", s)
    for i in range(6):
        c.observe(trace(i, 0.1, 0.2))
    back = Controller("c", s, state=c.state(), online=c.weights(), frozen=c.frozen_weights())
    back.restore(c.traces)
    assert back.decide(request(2)) == c.decide(request(2))
    assert back.observe(trace(3, 0.1, 0.2)) == (False, False)  # already seen
    assert isinstance(DecodingRegime(), DecodingRegime)


def test_the_strategy_names_the_ablations() -> None:
    from aios_rl.rail.plan import rail_settings
    from contracts import CampaignSpec

    frozen = CampaignSpec(campaign_id="c", rollout_strategy="rail-frozen")
    assert rail_settings(frozen).freeze_after_promotion
    assert not rail_settings(
        CampaignSpec(campaign_id="c", rollout_strategy="rail")
    ).freeze_after_promotion
    only = actions(RailSettings(), 4, budget_only=True)
    assert {a.regime for a in only} == {NEUTRAL} and [a.budget for a in only] == [1, 2, 4]


def test_a_repromoted_controller_is_judged_on_its_new_live_decisions_only() -> None:
    s = RailSettings(min_traces=4, refit_every=1000, exploration=0.0)
    c = Controller("c", s)
    for i in range(4):
        c.observe(trace(i, 0.1, 0.2))
    assert c.mode == "live" and c.state().promoted_at == 4
    for i in range(4, 8):  # live decisions whose gains go the other way
        c.observe(trace(i, 0.1, -0.2, mode="live"))
    assert c.mode == "shadow" and c.state().demotions == 1
    i = 8
    while c.mode == "shadow" and i < 60:
        c.observe(trace(i, 0.1, 0.2))
        i += 1
    assert c.mode == "live" and c.state().promotions == 2
    c.observe(trace(100, 0.1, -0.2, mode="live"))  # one bad decision of the new promotion
    assert c.mode == "live"  # the old promotion's failures do not count against it


@pytest.mark.parametrize("hindsight", [True, False])
def test_the_campaigns_hindsight_switch_reaches_every_context_it_asks_with(hindsight: bool) -> None:
    from aios_rl.rail.plan import decide_requests
    from aios_rl.rollouts import Group
    from contracts import CampaignSpec

    s = CampaignSpec(
        campaign_id="c",
        group_size=8,
        tasks_per_epoch=1,
        rollout_strategy="rail",
        rail=RailSettings(hindsight=hindsight),
    )
    a, b = rollout("a", reward=1.0, outcome="success"), rollout("b", reward=0.5)
    asks = decide_requests(
        s, epoch=0, rnd=1, groups=[Group(0, "g", [a, b])], orders=[], base_tasks=1, max_steps=16
    )
    contexts = [c.context for _, _, req in asks for c in req.candidates]
    assert contexts  # both rollouts have states to branch from
    at = CONTEXT_LAYOUT.index
    if hindsight:
        assert {z[at("source_reward")] for z in contexts} == {1.0, 0.5}
        assert all(z[at("steps_left")] > 0 for z in contexts)
    else:
        assert all(z[at("source_reward")] == z[at("steps_left")] == 0.0 for z in contexts)


# -- the scorer replayed offline on recorded traces ------------------------------------------------


def _noisy(n: int, seed: int = 0) -> list[RailTrace]:
    """Traces whose gain is 0.1 x the context's first number plus noise three times as large."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        z = [rng.random() for _ in range(CONTEXT_DIM)]
        y = 0.1 * z[0] + rng.gauss(0.0, 0.3)
        out.append(
            RailTrace(
                decision_id=f"d{i}", environment="shell", context=z, budget=rng.choice([1, 2, 4]),
                realized_gain=y,
            )
        )  # fmt: skip
    return out


def test_replay_predicts_each_trace_before_learning_from_it_as_the_controller_refits() -> None:
    s = RailSettings(refit_every=4, fit_steps=10)
    traces = _noisy(14)
    pairs = replay(traces, s)
    assert len(pairs) == 14 - 4  # nothing before the first fit, after trace 4
    assert [y for _, y in pairs] == [t.realized_gain for t in traces[4:]]
    # Out of sample: a trace's own gain never moves its prediction (only later ones).
    changed = [*traces[:9], msgspec.structs.replace(traces[9], realized_gain=9.0), *traces[10:]]
    again = replay(changed, s)
    assert [p for p, _ in again[:6]] == [p for p, _ in pairs[:6]]  # up to trace 9 the same
    assert again[8][0] != pairs[8][0]  # after the refit that read it, predictions moved
    # As the controller: the same seeds, the same fits, the same predictions.
    c = Controller("c", s, seed=0)
    predicted = []
    for t in traces:
        if c.meta.scorer_version:
            predicted.append(c.online.predict([t.context], [[t.budget / 4.0, 1.0, 1.0]])[0])
        c.observe(t)
    assert predicted == pytest.approx([p for p, _ in pairs], abs=1e-6)


def test_prior_mean_predicts_the_recency_weighted_mean_of_the_gains_before_the_last_refit():
    traces = [trace(i, 0.0, y) for i, y in enumerate([0.1, 0.3, 0.2, 0.6, 0.0])]
    s = RailSettings(refit_every=2, half_life=1.0)
    pairs = prior_mean(traces, s)
    first = (0.5 * 0.1 + 1.0 * 0.3) / 1.5  # after trace 2: the newest weighs 1, the one before 1/2
    assert pairs[0] == pytest.approx((first, 0.2)) and pairs[1] == pytest.approx((first, 0.6))
    w = [0.125, 0.25, 0.5, 1.0]
    second = sum(wi * y for wi, y in zip(w, [0.1, 0.3, 0.2, 0.6], strict=True)) / sum(w)
    assert pairs[2] == pytest.approx((second, 0.0))


def test_quality_by_hand() -> None:
    q = quality([(0.0, 0.0), (0.1, 0.02), (0.2, 0.04), (0.3, 0.06)])
    assert q.slope == pytest.approx(0.2) and q.rank == pytest.approx(1.0)
    assert q.mae == pytest.approx((0 + 0.08 + 0.16 + 0.24) / 4)
    assert q.top_lift == pytest.approx(0.06 - 0.03)  # the top quarter: one trace
    backwards = quality([(0.3, 0.0), (0.2, 0.01), (0.1, 0.02), (0.0, 0.03)])
    assert backwards.rank == pytest.approx(-1.0) and backwards.slope < 0 < -backwards.top_lift
    assert quality([(0.1, 0.0), (0.1, 0.2)]).slope == 0.0  # predictions that never vary
    with pytest.raises(ValueError, match="no predictions"):
        quality([])


def test_weight_decay_shrinks_a_scorer_fitted_on_noise_towards_what_it_can_predict() -> None:
    traces = _noisy(160, seed=2)
    plain = quality(replay(traces, RailSettings(refit_every=32, weight_decay=0.0)))
    decayed = quality(replay(traces, RailSettings(refit_every=32, weight_decay=1.0)))
    assert decayed.spread < plain.spread
    assert decayed.mae < plain.mae
