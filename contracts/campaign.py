"""Campaign specs, commands, epoch records, control snapshots and campaign events."""

from __future__ import annotations

from typing import Literal

import msgspec

from ._base import Message
from .checkpoint import PointerMove
from .episode import DecodingRegime
from .rail import RailDecision, RailSettings
from .vocab import Algorithm, Decision, EpochPhase, Outcome, RolloutStrategy, Verdict

__all__ = [
    "BranchOrder",
    "BranchingSettings",
    "CampaignCommand",
    "CampaignEvent",
    "CampaignSpec",
    "CampaignState",
    "CampaignStatus",
    "ControlSnapshot",
    "ControlState",
    "EnvEpochStats",
    "EnvironmentRecipe",
    "EpochArrivals",
    "EpochRecord",
    "GatewaySettings",
    "GroupContrast",
    "HeldoutScore",
    "RailState",
    "RolloutAccount",
    "RolloutSummary",
    "StartCampaign",
    "StatusCampaign",
    "StopCampaign",
    "TrainerSettings",
]


class EnvironmentRecipe(msgspec.Struct, frozen=True, kw_only=True):
    """One environment's own way of learning from reward in a campaign: each field set here
    replaces the campaign's (``TrainerSettings``) for that environment's episodes; ``None``
    keeps it."""

    self_imitation: bool | None = None
    progress_coef: float | None = None


class TrainerSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What the trainer is asked to do each epoch."""

    algorithm: Algorithm = "grpo"
    learning_rate: float = 3e-3
    update_epochs: int = 4
    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.01
    distill_coef: float = 0.0
    """Distillation toward teacher hints (cross-entropy on the action a teacher named); 0, the
    default: off, the student learns from reward (the environment's, plus the reward service's
    teacher shaping when a teacher judges)."""
    imitation_coef: float = 0.5
    """Imitation of the positive replay lane (the student's own best episodes: a reward signal,
    not a teacher's), in offline and mixed updates."""
    offline_fraction: float = 0.0
    """Share of each update drawn from replay rather than this epoch's fresh groups."""
    seed: int = 0
    minibatch_size: int = 64
    micro_batch_size: int = 0
    """Decisions per forward and backward pass within a step, gradients accumulated over the
    minibatch (0: the student's own: 4 for a language model, else the whole minibatch)."""
    aggregation: Literal["token", "action"] = "token"
    std_normalize: bool = True
    env_normalize: bool = False
    """Mixed campaigns: scale each environment's advantages to unit root mean square
    (AgentRL's per-task advantage normalisation), so every environment weighs alike in an
    update; a tied group's zero stays zero."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    negative_kl_coef: float = 0.1
    self_imitation: bool = False
    """Also imitate (``imitation_coef``) the update's own fresh rollouts that succeeded, as
    the environment judged them (behaviour cloning filtered by reward: RAFT, self-imitation
    learning), less their steps of negative measured progress. A reward signal, not a
    teacher's."""
    progress_coef: float = 0.0
    """Step-level credit from the environment's own measure of progress
    (``TrajectoryStep.progress``: shell measures it by re-running the tests after each edit):
    each step's advantage gets this times its progress on top of its episode's. Environment
    reward, not a teacher's. 0: every step shares its episode's credit."""
    by_environment: dict[str, EnvironmentRecipe] = {}
    """Per environment (its name), what replaces ``self_imitation`` and ``progress_coef`` for
    its episodes: what learns from reward differs between environments (measured in
    ``bench/results/learning_rl.md``)."""
    entropy_coef: float = 0.0
    warm_optimizer: bool = False
    """Keep Adam's moments from one update to the next, when an update starts from the weights
    the trainer's last update left (not after a rollback, nor from another replica's
    checkpoint): a fresh Adam steps about the learning rate in every weight however weak the
    update's signal is, so a run of updates with little to learn from becomes a random walk."""
    offline_batch: int = 128
    """Episodes asked of ``replay.sample`` for an offline or mixed update."""
    is_cap: float = 2.0
    """Token-level training (free text with the sampler's token log-probs): the truncated
    importance weight ``min(exp(logp_old - logp_rollout), is_cap)`` corrects each token for the
    gap between the sampler that wrote it (an inference engine) and the trainer's weights
    (verl's rollout-IS threshold default); 0 turns the correction off."""


class BranchingSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How the branching strategies spend a task's budget (``CampaignSpec.group_size`` rollouts
    in all, base rollouts and continuations together). Defaults follow ARPO's reference
    configuration where it fits (docs/branching.md says which and why)."""

    initial: int = 0
    """Base rollouts per task before any branching (ARPO's N); 0: half the budget."""
    branch_width: int = 1
    """Continuations per branch (ARPO's Z: ``beam_size - 1`` = 1); the heuristic's first round
    budget, doubled each round."""
    alpha: float | None = None
    """ARPO's base branching probability; ``None``: drawn uniformly per decision (ARPO's code)."""
    beta: float = 0.2
    """Weight of the normalised entropy change (ARPO's ``entropy_weight``)."""
    tau: float = 0.5
    """Branch where ``alpha + beta * dH`` exceeds this (ARPO's ``branch_probability``)."""
    max_rounds: int = 3
    """Planning rounds after the base rollouts (each waits for the previous one's episodes)."""
    regime: DecodingRegime | None = None
    """Decoding regime of continuations; ``None``: the campaign's."""
    resample_cap: int = 0
    """``dapo-filter``: most tasks drawn to replace tied groups in one epoch; 0: as many as
    ``tasks_per_epoch``."""
    fill: bool = True
    """``entropy``: when branching leaves budget unused, spend it on fresh rollouts (ARPO's
    supplement), so every strategy uses the same number of rollouts per task."""


class CampaignSpec(Message, frozen=True, kw_only=True):
    """Everything that defines a campaign; fixed once it starts."""

    SCHEMA = "campaign_spec.v1"

    campaign_id: str
    environments: dict[str, float] = msgspec.field(default_factory=lambda: {"shell": 1.0})
    """Environment -> share of each epoch's tasks."""
    tasks_per_epoch: int = 8
    group_size: int = 4
    epochs: int = 3
    rollout_strategy: RolloutStrategy = "uniform"
    """How each task's ``group_size`` rollouts are spent (see ``RolloutStrategy``)."""
    branching: BranchingSettings = BranchingSettings()
    rail: RailSettings = RailSettings()
    """The RAIL controller's actions and schedule (strategies ``rail``, ``rail-budget-only``,
    ``rail-frozen``)."""
    regime: DecodingRegime = DecodingRegime()
    comparison_margin: float = 0.05
    degradation_streak_limit: int = 2
    stable_epochs_to_promote: int = 1
    trainer: TrainerSettings = TrainerSettings()
    split: str = "train"
    episode_deadline_s: float = 120.0
    seed: int = 0
    reference_runs: int = 2
    """Runs of the reference policy per task, what each rollout is compared against."""


class StartCampaign(Message, frozen=True, kw_only=True, tag="start", tag_field="command"):
    """Start (or resume) a campaign."""

    SCHEMA = "campaign_start.v1"

    spec: CampaignSpec


class StopCampaign(Message, frozen=True, kw_only=True, tag="stop", tag_field="command"):
    """Stop a campaign after the phase in progress."""

    SCHEMA = "campaign_stop.v1"

    campaign_id: str
    reason: str = ""


class StatusCampaign(Message, frozen=True, kw_only=True, tag="status", tag_field="command"):
    """Ask where a campaign stands."""

    SCHEMA = "campaign_status_request.v1"

    campaign_id: str


class ResumeCampaign(Message, frozen=True, kw_only=True, tag="resume", tag_field="command"):
    """Resume a stopped or failed campaign where it stood (its spec is the stored one)."""

    SCHEMA = "campaign_resume.v1"

    campaign_id: str


CampaignCommand = StartCampaign | StopCampaign | StatusCampaign | ResumeCampaign
"""The command family on ``campaign.cmd.*``."""


class EnvEpochStats(msgspec.Struct, frozen=True, kw_only=True):
    """One environment's numbers within one epoch."""

    episodes: int = 0
    success: int = 0
    partial: int = 0
    failure: int = 0
    blocked: int = 0
    mean_reward: float = 0.0
    reward_sum: float = 0.0
    verdicts: dict[str, int] = {}
    """This environment's rollouts by comparison verdict (the replay lanes they feed)."""


class RolloutAccount(msgspec.Struct, frozen=True, kw_only=True):
    """What an epoch's rollouts cost: counted once per episode as it arrives."""

    strategy: str = "uniform"
    base: int = 0
    """Rollouts from the start state."""
    continuations: int = 0
    """Rollouts branched off another at an intermediate state."""
    steps_sampled: int = 0
    """Environment steps whose action the policy drew (rollouts)."""
    steps_replayed: int = 0
    """Environment steps replayed from a parent's prefix (rollouts)."""
    policy_calls: int = 0
    """Act requests that made a step (rollouts): one per sampled step."""
    references: int = 0
    """Reference runs (the comparison's cost, the same for every strategy)."""
    reference_steps: int = 0
    rounds: int = 0
    """Planning rounds after the base rollouts."""
    wall_s: float = 0.0
    """Seconds from the epoch's first job to its last arrival (or deadline)."""


class GroupContrast(msgspec.Struct, frozen=True, kw_only=True):
    """One task's group: its reward contrast ``I(Y)`` before and after its continuations."""

    group_id: str
    task_id: str
    base: int = 0
    continuations: int = 0
    before: float = 0.0
    """``I(Y_0)``: population variance of the base rollouts' rewards."""
    after: float = 0.0
    """``I(Y_b)``: of every rollout of the group."""
    dropped: bool = False
    """Left out of the update (``dapo-filter``: its rewards all tie)."""


class RolloutSummary(Message, frozen=True, kw_only=True):
    """What planning reads of one arrived rollout: its place in the task's tree, its reward, and
    per step its action and the policy's uncertainty. Kept in KV ``ledger`` under
    ``Names.key_rollout``."""

    SCHEMA = "rollout_summary.v1"

    episode_id: str
    campaign_id: str
    epoch: int
    group_id: str
    task_id: str
    environment: str
    seed: int = 0
    parent_episode_id: str = ""
    branch_step: int = 0
    round: int = 0
    reward: float = 0.0
    outcome: Outcome = "failure"
    actions: list[str] = []
    """Every action, replayed ones included (a continuation's prefix is read from here)."""
    entropies: list[float] = []
    """Per step: the entropy of the policy's distribution (0 for a replayed step)."""
    widths: list[int] = []
    """Per step: how many candidates were offered (0: free text)."""
    top1: list[float] = []
    margins: list[float] = []
    hidden: list[list[float]] = []
    """Per step: the policy's hidden-state projection, when the job asked for it (RAIL)."""
    replayed: int = 0
    """Steps replayed from the parent's prefix."""


class BranchOrder(msgspec.Struct, frozen=True, kw_only=True):
    """One planned addition to an epoch's rollouts, fixed in the campaign's state before its
    jobs are published (so a restarted campaign publishes the same jobs)."""

    round: int
    kind: Literal["branch", "fresh", "task"]
    """``branch``: continuations of ``parent_episode_id`` from ``step``; ``fresh``: more base
    rollouts of task ``task_index``; ``task``: a new task (its group and reference runs)."""
    task_index: int
    parent_episode_id: str = ""
    step: int = 0
    count: int = 1
    first: int = 0
    """Number of the first new run (fresh rollouts and continuations are numbered on)."""
    regime: DecodingRegime = DecodingRegime()
    decided_by: Literal["rail", "entropy", "heuristic", "uniform", "variance"] = "uniform"
    decision: RailDecision | None = None
    """The RAIL decision behind a branch (its trace is published when its continuations are
    back)."""


class EpochRecord(Message, frozen=True, kw_only=True):
    """The ledger's line for one epoch of one campaign; rewritten at every phase change."""

    SCHEMA = "epoch_record.v1"

    campaign_id: str
    epoch: int
    phase: EpochPhase = "collect"
    active_checkpoint: str | None = None
    reference_checkpoint: str | None = None
    new_checkpoint: str | None = None
    scheduled: int = 0
    received: int = 0
    missing: int = 0
    per_env: dict[str, EnvEpochStats] = {}
    verdict: Verdict | None = None
    verdict_detail: str = ""
    decision: Decision | None = None
    pointer_moves: list[PointerMove] = []
    degradation_streak: int = 0
    lane_counts: dict[str, int] = {}
    timings: dict[str, float] = {}
    """Phase -> unix seconds when it began."""
    rollouts: RolloutAccount = RolloutAccount()
    """What the epoch's rollouts cost, by the campaign's strategy."""
    groups: list[GroupContrast] = []
    """Each task's group contrast before and after its continuations."""


class HeldoutScore(Message, frozen=True, kw_only=True):
    """A policy's score on held-out tasks, measured for a campaign after one of its epochs (by
    the command that ran it). Kept in KV ``ledger`` under ``Names.key_heldout``; ``aios-rl
    report`` and the dashboard draw it beside the rollout success."""

    SCHEMA = "heldout_score.v1"

    campaign_id: str
    epoch: int
    """The policy scored was active when this epoch began (the campaign's last epoch + 1: the
    policy it ended with)."""
    checkpoint_id: str
    environment: str = "shell"
    split: str = "heldout"
    tasks: int = 0
    successes: int = 0
    mean_reward: float = 0.0
    at: float = 0.0


class EpochArrivals(Message, frozen=True, kw_only=True):
    """Which scheduled episodes of an epoch came back (each counted once), with their numbers.
    Kept in KV ``ledger`` under ``Names.key_arrivals``."""

    SCHEMA = "epoch_arrivals.v1"

    campaign_id: str
    epoch: int
    episode_ids: list[str] = []
    per_env: dict[str, EnvEpochStats] = {}
    """Rollouts only, per environment."""
    verdicts: dict[str, int] = {}
    """Rollouts' comparison verdicts (better / same / worse / comparison_failed)."""
    references: int = 0
    account: RolloutAccount = RolloutAccount()
    """Rollouts, steps and policy calls of what arrived."""


class CampaignStatus(Message, frozen=True, kw_only=True):
    """The answer to a status command."""

    SCHEMA = "campaign_status.v1"

    campaign_id: str
    state: Literal["unknown", "running", "stopping", "stopped", "finished", "failed"] = "unknown"
    epoch: int = 0
    phase: EpochPhase | None = None
    records: list[EpochRecord] = []
    failure: str = ""
    """Why it failed (state ``failed``): what retrying could not fix."""
    retries: int = 0
    """Transient errors (NATS outages, services restarting) it retried through."""
    last_error: str = ""
    """The last of those errors."""
    trainer: TrainerSettings | None = None
    """The campaign's trainer settings (what its updates learn from: ``distill_coef``)."""


class CampaignEvent(Message, frozen=True, kw_only=True):
    """Published on ``campaign.event.<kind>`` whenever the ledger or the campaign state moves."""

    SCHEMA = "campaign_event.v1"

    kind: Literal[
        "started", "phase", "decided", "finished", "stopped", "failed", "retrying", "resumed"
    ]
    campaign_id: str
    epoch: int = 0
    record: EpochRecord | None = None
    at: float = 0.0
    reason: str = ""
    """What happened, for ``failed`` (why) and ``retrying`` (the transient error)."""


class CampaignState(msgspec.Struct, frozen=True, kw_only=True, tag="campaign", tag_field="owner"):
    """What a restarted campaign service needs to resume: the spec and where it stood."""

    spec: CampaignSpec
    state: Literal["running", "stopping", "stopped", "finished", "failed"] = "running"
    epoch: int = 0
    phase: EpochPhase = "collect"
    degradation_streak: int = 0
    stable_streak: int = 0
    epoch_started_at: float = 0.0
    candidate: str | None = None
    """The checkpoint the epoch's rollouts run under (``active`` when the epoch began)."""
    reference: str | None = None
    """The checkpoint it is compared against (``pre_update_ref``, or the candidate itself)."""
    tasks: list[str] = []
    """The epoch's tasks as ``<environment>/<task_id>``, fixed before any job is published."""
    jobs_published: bool = False
    """Whether the current round's jobs are out."""
    round: int = 0
    """The epoch's planning round (0: base rollouts)."""
    round_started_at: float = 0.0
    orders: list[BranchOrder] = []
    """Every round's planned additions (branches, fresh rollouts, new tasks), in order."""
    dropped_groups: list[str] = []
    """Groups left out of this epoch's update (``dapo-filter``)."""
    base_tasks: int = 0
    """How many of ``tasks`` the epoch began with (later ones were drawn by resampling)."""
    failure: str = ""
    retries: int = 0
    """Transient errors retried through since the campaign started (or was resumed)."""
    last_error: str = ""


class RailState(msgspec.Struct, frozen=True, kw_only=True, tag="rail", tag_field="owner"):
    """One campaign's RAIL controller: its mode, scorer versions and what it has measured
    (KV ``control`` under ``Names.key_control("rail", campaign_id)``)."""

    mode: Literal["shadow", "live"] = "shadow"
    traces_seen: int = 0
    sign_agreement: float = 0.0
    """Sign agreement of the online scorer's out-of-sample predictions in the recent window."""
    scorer_object: str | None = None
    """Object Store name of the scorer's weights."""
    eta: float = 0.0
    campaign_id: str = ""
    scorer_version: int = 0
    """Fits so far (0: never fitted)."""
    frozen_object: str | None = None
    """Object Store name of the copy frozen at the last promotion."""
    fitted_at: int = 0
    """``traces_seen`` at the last fit."""
    promotions: int = 0
    demotions: int = 0
    promoted_at: int = 0
    """``traces_seen`` at the last promotion: demotion reads only the live traces after it."""
    live_traces: int = 0
    """Traces of decisions taken while live (scored by both the online and the frozen scorer)."""
    mae_online: float | None = None
    """Mean absolute error of the online scorer on the live traces."""
    mae_frozen: float | None = None
    """Of the frozen copy, on the same traces."""
    agreement_online: float | None = None
    agreement_frozen: float | None = None
    actions: dict[str, dict[str, int]] = {}
    """Environment -> action (``<budget>@<temperature>``, ``0``: no intervention) -> decisions."""
    settings: RailSettings | None = None
    """The campaign's settings, from its first request."""
    updated_at: float = 0.0


class GatewaySettings(msgspec.Struct, frozen=True, kw_only=True, tag="gateway", tag_field="owner"):
    """Teacher-gateway settings changeable at run time."""

    backend: str = "oracle"
    timeout_s: float = 30.0
    success_sample_rate: float = 0.1


ControlState = CampaignState | RailState | GatewaySettings


class ControlSnapshot(Message, frozen=True, kw_only=True):
    """A versioned, restart-safe snapshot in KV ``control``; written by compare-and-set."""

    SCHEMA = "control_snapshot.v1"

    key: str
    version: int = 0
    updated_at: float = 0.0
    state: ControlState
