"""A :class:`~contracts.TeacherRequest` rendered as text for a language-model teacher, asking for
the fixed JSON verdict that :func:`aios_rl.teachers.normalize` reads back."""

from __future__ import annotations

from contracts import TeacherRequest

__all__ = ["VERDICT_INSTRUCTIONS", "render_episode", "render_prompt"]

VERDICT_INSTRUCTIONS = """\
You are a teacher judging one episode of a student agent. Read the task, the steps the agent \
took (what it saw, the actions it was offered, the one it chose) and how the episode ended.

Answer with exactly one JSON object and nothing else, of this form:
{"verdict": "correct" | "partially_correct" | "incorrect" | "unsure",
 "score": <a number from -1 (useless or harmful trajectory) to 1 (ideal trajectory)>,
 "hints": [{"step": <a step index from the episode>, "better_action": "<the action the agent \
should have chosen at that step, copied verbatim from that step's candidates>"}],
 "boundary": <true if this is a borderline case that should be kept for analysis only, \
else false>,
 "rationale": "<one or two sentences>"}
Give hints only for steps where you know a better action; an empty list is fine."""


def render_episode(req: TeacherRequest) -> str:
    """The episode part of the prompt: task, steps, outcome and the environment's report."""
    lines = [
        f"Environment: {req.environment}    Task: {req.task_id}",
        "",
        "## Task",
        req.task_statement.strip() or "(no statement was given)",
        "",
        f"## Steps ({len(req.steps)} shown)",
    ]
    for step in req.steps:
        lines += [f"### Step {step.index}", "Observation:", step.observation.rstrip()]
        if step.candidates:
            lines.append("Candidates:")
            lines += [f"  - {c}" for c in step.candidates]
        lines += [f"Chosen: {step.action}", ""]
    lines += [f"## Outcome: {req.outcome}"]
    if req.env_report.strip():
        lines += ["", "## What the environment reported", req.env_report.rstrip()]
    return "\n".join(lines) + "\n"


def render_prompt(req: TeacherRequest) -> str:
    """Instructions, then the episode, then a reminder of the answer's form: one text for a
    teacher that takes a single prompt (the coding-agent CLIs)."""
    return (
        f"{VERDICT_INSTRUCTIONS}\n\n{render_episode(req)}\n"
        "Reply with the JSON verdict object only.\n"
    )
