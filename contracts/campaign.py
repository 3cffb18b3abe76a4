"""Campaign specs, commands, epoch records, control snapshots and campaign events."""

from __future__ import annotations

from typing import Literal

import msgspec

from ._base import Message
from .checkpoint import PointerMove
from .episode import DecodingRegime
from .vocab import Algorithm, Decision, EpochPhase, RolloutStrategy, Verdict

__all__ = [
    "CampaignCommand",
    "CampaignEvent",
    "CampaignSpec",
    "CampaignState",
    "CampaignStatus",
    "ControlSnapshot",
    "ControlState",
    "EnvEpochStats",
    "EpochArrivals",
    "EpochRecord",
    "GatewaySettings",
    "RailState",
    "StartCampaign",
    "StatusCampaign",
    "StopCampaign",
    "TrainerSettings",
]


class TrainerSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What the trainer is asked to do each epoch."""

    algorithm: Algorithm = "grpo"
    learning_rate: float = 3e-3
    update_epochs: int = 4
    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.01
    distill_coef: float = 0.5
    offline_fraction: float = 0.0
    """Share of each update drawn from replay rather than this epoch's fresh groups."""
    seed: int = 0
    minibatch_size: int = 64
    aggregation: Literal["token", "action"] = "token"
    std_normalize: bool = True
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    negative_kl_coef: float = 0.1
    entropy_coef: float = 0.0
    offline_batch: int = 128
    """Episodes asked of ``replay.sample`` for an offline or mixed update."""


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
    failure: str = ""
    retries: int = 0
    """Transient errors retried through since the campaign started (or was resumed)."""
    last_error: str = ""


class RailState(msgspec.Struct, frozen=True, kw_only=True, tag="rail", tag_field="owner"):
    """The RAIL controller's mode and promotion test state."""

    mode: Literal["shadow", "live"] = "shadow"
    traces_seen: int = 0
    sign_agreement: float = 0.0
    scorer_object: str | None = None
    """Object Store name of the scorer's weights."""
    eta: float = 0.0


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
