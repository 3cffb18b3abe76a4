"""AgentBench's OS-interaction bench, pure: its task format, its interaction protocol and its
judge. The machine the tasks run on is :mod:`.machine` (on an image of :mod:`.images`); the
environment that puts them together is :mod:`.os_adapter`.

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

import base64
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from contracts import AgentBenchOsTask, OsMatch, OsScript

from .db import content_id

__all__ = [
    "EMPTY_OUTPUT",
    "INSTRUCTIONS",
    "OUTPUT_LIMIT",
    "ROUND_LIMIT",
    "OsAction",
    "example_command",
    "judge_check",
    "judge_match",
    "load_os_tasks",
    "os_task_id",
    "parse_os_action",
    "problem",
    "reference_action",
    "script_argv",
    "shown_output",
]

ROUND_LIMIT = 8
OUTPUT_LIMIT = 800
"""Output longer than this is cut to its first 780 characters and marked."""
EMPTY_OUTPUT = "The output of the OS is empty."

INSTRUCTIONS = """You will act as a person at a Linux (Ubuntu) terminal; I play the operating \
system. Your goal is to do what I ask or to answer my question. Each turn, first think about \
what to do, then take exactly one of three actions: "bash", "finish" or "answer".

1. To run bash code, write:

Think: your thought.

Act: bash

```bash
# your bash code
```

2. When the task is done, write:

Think: your thought.

Act: finish

3. When you have the answer to the question, write:

Think: your thought.

Act: answer(your answer, inside these parentheses)

Long output is truncated: the truncated output is not complete, deal with that yourself. Your \
bash code must not wait for input. Take exactly one of the three actions each turn.

For example, my problem is: how many files are in the directory "/etc"?

Think: to count the files in /etc I list them.

Act: bash

```bash
ls /etc
```

The output of the OS:

cpi cron.hourly fuse.conf iproute2 lvm networkd-dispatcher protocols selinux tmpfiles.d \
[truncated because the output is too long]

Think: the output was truncated, so I count with a command instead.

Act: bash

```bash
ls -1 /etc | wc -l
```

The output of the OS:

220

Think: the answer is 220.

Act: answer(220)"""
"""What the agent reads first: AgentBench's instructions and its one-shot example, in our
words, with the same action formats."""


def problem(task: AgentBenchOsTask) -> str:
    return "Now, I will start a new problem in a new OS. My problem is:\n\n" + task.description


def example_command(script: OsScript) -> str:
    """One shell line that runs ``script`` as a program, for a policy that replays a task's
    ``example`` in the agent's shell: ``echo BASE64 | base64 -d | bash`` (or ``python3``), so a
    multi-line script does not echo line by line."""
    program = {"bash": "bash", "python": "python3"}.get(script.language)
    if program is None:
        raise ValueError(f"{script.language} scripts are not supported")
    encoded = base64.b64encode(script.code.encode()).decode()
    return f"echo {encoded} | base64 -d | {program}"


def reference_action(task: AgentBenchOsTask, observation: str) -> str | None:
    """What an agent that knows the task's reference writes next, given the conversation so
    far; ``None`` when the task has none (a ``match`` by regex with no ``example``). With an
    ``example``: run it in the shell (:func:`example_command`), then answer what it printed,
    stripped. A ``match`` with an exact answer and no example: answer it."""
    if task.example is not None:
        last = observation.rsplit("\n\n", 1)[-1]
        if "\nAct: bash" not in observation.split(problem(task), 1)[-1]:
            return f"Think: run the reference solution.\n\nAct: bash\n\n```bash\n{example_command(task.example)}\n```"
        head = "The output of the OS:\n\n"
        tail = observation.rsplit(head, 1)[-1] if head in observation else ""
        answer = "" if last == EMPTY_OUTPUT else tail.strip()
        return f"Think: that is the answer.\n\nAct: answer({answer})"
    if task.match is not None and task.match.answer is not None:
        return f"Think: I know the answer.\n\nAct: answer({task.match.answer})"
    return None


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
