"""AgentBench's OS-interaction bench, pure: its task format, its interaction protocol and its
judge. The machine the tasks run on (a sandbox with a root filesystem of its own) is not built
yet (issue 24); everything here is what that environment will use, tested on its own.

Task format (AgentBench's ``os_interaction`` JSON, read as AgentBench reads it): ``create``
names the image (``image``, or ``local``; default ``default``) and ``init`` scripts; ``start`` runs
in the agent's shell before the first turn; ``evaluation`` holds ``match`` (a string: the exact
answer, stripped; or ``{"answer" | "regex", "strip"}``) or ``check`` (one script or a list, where
``null`` stands for the ``example`` solution). A script is a string (bash), or ``{"code" | "file",
"language"}`` with ``file`` relative to the scripts folder. An entry whose ``create`` is not an
object (one in AgentBench's dev split is a list) gets the default image and no init, as in
AgentBench.

Protocol: each turn, the last ``Act:`` line the agent wrote that names an action counts (read from
the end): ``bash`` runs the text of every ```` ```bash ```` block (joined by a blank line) in the
shell and shows its output (cut at :data:`OUTPUT_LIMIT`); ``finish`` ends with no answer;
``answer(...)`` ends with what stands between the first ``(`` and the last ``)``. Anything else is
an invalid action, which ends the episode failed. At most :data:`ROUND_LIMIT` turns.

Judge: ``match`` compares the answer (stripped when asked) with the expected text, or searches the
regular expression in it; ``check`` runs each script with the answer and every earlier script's
output as arguments, and passes when every one exits 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from contracts import AgentBenchOsTask, OsMatch, OsScript

from .db import content_id

__all__ = [
    "EMPTY_OUTPUT",
    "OUTPUT_LIMIT",
    "ROUND_LIMIT",
    "OsAction",
    "judge_check",
    "judge_match",
    "load_os_tasks",
    "os_task_id",
    "parse_os_action",
    "script_argv",
    "shown_output",
]

ROUND_LIMIT = 8
OUTPUT_LIMIT = 800
"""Output longer than this is cut to its first 780 characters and marked."""
EMPTY_OUTPUT = "The output of the OS is empty."

Runner = Callable[[OsScript, Sequence[str]], tuple[int, str]]
"""Runs a script with arguments on the episode's machine: (exit status, output)."""


class OsAction(msgspec.Struct, frozen=True):
    kind: str
    """``bash``, ``answer`` (``finish`` is an answer of ``None``), or ``invalid``."""
    content: str | None = None


_THINK = re.compile(r"Think:\s*(.+)")
_ACT = re.compile(r"Act:\s*(.+)")
_BASH = re.compile(r"```bash\n(.*?)\n```", re.DOTALL)


def parse_os_action(raw: str) -> OsAction:
    """What one turn asks (see the module docstring)."""
    for act in reversed(_ACT.findall(raw)):
        low = act.lower()
        if low.startswith("bash"):
            return OsAction("bash", "\n\n".join(_BASH.findall(raw)))
        if low.startswith("finish"):
            return OsAction("answer", None)
        if low.startswith("answer"):
            content = act[6:].strip()
            left, right = content.find("("), content.rfind(")")
            if left == -1 or right == -1:
                continue
            return OsAction("answer", content[left + 1 : right])
    return OsAction("invalid")


def shown_output(output: str) -> str:
    """The output as the agent is shown it."""
    if not output:
        return EMPTY_OUTPUT
    if len(output) > OUTPUT_LIMIT:
        output = output[:780] + "\n[truncated because the output is too long]"
    return "The output of the OS:\n\n" + output


def judge_match(answer: str | None, match: OsMatch) -> bool:
    if answer is None:
        return False
    if match.strip:
        answer = answer.strip()
    if match.answer is not None:
        return answer == match.answer
    if match.regex is not None:
        return re.search(match.regex, answer) is not None
    return False


def judge_check(
    answer: str | None,
    check: Sequence[OsScript | None],
    example: OsScript | None,
    run: Runner,
) -> bool:
    """Run the check scripts (see the module docstring) through ``run``."""
    params = [str(answer)]
    for script in check:
        chosen = script if script is not None else example
        if chosen is None:
            return False  # a null entry and no example: nothing to compare with
        code, output = run(chosen, list(params))
        if code != 0:
            return False
        params.append(output)
    return True


def script_argv(script: OsScript, params: Sequence[str]) -> list[str]:
    """The command that runs ``script`` with ``params`` as AgentBench runs it on the machine:
    ``bash -c CODE -- PARAMS...`` or ``python3 -c CODE PARAMS...``. Raises ``ValueError`` for
    another language (AgentBench compiles C and C++ checks first: not supported yet)."""
    if script.language == "bash":
        return ["bash", "-c", script.code, *(["--", *params] if params else [])]
    if script.language == "python":
        return ["python3", "-c", script.code, *params]
    raise ValueError(f"{script.language} scripts are not supported yet")


def _script(obj: object, scripts: Path) -> OsScript | None:
    if obj is None:
        return None
    if isinstance(obj, str):
        return OsScript(language="bash", code=obj)
    if isinstance(obj, dict):
        language = str(obj.get("language", "bash"))
        if "file" in obj:
            return OsScript(
                language=language, code=(scripts / str(obj["file"])).read_text(encoding="utf-8")
            )
        if "code" in obj:
            return OsScript(language=language, code=str(obj["code"]))
    raise ValueError(f"not a script: {json.dumps(obj)[:200]}")


def os_task_id(task: AgentBenchOsTask) -> str:
    """The content address of an OS task (:func:`.db.content_id`)."""
    return content_id(task)


def load_os_tasks(path: Path, scripts: Path, split: str = "dev") -> list[AgentBenchOsTask]:
    """The tasks of an AgentBench OS file (a JSON list or object, or JSONL), scripts read from
    ``scripts``. Raises ``ValueError`` naming the entry that is not an OS task."""
    text = Path(path).read_text(encoding="utf-8")
    if str(path).endswith(".jsonl"):
        raw = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        loaded = json.loads(text)
        raw = loaded if isinstance(loaded, list) else [loaded]
    out = []
    for n, item in enumerate(raw):
        where = f"{Path(path).name}#{n}"
        try:
            create = item.get("create", {})
            create = create if isinstance(create, dict) else {}  # AgentBench: not an object
            init = create.get("init", [])
            init_list = init if isinstance(init, list) else [init]
            evaluation = item["evaluation"]
            match = check = None
            if "match" in evaluation:
                m = evaluation["match"]
                match = (
                    OsMatch(answer=m, strip=True)
                    if isinstance(m, str)
                    else OsMatch(
                        answer=m.get("answer"), regex=m.get("regex"), strip=m.get("strip", True)
                    )
                )
            elif "check" in evaluation:
                c = evaluation["check"]
                check = [_script(s, scripts) for s in (c if isinstance(c, list) else [c])]
            else:
                raise ValueError("check or match must exist")
            example = (
                _script(evaluation["example"], scripts)
                if check is not None and "example" in evaluation
                else None
            )
            draft = AgentBenchOsTask(
                task_id="",
                split=split,
                description=str(item["description"]),
                image=str(create.get("image") or create.get("local") or "default"),
                init=[s for s in (_script(x, scripts) for x in init_list) if s is not None],
                start=_script(item.get("start"), scripts),
                match=match,
                check=check or [],
                example=example,
                labels=[str(x) for x in item.get("labels", [])],
                source=where,
            )
        except (KeyError, TypeError, OSError, ValueError) as exc:
            raise ValueError(f"{where} is not an AgentBench OS task: {exc}") from None
        out.append(msgspec.structs.replace(draft, task_id=os_task_id(draft)))
    return out
