"""How an episode and an epoch compare with the reference policy, pure: no NATS here, only the
standard library (and msgspec for the stored shapes, :mod:`aios_rl.stats` for the sign test and
the bootstrap). The comparison service applies these rules to what it stores; the in-process
kernel (:mod:`aios_rl.local`) to an epoch's episodes.

**Statistics.** For each (task, checkpoint) we keep :class:`TaskStats`: every episode counted once
(its id is remembered), its outcome counted, and — unless it is ``blocked`` — its reward added to
``scored`` / ``reward_sum`` / ``reward_sq_sum``. A ``blocked`` episode is one its environment could
not run: it says nothing about the policy, so it never enters a mean.

**Bounds.** A reward must be finite and within ``[-MAX_ABS_REWARD, MAX_ABS_REWARD]``; any other
episode is refused (``ValueError``; the service dead-letters it with that reason) before it reaches
a sum, so every sum and square stays finite. :func:`check_stats` says whether stored statistics
are ones these rules could have written (finite, within the bounds, counts that agree); the store
treats any that are not as absent.

**Episode rule** (:func:`decide`, for role ``rollout``; reference and eval episodes only feed the
statistics and pass through with ``comparison=None``):

1. no ``reference_checkpoint`` → ``comparison_failed`` ("no reference");
2. the episode is ``blocked`` → ``comparison_failed`` (it could not run: no evidence either way);
3. the reference — stats of (task, reference checkpoint), without this very episode should it be
   counted there — has fewer than ``min_reference_runs`` scored runs → no verdict yet: the episode
   waits (pending) until enough arrive or its deadline passes (:func:`expire`:
   ``comparison_failed``, saying whether reference runs came but were all blocked, i.e. the
   reference could not run, or none came). An outage is never ``worse``;
4. otherwise ``delta = reward - mean reward of the scored reference runs``:
   ``delta > margin`` → ``better``, ``delta < -margin`` → ``worse``;
5. within the margin, outcome rank breaks the tie (success 3 > partial 2 > failure 1 > blocked 0):
   with ``r`` the episode's rank and ``m`` the mean rank of the scored reference runs,
   ``r - m > 0.5`` → ``better``, ``r - m < -0.5`` → ``worse``, else ``same``. So an outcome must
   beat (or trail) the reference's average outcome by more than half a rank to decide.

A rollout is measured against the reference runs counted when it is decided: one handled after
the first ``min_reference_runs`` reference runs but before the rest sees only those.

**Epoch rule** (:func:`epoch_verdict`): over the tasks where both checkpoints have scored runs
(the requested ones, or all shared), ``delta_t = mean(candidate) - mean(reference)``. A task is a
win when ``delta_t > margin``, a loss when ``delta_t < -margin``, else a tie. The sign test is the
exact two-sided binomial test on wins vs losses (ties dropped, :func:`aios_rl.stats.sign_test_p`):
``p = min(1, 2 * sum_{i <= min(w, l)} C(w + l, i) / 2^(w + l))``. The bootstrap
(:func:`aios_rl.stats.bootstrap_mean`) resamples the per-task deltas (``random.Random(seed)``,
tasks sorted by id) and takes the percentile interval of the resampled means at ``confidence``
(quantiles interpolated linearly between the closest ranks). With ``alpha = 1 - confidence``:

- ``better`` iff ``mean_delta > margin`` and ``ci_low > 0`` and ``wins > losses`` and
  ``p <= alpha``;
- ``worse`` iff ``mean_delta < -margin`` and ``ci_high < 0`` and ``losses > wins`` and
  ``p <= alpha``;
- ``same`` otherwise; ``comparison_failed`` when no task has scored runs of both.

The evidence must clear the margin (effect size) and the confidence twice: the interval excludes
zero and enough tasks agree in sign. At ``confidence = 0.95`` that takes at least 6 decisive tasks
(all one way: ``p = 2/64``); fewer can never move the student by this test.

**The veto: one verdict for the whole student, and a rule that can fire.** When the request
names each task's environment (``environments``; the campaign always does), the task-level test
also runs on each environment's tasks alone (``per_env``, reported), and each environment gets a
**degradation test** on its episodes (:func:`degradation_z`): the stratified permutation test of
"the candidate's rewards are no lower than the reference's" -- within each task, under the null,
candidate and reference episodes are exchangeable, so the difference of their means has variance
``S_t^2 (1/n_c + 1/n_r)`` (``S_t^2``: the task's rewards of both sides pooled, ``N - 1``
denominator); ``z = sum_t delta_t / sqrt(sum_t Var_t)``, normal approximation. An environment is
``degraded`` when ``z`` falls below the one-sided quantile at ``(1 - veto_confidence) / E``
(Bonferroni over the ``E`` environments tested; ``veto_confidence`` 0.95: a student that did not
change is rolled back for nothing in about 1 epoch in 20) and its mean delta is below
``-veto_margin``. A degraded environment makes the whole verdict ``worse`` (the campaign then
rolls the whole student back, never one environment). So gains elsewhere cannot buy a clear
regression in one environment. The test counts episodes, not tasks: at the default scale (8
tasks of 4 rollouts, 2 reference runs each) an environment with 2-3 tasks of a mixed campaign can
veto, where the task-level sign test needs 6 decisive tasks of one environment and never could.
Measured there (``tests/test_comparison.py``, seeded): a browser student whose success falls from
50 % to 5 % is caught in 47 % of epochs with 3 browser tasks of a mixed campaign, 98 % with 8;
an unchanged student is vetoed in 5 %. The pooled verdict is kept in
``pooled``, the vetoing environments in ``vetoed_by``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist

import msgspec

from aios_rl.stats import bootstrap_mean, sign_test_p
from contracts import (
    CampaignSpec,
    CampaignState,
    ComparisonResult,
    Decision,
    EnvVerdict,
    Episode,
    EpochVerdict,
    EpochVerdictRequest,
    Outcome,
    TaskDelta,
    Verdict,
)

__all__ = [
    "MAX_ABS_REWARD",
    "OUTCOME_RANK",
    "CompareRule",
    "ComparedMark",
    "DecisionPlan",
    "PendingComparison",
    "TaskStats",
    "add_episode",
    "check_pending",
    "check_stats",
    "checked_reward",
    "decide",
    "decide_epoch",
    "degradation_z",
    "epoch_verdict",
    "expire",
    "mark_compared",
    "reference_for",
    "verdict_request",
    "with_comparison",
]

OUTCOME_RANK: dict[str, int] = {"success": 3, "partial": 2, "failure": 1, "blocked": 0}
"""Outcome order for the tie-breaker: success > partial > failure > blocked."""

EPS = 1e-9
"""Float slack on margin comparisons: a delta equal to the margin (0.55 - 0.5 vs 0.05) is a tie."""

MAX_ABS_REWARD = 1e6
"""Largest reward magnitude comparison accepts. Environment rewards lie in [0, 1] and reward
fusion adds at most ``shaping_clip`` of teacher shaping, so a reward near this is a bug or an
attack; bounding it keeps every sum (at most ``count * 1e6``) and square (``count * 1e12``) far
from overflow."""


class TaskStats(msgspec.Struct, frozen=True, kw_only=True):
    """Running results of one checkpoint on one task (KV ``stats.<task>.<checkpoint>``)."""

    task_id: str
    checkpoint_id: str
    count: int = 0
    """Episodes counted, any outcome."""
    scored: int = 0
    """Episodes that ran (any outcome but ``blocked``): the ones whose reward enters the mean."""
    reward_sum: float = 0.0
    reward_sq_sum: float = 0.0
    outcomes: dict[str, int] = {}
    episode_ids: list[str] = []
    """Every episode counted, so a redelivered or duplicated one never lands twice."""
    updated_at: float = 0.0

    @property
    def mean(self) -> float | None:
        """Mean reward of the scored runs (``None`` without any)."""
        return self.reward_sum / self.scored if self.scored else None

    @property
    def std(self) -> float | None:
        """Population standard deviation of the scored runs' reward."""
        if not self.scored:
            return None
        m = self.reward_sum / self.scored
        return math.sqrt(max(0.0, self.reward_sq_sum / self.scored - m * m))

    @property
    def mean_rank(self) -> float | None:
        """Mean outcome rank of the scored runs (``None`` without any)."""
        if not self.scored:
            return None
        total = sum(OUTCOME_RANK[o] * n for o, n in self.outcomes.items() if o != "blocked")
        return total / self.scored


class PendingComparison(msgspec.Struct, frozen=True, kw_only=True):
    """A rollout waiting for its reference (KV ``pending.<episode_id>``)."""

    episode: Episode
    since: float
    deadline: float
    """Unix time after which it is resolved as ``comparison_failed``."""


class ComparedMark(msgspec.Struct, frozen=True, kw_only=True):
    """An episode went out on ``episode.compared`` (KV ``compared.<episode_id>``)."""

    verdict: Verdict | None
    """``None`` for a passed-through reference or eval episode."""
    at: float


class CompareRule(msgspec.Struct, frozen=True, kw_only=True):
    """The knobs of the episode rule."""

    margin: float = 0.05
    min_reference_runs: int = 1


def checked_reward(ep: Episode) -> float:
    """The reward of ``ep``. Raises ``ValueError`` when it has none, or one that is not finite
    or beyond ``MAX_ABS_REWARD``."""
    if ep.reward is None or not math.isfinite(ep.reward):
        raise ValueError(f"episode {ep.episode_id} reached comparison without a finite reward")
    if abs(ep.reward) > MAX_ABS_REWARD:
        raise ValueError(
            f"episode {ep.episode_id} has reward {ep.reward:g}, outside the accepted range "
            f"[-{MAX_ABS_REWARD:g}, {MAX_ABS_REWARD:g}]"
        )
    return ep.reward


def check_stats(stats: TaskStats) -> TaskStats:
    """``stats`` itself when they are statistics :func:`add_episode` could have written: every
    float finite, the sums within the reward bounds, the counts in agreement (``count`` episode
    ids and outcomes, ``scored`` of them not blocked). Raises ``ValueError`` saying what is
    wrong otherwise."""
    floats = (stats.reward_sum, stats.reward_sq_sum, stats.updated_at)
    if not all(math.isfinite(x) for x in floats):
        raise ValueError(f"statistics of ({stats.task_id}, {stats.checkpoint_id}): not finite")
    if not 0 <= stats.scored <= stats.count:
        raise ValueError(
            f"statistics of ({stats.task_id}, {stats.checkpoint_id}): counts disagree "
            f"(scored {stats.scored}, count {stats.count})"
        )
    if stats.reward_sq_sum < 0:
        raise ValueError(
            f"statistics of ({stats.task_id}, {stats.checkpoint_id}): negative sum of squares"
        )
    slack = 1 + 1e-9  # float sums of rewards at the limit may round a little above it
    if (
        abs(stats.reward_sum) > stats.scored * MAX_ABS_REWARD * slack
        or stats.reward_sq_sum > stats.scored * MAX_ABS_REWARD**2 * slack
    ):
        raise ValueError(
            f"statistics of ({stats.task_id}, {stats.checkpoint_id}): sums beyond "
            f"{stats.scored} rewards of at most {MAX_ABS_REWARD:g}"
        )
    if len(stats.episode_ids) != stats.count or len(set(stats.episode_ids)) != stats.count:
        raise ValueError(
            f"statistics of ({stats.task_id}, {stats.checkpoint_id}): {stats.count} episodes "
            f"but {len(set(stats.episode_ids))} distinct episode ids"
        )
    outcomes = stats.outcomes
    if (
        not set(outcomes) <= set(OUTCOME_RANK)
        or any(n < 1 for n in outcomes.values())
        or sum(outcomes.values()) != stats.count
        or stats.count - outcomes.get("blocked", 0) != stats.scored
    ):
        raise ValueError(
            f"statistics of ({stats.task_id}, {stats.checkpoint_id}): outcomes {outcomes} do "
            f"not add up to {stats.count} episodes, {stats.scored} scored"
        )
    return stats


def check_pending(pending: PendingComparison) -> PendingComparison:
    """``pending`` itself when it can be resolved: its episode's reward is within bounds and its
    times are finite. Raises ``ValueError`` otherwise."""
    checked_reward(pending.episode)
    if not (math.isfinite(pending.since) and math.isfinite(pending.deadline)):
        raise ValueError(f"pending comparison of {pending.episode.episode_id}: times not finite")
    return pending


def add_episode(stats: TaskStats | None, ep: Episode, *, now: float | None = None) -> TaskStats:
    """``stats`` (or fresh ones for the episode's task and checkpoint) with ``ep`` counted; the
    same ``stats`` object when ``ep`` is already counted. Raises ``ValueError`` for an episode
    whose reward is missing, not finite or beyond ``MAX_ABS_REWARD``, or of another task or
    checkpoint."""
    reward = checked_reward(ep)
    if stats is None:
        stats = TaskStats(task_id=ep.task_id, checkpoint_id=ep.checkpoint_id)
    if (stats.task_id, stats.checkpoint_id) != (ep.task_id, ep.checkpoint_id):
        raise ValueError(
            f"episode {ep.episode_id} ({ep.task_id}, {ep.checkpoint_id}) does not belong in "
            f"the stats of ({stats.task_id}, {stats.checkpoint_id})"
        )
    if ep.episode_id in stats.episode_ids:
        return stats
    scored = ep.outcome != "blocked"
    outcomes = dict(stats.outcomes)
    outcomes[ep.outcome] = outcomes.get(ep.outcome, 0) + 1
    return msgspec.structs.replace(
        stats,
        count=stats.count + 1,
        scored=stats.scored + scored,
        reward_sum=stats.reward_sum + (reward if scored else 0.0),
        reward_sq_sum=stats.reward_sq_sum + (reward * reward if scored else 0.0),
        outcomes=outcomes,
        episode_ids=[*stats.episode_ids, ep.episode_id],
        updated_at=time.time() if now is None else now,
    )


def _without(stats: TaskStats, ep: Episode) -> TaskStats:
    """``stats`` as if ``ep`` had never been counted (an episode is never its own reference)."""
    if ep.episode_id not in stats.episode_ids:
        return stats
    reward = checked_reward(ep)
    scored = ep.outcome != "blocked"
    outcomes = dict(stats.outcomes)
    outcomes[ep.outcome] -= 1
    if not outcomes[ep.outcome]:
        del outcomes[ep.outcome]
    return msgspec.structs.replace(
        stats,
        count=stats.count - 1,
        scored=stats.scored - scored,
        reward_sum=stats.reward_sum - (reward if scored else 0.0),
        reward_sq_sum=stats.reward_sq_sum - (reward * reward if scored else 0.0),
        outcomes=outcomes,
        episode_ids=[i for i in stats.episode_ids if i != ep.episode_id],
    )


def reference_for(ep: Episode, ref: TaskStats | None) -> TaskStats | None:
    """The reference statistics ``ep`` is measured against: ``ref`` without ``ep`` itself."""
    return None if ref is None else _without(ref, ep)


def _failed(ep: Episode, reason: str, ref: TaskStats | None = None) -> ComparisonResult:
    return ComparisonResult(
        verdict="comparison_failed",
        reference_checkpoint=ep.reference_checkpoint or None,
        reference_runs=ref.scored if ref is not None else 0,
        reason=reason,
    )


def _rank_verdict(outcome: Outcome, ref_mean_rank: float) -> Verdict:
    gap = OUTCOME_RANK[outcome] - ref_mean_rank
    if gap > 0.5 + EPS:
        return "better"
    if gap < -0.5 - EPS:
        return "worse"
    return "same"


def decide(ep: Episode, ref: TaskStats | None, rule: CompareRule) -> ComparisonResult | None:
    """The comparison of rollout ``ep`` with the reference statistics ``ref`` (those of
    (task, ``ep.reference_checkpoint``), as stored); ``None`` when it must wait for more
    reference runs. Raises ``ValueError`` for an episode whose reward :func:`checked_reward`
    refuses."""
    reward = checked_reward(ep)
    if not ep.reference_checkpoint:
        return _failed(ep, "no reference")
    if ep.outcome == "blocked":
        return _failed(ep, "the episode could not run (blocked): nothing to compare")
    ref = reference_for(ep, ref)
    if ref is None or ref.scored < max(1, rule.min_reference_runs):
        return None
    assert ref.mean is not None and ref.mean_rank is not None
    delta = reward - ref.mean
    if delta > rule.margin + EPS:
        verdict: Verdict = "better"
        why = f"reward beats the reference mean by {delta:+.4g} (margin {rule.margin:g})"
    elif delta < -rule.margin - EPS:
        verdict = "worse"
        why = f"reward trails the reference mean by {delta:+.4g} (margin {rule.margin:g})"
    else:
        verdict = _rank_verdict(ep.outcome, ref.mean_rank)
        why = (
            f"reward within the margin ({delta:+.4g}); outcome {ep.outcome} "
            f"(rank {OUTCOME_RANK[ep.outcome]}) vs reference mean rank {ref.mean_rank:.3g}"
        )
    return ComparisonResult(
        verdict=verdict,
        reference_checkpoint=ep.reference_checkpoint,
        delta=delta,
        reference_reward=ref.mean,
        reference_runs=ref.scored,
        reason=why,
    )


def expire(
    ep: Episode, ref: TaskStats | None, rule: CompareRule, waited_s: float
) -> ComparisonResult:
    """The verdict of a rollout whose deadline passed: the normal one if the reference is usable
    by now, else ``comparison_failed`` saying why."""
    result = decide(ep, ref, rule)
    if result is not None:
        return result
    ref = reference_for(ep, ref)
    need = max(1, rule.min_reference_runs)
    if ref is not None and ref.count and not ref.scored:
        reason = f"reference could not run: all {ref.count} reference runs blocked"
    elif ref is not None and ref.scored:
        reason = f"only {ref.scored} usable reference runs within {waited_s:.3g}s, need {need}"
    else:
        reason = (
            f"no reference results for {ep.reference_checkpoint} on {ep.task_id} "
            f"within {waited_s:.3g}s"
        )
    return _failed(ep, reason, ref)


def with_comparison(
    ep: Episode, result: ComparisonResult | None, *, now: float | None = None
) -> Episode:
    """``ep`` with its comparison set (``None`` for pass-through) and ``compared`` stage stamp."""
    stages = dict(ep.timings.stages)
    stages["compared"] = time.time() if now is None else now
    return msgspec.structs.replace(
        ep, comparison=result, timings=msgspec.structs.replace(ep.timings, stages=stages)
    )


def mark_compared(result: ComparisonResult | None, *, now: float | None = None) -> ComparedMark:
    return ComparedMark(
        verdict=None if result is None else result.verdict, at=time.time() if now is None else now
    )


# -- the epoch verdict ------------------------------------------------------------------------------


def _sound(stats: TaskStats) -> bool:
    try:
        check_stats(stats)
    except ValueError:
        return False
    return True


def _pairs(
    req: EpochVerdictRequest, candidate: Iterable[TaskStats], reference: Iterable[TaskStats]
) -> list[tuple[TaskStats, TaskStats]]:
    wanted = set(req.tasks)
    ref_by_task = {s.task_id: s for s in reference if s.scored and _sound(s)}
    pairs = [
        (c, ref_by_task[c.task_id])
        for c in candidate
        if c.scored
        and c.task_id in ref_by_task
        and (not wanted or c.task_id in wanted)
        and _sound(c)
    ]
    return sorted(pairs, key=lambda p: p[0].task_id)


def _test(
    values: list[float], req: EpochVerdictRequest, *, resamples: int, seed: int
) -> EnvVerdict:
    """The paired test on per-task deltas ``values`` (the epoch rule of the module docstring)."""
    wins = sum(v > req.margin + EPS for v in values)
    losses = sum(v < -req.margin - EPS for v in values)
    p = sign_test_p(wins, losses)
    mean_delta, lo, hi = bootstrap_mean(
        values, confidence=req.confidence, resamples=resamples, seed=seed
    )
    significant = p <= 1.0 - req.confidence + EPS
    if mean_delta > req.margin + EPS and lo > 0 and wins > losses and significant:
        verdict: Verdict = "better"
    elif mean_delta < -req.margin - EPS and hi < 0 and losses > wins and significant:
        verdict = "worse"
    else:
        verdict = "same"
    return EnvVerdict(
        verdict=verdict,
        tasks=len(values),
        wins=wins,
        losses=losses,
        ties=len(values) - wins - losses,
        mean_delta=mean_delta,
        ci_low=lo,
        ci_high=hi,
        sign_test_p=p,
    )


def degradation_z(pairs: Iterable[tuple[TaskStats, TaskStats]]) -> float:
    """The degradation test's statistic over (candidate, reference) statistics of the same
    tasks (see the module docstring): negative when the candidate's rewards are lower; 0 when
    no task has any spread of reward (nothing to tell apart)."""
    total = var = 0.0
    tasks = 0
    for c, r in pairs:
        n_c, n_r = c.scored, r.scored
        if not n_c or not n_r:
            continue
        n = n_c + n_r
        both = (c.reward_sum + r.reward_sum) / n
        spread = c.reward_sq_sum + r.reward_sq_sum - n * both * both
        s2 = max(spread, 0.0) / (n - 1) if n > 1 else 0.0
        total += c.reward_sum / n_c - r.reward_sum / n_r
        var += s2 * (1.0 / n_c + 1.0 / n_r)
        tasks += 1
    if not tasks or var <= 1e-12:
        return 0.0
    return total / math.sqrt(var)


def epoch_verdict(
    req: EpochVerdictRequest,
    candidate: Iterable[TaskStats],
    reference: Iterable[TaskStats],
    *,
    resamples: int,
    seed: int,
) -> EpochVerdict:
    """The paired verdict of ``req.candidate`` against ``req.reference`` from their per-task
    statistics (see the module docstring for the rule, and the veto when ``req.environments``
    names each task's environment); statistics that fail :func:`check_stats` are left out.
    Raises ``ValueError`` for a negative margin or veto margin, or a confidence outside (0, 1)."""
    if not req.margin >= 0:
        raise ValueError(f"margin must be >= 0, got {req.margin}")
    if not req.veto_margin >= 0:
        raise ValueError(f"veto_margin must be >= 0, got {req.veto_margin}")
    for name in ("confidence", "veto_confidence"):
        if not 0.0 < getattr(req, name) < 1.0:
            raise ValueError(f"{name} must be in (0, 1), got {getattr(req, name)}")
    pairs = _pairs(req, candidate, reference)
    base = dict(candidate=req.candidate, reference=req.reference)
    if not pairs:
        return EpochVerdict(
            verdict="comparison_failed",
            **base,
            reason=f"no task has scored results of both {req.candidate} and {req.reference}",
        )
    deltas = [
        TaskDelta(
            task_id=c.task_id,
            candidate_mean=c.reward_sum / c.scored,
            reference_mean=r.reward_sum / r.scored,
            candidate_runs=c.scored,
            reference_runs=r.scored,
            delta=c.reward_sum / c.scored - r.reward_sum / r.scored,
        )
        for c, r in pairs
    ]
    pooled = _test([d.delta for d in deltas], req, resamples=resamples, seed=seed)
    alpha = 1.0 - req.confidence
    reason = (
        f"{pooled.tasks} tasks: {pooled.wins} wins, {pooled.losses} losses, {pooled.ties} ties "
        f"(margin {req.margin:g}); mean delta {pooled.mean_delta:+.4g}, {req.confidence:g} CI "
        f"[{pooled.ci_low:+.4g}, {pooled.ci_high:+.4g}], sign test p={pooled.sign_test_p:.4g} "
        f"(alpha {alpha:.3g})"
    )
    per_env: dict[str, EnvVerdict] = {}
    vetoed_by: list[str] = []
    verdict = pooled.verdict
    if req.environments:
        by_env: dict[str, list[float]] = {}
        pairs_of: dict[str, list[tuple[TaskStats, TaskStats]]] = {}
        for d, pair in zip(deltas, pairs, strict=True):
            env = req.environments.get(d.task_id, "?")
            by_env.setdefault(env, []).append(d.delta)
            pairs_of.setdefault(env, []).append(pair)
        bar = NormalDist().inv_cdf((1.0 - req.veto_confidence) / len(by_env))
        for env in sorted(by_env):
            z = degradation_z(pairs_of[env])
            tested = _test(by_env[env], req, resamples=resamples, seed=seed)
            per_env[env] = msgspec.structs.replace(
                tested,
                degradation_z=z,
                degraded=z < bar and tested.mean_delta < -req.veto_margin - EPS,
            )
        vetoed_by = [env for env, v in per_env.items() if v.degraded]
        if vetoed_by and verdict != "worse":
            verdict = "worse"
            reason += f"; pooled {pooled.verdict}, vetoed: " + ", ".join(
                f"{e} degraded (mean delta {per_env[e].mean_delta:+.3g} < -{req.veto_margin:g}, "
                f"z={per_env[e].degradation_z:.2f} < {bar:.2f})"
                for e in vetoed_by
            )
    return EpochVerdict(
        verdict=verdict,
        **base,
        tasks=pooled.tasks,
        wins=pooled.wins,
        losses=pooled.losses,
        ties=pooled.ties,
        mean_delta=pooled.mean_delta,
        ci_low=pooled.ci_low,
        ci_high=pooled.ci_high,
        sign_test_p=pooled.sign_test_p,
        reason=reason,
        deltas=deltas,
        per_env=per_env,
        vetoed_by=vetoed_by,
        pooled=pooled.verdict if req.environments else None,
    )


def verdict_request(state: CampaignState) -> EpochVerdictRequest:
    """The comparison asked at the end of an epoch: the epoch's candidate against its reference
    over the epoch's tasks, each named with its environment, so a mixed campaign gets one verdict
    for the whole student with the per-environment veto."""
    spec = state.spec
    pairs = [t.split("/", 1) for t in sorted(state.tasks)]
    return EpochVerdictRequest(
        campaign_id=spec.campaign_id,
        epoch=state.epoch,
        candidate=state.candidate or "",
        reference=state.reference or "",
        margin=spec.comparison_margin,
        tasks=sorted({task for _, task in pairs}),
        environments={task: env for env, task in pairs},
    )


# -- the gate's decision ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DecisionPlan:
    """What an epoch's verdict does."""

    decision: Decision
    degradation_streak: int
    stable_streak: int
    train: bool


def decide_epoch(
    verdict: Verdict,
    *,
    degradation_streak: int,
    stable_streak: int,
    spec: CampaignSpec,
    first: bool,
) -> DecisionPlan:
    """One decision for the whole student (the campaign's, and the kernel's when a benchmark
    gates its training).

    - ``worse``: roll ``active`` back to ``pre_update_ref``; when that makes
      ``degradation_streak_limit`` degradations in a row, back to ``last_stable`` instead. No
      training this epoch.
    - ``better`` / ``same``: the update held; after ``stable_epochs_to_promote`` such epochs in a
      row, promote ``active`` to ``last_stable``.
    - ``comparison_failed``: hold (an outage is never a degradation); the streaks stay.
    On the first epoch the candidate is its own reference: ``same`` by construction, a hold.
    """
    if first:
        return DecisionPlan("hold", degradation_streak, stable_streak, train=True)
    if verdict == "worse":
        streak = degradation_streak + 1
        if streak >= spec.degradation_streak_limit:
            return DecisionPlan("rollback_last_stable", 0, 0, train=False)
        return DecisionPlan("rollback_pre_update", streak, 0, train=False)
    if verdict in ("better", "same"):
        stable = stable_streak + 1
        if stable >= spec.stable_epochs_to_promote:
            return DecisionPlan("promote", 0, 0, train=True)
        return DecisionPlan("hold", 0, stable, train=True)
    return DecisionPlan("hold", degradation_streak, stable_streak, train=True)
