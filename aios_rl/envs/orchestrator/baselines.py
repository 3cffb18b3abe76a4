"""Baselines a learned orchestrator policy must beat, and the check that the environment is not
a lookup table: constant policies, the majority decision per stage, and the best **one-feature
rule** per stage (a decision stump on one visible signal, fitted on train). Pure.

The features are what the observation shows (:mod:`.render`), read from the state instead of
parsed from the text: the same information, no parsing noise.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence

from contracts import OrchestratorTask

from . import sim

__all__ = [
    "CONSTANT",
    "Policy",
    "evaluate",
    "features",
    "fit_majority",
    "fit_one_feature",
    "oracle",
    "random_policy",
    "rollout",
]

Policy = Callable[[OrchestratorTask, sim.State], str]

CONSTANT: dict[str, dict[str, str]] = {
    "always-subagent": {
        "preflight": "pass",
        "dispatch": "send to a subagent",
        "clarity": "retry",
        "quality": "accept",
    },
    "always-pass": {
        "preflight": "pass",
        "dispatch": "dry-run first",
        "clarity": "proceed on a stated assumption",
        "quality": "accept",
    },
    "always-human-gate": {
        "preflight": "ask for information",
        "dispatch": "ask a human to approve",
        "clarity": "needs a human",
        "quality": "escalate",
    },
}
"""Constant policies: one decision per stage whatever the evidence."""


def oracle(task: OrchestratorTask, s: sim.State) -> str:
    return sim.best_decision(task, s)[0]


def random_policy(seed: int) -> Policy:
    rng = random.Random(seed)
    return lambda task, s: rng.choice(sim.offered(task, s))


def constant(decisions: Mapping[str, str]) -> Policy:
    return lambda task, s: decisions[s.stage]


def features(task: OrchestratorTask, s: sim.State) -> dict[str, str]:
    """The visible signals of ``s``, one value each (what the observation shows)."""
    item = task.item
    assert item is not None
    f: dict[str, str] = {
        "environment": item.environment,
        "undo": str(item.reversible),
        "destructive_request": str(item.destructive),
        "large_diff": item.scope,
        "history": str(len(s.history)),
    }
    if s.stage == "preflight":
        f |= {
            "tests_failing": str(s.tests != "green"),
            "failures_flaky_on_main": str(s.tests == "flaky"),
            "secret_found": str(s.secret),
            "ambiguity_note": str(s.ambiguous),
        }
    elif s.stage == "clarity":
        assert task.checkpoint is not None
        f["checkpoint_text"] = task.checkpoint.evidence
    elif s.stage == "quality":
        flaky = item.flaky_infra or item.tests == "flaky"
        f |= {
            "tests_failing": str(bool(s.bugs) or flaky),
            "failures_flaky_on_main": str(not s.bugs and flaky),
            "review_scope_creep": str(s.wrong),
            "review_bug": str(bool(s.bugs) and not s.wrong),
            "monitoring_alert": str(s.harm),
            "irreversible_preview": str(s.preview),
        }
    return f


def rollout(task: OrchestratorTask, policy: Policy) -> tuple[str, float, list[sim.State]]:
    """Run ``policy`` on ``task``: outcome, reward, and the states it decided in."""
    s = sim.start(task)
    seen: list[sim.State] = []
    while not s.done and len(seen) < task.max_steps:
        seen.append(s)
        s = sim.step(task, s, policy(task, s))
    outcome, reward = sim.reward_of(task, s)
    return outcome, reward, seen


def evaluate(tasks: Sequence[OrchestratorTask], policy: Policy) -> float:
    """Mean reward of ``policy`` over ``tasks``."""
    return sum(rollout(t, policy)[1] for t in tasks) / max(1, len(tasks))


def _oracle_states(tasks: Sequence[OrchestratorTask]) -> list[tuple[OrchestratorTask, sim.State]]:
    return [(t, s) for t in tasks for s in rollout(t, oracle)[2]]


def fit_majority(train: Sequence[OrchestratorTask]) -> dict[str, str]:
    """The oracle's most frequent decision per stage on ``train``'s oracle runs."""
    votes: dict[str, Counter[str]] = defaultdict(Counter)
    for t, s in _oracle_states(train):
        votes[s.stage][oracle(t, s)] += 1
    return {
        stage: votes[stage].most_common(1)[0][0] if votes[stage] else sim.DECISIONS[stage][0]
        for stage in sim.DECISIONS
    }


def fit_one_feature(train: Sequence[OrchestratorTask]) -> tuple[Policy, dict[str, str]]:
    """The best decision stump per stage: for each stage, the one feature whose values, each
    mapped to the oracle's most frequent decision for it on ``train``, agree with the oracle
    most often there. Unseen values fall back to the stage's majority. Returns the policy and
    the feature chosen per stage."""
    states = _oracle_states(train)
    majority = fit_majority(train)
    chosen: dict[str, str] = {}
    tables: dict[str, dict[str, str]] = {}
    for stage in sim.DECISIONS:
        here = [(t, s) for t, s in states if s.stage == stage]
        best: tuple[int, str, dict[str, str]] = (-1, "", {})
        names = sorted({k for t, s in here for k in features(t, s)})
        for name in names:
            votes: dict[str, Counter[str]] = defaultdict(Counter)
            for t, s in here:
                votes[features(t, s).get(name, "")][oracle(t, s)] += 1
            table = {v: c.most_common(1)[0][0] for v, c in votes.items()}
            agree = sum(c[table[v]] for v, c in votes.items())
            if agree > best[0]:
                best = (agree, name, table)
        chosen[stage], tables[stage] = best[1], best[2]

    def policy(task: OrchestratorTask, s: sim.State) -> str:
        name = chosen.get(s.stage, "")
        value = features(task, s).get(name, "")
        return tables.get(s.stage, {}).get(value, majority[s.stage])

    return policy, chosen
