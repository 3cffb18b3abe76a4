"""Which stack a command talks to, and as whom: a command run in process leaves no credentials
behind; the default credentials are the store's; a server named by ``--nats-url`` that refuses
the command is an error, never a reason to run the command on another stack."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from aios_rl.cli import main
from aios_rl.cli._common import use_credentials
from aios_rl.stack.auth import prepare
from aios_rl.stack.embedded import StackError, reader, stack
from aios_rl.stack.natsd import NatsServer
from contracts import Names

from .support import stack_env


def _admin_file(store: Path, user: str = "admin", password: str = "from-the-store") -> Path:
    path = store / "auth" / "admin.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"user": user, "password": password}))
    return path


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NATS_USER", "NATS_PASSWORD", "NATS_CA"):
        monkeypatch.setenv(name, "")  # recorded: what the test sets is undone after it
        monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A server with users, as ``aios-rl up`` runs it (its own store and admin)."""
    data = tmp_path_factory.mktemp("up")
    auth = prepare(data, Names(""), ["reward"])
    with NatsServer(data / "nats", config=auth.config) as server:
        yield server


def test_the_default_credentials_are_the_stores(
    tmp_path: Path, no_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    _admin_file(store)
    use_credentials(argparse.Namespace(credentials=None, store=store))
    assert os.environ["NATS_USER"] == "admin"
    assert os.environ["NATS_PASSWORD"] == "from-the-store"
    monkeypatch.delenv("NATS_USER")
    # A command without --store: the store AIOS_STORE names.
    monkeypatch.setenv("AIOS_STORE", str(store))
    use_credentials(argparse.Namespace(credentials=None))
    assert os.environ["NATS_USER"] == "admin"


def test_a_command_run_in_process_leaves_no_credentials_behind(
    tmp_path: Path, no_credentials: None
) -> None:
    store = tmp_path / "store"
    _admin_file(store)
    with pytest.raises(SystemExit) as ended:
        main(["checkpoints", "--store", str(store), "--nats-url", "nats://127.0.0.1:1"])
    assert ended.value.code == 1  # no server, no state: a one-line error
    assert "NATS_USER" not in os.environ and "NATS_PASSWORD" not in os.environ


async def test_a_named_server_that_refuses_is_an_error_not_another_stack(
    tmp_path: Path, secured: NatsServer, no_credentials: None
) -> None:
    mine = tmp_path / "mine"
    _admin_file(mine, password="not-this-servers")
    with pytest.raises(StackError, match=f"the NATS server at {secured.url} did not accept"):
        async with stack(secured.url, data_dir=mine, needs=set(), echo=lambda _: None):
            pass
    with pytest.raises(StackError, match="did not accept"):
        async with reader(secured.url, store=mine):
            pass
    assert not (mine / "nats").exists()  # no embedded server was started on the store


def test_the_cli_says_so_in_one_line(tmp_path: Path, secured: NatsServer) -> None:
    env = stack_env()
    for name in ("NATS_USER", "NATS_PASSWORD"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", "aios_rl.cli", "shell", "train", "--epochs", "1",
         "--nats-url", secured.url, "--store", str(tmp_path / "mine")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, (done.stdout[-2000:], done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "did not accept" in lines[0] and "--credentials" in lines[0], lines
    assert "starting an embedded stack" not in done.stdout
    assert not (tmp_path / "mine" / "nats").exists()
