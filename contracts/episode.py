"""The episode and everything that enriches it on its way through the pipeline."""

from __future__ import annotations

from typing import Literal

import msgspec

from ._base import Message
from .vocab import (
    Environment,
    EpisodeRole,
    Lane,
    Outcome,
    TeacherStatus,
    TeacherVerdict,
    Verdict,
)

__all__ = [
    "BranchInfo",
    "ComparisonResult",
    "DecodingRegime",
    "Episode",
    "EvidenceRef",
    "RewardBreakdown",
    "TeacherHint",
    "TeacherSignal",
    "Timings",
    "TrajectoryStep",
]


class DecodingRegime(msgspec.Struct, frozen=True, kw_only=True):
    """How the sampler draws an action: softmax temperature and nucleus (top-p) mass."""

    temperature: float = 1.0
    top_p: float = 1.0


class BranchInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Where an episode branched off another: it replays the parent's first ``branch_step``
    actions, then samples under ``regime``."""

    parent_episode_id: str
    branch_step: int
    budget: int
    regime: DecodingRegime = DecodingRegime()
    decided_by: Literal["rail", "entropy", "heuristic", "uniform"] = "rail"
    round: int = 1
    """The epoch's planning round that made it (base rollouts are round 0)."""


class TrajectoryStep(msgspec.Struct, frozen=True, kw_only=True):
    """One decision of the policy: what it saw, what it could do, what it did."""

    index: int
    observation: str
    action: str
    candidates: list[str] = []
    action_index: int | None = None
    logprob: float = 0.0
    entropy: float = 0.0
    value: float | None = None
    replayed: bool = False
    """True when the action came from a branch prefix rather than the policy."""
    step_reward: float = 0.0
    progress: float = 0.0
    """The environment's measure of what this step did toward solving the task (shell: the
    change of the tests' state after an edit; see ``Environment.progress``); 0 when the
    environment measures none. Step-level credit for the trainer (``progress_coef``), not part
    of the episode's reward; the policy never sees it."""
    hidden: list[float] = []
    """The policy's hidden-state projection at this step, when the job asked for it (RAIL's
    context); empty otherwise."""
    top1_prob: float = 0.0
    """The policy's probability of its most likely candidate at this step (0: free text)."""
    margin: float = 0.0
    """Its lead over the second most likely candidate (branching reads both)."""
    token_entropies: list[float] = []
    """Text students: the next-token entropy at each token of the action (empty otherwise)."""
    token_ids: list[int] = []
    """Free text: the action's token ids as sampled (see ``ActResponse.token_ids``)."""
    token_logprobs: list[float] = []
    """Their log-probs under the sampler that wrote them (the rollout policy)."""
    prompt_ids: list[int] = []
    """Free text from a prompt the student did not render (an agent's own conversation): the
    prompt's token ids as the engine read them, which the trainer scores the action after in
    place of the student's rendering of ``observation``; empty otherwise."""


class RewardBreakdown(msgspec.Struct, frozen=True, kw_only=True):
    """How the scalar reward was made from the environment's reward and teacher shaping."""

    env_reward: float
    teacher_score: float | None = None
    teacher_weight: float = 0.0
    shaping: float = 0.0
    clip: float = 1.0
    total: float = 0.0


class TeacherHint(msgspec.Struct, frozen=True, kw_only=True):
    """A teacher's advice on one step: the action it would have taken, where it knows one."""

    step: int
    better_action: str | None = None
    note: str = ""


class TeacherSignal(Message, frozen=True, kw_only=True):
    """One teacher's normalised judgement of an episode, whatever backend produced it."""

    SCHEMA = "teacher_signal.v1"

    backend: str
    status: TeacherStatus = "ok"
    verdict: TeacherVerdict = "unsure"
    score: float = 0.0
    """In [-1, 1]: how good the trajectory was in the teacher's eyes."""
    hints: list[TeacherHint] = []
    boundary: bool = False
    """A borderline case: kept for analysis only, never trained on."""
    rationale: str = ""
    latency_s: float = 0.0
    raw_ref: str | None = None
    """Object Store name of the backend's raw output, kept for diagnosis."""


class ComparisonResult(msgspec.Struct, frozen=True, kw_only=True):
    """An episode measured against the reference policy on the same task."""

    verdict: Verdict
    reference_checkpoint: str | None = None
    delta: float = 0.0
    reference_reward: float | None = None
    reference_runs: int = 0
    reason: str = ""


class EvidenceRef(msgspec.Struct, frozen=True, kw_only=True):
    """A pointer to something too big for a message (screenshot, long log) in the Object Store."""

    kind: str
    bucket: str
    name: str
    size_bytes: int = 0


class Timings(msgspec.Struct, frozen=True, kw_only=True):
    """Wall-clock stamps (unix seconds): when the episode ran and when each stage saw it."""

    started_at: float = 0.0
    finished_at: float = 0.0
    stages: dict[str, float] = {}


class Episode(Message, frozen=True, kw_only=True):
    """One rollout of the student on one task, enriched by every pipeline stage in turn."""

    SCHEMA = "episode.v1"

    episode_id: str
    environment: Environment
    task_id: str
    campaign_id: str = ""
    epoch: int = 0
    checkpoint_id: str = ""
    """The checkpoint that acted."""
    group_id: str = ""
    """The GRPO group: rollouts of one task under one checkpoint in one epoch."""
    role: EpisodeRole = "rollout"
    seed: int = 0
    """The environment's seed (a continuation keeps its parent's, so the prefix replays exactly)."""
    sampling_seed: int | None = None
    """The seed of the policy's draws when it differs from ``seed`` (continuations)."""
    regime: DecodingRegime = DecodingRegime()
    branch: BranchInfo | None = None
    trajectory: list[TrajectoryStep] = []
    outcome: Outcome = "failure"
    env_reward: float = 0.0
    reward: float | None = None
    reward_breakdown: RewardBreakdown | None = None
    teacher_status: TeacherStatus | None = None
    teacher_signal: TeacherSignal | None = None
    comparison: ComparisonResult | None = None
    lane: Lane | None = None
    timings: Timings = Timings()
    evidence: list[EvidenceRef] = []
    info: dict[str, str] = {}
    """Environment-specific facts worth keeping (tests passed, pages visited, ...)."""
    reference_checkpoint: str = ""
    """The checkpoint this episode is compared against (the campaign sets it; empty: none)."""
