"""One error root: every package's root class is an ``AiosError``, and the command line turns any
of them into one line on stderr (here a state outage, against a real nats-server)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from aios_rl.bus import BusError, ConnectError
from aios_rl.cli._common import CliError
from aios_rl.envs.agentbench.images import ImageMissing
from aios_rl.envs.agentbench.machine import MachineError
from aios_rl.envs.agentbench.mariadb import MariaDbError
from aios_rl.envs.browser.actions import InvalidAction
from aios_rl.envs.browser.miniwob import MiniwobError
from aios_rl.envs.loop import StepLimitError
from aios_rl.envs.orchestrator.importer import LogFormatError
from aios_rl.envs.registry import UnknownEnvironmentError
from aios_rl.envs.shell._common import GenerationError
from aios_rl.envs.shell.episode import UnsafePath
from aios_rl.envs.shell.importing import RejectedTask
from aios_rl.envs.shell.mutations import MutationError
from aios_rl.envs.shell.repo import SnapshotError
from aios_rl.envs.shell.sandbox import SandboxError
from aios_rl.envs.shell.verify import EditError
from aios_rl.errors import AiosError
from aios_rl.local.policy import UnknownLocalCheckpointError
from aios_rl.stack.embedded import NoStoreError, StackError
from aios_rl.stack.natsd import NatsServerError
from aios_rl.stack.supervisor import PlanError
from aios_rl.stack.tls import TlsError
from aios_rl.state import StateError, UnavailableError
from aios_rl.state.checkpoints import RegistryUnavailableError
from aios_rl.state.tasks import UnknownTaskError
from aios_rl.student.base import StudentError
from aios_rl.teachers._normalize import VerdictError
from contracts import Names
from services.sites.logic import SessionLimitError

ROOTS = [
    BusError,
    StateError,
    CliError,
    StackError,
    NatsServerError,
    PlanError,
    TlsError,
    StudentError,
    VerdictError,
    UnknownEnvironmentError,
    MiniwobError,
    InvalidAction,
    LogFormatError,
    SandboxError,
    UnsafePath,
    GenerationError,
    MutationError,
    SnapshotError,
    EditError,
    RejectedTask,
    MariaDbError,
    MachineError,
    ImageMissing,
    SessionLimitError,
    StepLimitError,
    UnknownLocalCheckpointError,
]


@pytest.mark.parametrize("root", ROOTS, ids=lambda c: c.__name__)
def test_every_package_root_is_an_aios_error(root: type[Exception]) -> None:
    assert issubclass(root, AiosError)


def test_subclasses_keep_the_builtin_kinds_they_had() -> None:
    assert issubclass(ConnectError, AiosError) and issubclass(NoStoreError, AiosError)
    assert issubclass(RegistryUnavailableError, AiosError)
    assert issubclass(UnknownTaskError, LookupError) and issubclass(UnknownTaskError, KeyError)
    assert issubclass(UnknownEnvironmentError, KeyError)
    for cls in (PlanError, VerdictError, InvalidAction, LogFormatError, RejectedTask, EditError):
        assert issubclass(cls, ValueError), cls
    assert issubclass(UnsafePath, OSError)
    assert issubclass(GenerationError, RuntimeError) and issubclass(MariaDbError, RuntimeError)
    with pytest.raises(KeyError):  # what `except KeyError` caught before still is caught
        raise UnknownEnvironmentError("nope")


def test_the_root_is_pure() -> None:
    import ast

    import aios_rl.errors

    tree = ast.parse(Path(aios_rl.errors.__file__).read_text())
    imported = {
        (n.module or "").split(".")[0] if isinstance(n, ast.ImportFrom) else a.name.split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}


async def _cli(*args: str, timeout: float = 60.0) -> tuple[int, str, str]:
    unset = ("NATS_URL", "AIOS_NAMESPACE", "NATS_USER", "NATS_PASSWORD", "AIOS_CREDENTIALS")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["AIOS_LOG_FORMAT"] = "json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aios_rl.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.parametrize(
    "command", [["checkpoints"], ["campaign", "status"]], ids=lambda c: " ".join(c)
)
async def test_a_state_outage_in_a_read_command_is_one_line(
    command: list[str], nats_url: str, names: Names, tmp_path: Path
) -> None:
    """A server that answers but whose JetStream holds none of the stack's buckets (nothing was
    provisioned under this namespace): the state room raises an ``UnavailableError``, which
    the command reports as one line, exit 1."""
    code, out, err = await _cli(
        *command,
        "--nats-url",
        nats_url,
        "--namespace",
        names.namespace,
        "--store",
        str(tmp_path / "store"),
    )
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"aios-rl {command[0]}: error: ")
    assert "the bucket does not exist" in lines[0]  # the state room's message, not a connect error
    assert "run a command that writes first" in lines[0]  # and what to do about it
    assert code == 1 and out == ""


async def test_the_state_room_raises_an_unavailable_error_there(
    nats_url: str, names: Names
) -> None:
    """What the test above relies on: an unprovisioned namespace is a state error, not a bus
    error."""
    from aios_rl.bus import connect
    from aios_rl.state.checkpoints import CheckpointRegistry

    async with connect(nats_url, name="test-errors", names=names) as bus:
        with pytest.raises(UnavailableError) as caught:
            await CheckpointRegistry(bus).snapshot()
    assert not isinstance(caught.value, BusError)
