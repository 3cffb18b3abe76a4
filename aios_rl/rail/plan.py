"""A RAIL round, pure: the decision requests an epoch's groups make, the branch orders the
answers become, and the traces the realized continuations make. The campaign service sends the
requests over the bus; the in-process kernel hands them to a :class:`~aios_rl.rail.Controller`
in the same process."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from aios_rl.rollouts import Group, budget, continuation_id, initial_runs, scheduled_runs
from aios_rl.rollouts.epoch import epoch_groups
from contracts import BranchOrder, CampaignSpec, CampaignState, RolloutJob, RolloutSummary
from contracts.rail import (
    RailCandidate,
    RailDecideRequest,
    RailDecisions,
    RailSettings,
    RailTrace,
)

from .context import build_context, candidate_states, realized_gain

__all__ = [
    "PROGRESS_STEPS",
    "Ask",
    "decide_requests",
    "decision_orders",
    "rail_settings",
    "realized_traces",
    "round_asks",
]

PROGRESS_STEPS: int = next(
    f.default for f in msgspec.structs.fields(RolloutJob) if f.name == "max_steps"
)
"""The most steps a rollout job asks for (runners may cap it lower): RAIL's progress scale."""

Ask = tuple[Group, int, RailDecideRequest]
"""A group, the continuations it may still get, and its decision request."""


def rail_settings(spec: CampaignSpec) -> RailSettings:
    """The campaign's RAIL settings as its strategy reads them: ``rail-frozen`` freezes the
    scorer once live whatever ``spec.rail`` says."""
    if spec.rollout_strategy == "rail-frozen" and not spec.rail.freeze_after_promotion:
        return msgspec.structs.replace(spec.rail, freeze_after_promotion=True)
    return spec.rail


def round_asks(state: CampaignState, summaries: Mapping[str, RolloutSummary]) -> list[Ask] | None:
    """The decision requests of the epoch's next round (one per task with budget left), from
    the rollouts that arrived; ``None`` when the epoch has used its ``max_rounds``."""
    spec = state.spec
    if state.round >= spec.branching.max_rounds:
        return None
    return decide_requests(
        spec,
        epoch=state.epoch,
        rnd=state.round + 1,
        groups=epoch_groups(state, summaries),
        orders=state.orders,
        base_tasks=state.base_tasks or len(state.tasks),
        max_steps=PROGRESS_STEPS,
    )


def decide_requests(
    spec: CampaignSpec,
    *,
    epoch: int,
    rnd: int,
    groups: Sequence[Group],
    orders: Sequence[BranchOrder],
    base_tasks: int,
    max_steps: int,
) -> list[Ask]:
    """One request per group with budget left and a state to branch from, for round ``rnd``."""
    used = scheduled_runs(spec, orders)
    taken = {(o.parent_episode_id, o.step) for o in orders if o.kind == "branch"}
    asks: list[Ask] = []
    for g in groups:
        left = budget(spec) - used.get(g.task_index, 0)
        left -= initial_runs(spec) if g.task_index < base_tasks else 0
        states = candidate_states(g.rollouts, taken, spec.rail.candidates)
        if left <= 0 or not states:
            continue
        req = RailDecideRequest(
            campaign_id=spec.campaign_id,
            epoch=epoch,
            round=rnd,
            group_id=g.group_id,
            environment=g.rollouts[0].environment,
            budget_left=left,
            candidates=[
                RailCandidate(
                    episode_id=s.episode_id,
                    step=t,
                    context=build_context(
                        s,
                        t,
                        g.rollouts,
                        budget=budget(spec),
                        max_steps=max_steps,
                        epoch=epoch,
                        hindsight=rail_settings(spec).hindsight,
                    ),
                )
                for s, t in states
            ],
            settings=rail_settings(spec),
            budget_only=spec.rollout_strategy == "rail-budget-only",
        )
        asks.append((g, left, req))
    return asks


def decision_orders(
    rnd: int, asks: Sequence[Ask], answers: Sequence[RailDecisions], orders: Sequence[BranchOrder]
) -> list[BranchOrder]:
    """The branch orders of round ``rnd``: one per decision that branches (its budget capped by
    what the task has left), carrying the decision for its trace."""
    taken = {(o.parent_episode_id, o.step) for o in orders if o.kind == "branch"}
    return [
        BranchOrder(
            round=rnd,
            kind="branch",
            task_index=g.task_index,
            parent_episode_id=d.episode_id,
            step=d.step,
            count=min(d.budget, left),
            regime=d.regime,
            decided_by="rail" if d.decided_by == "rail" else "heuristic",
            decision=d,
        )
        for (g, left, _), answer in zip(asks, answers, strict=True)
        for d in answer.decisions
        if d.branch and d.budget > 0 and (d.episode_id, d.step) not in taken
    ]


def realized_traces(
    spec: CampaignSpec,
    *,
    epoch: int,
    rnd: int,
    orders: Sequence[BranchOrder],
    tasks: Sequence[str],
    before: Mapping[int, Sequence[str]],
    summaries: Mapping[str, RolloutSummary],
    at: float = 0.0,
) -> list[RailTrace]:
    """One trace per RAIL decision of round ``rnd`` with a continuation back: ``Y_0`` the
    rewards of the task's rollouts scheduled before the round (``before``: task index -> their
    episode ids), ``Y_b`` the decision's continuations'."""
    out: list[RailTrace] = []
    for o in orders:
        d = o.decision
        if o.round != rnd or d is None or o.kind != "branch":
            continue
        y0 = [summaries[e].reward for e in before.get(o.task_index, ()) if e in summaries]
        added = [
            summaries[e].reward
            for k in range(o.first, o.first + o.count)
            if (e := continuation_id(o.parent_episode_id, o.step, k)) in summaries
        ]
        if not added:
            continue  # none came back before the deadline: nothing was realized
        env, task_id = tasks[o.task_index].split("/", 1)
        out.append(
            RailTrace(
                decision_id=d.decision_id,
                campaign_id=spec.campaign_id,
                epoch=epoch,
                environment=env,
                task_id=task_id,
                context=d.context,
                budget=o.count,
                regime=o.regime,
                realized_gain=realized_gain(y0, added),
                predicted_gain=d.predicted_gain,
                frozen_gain=d.frozen_gain,
                fitted=d.fitted,
                mode=d.mode,
                scorer_version=d.scorer_version,
                at=at,
            )
        )
    return out
