"""Users' own orchestrator decisions as tasks: a JSONL file, one decision per line
(``aios-rl orchestrator import FILE``). Pure: parsing and validation, no NATS.

The format (one JSON object per line; blank lines and lines starting with ``#`` are skipped)::

    {"stage": "dispatch",
     "evidence": "Work item: rotate the DB password\\nTarget: production | backup: none\\n...",
     "decision": "send to a subagent",
     "outcome": "incident",
     "correct": "ask a human to approve",
     "candidates": ["send to a subagent", "dry-run first", "ask a human to approve"],
     "split": "train",
     "id": "INC-2291"}

- ``stage``: ``preflight`` | ``dispatch`` | ``clarity`` | ``quality`` (required);
- ``evidence``: what the orchestrator saw, as text: the observation (required, non-empty);
- ``decision``: what it decided (required; one of ``candidates``);
- ``outcome``: ``success`` | ``failure`` | ``incident`` (required);
- ``correct``: the decision that should have been taken, when a reviewer labelled it
  (optional; one of ``candidates``);
- ``candidates``: the decisions that were open (optional; default: the stage's four or three,
  ``aios_rl.envs.orchestrator.sim.DECISIONS``);
- ``split``: ``train`` | ``heldout`` (optional; default: one entry in four held out, by content);
- ``id``: your own reference (optional; kept in nothing but the task's content address).

Each line becomes a one-step task (``kind="imported"``), rewarded as
:func:`~aios_rl.envs.orchestrator.sim.imported_reward` says: 1 for the right decision (``correct``,
or the decision taken when it succeeded), 0 for the decision taken when it failed, -1 when it
caused an incident, 0.5 for another decision on an entry whose right decision nobody knows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

from aios_rl.errors import AiosError
from contracts import LoggedDecision, OrchestratorTask

from .sim import DECISIONS, normalise
from .tasks import split_of_combination, with_id

__all__ = ["LogEntry", "LogFormatError", "parse_lines", "read_file"]


class LogFormatError(AiosError, ValueError):
    """A line of the file is not a valid entry; the message names the line."""


class LogEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One line of the import format (see the module docstring)."""

    stage: Literal["preflight", "dispatch", "clarity", "quality"]
    evidence: str
    decision: str
    outcome: Literal["success", "failure", "incident"]
    correct: str = ""
    candidates: list[str] = []
    split: Literal["train", "heldout", ""] = ""
    id: str = ""


def _task(entry: LogEntry, where: str) -> OrchestratorTask:
    if not entry.evidence.strip():
        raise LogFormatError(f"{where}: evidence is empty")
    offered = list(entry.candidates) or list(DECISIONS[entry.stage])
    names = {normalise(c) for c in offered}
    if len(names) < 2:
        raise LogFormatError(f"{where}: at least two candidates are needed")
    for field in ("decision", "correct"):
        value = getattr(entry, field)
        if value and normalise(value) not in names:
            raise LogFormatError(
                f"{where}: {field} {value!r} is not one of the candidates ({', '.join(offered)})"
            )
    logged = LoggedDecision(
        stage=entry.stage,
        evidence=entry.evidence,
        decision=entry.decision,
        outcome=entry.outcome,
        correct=entry.correct,
        candidates=offered,
    )
    task = with_id(
        OrchestratorTask(
            task_id="",
            split="",
            kind="imported",
            template="log",
            request=entry.id,
            logged=logged,
            max_steps=1,
        )
    )
    split = entry.split or split_of_combination(f"log:{task.task_id}")
    return msgspec.structs.replace(task, split=split)


def parse_lines(lines: list[str], source: str = "<input>") -> list[OrchestratorTask]:
    """The tasks of ``lines`` (the import format). Raises ``LogFormatError`` naming the first bad
    line; nothing is returned for a file with any bad line."""
    out: list[OrchestratorTask] = []
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{source}:{n}"
        try:
            entry = msgspec.json.decode(text, type=LogEntry)
        except msgspec.ValidationError as exc:
            raise LogFormatError(f"{where}: {exc}") from None
        except msgspec.DecodeError as exc:
            raise LogFormatError(f"{where}: not JSON: {exc}") from None
        out.append(_task(entry, where))
    return out


def read_file(path: str | Path) -> list[OrchestratorTask]:
    """The tasks of the JSONL file at ``path``. Raises ``LogFormatError`` (a bad line, a file that
    cannot be read or holds no entry)."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise LogFormatError(f"cannot read {p}: {exc}") from None
    tasks = parse_lines(lines, str(p))
    if not tasks:
        raise LogFormatError(f"{p} holds no entry")
    return tasks
