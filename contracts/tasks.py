"""Environment tasks as stored for every runner replica to see: content-addressed objects in the
Object Store ``tasks``, listed by an index object per split."""

from __future__ import annotations

from typing import Literal

import msgspec

from ._base import Message

__all__ = ["CandidateEdit", "GroundTruth", "OrchestratorTask", "ShellTask", "TaskIndex"]

ShellSplit = Literal["train", "heldout", "real"]


class CandidateEdit(msgspec.Struct, frozen=True, kw_only=True):
    """An edit the environment offers as an action: replace ``old`` by ``new`` in ``path``
    (exactly one occurrence). ``label`` is what the policy sees."""

    label: str
    path: str
    old: str
    new: str
    is_fix: bool = False
    """Hidden ground truth: this edit fixes the bug (never shown to the policy)."""


class GroundTruth(msgspec.Struct, frozen=True, kw_only=True):
    """Where the injected bug is and what fixes it (for the oracle teacher and analysis)."""

    path: str
    line: int
    operator: str
    """Mutation operator that injected the bug (off_by_one, flipped_comparison, ...)."""
    original: str
    """The code before the mutation (the fix restores it)."""
    mutated: str
    description: str = ""


class ShellTask(Message, frozen=True, kw_only=True):
    """A bug-fix task: a small code base with one injected bug, its test command and the hidden
    ground truth. ``task_id`` is a content address of everything the policy works on."""

    SCHEMA = "shell_task.v1"

    task_id: str
    phase: Literal[1, 2] = 1
    split: ShellSplit = "train"
    family: str
    """Phase 1: the module family (stack, interval, ...). Phase 2: the upstream module's name."""
    statement: str
    files: dict[str, str]
    """Relative path -> text, the buggy code base with its tests."""
    test_command: list[str]
    """argv run in the task directory; ``{python}`` is replaced by the interpreter."""
    test_files: list[str] = []
    """Paths the agent must not modify (touching one voids success)."""
    failing_tests: list[str] = []
    """Test ids that fail on the mutant (and pass on the original)."""
    candidate_edits: list[CandidateEdit] = []
    ground_truth: GroundTruth
    source: str = "generated"
    """``generated`` (phase 1) or where the real code came from (phase 2)."""


class TaskIndex(Message, frozen=True, kw_only=True):
    """The ids of one split's tasks, in a stable order."""

    SCHEMA = "task_index.v1"

    environment: str = "shell"
    split: str
    task_ids: list[str] = []


class OrchestratorTask(Message, frozen=True, kw_only=True):
    """A control decision with hidden ground truth: route a request (dispatch), pass or block a
    change (preflight), or tell a real need for a human from noise (clarity)."""

    SCHEMA = "orchestrator_task.v1"

    task_id: str
    split: str = "train"
    kind: Literal["dispatch", "preflight", "clarity"]
    observation: str
    """What the policy sees: the request and its facts, rendered as text."""
    candidates: list[str]
    best: str
    """Hidden: the decision with the best simulated outcome."""
    acceptable: list[str] = []
    """Hidden: decisions that are safe but costly (partial credit)."""
    rationale: str = ""
    """Hidden: why ``best`` is best (for the oracle teacher)."""
