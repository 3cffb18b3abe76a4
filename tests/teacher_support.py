"""Helpers of the teacher tests: a hand-made shell task with its ground truth, episodes on it,
fake teacher CLIs and a fake OpenAI-compatible server, service subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import stat
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aios_rl.bus import Bus, discover
from aios_rl.envs.shell.store import ShellTaskStore
from aios_rl.envs.shell.verify import task_id_of
from contracts import (
    CandidateEdit,
    Episode,
    GroundTruth,
    Names,
    Outcome,
    ShellTask,
    Timings,
    TrajectoryStep,
)

FIX = "edit stack.py: `return self.items[-2]` -> `return self.items[-1]`"
WRONG = "edit stack.py: `self.items.append(x)` -> `self.items.insert(0, x)`"
TEST_EDIT = "edit test_stack.py: `assert s.pop() == 3` -> `assert s.pop() == 2`"
RUN = "run the tests"
SUBMIT = "submit"

_FILES = {
    "stack.py": (
        "class Stack:\n    def __init__(self):\n        self.items = []\n\n"
        "    def push(self, x):\n        self.items.append(x)\n\n"
        "    def pop(self):\n        return self.items[-2]\n"
    ),
    "test_stack.py": (
        "from stack import Stack\n\n\ndef test_pop():\n    s = Stack()\n"
        "    s.push(2)\n    s.push(3)\n    assert s.pop() == 3\n"
    ),
}
_TEST_COMMAND = ["{python}", "-m", "pytest", "-q"]

TASK = ShellTask(
    task_id=task_id_of(_FILES, _TEST_COMMAND),  # a content address, as every stored task's
    family="stack",
    statement="The stack's pop() returns the wrong element. Make the tests pass.",
    files=_FILES,
    test_command=_TEST_COMMAND,
    test_files=["test_stack.py"],
    failing_tests=["test_stack.py::test_pop"],
    candidate_edits=[
        CandidateEdit(
            label=WRONG, path="stack.py", old="self.items.append(x)", new="self.items.insert(0, x)"
        ),
        CandidateEdit(
            label=FIX,
            path="stack.py",
            old="return self.items[-2]",
            new="return self.items[-1]",
            is_fix=True,
        ),
        CandidateEdit(
            label=TEST_EDIT,
            path="test_stack.py",
            old="assert s.pop() == 3",
            new="assert s.pop() == 2",
        ),
    ],
    ground_truth=GroundTruth(
        path="stack.py",
        line=9,
        operator="off_by_one",
        original="return self.items[-1]",
        mutated="return self.items[-2]",
    ),
)


async def store_task(bus: Bus, task: ShellTask = TASK) -> None:
    """Put ``task`` where the shell environment keeps it: the task store (Object Store
    ``tasks``)."""
    await ShellTaskStore(bus).put(task)


def shell_episode(
    episode_id: str,
    actions: list[str],
    outcome: Outcome = "failure",
    *,
    task_id: str = TASK.task_id,
    offered: list[str] | None = None,
) -> Episode:
    """A shell episode on the task: one step per action, each offering ``offered``."""
    candidates = offered if offered is not None else [RUN, WRONG, FIX, TEST_EDIT, SUBMIT]
    return Episode(
        episode_id=episode_id,
        environment="shell",
        task_id=task_id,
        outcome=outcome,
        env_reward=1.0 if outcome == "success" else 0.0,
        trajectory=[
            TrajectoryStep(
                index=i,
                observation=f"$ pytest -q\nFAILED test_stack.py::test_pop (step {i})",
                action=a,
                candidates=list(candidates),
            )
            for i, a in enumerate(actions)
        ],
        timings=Timings(started_at=1.0, finished_at=2.0, stages={"completed": 2.0}),
        info={"task_statement": TASK.statement, "tests_passed": "0/1"},
    )


# -- subprocesses ------------------------------------------------------------------------------------


def service_env(nats_url: str, names: Names, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "NATS_URL": nats_url,
        "AIOS_NAMESPACE": names.namespace,
        "AIOS_LOG_FORMAT": "json",
        **extra,
    }


@contextlib.asynccontextmanager
async def module_process(
    module: str, env: dict[str, str], *args: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m module args`` for the length of the block; SIGTERM (a graceful stop) at the
    end, and the exit code must be 0."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        *args,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 20)
        assert proc.returncode == 0, f"{module} exited {proc.returncode}: {err.decode()[-2000:]}"


async def until_serving(bus: Bus, service: str, proc: asyncio.subprocess.Process) -> None:
    """Wait until ``service`` answers discovery in the test's namespace (each round waits for
    replies: no busy loop); fail at once if its process died."""
    while not any(v.name == service for v in await discover(bus.nc, namespace=bus.names.namespace)):
        if proc.returncode is not None:
            err = await proc.stderr.read() if proc.stderr else b""
            raise AssertionError(f"{service} exited {proc.returncode}: {err.decode()[-2000:]}")


# -- fake CLIs ---------------------------------------------------------------------------------------


def fake_cli(bin_dir: Path, name: str, body: str) -> Path:
    """An executable ``bin_dir/name``: a shell script that records its arguments and standard
    input next to itself (``<name>.argv``, ``<name>.stdin``), then runs ``body``."""
    path = bin_dir / name
    path.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > "{bin_dir}/{name}.argv"\n'
        f'cat > "{bin_dir}/{name}.stdin"\n'
        f"{body}\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def printing(fixture: Path) -> str:
    """A fake CLI body that prints a recorded output."""
    return f'cat "{fixture}"'


# -- a fake OpenAI-compatible server ------------------------------------------------------------------


@dataclass
class FakeOpenAI:
    """Records every request; answers with ``reply(request_json) -> (status, body)``."""

    reply: Callable[[dict[str, Any]], tuple[int, str]]
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    def verdict_reply(self, verdict: dict[str, Any]) -> None:
        content = json.dumps(verdict)

        def reply(_: dict[str, Any]) -> tuple[int, str]:
            return 200, json.dumps(
                {
                    "id": "chatcmpl-test",
                    "object": "chat.completion",
                    "model": "test-model",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop",
                        }
                    ],
                }
            )

        self.reply = reply


@contextlib.contextmanager
def openai_server(reply: Callable[[dict[str, Any]], tuple[int, str]]) -> Iterator[FakeOpenAI]:
    """A ``/v1/chat/completions`` server on 127.0.0.1 (a free port) in a thread."""
    fake = FakeOpenAI(reply)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            fake.requests.append({"path": self.path, "headers": dict(self.headers), "json": body})
            status, text = fake.reply(body)
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
