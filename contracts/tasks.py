"""Environment tasks as stored for every runner replica to see: content-addressed objects in the
Object Store ``tasks``, listed by an index object per split."""

from __future__ import annotations

from typing import Literal

import msgspec

from ._base import Message

__all__ = [
    "CandidateEdit",
    "Checkpoint",
    "CheckpointCause",
    "GroundTruth",
    "KnownFix",
    "LoggedDecision",
    "OrchestratorStage",
    "OrchestratorTask",
    "ShellTask",
    "TaskIndex",
    "WorkItem",
]

ShellSplit = Literal["train", "heldout", "real", "real-heldout"]
"""Generated tasks (``train``, ``heldout``), real code (``real``: stdlib modules with an injected
bug, and tasks imported or mined from users' repositories) and the mined tasks held out by commit
(``real-heldout``)."""


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
    """``generated`` (phase 1) or where the real code came from (phase 2): ``stdlib:<module>@...``,
    ``import:<name>`` or ``mined:<name>@<commit>``."""
    known_fix: KnownFix | None = None
    """Imported and mined tasks: the person's fix, when known (``ground_truth`` then summarises
    its first hunk, operator ``known_fix``; without one the operator is ``unknown``)."""
    suspicious: list[str] = []
    """Imported and mined tasks: ``path:line`` of the code lines fault localisation ranked most
    suspicious, best first (analysis; the policy sees only the candidates it produced)."""
    test_timeout_s: float = 0.0
    """Seconds one test may run before it is stopped and counted as failing (a bug that loops for
    ever fails its tests instead of stalling the run). Set by ``shell import`` and ``shell mine``
    and used by every later run of the task's tests (episodes, checks); ``0``: no per-test limit,
    only the run's wall-clock one."""


class KnownFix(msgspec.Struct, frozen=True, kw_only=True):
    """The fix a person made, for a task imported with one or mined from history: hidden ground
    truth (the oracle teacher and analysis use it). It is never offered as a candidate edit."""

    patch: str
    """Unified diff (``a/``, ``b/`` prefixes) from the task's files to the fixed files."""
    files: dict[str, str] = {}
    """Path -> fixed text of each code file the fix changes (``""``: the fix deletes it)."""
    lines: list[str] = []
    """``path:line`` of each line of the task's (buggy) files the fix changes or deletes, or
    next to which it inserts: what fault localisation is scored against."""
    commit: str = ""
    """The commit that fixed it (mined or ``--fix-commit``), else empty."""
    message: str = ""
    """That commit's subject line."""


class TaskIndex(Message, frozen=True, kw_only=True):
    """The ids of one split's tasks, in a stable order."""

    SCHEMA = "task_index.v1"

    environment: str = "shell"
    split: str
    task_ids: list[str] = []


OrchestratorStage = Literal["preflight", "dispatch", "clarity", "quality"]
"""The decisions of an orchestrated run, in the order they come."""

CheckpointCause = Literal["human", "transient", "assumption", "replan"]
"""Why a run is blocked: a real need for a human, noise to retry, a gap a stated assumption
bridges, or a plan that cannot work (re-plan)."""


class WorkItem(msgspec.Struct, frozen=True, kw_only=True):
    """Hidden attributes of a work item: the policy sees only the evidence they produce."""

    environment: Literal["production", "staging", "sandbox"]
    destructive: bool
    """The request deletes, overwrites or revokes something."""
    reversible: bool
    """A backup or a down-migration can undo it."""
    ambiguous: bool
    """The request misses a choice only its author can make."""
    tests: Literal["green", "broken", "flaky"]
    """The branch before dispatch: all green, really broken, or failing only on flaky tests."""
    secret: bool
    """The diff carries a credential."""
    scope: Literal["small", "large"]
    """A large item's first subagent result has a bug to rework."""
    flaky_infra: bool
    """CI is flaky: a failure after the run may be noise."""


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    """Where a run blocks after dispatch, with the evidence an orchestrator would see."""

    cause: CheckpointCause
    """Hidden: what the block really needs."""
    evidence: str
    """What the policy sees at the clarity gate."""
    source: str = "generated"
    """``generated``, or ``episode:<environment>:<episode_id>`` for a checkpoint built from a
    real blocked or failed episode of another environment."""


class LoggedDecision(msgspec.Struct, frozen=True, kw_only=True):
    """One decision from a user's own orchestrator log (``aios-rl orchestrator import``)."""

    stage: OrchestratorStage
    evidence: str
    """What the orchestrator saw when it decided (the observation)."""
    decision: str
    """The decision it took."""
    outcome: Literal["success", "failure", "incident"]
    """What came of it."""
    correct: str = ""
    """The decision that should have been taken, when the log says (a reviewer's label)."""
    candidates: list[str] = []
    """The decisions offered (default: the stage's)."""


class OrchestratorTask(Message, frozen=True, kw_only=True):
    """An orchestrated run over one work item (``kind="run"``): preflight, dispatch, a blocked
    checkpoint when it has one, quality review; or a run that starts at a blocked checkpoint
    (``kind="clarity"``); or one imported decision (``kind="imported"``). Outcomes are simulated
    from the hidden ``item`` and ``checkpoint`` (``aios_rl.envs.orchestrator.sim``)."""

    SCHEMA = "orchestrator_task.v2"

    task_id: str
    """Content address (``aios_rl.envs.orchestrator.task_id_of``)."""
    split: str = "train"
    kind: Literal["run", "clarity", "imported"] = "run"
    template: str = ""
    """How the evidence is worded; train and held-out share no template."""
    seed: int = 0
    """Seeds the evidence's details (counts, names); the outcome depends only on the hidden
    attributes and the decisions."""
    request: str = ""
    """The work item as its author wrote it."""
    service: str = ""
    """The repository / service the item is about."""
    facts: dict[str, str] = {}
    """Visible details: the paths and size of the change, what an ambiguous phrase could mean."""
    item: WorkItem | None = None
    """Hidden attributes (``None`` for an imported decision)."""
    checkpoint: Checkpoint | None = None
    """Hidden cause and visible evidence of the block the run hits after dispatch, if any."""
    logged: LoggedDecision | None = None
    """The imported decision (``kind="imported"``)."""
    max_steps: int = 12
