"""The oracle teacher's judgement, pure: no NATS here.

The oracle knows the ground truth of generated shell tasks: which of the candidate edits
(``CandidateEdit.is_fix``) fixes the injected bug. It judges a trajectory by whether and when the
agent applied that edit, and by the outcome the environment reported.

Hints: every step *before the fix was first applied* that offered the fix among its candidates
and chose something else gets ``better_action`` = that fix's label. After the fix, while the fix
is the only edit applied (the oracle follows the candidate edits and ``undo the last edit``), a
step that chose anything but ``submit`` gets ``better_action`` = ``submit``: the task was
verified so that the fix alone makes every test pass. Once a free-text command ran (the oracle
cannot tell what it changed) no more hints are given. Only the hints before the fix count as
``missed`` below.

Scores and verdicts (``missed`` = steps that offered the fix and chose something else first):

=========  ===========  =============================  =================  ========
outcome    fix applied  verdict                        score              boundary
=========  ===========  =============================  =================  ========
success    yes          correct                        1 - 0.1·missed     no
                                                       (at least 0.5)
success    no           correct                        0.5                **yes**
partial    yes, alone   partially_correct              0.25               **yes**
partial    yes, more    partially_correct              0.25               no
partial    no           partially_correct              -0.25              no
failure    yes, alone   partially_correct              0.0                **yes**
failure    yes, more    partially_correct              -0.25              no
failure    no, offered  incorrect                      -1.0               no
failure    never shown  incorrect                      -0.5               no
blocked    either       unsure                         0.0                **yes**
=========  ===========  =============================  =================  ========

"alone": when the episode ended, the fix was the only change the oracle saw applied (other
candidate edits undone, no free-text command after it); "more": another edit or a command
changed the code too.

Boundary (ambiguous) cases are those where the outcome and the ground truth disagree — tests
pass without the known fix (another fix, or weak tests), the fix alone was applied and the tests
still fail (flaky tests, or a task the oracle knows wrong) — and ``blocked`` episodes, where the
environment stopped the agent and the oracle cannot tell fault from infrastructure. A task with
no fix among its candidate edits is judged ``unsure``, score 0, boundary — unless it was
imported or mined with a known fix: then the hint is a free-text command that applies that fix
(``importing.fix_command``) and the verdict follows the outcome (success correct 1, partial 0.25,
failure incorrect -0.5, blocked unsure and boundary).

Browser episodes on the local sites (``judge_browser``): the generator knows the solution
path. The oracle walks the trajectory along it (element names resolved against each step's
observation); the first step that left the path gets ``better_action`` = the path's action there
(as the candidate offered), and no hint after it (the page may be elsewhere by then). Scores: a
success ``1 - 0.1·missed`` (at least 0.5), partial 0.25, failure -1 when the path was left
(-0.5 when it could not be followed from the start), blocked unsure 0 (boundary). MiniWoB++ tasks
carry no path (their solvers read the page): answered ``unsure``.

Orchestrator episodes (``judge_orchestrator``): the run is a pure function of the task's hidden
attributes and the decisions, so the oracle replays the episode's own decisions through the
simulator and knows the exact state at every step: each step whose decision differs from the best
one there (``aios_rl.envs.orchestrator.sim.best_decision``) gets a hint with why. Scores: a success
``1 - 0.1·missed`` (at least 0.5), partial (a safe stop) 0.25, failure -0.5; a run with an incident
(an ungated change or a leaked secret shipped: its reward is below zero even when the work
shipped) is incorrect, -1, whatever its outcome; boundary when every decision was the best and
the run still did not succeed (cut off), or the trajectory cannot be replayed (steps left out of
the digest); blocked: unsure 0, boundary. An imported decision is judged by its log's verdict (no
verdict: unsure).

AgentBench episodes (``judge_agentbench``): the ground truth is the task's reference, the turns of
``aios_rl.envs.agentbench.verify`` (DB: the reference SQL then the answer, or the label as the
answer; OS: the ``example`` run in the shell then its output as the answer, or a ``match`` task's
expected text). The oracle follows the trajectory along those turns (an OS answer is read from the
output the agent saw); the first step that left them gets ``better_action`` = the reference turn
there, and no hint after it. A success is correct, 1, with no hint (another way to the answer is
as good); a failure incorrect, -0.5, with the hint; blocked unsure 0, boundary. An OS task with
neither an example nor an exact answer (a regex ``match``) has no reference: ``unsure``.

Episodes of other environments have no ground truth the oracle holds: they are answered
``unsure`` with score 0 and no hints (status ``ok``, so they pass through reward fusion without
shaping).
"""

from __future__ import annotations

import hashlib
import random

import msgspec

from aios_rl.envs.agentbench.db import MODIFYING, parse_action, reference_turns
from aios_rl.envs.agentbench.os import parse_os_action, problem, reference_action
from aios_rl.envs.browser.actions import (
    InvalidAction,
    as_candidate,
    elements_from_observation,
    parse,
    resolve_names,
)
from aios_rl.envs.orchestrator import sim
from aios_rl.envs.shell.episode import SUBMIT, UNDO
from aios_rl.envs.shell.importing import fix_command
from aios_rl.teachers import shown_as
from contracts import (
    AgentBenchDbTask,
    AgentBenchOsTask,
    BrowserTask,
    CandidateEdit,
    OrchestratorTask,
    ShellTask,
    TeacherHint,
    TeacherRequest,
    TeacherSignal,
)

__all__ = [
    "BACKEND",
    "NOISY_BACKEND",
    "garble",
    "judge",
    "judge_agentbench",
    "judge_browser",
    "judge_orchestrator",
    "not_judged",
]

BACKEND = "oracle"
NOISY_BACKEND = "noisy-oracle"
"""The oracle made fallible (:func:`garble`): a stand-in for a real teacher, which does not know
the answers and is sometimes wrong."""


def not_judged(req: TeacherRequest, reason: str) -> TeacherSignal:
    """The answer for an episode the oracle holds no ground truth for."""
    return TeacherSignal(backend=BACKEND, verdict="unsure", score=0.0, rationale=reason)


def _offered_fix(candidates: list[str], fixes: list[CandidateEdit]) -> CandidateEdit | None:
    for shown in candidates:
        for fix in fixes:
            if shown_as(fix.label, shown):
                return fix
    return None


def _after_fix(
    req: TeacherRequest, task: ShellTask, fixed_at: int
) -> tuple[list[TeacherHint], bool]:
    """``submit`` hints on the steps after the fix while it is the only edit applied, and whether
    it still was at the end (``alone``)."""
    labels = {e.label for e in task.candidate_edits}
    applied: list[str] = []
    hints: list[TeacherHint] = []
    for step in req.steps:
        if step.index < fixed_at:
            if step.action == UNDO and applied:
                applied.pop()
            elif any(shown_as(label, step.action) for label in labels):
                applied.append(step.action)
            elif step.action not in step.candidates:
                return hints, False  # a free-text command before the fix: state unknown
            continue
        if step.index == fixed_at:
            applied.append("fix")
            continue
        if applied == ["fix"] and step.action != SUBMIT and SUBMIT in step.candidates:
            hints.append(
                TeacherHint(
                    step=step.index,
                    better_action=SUBMIT,
                    note="the fix alone makes every test pass",
                )
            )
        if step.action == UNDO and applied:
            applied.pop()
        elif any(shown_as(label, step.action) for label in labels):
            applied.append(step.action)
        elif step.action not in step.candidates:
            return hints, False  # a free-text command: what it changed is unknown
    return hints, applied == ["fix"]


def judge(req: TeacherRequest, task: ShellTask) -> TeacherSignal:
    """The oracle's signal for a shell episode on ``task`` (see the module's table)."""
    fixes = [e for e in task.candidate_edits if e.is_fix]
    gt = task.ground_truth
    if not fixes:
        command = fix_command(task)
        if command is not None:
            return _judge_known_fix(req, task, command)
        return TeacherSignal(
            backend=BACKEND,
            verdict="unsure",
            boundary=True,
            rationale=f"task {task.task_id} offers no candidate edit that fixes the bug",
        )
    where = f"{gt.operator} at {gt.path}:{gt.line}"
    hints: list[TeacherHint] = []
    applied_at: int | None = None
    offered = False
    for step in req.steps:
        fix = _offered_fix(step.candidates, fixes)
        if any(shown_as(f.label, step.action) for f in fixes):
            applied_at = step.index
            break
        if fix is not None:
            offered = True
            hints.append(
                TeacherHint(step=step.index, better_action=fix.label, note=f"fixes the {where}")
            )
    missed = len(hints)
    alone = False
    if applied_at is not None:
        after, alone = _after_fix(req, task, applied_at)
        hints += after
    applied = applied_at is not None
    match req.outcome, applied:
        case "success", True:
            verdict, score, boundary = "correct", max(0.5, 1.0 - 0.1 * missed), False
            why = f"applied the fix at step {applied_at}" + (
                f" after passing it over {missed} time(s)" if missed else ""
            )
        case "success", False:
            verdict, score, boundary = "correct", 0.5, True
            why = "tests pass without the known fix (another fix, or weak tests)"
        case "partial", True:
            verdict, score, boundary = "partially_correct", 0.25, alone
            why = f"applied the fix at step {applied_at} yet some tests still fail" + (
                "" if alone else " (other changes too)"
            )
        case "partial", False:
            verdict, score, boundary = "partially_correct", -0.25, False
            why = "some tests pass but the bug was never fixed"
        case "failure", True if alone:
            verdict, score, boundary = "partially_correct", 0.0, True
            why = f"applied the fix alone at step {applied_at} yet the tests fail"
        case "failure", True:
            verdict, score, boundary = "partially_correct", -0.25, False
            why = f"applied the fix at step {applied_at}, then broke the code with other changes"
        case "failure", False if offered:
            verdict, score, boundary = "incorrect", -1.0, False
            why = f"passed over the fix {missed} time(s)"
        case "failure", False:
            verdict, score, boundary = "incorrect", -0.5, False
            why = "the fix was never among the shown candidates"
        case _:  # blocked
            verdict, score, boundary = "unsure", 0.0, True
            why = "the environment blocked the episode"
    return TeacherSignal(
        backend=BACKEND,
        verdict=verdict,
        score=score,
        hints=hints,
        boundary=boundary,
        rationale=f"{why}; the bug is the {where}",
    )


def _judge_known_fix(req: TeacherRequest, task: ShellTask, command: str) -> TeacherSignal:
    """An imported or mined task whose known fix no candidate edit makes: the hint is a
    free-text command that applies it (at the first step, unless that step ran it), the verdict
    follows the outcome."""
    hints: list[TeacherHint] = []
    if req.steps and req.steps[0].action.strip() != command.strip():
        hints.append(
            TeacherHint(
                step=req.steps[0].index,
                better_action=command,
                note="applies the known fix (no candidate edit makes it)",
            )
        )
    where = task.known_fix.commit[:12] if task.known_fix and task.known_fix.commit else "a patch"
    match req.outcome:
        case "success":
            verdict, score, boundary, why = "correct", 1.0, False, "the tests pass"
        case "partial":
            verdict, score, boundary, why = "partially_correct", 0.25, False, "some tests pass"
        case "failure":
            verdict, score, boundary, why = "incorrect", -0.5, False, "the tests still fail"
        case _:
            verdict, score, boundary, why = "unsure", 0.0, True, "the environment blocked it"
    return TeacherSignal(
        backend=BACKEND,
        verdict=verdict,
        score=score,
        hints=hints,
        boundary=boundary,
        rationale=f"{why}; the known fix ({where}) is outside the candidate edits",
    )


def judge_browser(req: TeacherRequest, task: BrowserTask) -> TeacherSignal:
    """The oracle's signal for a browser episode on ``task`` (see the module docstring)."""
    if not task.solution:
        return not_judged(req, f"task {task.task_id} carries no solution path to follow")
    hints: list[TeacherHint] = []
    followed = 0
    for step in req.steps:
        if followed >= len(task.solution):
            break
        try:
            expected = resolve_names(
                task.solution[followed], elements_from_observation(step.observation)
            )
        except InvalidAction:
            break  # the page is not where the path expects it: nothing more to say
        try:
            same = parse(step.action) == parse(expected)
        except InvalidAction:
            same = False
        if same:
            followed += 1
            continue
        hints.append(
            TeacherHint(
                step=step.index,
                better_action=as_candidate(expected, step.candidates) or expected,
                note=f"step {followed + 1} of the path: {task.solution[followed]}",
            )
        )
        break
    missed = len(hints)
    where = f"{task.flow}/{task.template}: {followed} of {len(task.solution)} path steps followed"
    if req.outcome == "blocked":
        return TeacherSignal(
            backend=BACKEND, verdict="unsure", boundary=True, hints=hints, rationale=where
        )
    if req.outcome == "success":
        verdict, score = "correct", max(0.5, 1.0 - 0.1 * missed)
    elif req.outcome == "partial":
        verdict, score = "partially_correct", 0.25
    else:
        verdict, score = "incorrect", -1.0 if followed or missed else -0.5
    return TeacherSignal(
        backend=BACKEND,
        verdict=verdict,  # type: ignore[arg-type]
        score=score,
        hints=hints,
        rationale=where,
    )


def judge_orchestrator(req: TeacherRequest, task: OrchestratorTask) -> TeacherSignal:
    """The oracle's signal for an orchestrator episode on ``task`` (see the module docstring)."""
    if task.kind == "imported" and not sim.best_decision(task, sim.start(task))[0]:
        return not_judged(req, f"the log of task {task.task_id} says no right decision")
    state = sim.start(task)
    hints: list[TeacherHint] = []
    followed = 0
    replayed = True
    for expected_index, step in enumerate(req.steps):
        if step.index != expected_index or state.done:
            replayed = False  # a step left out of the digest: the state after it is unknown
            break
        best, why = sim.best_decision(task, state)
        if sim.normalise(step.action) == sim.normalise(best):
            followed += 1
        else:
            offered = [c for c in step.candidates if sim.normalise(c) == sim.normalise(best)]
            hints.append(
                TeacherHint(
                    step=step.index,
                    better_action=offered[0] if offered else best,
                    note=f"{state.stage}: {why}",
                )
            )
        state = sim.step(task, state, step.action)
    missed = len(hints)
    where = (
        f"{task.kind} {task.template or 'log'}: {followed} of {len(req.steps)} decisions were the "
        f"best; incidents {state.incidents}, human minutes {state.human_minutes}, "
        f"compute units {state.compute}"
    )
    if req.outcome == "blocked" or not replayed:
        return TeacherSignal(
            backend=BACKEND,
            verdict="unsure",
            boundary=True,
            hints=hints,
            rationale=where if replayed else f"{where}; the digest leaves steps out",
        )
    if req.outcome == "success" and not state.incidents:
        verdict, score, boundary = "correct", max(0.5, 1.0 - 0.1 * missed), False
    elif req.outcome == "partial" and not state.incidents:
        verdict, score, boundary = "partially_correct", 0.25, False
    else:  # a failure, or a run that shipped an incident on its way to its end
        verdict = "incorrect"
        score = -1.0 if state.incidents else -0.5
        boundary = missed == 0  # every decision was the best and the run still failed
    return TeacherSignal(
        backend=BACKEND,
        verdict=verdict,  # type: ignore[arg-type]
        score=score,
        boundary=boundary,
        hints=hints,
        rationale=where,
    )


_OS_OUTPUT = "The output of the OS"


def _agentbench_reference(
    task: AgentBenchDbTask | AgentBenchOsTask, steps: list, at: int
) -> str | None:
    """The reference turn at step ``at`` given the steps before it (which followed it)."""
    if isinstance(task, AgentBenchDbTask):
        turns = reference_turns(task)
        return turns[at] if at < len(turns) else None
    if at == 0:
        return reference_action(task, problem(task))
    if at == 1 and _OS_OUTPUT in steps[1].observation:
        seen = steps[1].observation.rsplit(_OS_OUTPUT, 1)[1]
        return reference_action(task, f"{problem(task)}\n\n{steps[0].action}\n\n{_OS_OUTPUT}{seen}")
    return None


def _same_turn(task: AgentBenchDbTask | AgentBenchOsTask, a: str, b: str) -> bool:
    if isinstance(task, AgentBenchDbTask):
        first, second = parse_action(a), parse_action(b)
        if task.kind in MODIFYING and first.kind == second.kind == "answer":
            return True  # the table is judged, not the answer's text
        return first == second
    first, second = parse_os_action(a), parse_os_action(b)
    if (
        first.kind == "answer"
        and second.kind == "answer"
        and None not in (first.content, second.content)
    ):
        return (first.content or "").strip() == (second.content or "").strip()
    return first == second


def judge_agentbench(
    req: TeacherRequest, task: AgentBenchDbTask | AgentBenchOsTask
) -> TeacherSignal:
    """The oracle's signal for an AgentBench DB or OS episode (see the module docstring)."""
    if isinstance(task, AgentBenchOsTask) and reference_action(task, problem(task)) is None:
        return not_judged(req, f"task {task.task_id} has no reference solution")
    steps = sorted(req.steps, key=lambda s: s.index)
    hints: list[TeacherHint] = []
    followed = 0
    for at, step in enumerate(steps):
        if step.index != at:
            break  # a step left out of the digest: what came before it is unknown
        expected = _agentbench_reference(task, steps, at)
        if expected is None:
            break
        if _same_turn(task, step.action, expected):
            followed += 1
            continue
        hints.append(TeacherHint(step=step.index, better_action=expected, note="the reference"))
        break
    where = f"{req.environment}: {followed} reference turns followed"
    if req.outcome == "blocked":
        return TeacherSignal(
            backend=BACKEND, verdict="unsure", boundary=True, hints=hints, rationale=where
        )
    if req.outcome == "success":
        return TeacherSignal(backend=BACKEND, verdict="correct", score=1.0, rationale=where)
    return TeacherSignal(
        backend=BACKEND, verdict="incorrect", score=-0.5, hints=hints, rationale=where
    )


_FLIPPED = {"correct": "incorrect", "incorrect": "correct"}


def garble(
    signal: TeacherSignal, req: TeacherRequest, *, accuracy: float, seed: int = 0
) -> TeacherSignal:
    """The oracle's ``signal`` as a teacher right with probability ``accuracy`` would give it
    (the ``noisy-oracle`` backend). Each hint is, with probability ``1 - accuracy``, replaced
    by a wrong action: one of the step's other candidates, drawn uniformly (a step with no
    other candidate loses the hint: there is nothing wrong to say). The verdict is, with the
    same probability, wrong: its score negated, ``correct`` and ``incorrect`` swapped
    (``unsure`` and a score of 0 have no wrong side). Boundary flags stay: whether a case is
    ambiguous is the episode's, not the teacher's. Every draw is fixed by ``seed``, the episode
    and the step, so the same episode is garbled the same way each time it is asked about.
    Raises ``ValueError`` for an accuracy outside [0, 1]."""
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"accuracy must be within [0, 1], got {accuracy!r}")
    by_index = {s.index: s for s in req.steps}

    def wrong(what: str) -> bool:
        draw = hashlib.sha256(f"{seed}:{req.episode_id}:{what}".encode()).digest()
        return int.from_bytes(draw[:8], "big") / 2**64 >= accuracy

    hints: list[TeacherHint] = []
    garbled = 0
    for h in signal.hints:
        if h.better_action is None or not wrong(f"hint:{h.step}"):
            hints.append(h)
            continue
        garbled += 1
        step = by_index.get(h.step)
        others = [c for c in (step.candidates if step else []) if c != h.better_action]
        if others:
            pick = random.Random(f"{seed}:{req.episode_id}:pick:{h.step}").choice(others)
            hints.append(msgspec.structs.replace(h, better_action=pick, note=""))
    flip = signal.score != 0.0 and wrong("verdict")
    notes = [f"{garbled} of {len(signal.hints)} hints wrong"] if garbled else []
    if flip:
        notes.append("verdict wrong")
    return msgspec.structs.replace(
        signal,
        backend=NOISY_BACKEND,
        hints=hints,
        score=-signal.score if flip else signal.score,
        verdict=_FLIPPED.get(signal.verdict, signal.verdict) if flip else signal.verdict,  # type: ignore[arg-type]
        rationale="; ".join([signal.rationale, *(f"noisy-oracle: {n}" for n in notes)]).strip("; "),
    )
