"""Turning a verified mutant into a :class:`~contracts.ShellTask`: the statement the policy
reads, the candidate edits it chooses from, and the content address.

The statement says what fails (test ids and the first line of each failure's exception), never
where: no traceback frames, no file lines. The candidate edits are the true fix and distractors
that look like fixes, derived from where the failing tests point: a wrong fix on the bug's
line (another operator's change there), changes elsewhere in the function that holds the bug,
then in the functions the failing tests name, then anywhere in the module. How many edits share
a line never tells the bug's line apart (see :func:`candidate_edits`).

All carry labels of one shape (``stack.py:23: `a` -> `b```), so a label never tells the fix
apart, and they are shuffled by a generator seeded from the task.
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Literal

from contracts import CandidateEdit, ShellTask

from . import mutations
from .mutations import Mutant, MutationError
from .pyparse import parse
from .verify import task_id_of

__all__ = [
    "assemble",
    "candidate_edits",
    "failure_reasons",
    "pointed_functions",
    "statement",
]

MAX_LISTED_FAILURES = 12
MAX_REASON_CHARS = 160


def _label(path: str, line: int, old: str, new: str) -> str:
    before, after = mutations.changed_lines(old, new)
    return f"{path}:{line}: `{before}` -> `{after}`"


def failure_reasons(output: str) -> dict[str, str]:
    """Test id -> the first line of the exception that failed it, from ``unittest`` output."""
    reasons: dict[str, str] = {}
    blocks = re.split(r"^={20,}$", output, flags=re.MULTILINE)
    for block in blocks:
        header = re.search(r"^(?:FAIL|ERROR): (\S+) \(([^)\s]+)\)", block, re.MULTILINE)
        if header is None:
            continue
        name, where = header.groups()
        test_id = where if where.endswith("." + name) or where == name else f"{where}.{name}"
        body = block[header.end() :]
        last_tb = body.rfind("Traceback (most recent call last):")
        tail = body[last_tb:] if last_tb >= 0 else body
        reason = ""
        for line in tail.splitlines()[1:]:
            if line and not line[0].isspace() and not line.startswith("-" * 20):
                reason = line.strip()
                break
        if len(reason) > MAX_REASON_CHARS:
            reason = reason[: MAX_REASON_CHARS - 3] + "..."
        reasons.setdefault(test_id, reason)
    for m in re.finditer(r"^(?:FAILED|ERROR) (\S+?::\S+?)(?: - (.*))?$", output, re.MULTILINE):
        reason = (m.group(2) or "").strip()
        if len(reason) > MAX_REASON_CHARS:
            reason = reason[: MAX_REASON_CHARS - 3] + "..."
        reasons.setdefault(m.group(1), reason)
    return reasons


def _shown(test_command: Sequence[str]) -> str:
    return " ".join(a.replace("{python}", "python") for a in test_command)


def statement(
    *,
    intro: str,
    code_paths: Sequence[str],
    test_paths: Sequence[str],
    test_command: Sequence[str],
    failing: Sequence[str],
    reasons: Mapping[str, str],
) -> str:
    """The task statement: what the code is, how to run the tests, what fails (with the first
    line of each failure), and the rule (fix the code, leave the tests alone)."""
    lines = [intro, "", f"Run the tests with `{_shown(test_command)}` in the task directory."]
    lines += ["", f"{len(failing)} test(s) fail:"]
    for test_id in failing[:MAX_LISTED_FAILURES]:
        reason = reasons.get(test_id, "")
        lines.append(f"- {test_id}" + (f": {reason}" if reason else ""))
    if len(failing) > MAX_LISTED_FAILURES:
        lines.append(f"- ... and {len(failing) - MAX_LISTED_FAILURES} more")
    lines += [
        "",
        f"Find the bug in {', '.join(code_paths)} and fix it so that every test passes. "
        f"Do not modify {', '.join(test_paths)}.",
    ]
    return "\n".join(lines)


def pointed_functions(test_sources: Mapping[str, str], failing: Sequence[str]) -> set[str]:
    """Names (functions, methods, attributes) the failing test methods mention.

    ``test_sources`` maps a test module's name (``test_stack``) to its source; a failing id is
    ``module.Class.method`` (unittest) or ``path/test_stack.py::[Class::]function[params]``
    (pytest; a function without a class is paired with ``""``)."""
    wanted: dict[str, set[tuple[str, str]]] = {}
    for test_id in failing:
        if "::" in test_id:
            path, *names = test_id.split("::")
            func = names[-1].split("[", 1)[0]
            cls = names[-2] if len(names) >= 2 else ""
            wanted.setdefault(PurePosixPath(path).stem, set()).add((cls, func))
            continue
        parts = test_id.split(".")
        if len(parts) >= 3:
            wanted.setdefault(parts[0], set()).add((parts[-2], parts[-1]))
    names: set[str] = set()
    for module, pairs in wanted.items():
        source = test_sources.get(module)
        if source is None:
            continue
        tree = parse(source)
        functions = [("", fn) for fn in tree.body if isinstance(fn, ast.FunctionDef)]
        for cls in tree.body:
            if isinstance(cls, ast.ClassDef):
                functions += [(cls.name, fn) for fn in cls.body if isinstance(fn, ast.FunctionDef)]
        for owner, fn in functions:
            if (owner, fn.name) in pairs:
                for node in ast.walk(fn):
                    if isinstance(node, ast.Name):
                        names.add(node.id)
                    elif isinstance(node, ast.Attribute):
                        names.add(node.attr)
    return names


def candidate_edits(
    *,
    path: str,
    original: str,
    mutant: Mutant,
    pointed: set[str],
    rng: random.Random,
    count: int = 4,
) -> list[CandidateEdit]:
    """The fix and up to ``count - 1`` distractors (see the module docstring), shuffled by
    ``rng``. A distractor is an applicable edit of the mutated file that does not give back
    the original module (by AST); whether it fails the tests is the caller's to check.

    How many edits share a line never points at the bug. Half the time (by ``rng``, when the
    bug's line offers a wrong fix) the edits come in pairs: the fix and a wrong fix on the bug's
    line, and two edits on one other line; otherwise every edit is on a line of its own."""
    gt = mutant.ground_truth
    fix = CandidateEdit(
        label=_label(path, gt.line, gt.mutated, gt.original),
        path=path,
        old=gt.mutated,
        new=gt.original,
        is_fix=True,
    )
    bug_function = mutant.site.function
    tiers: list[list[mutations.Site]] = [[], [], [], []]
    for site in mutations.sites(mutant.source):
        short = site.function.rsplit(".", 1)[-1]
        if site.line == gt.line:
            tiers[0].append(site)
        elif bug_function and site.function == bug_function:
            tiers[1].append(site)
        elif short in pointed:
            tiers[2].append(site)
        else:
            tiers[3].append(site)
    for tier in tiers:
        rng.shuffle(tier)
    elsewhere = tiers[1] + tiers[2] + tiers[3]  # nearest first
    seen = {fix.label}

    def edit_for(site: mutations.Site) -> CandidateEdit | None:
        try:
            other = mutations.apply(mutant.source, site, path)
        except MutationError:
            return None
        if mutations.same_module(other.source, original):
            return None  # another way to write the fix
        ot = other.ground_truth
        label = _label(path, ot.line, ot.original, ot.mutated)
        if label in seen:
            return None
        seen.add(label)
        return CandidateEdit(label=label, path=path, old=ot.original, new=ot.mutated)

    edits = [fix]
    if count >= 4 and rng.random() < 0.5:
        wrong_fix = next((e for e in map(edit_for, tiers[0]) if e is not None), None)
        pair = _pair_on_one_line(elsewhere, edit_for) if wrong_fix is not None else []
        if wrong_fix is not None and len(pair) == 2:
            edits += [wrong_fix, *pair]
    if len(edits) == 1:
        lines = {gt.line}
        for site in elsewhere:
            if len(edits) >= count:
                break
            if site.line in lines:
                continue
            edit = edit_for(site)
            if edit is not None:
                edits.append(edit)
                lines.add(site.line)
    rng.shuffle(edits)
    return edits


def _pair_on_one_line(
    sites: Sequence[mutations.Site], edit_for: Callable[[mutations.Site], CandidateEdit | None]
) -> list[CandidateEdit]:
    """Two edits on the first line (in ``sites`` order) that offers two."""
    by_line: dict[int, list[mutations.Site]] = {}
    for site in sites:
        by_line.setdefault(site.line, []).append(site)
    for group in by_line.values():
        if len(group) < 2:
            continue
        found = []
        for site in group:
            edit = edit_for(site)
            if edit is not None:
                found.append(edit)
                if len(found) == 2:
                    return found
    return []


def assemble(
    *,
    family: str,
    phase: Literal[1, 2],
    split: Literal["train", "heldout", "real"],
    files: Mapping[str, str],
    test_command: Sequence[str],
    test_files: Sequence[str],
    failing: Sequence[str],
    statement_text: str,
    edits: Sequence[CandidateEdit],
    mutant: Mutant,
    source: str,
) -> ShellTask:
    """The task, its id the content address of ``files`` and ``test_command``."""
    return ShellTask(
        task_id=task_id_of(files, test_command),
        phase=phase,
        split=split,
        family=family,
        statement=statement_text,
        files=dict(sorted(files.items())),
        test_command=list(test_command),
        test_files=sorted(test_files),
        failing_tests=sorted(failing),
        candidate_edits=list(edits),
        ground_truth=mutant.ground_truth,
        source=source,
    )
