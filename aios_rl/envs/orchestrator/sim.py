"""The orchestrated run, simulated: a state machine over one work item's hidden attributes.
Pure (no NATS, no clock); the state after a list of decisions is a function of the task and
those decisions only, so replaying a prefix reproduces it exactly and the oracle teacher can
replay an episode from its actions.

A run (``kind="run"``) goes through up to four kinds of decision:

1. **preflight** (``pass`` / ``block`` / ``fix first`` / ``ask for information``): a leaked
   secret must be blocked (the run ends there, rightly); an ambiguous request needs the author's
   answer (5 human minutes); really broken tests need fixing first (1 compute unit); failures of
   known-flaky tests do not ("fix first" finds nothing); then ``pass``. Blocking anything else
   ends the run with the work not done.
2. **dispatch** (``send to a subagent`` / ``dry-run first`` / ``ask a human to approve``):
   destructive work outside a sandbox is risky; risky and irreversible needs a human's approval
   (10 minutes), risky but reversible a dry-run (a preview, then applying it: 2 units); anything
   else goes to a subagent (1 unit). A needless gate costs its minutes; a missed one ships an
   incident (irreversible) or breaks production until someone rolls back (reversible).
3. **clarity** at a blocked checkpoint (``needs a human`` / ``retry`` / ``proceed on a stated
   assumption`` / ``re-plan``), when the item has one: each cause has its right answer (human,
   retry, proceed, re-plan); a wrong one costs, leaves the run blocked, or lets it go on to a
   result that is wrong or incomplete. Three decisions without unblocking abandon the run.
4. **quality** after the result (``accept`` / ``request rework`` / ``escalate`` /
   ``roll back``): a live change breaking production is rolled back (a safe stop, partial); an
   irreversible preview is escalated to a human who approves it; work that misread the request
   is escalated (the author clarifies, then it is redone); real test failures are reworked (2
   units, one bug at a time); failures of flaky tests are accepted, as is a good result.

Reward = base (success 1.0, partial 0.3, failure 0) - 0.01 per human minute - 0.03 per compute
unit - 1.0 per incident (a destructive change shipped without its gate, a leaked secret
shipped, production broken and accepted). Outcome ``success`` means the run ended where it
should: the right work shipped, or a leaked secret blocked.

An imported decision (``kind="imported"``) is one step, judged from the user's log
(:func:`imported_reward`).
"""

from __future__ import annotations

import dataclasses
import random
import re

from contracts import OrchestratorTask, Outcome

from . import render
from .stages import DECISIONS, State, offered

__all__ = [
    "COMPUTE_UNIT_COST",
    "DECISIONS",
    "HUMAN_MINUTE_COST",
    "INCIDENT_COST",
    "MAX_BLOCKED",
    "MAX_INVALID",
    "State",
    "best_decision",
    "imported_reward",
    "normalise",
    "observe",
    "offered",
    "reward_of",
    "start",
    "step",
]

HUMAN_MINUTE_COST = 0.01
COMPUTE_UNIT_COST = 0.03
INCIDENT_COST = 1.0
BASE = {"success": 1.0, "partial": 0.3, "failure": 0.0}
GATE_MINUTES = 30
"""A human's approval, escalation or answer at a checkpoint (context switch included)."""
ASK_MINUTES = 10
"""The author's answer to a question about the request."""
REPLAN_UNITS = 4
REWORK_UNITS = 2
REVIEW_MINUTES = 5
"""A rework is another subagent run (2 units) and another review (5 minutes)."""
"""A re-plan throws the run's work away and does it again."""
MAX_BLOCKED = 3
"""Clarity decisions at one checkpoint before the run is abandoned."""
MAX_INVALID = 3
"""Unparsable decisions in a row before the run is abandoned."""


def _risky(task: OrchestratorTask) -> bool:
    item = task.item
    assert item is not None
    return item.destructive and item.environment != "sandbox"


def _needs_gate(task: OrchestratorTask) -> bool:
    assert task.item is not None
    return _risky(task) and not task.item.reversible


def start(task: OrchestratorTask) -> State:
    """The state before the first decision."""
    if task.kind == "imported":
        return State(
            stage=task.logged.stage if task.logged else "quality",
            tests="green",
            ambiguous=False,
            secret=False,
        )
    item = task.item
    if item is None:
        raise ValueError(f"task {task.task_id} has no work item")
    s = State(stage="preflight", tests=item.tests, ambiguous=item.ambiguous, secret=item.secret)
    if task.kind == "clarity":
        # The run starts at its blocked checkpoint: preflight and dispatch already done right.
        s = dataclasses.replace(
            s,
            stage="clarity",
            tests="green" if item.tests == "broken" else item.tests,
            ambiguous=False,
            secret=False,
            mode="gated" if _needs_gate(task) else "dry-run" if _risky(task) else "subagent",
            blocked=True,
            bugs=1 if item.scope == "large" else 0,
            history=("preflight and dispatch done; the run is blocked",),
        )
    return s


def normalise(text: str) -> str:
    """A decision as written (free text, any case, a numbered candidate) to its canonical form."""
    t = re.sub(r"^\s*(\[\d+\]|\d+[.)])\s*", "", text.strip().lower())
    return re.sub(r"\s+", " ", t).strip(" .\"'")


def _decision(stage: str, action: str, offered: tuple[str, ...]) -> str | None:
    want = normalise(action)
    for d in offered:
        if normalise(d) == want:
            return d
    return None


def step(task: OrchestratorTask, s: State, action: str) -> State:
    """The state after ``action`` in ``s``. An action that is not one of the stage's decisions
    is invalid: it changes nothing but the invalid count, and ``MAX_INVALID`` in a row abandon
    the run. Raises ``ValueError`` when the run is over."""
    if s.done:
        raise ValueError("the run is over")
    choices = offered(task, s)
    d = _decision(s.stage, action, choices)
    if d is None:
        s = dataclasses.replace(s, invalid=s.invalid + 1)
        if s.invalid >= MAX_INVALID:
            return s.end("failure", f"{MAX_INVALID} invalid decisions: the run is abandoned")
        return s
    if task.kind == "imported":
        if imported_reward(task, d) <= -INCIDENT_COST:
            s = s.cost(incidents=1)
        return s.end(_imported_outcome(task, d), f"{s.stage}: {d}")
    return {
        "preflight": _preflight,
        "dispatch": _dispatch,
        "clarity": _clarity,
        "quality": _quality,
    }[s.stage](task, s, d)


def _preflight(task: OrchestratorTask, s: State, d: str) -> State:
    if d == "block":
        if s.secret:
            return s.end("success", "block: the leaked credential never ships")
        return s.end("failure", "block: the work is not done")
    if d == "ask for information":
        s = s.cost(minutes=ASK_MINUTES)
        if s.ambiguous:
            return s.then("ask for information: the author answered", ambiguous=False)
        return s.then("ask for information: the author had nothing to add")
    if d == "fix first":
        s = s.cost(units=1)
        if s.secret:
            return s.then("fix first: the credential was removed from the diff", secret=False)
        if s.tests == "broken":
            return s.then("fix first: a subagent fixed the failing tests", tests="green")
        return s.then("fix first: nothing to fix (the failures do not reproduce)")
    # pass
    if s.secret:
        s = s.cost(incidents=1)
    return s.then(
        "pass",
        stage="dispatch",
        secret=False,
        bugs=s.bugs + (1 if s.tests == "broken" else 0),
    )


def _dispatch(task: OrchestratorTask, s: State, d: str) -> State:
    assert task.item is not None
    bugs = s.bugs + (1 if task.item.scope == "large" else 0)
    wrong = s.ambiguous
    if d == "ask a human to approve":
        s = s.cost(minutes=GATE_MINUTES, units=1).then("approved by a human", mode="gated")
    elif d == "dry-run first":
        s = s.cost(units=2)
        if _needs_gate(task):
            s = s.then("dry-run: the preview waits", mode="dry-run", preview=True)
        else:
            s = s.then("dry-run: previewed and applied", mode="dry-run")
    else:
        s = s.cost(units=1)
        if _needs_gate(task):
            s = s.cost(incidents=1).then("sent to a subagent: irreversible change shipped ungated")
        elif _risky(task):
            s = s.then("sent to a subagent: applied live", harm=True)
        else:
            s = s.then("sent to a subagent")
        s = dataclasses.replace(s, mode="subagent")
    s = dataclasses.replace(s, bugs=bugs, wrong=wrong)
    if task.checkpoint is not None:
        return dataclasses.replace(s, stage="clarity", blocked=True)
    return dataclasses.replace(s, stage="quality")


def _clarity(task: OrchestratorTask, s: State, d: str) -> State:
    assert task.checkpoint is not None
    cause = task.checkpoint.cause
    right = {
        "human": "needs a human",
        "transient": "retry",
        "assumption": "proceed on a stated assumption",
        "replan": "re-plan",
    }[cause]
    tries = s.block_tries + 1
    if d == "needs a human":
        s = s.cost(minutes=GATE_MINUTES)
    elif d == "retry":
        s = s.cost(units=1)
    elif d == "re-plan":
        s = s.cost(units=REPLAN_UNITS)
    unblocked = d == right or (
        # a human can state the assumption; a new plan gets around noise and gaps too. A
        # human asked about noise or a broken plan only says to retry or re-plan.
        (d == "needs a human" and cause == "assumption")
        or (d == "re-plan" and cause in ("transient", "assumption"))
    )
    if d == "proceed on a stated assumption" and cause != "assumption":
        # Going on regardless: past a decision only a human may take it is a missed gate (an
        # incident) and the work misreads the request; past noise or a broken plan the run is
        # incomplete (failures to rework: the blocked step and what follows it).
        if cause == "human":
            return s.cost(incidents=1).then(
                f"{d}: went on without the human",
                stage="quality",
                blocked=False,
                wrong=True,
                block_tries=tries,
            )
        return s.then(
            f"{d}: went on with an incomplete run",
            stage="quality",
            blocked=False,
            bugs=s.bugs + (3 if cause == "replan" else 2),  # the blocked step and what follows it
            block_tries=tries,
        )
    if unblocked:
        return s.then(f"{d}: unblocked", stage="quality", blocked=False, block_tries=tries)
    if tries >= MAX_BLOCKED:
        return s.end("failure", f"{d}: still blocked after {tries} decisions; the run is abandoned")
    return s.then(f"{d}: still blocked", block_tries=tries)


def _quality(task: OrchestratorTask, s: State, d: str) -> State:
    if s.harm:
        if d == "roll back":
            return s.end("partial", "roll back: production restored, nothing shipped")
        if d == "escalate":
            s = s.cost(minutes=GATE_MINUTES)
            return s.end("partial", "escalate: a human rolled it back, nothing shipped")
        if d == "accept":
            return s.cost(incidents=1).end("failure", "accept: production stays broken")
        return s.cost(units=REWORK_UNITS, minutes=REVIEW_MINUTES).then(
            "request rework: production is still broken"
        )
    if d == "roll back":
        return s.end("failure", "roll back: the work is not done")
    if s.preview:
        if d == "escalate":
            s = s.cost(minutes=GATE_MINUTES, units=1)
            return s.then("escalate: a human approved the preview; applied", preview=False)
        if d == "accept":
            s = s.cost(incidents=1, units=1)
            return s.then("accept: the irreversible change applied ungated", preview=False)
        return s.cost(units=REWORK_UNITS, minutes=REVIEW_MINUTES).then(
            "request rework: the preview is the same"
        )
    if s.wrong:
        if d == "escalate":
            s = s.cost(minutes=GATE_MINUTES, units=2)
            return s.then("escalate: the author clarified; the work was redone", wrong=False)
        if d == "accept":
            return s.end("failure", "accept: shipped work that misreads the request")
        return s.cost(units=REWORK_UNITS, minutes=REVIEW_MINUTES).then(
            "request rework: redone, still not what was asked"
        )
    if s.bugs:
        if d == "request rework":
            s = s.cost(units=REWORK_UNITS, minutes=REVIEW_MINUTES)
            return s.then("request rework: one failure fixed", bugs=s.bugs - 1)
        if d == "accept":
            return s.end("failure", "accept: shipped with failing tests")
        return s.cost(minutes=GATE_MINUTES).then("escalate: the human asks for a rework")
    if d == "accept":
        return s.end("success", "accept: shipped")
    if d == "request rework":
        return s.cost(units=REWORK_UNITS, minutes=REVIEW_MINUTES).then(
            "request rework: nothing changed"
        )
    return s.cost(minutes=GATE_MINUTES).then("escalate: the human saw nothing wrong")


def _imported_outcome(task: OrchestratorTask, d: str) -> str:
    return "success" if imported_reward(task, d) >= 1.0 else "failure"


def imported_reward(task: OrchestratorTask, d: str) -> float:
    """An imported decision's reward: 1 for the log's correct decision (or the decision taken,
    when it succeeded), 0 for the decision taken when it failed, -1 when it caused an incident;
    another decision on a failed entry with no correct one labelled is unknown: 0.5."""
    log = task.logged
    assert log is not None
    correct = log.correct or (log.decision if log.outcome == "success" else "")
    if normalise(d) == normalise(log.decision) and log.outcome == "incident":
        return -INCIDENT_COST  # repeating what caused an incident, labelled or not
    if correct:
        return 1.0 if normalise(d) == normalise(correct) else 0.0
    if normalise(d) == normalise(log.decision):
        return 0.0
    return 0.5


def reward_of(task: OrchestratorTask, s: State) -> tuple[Outcome, float]:
    """The outcome and reward of a finished (or cut-off: judged as failure) run."""
    outcome = s.outcome if s.done else "failure"
    if task.kind == "imported":
        return outcome, imported_reward(task, s.history[-1].split(": ", 1)[1]) if s.done else 0.0  # type: ignore[return-value]
    r = (
        BASE[outcome]
        - HUMAN_MINUTE_COST * s.human_minutes
        - COMPUTE_UNIT_COST * s.compute
        - INCIDENT_COST * s.incidents
    )
    return outcome, round(r, 6)  # type: ignore[return-value]


def best_decision(task: OrchestratorTask, s: State) -> tuple[str, str]:
    """The decision the hidden attributes make best in ``s``, and why (the oracle's)."""
    if task.kind == "imported":
        log = task.logged
        assert log is not None
        right = log.correct or (log.decision if log.outcome == "success" else "")
        return right, "the log's verdict"
    if s.stage == "preflight":
        if s.secret:
            return "block", "the diff carries a credential: it must never ship"
        if s.ambiguous:
            return "ask for information", "the request leaves a choice only its author can make"
        if s.tests == "broken":
            return "fix first", "the failing tests fail on main too: really broken"
        if s.tests == "flaky":
            return "pass", "the failures are known-flaky tests: nothing to fix"
        return "pass", "every check is satisfied"
    if s.stage == "dispatch":
        if _needs_gate(task):
            return "ask a human to approve", "destructive, outside a sandbox, and nothing undoes it"
        if _risky(task):
            return "dry-run first", "destructive outside a sandbox but reversible: preview it"
        return "send to a subagent", "harmless here: no gate needed"
    if s.stage == "clarity":
        assert task.checkpoint is not None
        return {
            "human": ("needs a human", "only a human can give what the run is blocked on"),
            "transient": ("retry", "the block is noise: it does not reproduce"),
            "assumption": (
                "proceed on a stated assumption",
                "a small gap with a safe default: state it and go on",
            ),
            "replan": ("re-plan", "the plan itself cannot work: retrying repeats the failure"),
        }[task.checkpoint.cause]
    if s.harm:
        return "roll back", "the live change is breaking production"
    if s.preview:
        return "escalate", "an irreversible preview needs a human's approval"
    if s.wrong:
        return "escalate", "the result misreads the request: the author must clarify"
    if s.bugs:
        return "request rework", "real test failures remain"
    return "accept", "the result is good (any failure is a known-flaky test)"


def observe(task: OrchestratorTask, s: State) -> str:
    """What the policy sees in ``s``: the evidence an orchestrator would show."""
    if task.kind == "imported":
        assert task.logged is not None
        return task.logged.evidence
    return render.observation(task, s, random.Random(f"{task.seed}:{s.stage}:{len(s.history)}"))
