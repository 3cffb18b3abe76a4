"""Teacher gateway logic, pure: no NATS here.

- :func:`wants_teacher`: failures, partial and blocked episodes always get a teacher; successes
  a seeded, deterministic sample (``success_sample_rate``) for calibration.
- :func:`build_request`: the compact ``TeacherRequest`` (task statement, a trajectory digest
  with clipped observations and labels, the environment's report from ``episode.info``).
- :func:`cache_key`: identical requests to one backend share a key (ids left out).
- :func:`accept`: a backend's reply made safe to pass on (score clamped, hints only for steps
  the request showed).
- :func:`taught`: the episode as it goes on, whatever became of its request.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

import msgspec

from aios_rl.teachers import clip_head, clip_middle
from contracts import (
    ControlState,
    Episode,
    GatewaySettings,
    StepDigest,
    TeacherRequest,
    TeacherSignal,
    TeacherStatus,
)

__all__ = [
    "NO_BACKEND",
    "STATEMENT_KEYS",
    "DigestLimits",
    "LruCache",
    "accept",
    "build_request",
    "cache_key",
    "checked_settings",
    "pick_steps",
    "sample_point",
    "taught",
    "wants_teacher",
    "without_answer",
]

NO_BACKEND = "none"
"""The backend name that turns teaching off: every episode passes as ``skipped``."""

STATEMENT_KEYS = ("task_statement", "statement")
"""Keys of ``episode.info`` that hold the task statement (the first one present wins); every
other key is part of the environment's report."""

MAX_RATIONALE_CHARS = 2000
_BACKEND_RE = re.compile(r"^[A-Za-z0-9_-]+$")

V = TypeVar("V")


# -- who gets a teacher -------------------------------------------------------------------------


def sample_point(episode_id: str, seed: int) -> float:
    """A number in [0, 1) fixed by the episode id and the seed (uniform over ids)."""
    digest = hashlib.sha256(f"{seed}:{episode_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def wants_teacher(episode: Episode, *, success_sample_rate: float, seed: int) -> bool:
    """Never an evaluation episode (a held-out score is the environment's alone: no teacher
    judges it, so its reward carries no shaping); every other episode that did not succeed; a
    successful one when its :func:`sample_point` falls below ``success_sample_rate`` (so the
    same episode is always decided the same way, and about that share of successes is
    picked)."""
    if episode.role == "eval":
        return False
    if episode.outcome != "success":
        return True
    return sample_point(episode.episode_id, seed) < success_sample_rate


# -- the request -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DigestLimits:
    """How much of an episode a teacher is shown."""

    max_steps: int = 40
    max_observation_chars: int = 600
    max_candidates: int = 16
    max_action_chars: int = 300
    max_statement_chars: int = 2000
    max_report_chars: int = 2000


def pick_steps(n: int, max_steps: int) -> list[int]:
    """Positions of the steps to show: all of them, or the first quarter of ``max_steps`` and the
    rest from the end (how it started, and how it ended)."""
    if n <= max_steps:
        return list(range(n))
    head = max(1, max_steps // 4) if max_steps > 1 else 0
    tail = max_steps - head
    return [*range(head), *range(n - tail, n)]


def _statement(info: dict[str, str]) -> str:
    for key in STATEMENT_KEYS:
        if info.get(key, "").strip():
            return info[key]
    return ""


def _report(ep: Episode) -> str:
    lines = [f"env_reward: {ep.env_reward:g}"]
    lines += [
        f"{key}: {value}" for key, value in sorted(ep.info.items()) if key not in STATEMENT_KEYS
    ]
    return "\n".join(lines)


def build_request(ep: Episode, backend: str, limits: DigestLimits) -> TeacherRequest:
    """The compact request for ``ep`` (``request_id`` is ``<episode_id>.<backend>``)."""
    steps = []
    for pos in pick_steps(len(ep.trajectory), limits.max_steps):
        step = ep.trajectory[pos]
        steps.append(
            StepDigest(
                index=step.index,
                observation=clip_middle(step.observation, limits.max_observation_chars),
                action=clip_head(step.action, limits.max_action_chars),
                candidates=[
                    clip_head(c, limits.max_action_chars)
                    for c in step.candidates[: limits.max_candidates]
                ],
            )
        )
    return TeacherRequest(
        request_id=f"{ep.episode_id}.{backend}",
        episode_id=ep.episode_id,
        environment=ep.environment,
        task_id=ep.task_id,
        task_statement=clip_middle(_statement(ep.info), limits.max_statement_chars),
        steps=steps,
        outcome=ep.outcome,
        env_report=clip_middle(_report(ep), limits.max_report_chars),
    )


_encoder = msgspec.json.Encoder()


def cache_key(backend: str, req: TeacherRequest) -> str:
    """The hash of the request without its ids, for one backend: two episodes that show a teacher
    the same thing get the same key."""
    anonymous = msgspec.structs.replace(req, request_id="", episode_id="")
    digest = hashlib.sha256(backend.encode() + b"\0" + _encoder.encode(anonymous))
    return digest.hexdigest()


class LruCache(Generic[V]):
    """A bounded map that forgets the least recently used entry first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[str, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: str, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)


# -- the answer --------------------------------------------------------------------------------------


def accept(signal: TeacherSignal, req: TeacherRequest, backend: str) -> TeacherSignal:
    """The reply of ``backend`` as it goes on the episode: named after the backend that was asked,
    score clamped to [-1, 1] (a non-finite one makes it ``unparseable``), one hint per step and
    only for steps the request showed, rationale clipped."""
    shown = {s.index for s in req.steps}
    hints, seen = [], set()
    for hint in signal.hints:
        if hint.step in shown and hint.step not in seen:
            seen.add(hint.step)
            hints.append(hint)
    status = signal.status
    score = signal.score
    rationale = signal.rationale
    if not math.isfinite(score):
        status, score = "unparseable", 0.0
        rationale = f"non-finite score from {backend}; {rationale}"
    return msgspec.structs.replace(
        signal,
        backend=backend,
        status=status,
        score=max(-1.0, min(1.0, score)),
        hints=hints,
        rationale=rationale[:MAX_RATIONALE_CHARS],
    )


def without_answer(
    status: TeacherStatus, backend: str, reason: str, latency_s: float
) -> TeacherSignal:
    """The signal of a request that got no judgement (``timeout`` or ``error``): who and why."""
    return TeacherSignal(
        backend=backend,
        status=status,
        rationale=reason[:MAX_RATIONALE_CHARS],
        latency_s=max(0.0, latency_s),
    )


def taught(
    ep: Episode, status: TeacherStatus, signal: TeacherSignal | None, *, now: float
) -> Episode:
    """``ep`` with its teacher status and signal set and its ``taught`` stage stamped."""
    stages = dict(ep.timings.stages)
    stages["taught"] = now
    return msgspec.structs.replace(
        ep,
        teacher_status=status,
        teacher_signal=signal,
        timings=msgspec.structs.replace(ep.timings, stages=stages),
    )


# -- run-time settings -------------------------------------------------------------------------------


def checked_settings(state: ControlState) -> GatewaySettings:
    """``state`` if it is usable gateway settings. Raises ``ValueError`` saying what is wrong:
    not gateway settings, a backend name that is not a subject token, a timeout that is not a
    positive number, a sample rate outside [0, 1]."""
    if not isinstance(state, GatewaySettings):
        raise ValueError(f"the key holds {type(state).__name__}, not GatewaySettings")
    if not _BACKEND_RE.match(state.backend):
        raise ValueError(f"backend {state.backend!r} is not a name: use letters, digits, - or _")
    if not (math.isfinite(state.timeout_s) and state.timeout_s > 0):
        raise ValueError(f"timeout_s must be a positive number, got {state.timeout_s!r}")
    if not (0.0 <= state.success_sample_rate <= 1.0):
        raise ValueError(
            f"success_sample_rate must be within [0, 1], got {state.success_sample_rate!r}"
        )
    return state
