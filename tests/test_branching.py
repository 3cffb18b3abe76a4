"""Branching rollouts, pure: the strategies' round plans (ARPO's entropy rule, DAPO's filter,
RAIL's heuristic warm-up), the jobs a plan makes (prefix, seeds, tree group), and what every
rollout costs."""

from __future__ import annotations

import math

import msgspec
import pytest

from aios_rl.rollouts import (
    Group,
    account_add,
    group_contrasts,
    initial_runs,
    plan_round,
    reward_contrast,
    summarize,
    validate,
    variance_shares,
)
from aios_rl.rollouts.epoch import (
    plan_jobs,
    resample_tasks,
    round_runs,
    sampling_seed,
    scheduled_ids,
)
from contracts import (
    BranchingSettings,
    BranchOrder,
    CampaignSpec,
    CampaignState,
    DecodingRegime,
    Episode,
    RolloutAccount,
    RolloutSummary,
    TrajectoryStep,
    job_max_steps,
)
from services.campaign.logic import add_arrival


def spec(strategy: str = "entropy", **branching: object) -> CampaignSpec:
    return CampaignSpec(
        campaign_id="c",
        group_size=4,
        tasks_per_epoch=2,
        rollout_strategy=strategy,  # type: ignore[arg-type]
        branching=BranchingSettings(**branching),  # type: ignore[arg-type]
        reference_runs=1,
    )


def summary(
    eid: str, entropies: list[float], *, reward: float = 0.0, **kw: object
) -> RolloutSummary:
    n = len(entropies)
    fields: dict[str, object] = {
        "campaign_id": "c",
        "epoch": 0,
        "group_id": "c-e0-t0",
        "task_id": "t0",
        "environment": "shell",
        "seed": 7,
        "reward": reward,
        "actions": [f"a{i}" for i in range(n)],
        "entropies": entropies,
        "widths": [4] * n,
    }
    fields.update(kw)
    return RolloutSummary(episode_id=eid, **fields)  # type: ignore[arg-type]


# -- the entropy rule (ARPO) ---------------------------------------------------------------------


def test_entropy_branches_where_alpha_plus_beta_times_the_entropy_rise_exceeds_tau() -> None:
    # log 4 = 1.386: dH_t = (H_t - H_0) / log 4. With alpha 0.4, beta 0.2, tau 0.45 a step
    # branches iff 0.4 + 0.2 dH > 0.45, i.e. H_t - H_0 > 0.25 * log 4 = 0.347.
    s = spec(alpha=0.4, beta=0.2, tau=0.45, initial=2, fill=False)
    a = summary("c-e0-t0-r0", [0.5, 0.9, 0.8, 1.2])  # rises 0.4 (t=1), 0.3 (t=2), 0.7 (t=3)
    b = summary("c-e0-t0-r1", [1.0, 1.0, 1.5])  # rises 0 (t=1), 0.5 (t=2)
    orders = plan_round(
        s,
        1,
        [Group(0, "c-e0-t0", [a, b])],
        orders=[],
        base_tasks=1,
        tasks=1,
        new_tasks_available=0,
    )
    # Step-major: t=1 -> a branches (0.4 > 0.347); b does not; t=2 -> b branches (0.5); then
    # the budget (4 - 2 base = 2) is spent, so a's t=3 does not.
    assert [(o.parent_episode_id, o.step, o.count) for o in orders] == [
        ("c-e0-t0-r0", 1, 1),
        ("c-e0-t0-r1", 2, 1),
    ]
    assert all(o.kind == "branch" and o.decided_by == "entropy" for o in orders)
    dh = (0.9 - 0.5) / math.log(4)
    assert 0.4 + 0.2 * dh > 0.45 > 0.4 + 0.2 * (0.3 / math.log(4))


def test_entropy_fills_the_budget_with_fresh_rollouts_when_nothing_branches() -> None:
    s = spec(alpha=0.0, tau=0.5, initial=1)  # alpha 0: only a huge rise could branch
    a = summary("c-e0-t0-r0", [1.0, 0.2, 0.3])
    orders = plan_round(
        s, 1, [Group(0, "c-e0-t0", [a])], orders=[], base_tasks=1, tasks=1, new_tasks_available=0
    )
    assert [(o.kind, o.count, o.first) for o in orders] == [("fresh", 3, 1)]


def test_continuations_branch_again_only_after_their_own_branch_point() -> None:
    s = spec(alpha=1.0, tau=0.5, initial=1, fill=False)  # every eligible step branches
    parent = summary("c-e0-t0-r0", [1.0, 1.0, 1.0, 1.0])
    first = BranchOrder(
        round=1, kind="branch", task_index=0, parent_episode_id=parent.episode_id, step=2
    )
    child = summary(
        "c-e0-t0-r0-s2b0",
        [0.0, 0.0, 1.0, 1.0, 1.0],
        parent_episode_id=parent.episode_id,
        branch_step=2,
        round=1,
        replayed=2,
    )
    orders = plan_round(
        s,
        2,
        [Group(0, "c-e0-t0", [parent, child])],
        orders=[first],
        base_tasks=1,
        tasks=1,
        new_tasks_available=0,
    )
    # Round 2's sources are round 1's continuations; the child branches at 3 then 4 (budget 4 -
    # 1 base - 1 continuation = 2 left), never at or before its branch step 2.
    assert [(o.parent_episode_id, o.step) for o in orders] == [
        ("c-e0-t0-r0-s2b0", 3),
        ("c-e0-t0-r0-s2b0", 4),
    ]


def test_a_step_without_a_choice_never_branches() -> None:
    s = spec(alpha=1.0, initial=1, fill=False)
    a = summary("c-e0-t0-r0", [0.0, 0.0, 0.0], widths=[3, 1, 1])
    orders = plan_round(
        s, 1, [Group(0, "c-e0-t0", [a])], orders=[], base_tasks=1, tasks=1, new_tasks_available=0
    )
    assert orders == []


# -- the heuristic and DAPO's filter -----------------------------------------------------------


def test_heuristic_branches_from_the_most_uncertain_state_with_a_budget_that_doubles() -> None:
    s = CampaignSpec(
        campaign_id="c",
        group_size=8,
        rollout_strategy="heuristic",
        branching=BranchingSettings(initial=2, fill=False),
    )
    a = summary("c-e0-t0-r0", [0.1, 0.3, 1.2])
    b = summary("c-e0-t0-r1", [0.1, 0.9, 0.2])
    g = [Group(0, "c-e0-t0", [a, b])]
    r1 = plan_round(s, 1, g, orders=[], base_tasks=1, tasks=1, new_tasks_available=0)
    assert [(o.parent_episode_id, o.step, o.count) for o in r1] == [("c-e0-t0-r0", 2, 1)]
    r2 = plan_round(s, 2, g, orders=r1, base_tasks=1, tasks=1, new_tasks_available=0)
    assert [(o.parent_episode_id, o.step, o.count) for o in r2] == [("c-e0-t0-r1", 1, 2)]
    r3 = plan_round(s, 3, g, orders=[*r1, *r2], base_tasks=1, tasks=1, new_tasks_available=0)
    # Left: a at 1 (0.3) over b at 2 (0.2); 8 - 2 - 1 - 2 = 3 rollouts left of a budget of 4.
    assert [(o.parent_episode_id, o.step, o.count) for o in r3] == [("c-e0-t0-r0", 1, 3)]


def test_dapo_filter_replaces_tied_groups_with_new_tasks_up_to_the_cap() -> None:
    s = spec("dapo-filter", resample_cap=1)
    tied = Group(0, "c-e0-t0", [summary(f"c-e0-t0-r{k}", [1.0], reward=1.0) for k in range(4)])
    mixed = Group(
        1,
        "c-e0-t1",
        [
            summary(f"c-e0-t1-r{k}", [1.0], reward=float(k % 2), group_id="c-e0-t1")
            for k in range(4)
        ],
    )
    also_tied = Group(2, "c-e0-t2", [summary("c-e0-t2-r0", [1.0], group_id="c-e0-t2")])
    orders = plan_round(
        s, 1, [tied, mixed, also_tied], orders=[], base_tasks=3, tasks=3, new_tasks_available=10
    )
    assert [(o.kind, o.task_index) for o in orders] == [("task", 3)]  # two tied, cap 1
    assert (
        plan_round(
            s,
            2,
            [tied, mixed, also_tied],
            orders=orders,
            base_tasks=3,
            tasks=4,
            new_tasks_available=9,
        )
        == []
    )
    picked = resample_tasks(s, 0, {"shell": ["a", "b", "c"]}, ["shell/a", "shell/b"], 2)
    assert picked == ["shell/c"]  # only what the epoch does not have


def test_variance_shares_by_hand() -> None:
    # Rewards so far: mean of all 8 = 0.25 (the prior). With a prior of 2 rollouts:
    # t0 [1, 0, 0, 1] -> p = (2 + 0.5) / 6 = 0.4167, p(1-p) = 0.2431
    # t1 [0, 0, 0, 0] -> p = 0.5 / 6 = 0.0833, p(1-p) = 0.0764
    # 8 extra rollouts: 8 x 0.2431 / 0.3194 = 6.09 and 1.91 -> 6 and 1, the last to the larger
    # remainder (t1's 0.91).
    assert variance_shares([[1, 0, 0, 1], [0, 0, 0, 0]], pool=8, cap=12) == [6, 2]
    # A cap: what a task cannot take goes to the others; what no task can take is not spent.
    assert variance_shares([[1, 0], [0, 0], [1, 1]], pool=6, cap=2) == [2, 2, 2]
    assert variance_shares([[1, 0], [0, 0]], pool=9, cap=3) == [3, 3]
    # No contrast anywhere and a certain prior (every reward 0): spread evenly.
    assert variance_shares([[0, 0], [0, 0], [0, 0]], pool=6, cap=6) == [2, 2, 2]
    assert variance_shares([], pool=6, cap=6) == [] and variance_shares([[1]], 0, 4) == [0]
    for pool in range(0, 20):  # never more than the pool or the cap
        got = variance_shares([[1, 0], [0.2, 0.1, 1.7], [0]], pool=pool, cap=5)
        assert sum(got) == min(pool, 15) and max(got) <= 5


def test_variance_spends_the_epochs_budget_where_the_predicted_variance_is_highest() -> None:
    s = spec("variance")  # M = 4: N = 2 base rollouts, 2 tasks x 2 more = 4 to hand out
    validate(s)
    assert initial_runs(s) == 2

    def group(i: int, rewards: list[float]) -> Group:
        gid = f"c-e0-t{i}"
        return Group(
            i,
            gid,
            [summary(f"{gid}-r{k}", [1.0], reward=r, group_id=gid) for k, r in enumerate(rewards)],
        )

    mixed, failed = group(0, [1.0, 0.0]), group(1, [0.0, 0.0])
    orders = plan_round(
        s, 1, [mixed, failed], orders=[], base_tasks=2, tasks=2, new_tasks_available=0
    )
    # p: (1 + 2 x 0.25) / 4 = 0.375 -> 0.234; 0.5 / 4 = 0.125 -> 0.109: 2.73 and 1.27 -> 3, 1
    assert [(o.kind, o.task_index, o.count, o.first, o.decided_by) for o in orders] == [
        ("fresh", 0, 3, 2, "variance"),
        ("fresh", 1, 1, 2, "variance"),
    ]
    assert sum(o.count for o in orders) == 2 * (4 - 2)  # the same rollouts as uniform-4
    again = plan_round(
        s, 2, [mixed, failed], orders=orders, base_tasks=2, tasks=2, new_tasks_available=0
    )
    assert again == []  # one round: the epoch's collection is complete
    state = CampaignState(
        spec=s, tasks=["shell/a", "shell/b"], base_tasks=2, candidate="x", reference="y", round=1,
        orders=orders,
    )  # fmt: skip
    ids = {j.episode_id for j in plan_jobs(s, state, deadline=1.0)}
    assert ids == {"c-e0-t0-r2", "c-e0-t0-r3", "c-e0-t0-r4", "c-e0-t1-r2"}


def test_validate_refuses_what_cannot_be_planned() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        validate(CampaignSpec(campaign_id="c", group_size=1, rollout_strategy="entropy"))
    with pytest.raises(ValueError, match="below group_size"):
        validate(spec(initial=4))
    with pytest.raises(ValueError, match="unknown rollout strategy"):
        validate(CampaignSpec(campaign_id="c", rollout_strategy="nope"))  # type: ignore[arg-type]
    assert initial_runs(spec()) == 2 and initial_runs(spec("uniform")) == 4


# -- the jobs a plan makes ------------------------------------------------------------------------


def test_a_continuation_job_replays_its_parents_prefix_in_its_parents_environment() -> None:
    s = spec(regime=DecodingRegime(temperature=1.5))
    state = CampaignState(
        spec=s,
        tasks=["shell/t0", "shell/t1"],
        base_tasks=2,
        candidate="cand",
        reference="ref",
    )
    base = plan_jobs(s, state, deadline=5.0)
    assert len(base) == 2 * (2 + 1)  # two tasks: two base rollouts and one reference run each
    assert {j.max_steps for j in base} == {16}
    # a browser job gets the browser's budget: a combined flow takes 20 to 22 actions
    web = plan_jobs(s, msgspec.structs.replace(state, tasks=["browser/w0"]), deadline=5.0)
    assert {j.max_steps for j in web} == {job_max_steps("browser")} == {32}
    parent = summary("c-e0-t0-r1", [1.0, 1.0, 1.0], seed=base[1].seed)
    order = BranchOrder(
        round=1,
        kind="branch",
        task_index=0,
        parent_episode_id=parent.episode_id,
        step=2,
        count=2,
        regime=DecodingRegime(temperature=1.5),
        decided_by="entropy",
    )
    fresh = BranchOrder(round=1, kind="fresh", task_index=1, count=1, first=2)
    state = CampaignState(
        spec=s,
        tasks=state.tasks,
        base_tasks=2,
        candidate="cand",
        reference="ref",
        round=1,
        orders=[order, fresh],
    )
    jobs = plan_jobs(s, state, deadline=5.0, parents={parent.episode_id: parent})
    assert [j.episode_id for j in jobs] == ["c-e0-t0-r1-s2b0", "c-e0-t0-r1-s2b1", "c-e0-t1-r2"]
    c0, c1, extra = jobs
    assert c0.prefix == ["a0", "a1"] and c0.seed == parent.seed  # same environment
    assert c0.sampling_seed is not None and c0.sampling_seed != c1.sampling_seed
    # Another regime at the same branch point draws with other seeds (same ids, same prefix).
    cool = msgspec.structs.replace(order, regime=DecodingRegime(temperature=0.7, top_p=0.9))
    other = plan_jobs(
        s,
        msgspec.structs.replace(state, orders=[cool, fresh]),
        deadline=5.0,
        parents={parent.episode_id: parent},
    )
    assert [j.episode_id for j in other] == [j.episode_id for j in jobs]
    assert other[0].prefix == c0.prefix and other[0].seed == c0.seed
    assert {other[0].sampling_seed, other[1].sampling_seed}.isdisjoint(
        {c0.sampling_seed, c1.sampling_seed}
    )
    assert c0.sampling_seed == sampling_seed(s.seed, c0.episode_id, order.regime)
    assert (
        c0.group_id == "c-e0-t0" and c0.checkpoint_id == "cand" and c0.reference_checkpoint == "ref"
    )
    assert c0.branch is not None and c0.branch.parent_episode_id == parent.episode_id
    assert (c0.branch.branch_step, c0.branch.budget, c0.branch.decided_by) == (2, 2, "entropy")
    assert c0.regime.temperature == 1.5
    assert extra.prefix == [] and extra.branch is None and extra.group_id == "c-e0-t1"
    assert scheduled_ids(s, state) == {j.episode_id for j in base} | {j.episode_id for j in jobs}
    assert len(round_runs(s, state, 0)) == 6


# -- accounting and contrast ----------------------------------------------------------------------


def episode(
    eid: str, *, replayed: int, sampled: int, role: str = "rollout", branch=None, reward=0.0
) -> Episode:
    steps = [
        TrajectoryStep(index=i, observation="o", action="a", replayed=i < replayed, entropy=0.5)
        for i in range(replayed + sampled)
    ]
    return Episode(
        episode_id=eid,
        environment="shell",
        task_id="t0",
        campaign_id="c",
        group_id="c-e0-t0",
        role=role,
        trajectory=steps,
        branch=branch,
        env_reward=reward,  # type: ignore[arg-type]
    )


def test_accounting_counts_each_rollouts_sampled_and_replayed_steps_once() -> None:
    from contracts import BranchInfo, EpochArrivals

    eps = [
        episode("b0", replayed=0, sampled=3, reward=1.0),
        episode("b1", replayed=0, sampled=2),
        episode(
            "b0-s2b0",
            replayed=2,
            sampled=4,
            reward=1.0,
            branch=BranchInfo(parent_episode_id="b0", branch_step=2, budget=1),
        ),
        episode("ref0", replayed=0, sampled=5, role="reference"),
    ]
    arrivals = EpochArrivals(campaign_id="c", epoch=0)
    for ep in [*eps, eps[0]]:  # a redelivery counts once
        arrivals = add_arrival(arrivals, ep) or arrivals
    acc = arrivals.account
    assert (acc.base, acc.continuations, acc.references) == (2, 1, 1)
    assert (acc.steps_sampled, acc.steps_replayed, acc.policy_calls) == (9, 2, 9)
    assert acc.reference_steps == 5
    direct = RolloutAccount()
    for ep in eps:
        direct = account_add(direct, ep)
    assert direct == acc
    summaries = [summarize(ep) for ep in eps[:3]]
    assert summaries[2].replayed == 2 and summaries[2].entropies[:2] == [0.0, 0.0]
    (g,) = group_contrasts(summaries, dropped=["c-e0-t0"])
    assert (g.base, g.continuations, g.dropped) == (2, 1, True)
    assert g.before == pytest.approx(reward_contrast([1.0, 0.0])) == pytest.approx(0.25)
    assert g.after == pytest.approx(reward_contrast([1.0, 0.0, 1.0])) == pytest.approx(2 / 9)


# -- the hidden-state projection RAIL reads -------------------------------------------------------


def test_the_hidden_projection_is_fixed_along_a_checkpoint_lineage() -> None:
    import torch

    from aios_rl.student import load_student, new_student
    from aios_rl.student.base import Decision, Regime
    from aios_rl.student.train import UpdateConfig, build_batch, update

    from .toytask import ToyTask

    model = new_student("tiny", seed=3)
    projection = model.summary_projection.clone()
    d = [Decision("the light shows red", ("press alpha", "press bravo", "press charlie"), seed=1)]
    (out,) = model.act(d, Regime(1.0), want_hidden=True)
    assert len(out.hidden) == 8 and all(-1 <= x <= 1 for x in out.hidden)
    assert model.act(d, Regime(1.0))[0].hidden == []  # only when asked
    params = [p.detach().clone() for p in model.parameters()]
    config = UpdateConfig(learning_rate=1e-2, update_epochs=2, minibatch_size=64)
    episodes = ToyTask(seed=1).rollouts(model, groups=8, group_size=4, tag="h")
    update(model, None, build_batch(episodes, config=config), config)
    assert any(not torch.equal(a, b) for a, b in zip(params, model.parameters(), strict=True))
    child = load_student(model.to_bytes())  # the next checkpoint of the lineage
    assert torch.equal(child.summary_projection, projection)
    assert not torch.equal(new_student("tiny", seed=4).summary_projection, projection)
