"""The command line on a server that has no aios-rl state yet: a plain ``nats-server -js``.

Every command that stores tasks (each ``benchmark-generate``, once per environment, every
``import`` and ``mine``: found in the parser, so a new one runs here too) creates what it writes
and its tasks are readable afterwards; as a user who may not create streams and buckets, every
one of them stops with the same one line naming what to run. The commands that read answer a
bare server in one line too, never with a traceback. Each command runs in process, through the
CLI's ``main``, under a namespace of its own: each finds the server bare.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from aios_rl.bus import connect
from aios_rl.cli import build_parser, main
from aios_rl.envs import registry
from aios_rl.stack.auth import load_credentials, prepare
from aios_rl.stack.natsd import NatsServer
from aios_rl.stack.services import SERVICES
from contracts import Names

VERBS = ("benchmark-generate", "import", "mine")
"""What the commands that store tasks are called."""

RUNNING = ("up", "serve", "tap", "dashboard", "train", "eval", "mixed", "mixed-eval", "provision")
"""What the commands with ``--nats-url`` that neither store tasks nor read are called: they run
services, wait for them, or stream until stopped (``auth provision`` creates the state on
purpose)."""

EPISODE = '{"episode_id": "e1", "environment": "shell", "task_id": "t", "outcome": "success"}'
READ_ARGS = {
    ("campaign", "stop"): ["c1"],
    ("campaign", "resume"): ["c1"],
    ("publish",): ["episode.taught.shell", "episode.v1", EPISODE],
}
"""What a command of ``readers()`` needs besides the server."""

AGENTBENCH = Path(__file__).parent / "fixtures" / "agentbench"

BUGGY = "def at_least(xs, k):\n    return sum(1 for x in xs if x > k)\n"
TEST = """import unittest

from ops import at_least


class T(unittest.TestCase):
    def test_boundary(self):
        self.assertEqual(at_least([1, 2, 3], 2), 2)
"""
DECISION = (
    '{"stage": "dispatch", "evidence": "rotate the DB password (production)", '
    '"decision": "send to a subagent", "outcome": "incident", '
    '"correct": "ask a human to approve", "split": "heldout"}\n'
)
FEW = ["--test-cmd", "python -m unittest -q", "--max-tries", "1", "--offer", "1"]
"""A user's bug as a task with as few sandboxed test runs as the import allows."""


def _leaves(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield words, parser
        return
    for word, sub in subs[0].choices.items():
        yield from _leaves(sub, (*words, word))


LEAVES = dict(_leaves(build_parser()))
"""Every command of ``aios-rl`` (its words) -> its parser."""


def _option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


def writers() -> list[tuple[str, ...]]:
    """Every command that stores tasks, once per environment it stores for (``--env``)."""
    found: list[tuple[str, ...]] = []
    for words, parser in LEAVES.items():
        env = _option(parser, "--env")
        if words[-1] in VERBS:
            found += [(*words, "--env", c) for c in env.choices] if env and env.choices else [words]
    return found


def readers() -> list[tuple[str, ...]]:
    """Every other command that talks to a server (``--nats-url``) and does not run (``RUNNING``)."""
    return [
        words
        for words, parser in LEAVES.items()
        if _option(parser, "--nats-url") and words[-1] not in (*VERBS, *RUNNING)
    ]


def _git(repo: Path, *args: str) -> None:
    who = ["-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(["git", "-C", str(repo), *who, *args], check=True, capture_output=True)


def inputs(command: tuple[str, ...], tmp: Path) -> tuple[list[str], str, str, int]:
    """What ``command`` needs besides the server, the environment and split its tasks are
    stored under, and at least how many it stores."""
    match command:
        case ("benchmark-generate", "--env", env) | (env, "benchmark-generate"):
            return ["--count", "1"], env, "train", 1
        case ("shell", "import"):
            (tmp / "bug").mkdir()
            (tmp / "bug" / "ops.py").write_text(BUGGY)
            (tmp / "bug" / "test_ops.py").write_text(TEST)
            return [str(tmp / "bug"), *FEW], "shell", "real", 1
        case ("shell", "mine"):
            repo = tmp / "repo"
            repo.mkdir()
            (repo / "ops.py").write_text(BUGGY)
            (repo / "test_ops.py").write_text(TEST)
            _git(repo, "init", "-q")
            _git(repo, "add", "-A")
            _git(repo, "commit", "-qm", "count items above k")
            (repo / "ops.py").write_text(BUGGY.replace("x > k", "x >= k"))
            _git(repo, "commit", "-qam", "fix at_least: k itself counts")
            return [str(repo), *FEW, "--heldout-share", "0"], "shell", "real", 1
        case ("orchestrator", "import"):
            (tmp / "decisions.jsonl").write_text(DECISION)
            return [str(tmp / "decisions.jsonl")], "orchestrator", "heldout", 1
        case ("orchestrator", "mine"):  # no episode recorded yet: nothing to mine
            return [], "orchestrator", "train", 0
        case ("agentbench", "import", "--env", bench):
            return ["--dir", str(AGENTBENCH), "--split", "mini"], f"agentbench_{bench}", "mini", 1
    pytest.fail(f"`aios-rl {' '.join(command)}` stores tasks: give it its inputs in inputs()")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``aios-rl ARGV`` in this process: its exit code, stdout and stderr."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as ended:
        main(argv)
    out, err = capsys.readouterr()
    return int(ended.value.code or 0), out, err


def where(url: str, namespace: str, command: tuple[str, ...], tmp: Path) -> list[str]:
    """The server and namespace to run ``command`` on (and, for a command with ``--store``, an
    empty store it must not fall back to)."""
    parser = LEAVES[command[: command.index("--env")] if "--env" in command else command]
    store = ["--store", str(tmp / "store")] if _option(parser, "--store") else []
    return ["--nats-url", url, "--namespace", namespace, *store]


def fresh() -> str:
    """A namespace no command used yet: the bare server is bare there."""
    return f"t{uuid.uuid4().hex[:10]}"


async def stored(url: str, namespace: str, env: str, split: str) -> list[str]:
    """The ids of ``env``'s ``split`` on the server, each read back in full."""
    async with connect(url, name="test-bare", names=Names(namespace)) as bus:
        store = registry.task_store(bus, env)
        ids = await store.list(split)
        for task_id in ids:
            await store.get(task_id)
    return ids


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A plain ``nats-server -js``: no stream, bucket or object store of aios-rl."""
    with NatsServer(tmp_path_factory.mktemp("bare")) as server:
        yield server.url


GUARDED = "g"
"""The namespace of the server with users."""


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A server with the stack's users under ``GUARDED`` (and nothing provisioned), and the
    folder of their credentials."""
    data = tmp_path_factory.mktemp("guarded")
    auth = prepare(data, Names(GUARDED), [s.name for s in SERVICES])
    with NatsServer(data / "nats", config=auth.config) as server:
        yield server.url, data


def test_every_task_writing_command_is_found() -> None:
    found = writers()
    for env in registry.benchmarks():
        assert (env, "benchmark-generate") in found
        assert ("benchmark-generate", "--env", env) in found
    assert {("shell", "import"), ("shell", "mine"), ("orchestrator", "mine")} <= set(found)
    assert ("agentbench", "import", "--env", "db") in found
    assert ("checkpoints",) in readers() and ("shell", "train") not in readers()


@pytest.mark.parametrize("command", writers(), ids=" ".join)
def test_a_task_writing_command_creates_what_it_writes_on_a_bare_server(
    bare: str, command: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra, env, split, least = inputs(command, tmp_path)
    namespace = fresh()
    code, out, err = run([*command, *extra, *where(bare, namespace, command, tmp_path)], capsys)
    assert code == 0, err
    ids = asyncio.run(stored(bare, namespace, env, split))
    assert len(ids) >= least, (out, err)
    assert not (tmp_path / "store").exists()  # on the server it was given, not a store


@pytest.mark.parametrize("command", writers(), ids=" ".join)
def test_a_task_writing_command_says_what_to_run_when_it_may_not_create_it(
    guarded: tuple[str, Path],
    command: tuple[str, ...],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, data = guarded
    extra, _env, _split, _least = inputs(command, tmp_path)
    runner = load_credentials(data, "shell-runner")
    assert runner is not None
    (tmp_path / "runner.json").write_text(
        f'{{"user": "{runner.user}", "password": "{runner.password}"}}'
    )
    at = [*where(url, GUARDED, command, tmp_path), "--credentials", str(tmp_path / "runner.json")]
    code, _out, err = run([*command, *extra, *at], capsys)
    message = [ln for ln in err.splitlines() if ln.startswith("aios-rl ")]
    assert code == 1 and len(message) == 1 and "Traceback" not in err, err
    assert "cannot create the aios-rl streams and buckets" in message[0]
    assert f"run `aios-rl auth provision --nats-url {url} --namespace {GUARDED}`" in message[0]


@pytest.mark.parametrize("command", readers(), ids=" ".join)
def test_a_read_command_answers_a_bare_server_in_one_line(
    bare: str, command: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*command, *READ_ARGS.get(command, []), *where(bare, fresh(), command, tmp_path)]
    code, _out, err = run(argv, capsys)
    assert "Traceback" not in err
    if code != 0:
        lines = err.strip().splitlines()
        assert code == 1 and len(lines) == 1 and lines[0].startswith("aios-rl "), err
