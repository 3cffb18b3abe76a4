"""The stdlib baseline for bench/bus.py: dataclass mirrors of the contracts the bench sends, and
a codec with the same signatures as ``contracts.encode`` / ``contracts.decode``.

Encoding is ``json.dumps(dataclasses.asdict(x))``; decoding is ``json.loads`` followed by
hand-written constructors for the nested dataclasses (the fastest honest way without a library).
Unlike msgspec it checks no types: a wrong payload decodes into wrong objects. The shapes (field
names, order, defaults) match the Structs field for field, so both codecs produce the same JSON
document and each can read the other's bytes; ``bench/bus.py`` checks that before measuring.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from contracts import SCHEMA_HEADER, DecodeError

__all__ = [
    "ActRequest",
    "ActResponse",
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
    "decode",
    "encode",
]

_dc = dataclass(frozen=True, kw_only=True, slots=True)
"""Frozen, keyword-only and slotted, as the msgspec Structs are."""


@_dc
class DecodingRegime:
    temperature: float = 1.0
    top_p: float = 1.0


@_dc
class BranchInfo:
    parent_episode_id: str
    branch_step: int
    budget: int
    regime: DecodingRegime = DecodingRegime()
    decided_by: str = "rail"


@_dc
class TrajectoryStep:
    index: int
    observation: str
    action: str
    candidates: list[str] = field(default_factory=list)
    action_index: int | None = None
    logprob: float = 0.0
    entropy: float = 0.0
    value: float | None = None
    replayed: bool = False
    step_reward: float = 0.0


@_dc
class RewardBreakdown:
    env_reward: float
    teacher_score: float | None = None
    teacher_weight: float = 0.0
    shaping: float = 0.0
    clip: float = 1.0
    total: float = 0.0


@_dc
class TeacherHint:
    step: int
    better_action: str | None = None
    note: str = ""


@_dc
class TeacherSignal:
    SCHEMA: ClassVar[str] = "teacher_signal.v1"

    backend: str
    status: str = "ok"
    verdict: str = "unsure"
    score: float = 0.0
    hints: list[TeacherHint] = field(default_factory=list)
    boundary: bool = False
    rationale: str = ""
    latency_s: float = 0.0
    raw_ref: str | None = None


@_dc
class ComparisonResult:
    verdict: str
    reference_checkpoint: str | None = None
    delta: float = 0.0
    reference_reward: float | None = None
    reference_runs: int = 0
    reason: str = ""


@_dc
class EvidenceRef:
    kind: str
    bucket: str
    name: str
    size_bytes: int = 0


@_dc
class Timings:
    started_at: float = 0.0
    finished_at: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)


@_dc
class Episode:
    SCHEMA: ClassVar[str] = "episode.v1"

    episode_id: str
    environment: str
    task_id: str
    campaign_id: str = ""
    epoch: int = 0
    checkpoint_id: str = ""
    group_id: str = ""
    role: str = "rollout"
    seed: int = 0
    regime: DecodingRegime = DecodingRegime()
    branch: BranchInfo | None = None
    trajectory: list[TrajectoryStep] = field(default_factory=list)
    outcome: str = "failure"
    env_reward: float = 0.0
    reward: float | None = None
    reward_breakdown: RewardBreakdown | None = None
    teacher_status: str | None = None
    teacher_signal: TeacherSignal | None = None
    comparison: ComparisonResult | None = None
    lane: str | None = None
    timings: Timings = Timings()
    evidence: list[EvidenceRef] = field(default_factory=list)
    info: dict[str, str] = field(default_factory=dict)
    reference_checkpoint: str = ""


@_dc
class ActRequest:
    SCHEMA: ClassVar[str] = "act_request.v1"

    episode_id: str
    step: int
    observation: str
    candidates: list[str] = field(default_factory=list)
    regime: DecodingRegime = DecodingRegime()
    checkpoint_id: str = "active"
    seed: int | None = None
    want_hidden: bool = False


@_dc
class ActResponse:
    SCHEMA: ClassVar[str] = "act_response.v1"

    action: str
    action_index: int | None = None
    logprob: float = 0.0
    entropy: float = 0.0
    value: float | None = None
    checkpoint_id: str = ""
    hidden: list[float] = field(default_factory=list)


# -- building the nested dataclasses from json.loads output ------------------------------------


def _regime(d: dict[str, Any]) -> DecodingRegime:
    return DecodingRegime(**d)


def _branch(d: dict[str, Any] | None) -> BranchInfo | None:
    if d is None:
        return None
    return BranchInfo(**{**d, "regime": _regime(d["regime"])})


def _teacher_signal(d: dict[str, Any] | None) -> TeacherSignal | None:
    if d is None:
        return None
    return TeacherSignal(**{**d, "hints": [TeacherHint(**h) for h in d["hints"]]})


def episode_from_dict(d: dict[str, Any]) -> Episode:
    """An ``Episode`` and all its nested dataclasses from a decoded JSON object."""
    rb = d.get("reward_breakdown")
    cmp = d.get("comparison")
    return Episode(
        **{
            **d,
            "regime": _regime(d["regime"]),
            "branch": _branch(d.get("branch")),
            "trajectory": [TrajectoryStep(**s) for s in d["trajectory"]],
            "reward_breakdown": RewardBreakdown(**rb) if rb is not None else None,
            "teacher_signal": _teacher_signal(d.get("teacher_signal")),
            "comparison": ComparisonResult(**cmp) if cmp is not None else None,
            "timings": Timings(**d["timings"]),
            "evidence": [EvidenceRef(**e) for e in d["evidence"]],
        }
    )


def act_request_from_dict(d: dict[str, Any]) -> ActRequest:
    return ActRequest(**{**d, "regime": _regime(d["regime"])})


def act_response_from_dict(d: dict[str, Any]) -> ActResponse:
    return ActResponse(**d)


_FROM_DICT = {
    Episode: episode_from_dict,
    ActRequest: act_request_from_dict,
    ActResponse: act_response_from_dict,
}


# -- the codec, with contracts.encode / contracts.decode's signatures --------------------------


def encode(msg: Any, headers: Mapping[str, str] | None = None) -> tuple[bytes, dict[str, str]]:
    """JSON bytes and headers (the schema header plus any given) for a baseline dataclass."""
    out = dict(headers) if headers else {}
    out[SCHEMA_HEADER] = msg.SCHEMA
    return json.dumps(asdict(msg)).encode(), out


def decode(data: bytes, headers: Mapping[str, str] | None, expected: type) -> Any:
    """Decode ``data`` into the baseline dataclass ``expected``, checking the schema header as
    ``contracts.decode`` does. Raises ``contracts.DecodeError`` on a missing or wrong header or
    on bytes that are not JSON of the right shape (types are not checked)."""
    schema = (headers or {}).get(SCHEMA_HEADER, "")
    if schema != expected.SCHEMA:
        raise DecodeError(
            "wrong_schema", f"header says {schema!r}, expected {expected.SCHEMA}", schema
        )
    try:
        return _FROM_DICT[expected](json.loads(data))
    except (ValueError, TypeError, KeyError) as exc:
        raise DecodeError("invalid_payload", f"{expected.SCHEMA}: {exc}", schema) from exc
