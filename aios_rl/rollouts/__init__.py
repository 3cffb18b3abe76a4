"""How an epoch spends its rollouts: the strategies that plan branch jobs (uniform GRPO, ARPO's
entropy rule, DAPO's dynamic sampling, RAIL's heuristic warm-up), what each rollout costs, and the
reward contrast a group gives the update. Pure: no NATS, no torch; the campaign service, RAIL and
the benchmarks all plan with this one module."""

from .accounting import (
    account_add,
    group_contrasts,
    reward_contrast,
    summarize,
)
from .plan import (
    ADAPTIVE,
    BRANCHING,
    RAIL,
    STRATEGIES,
    Group,
    budget,
    continuation_id,
    initial_runs,
    plan_round,
    scheduled_runs,
    tied,
    validate,
    variance_shares,
)

__all__ = [
    "ADAPTIVE",
    "BRANCHING",
    "RAIL",
    "STRATEGIES",
    "Group",
    "account_add",
    "budget",
    "continuation_id",
    "group_contrasts",
    "initial_runs",
    "plan_round",
    "reward_contrast",
    "scheduled_runs",
    "summarize",
    "tied",
    "validate",
    "variance_shares",
]
