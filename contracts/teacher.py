"""What the teacher gateway asks a teacher backend."""

from __future__ import annotations

import msgspec

from ._base import Message
from .vocab import Environment, Outcome

__all__ = ["StepDigest", "TeacherRequest"]


class StepDigest(msgspec.Struct, frozen=True, kw_only=True):
    """One step of a trajectory, shortened for a teacher to read."""

    index: int
    observation: str
    action: str
    candidates: list[str] = []


class TeacherRequest(Message, frozen=True, kw_only=True):
    """A compact account of an episode for a teacher to judge; answered by a ``TeacherSignal``."""

    SCHEMA = "teacher_request.v1"

    request_id: str
    episode_id: str
    environment: Environment
    task_id: str
    task_statement: str = ""
    steps: list[StepDigest] = []
    outcome: Outcome = "failure"
    env_report: str = ""
    """What the environment reported at the end (test summary, server record, ...)."""
