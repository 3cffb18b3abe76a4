"""Shared fixtures: a real nats-server per test session, a unique namespace per test; a store
of the suite's own instead of the user's, and a guard that no test leaves connection settings
in this process's environment."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from aios_rl.bus import Bus, configure_logging, connect, provision
from aios_rl.stack.natsd import NatsServer
from contracts import Names

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One real ``nats-server -js`` on a free port for the whole session."""
    with NatsServer(tmp_path_factory.mktemp("nats")) as server:
        yield server


@pytest.fixture
def nats_url(nats_server: NatsServer) -> str:
    return nats_server.url


@pytest.fixture
def names() -> Names:
    """A namespace of its own for each test: unique subjects, streams and buckets."""
    return Names(f"t{uuid.uuid4().hex[:10]}")


@pytest.fixture
async def bus(nats_url: str, names: Names) -> AsyncIterator[Bus]:
    """A connected bus with the stack's topology provisioned under the test's namespace."""
    async with connect(nats_url, name="test", names=names) as b:
        await provision(b)
        yield b


CONNECTION_VARIABLES = (
    "NATS_URL",
    "NATS_USER",
    "NATS_PASSWORD",
    "NATS_CA",
    "AIOS_NAMESPACE",
    "AIOS_STORE",
    "AIOS_CREDENTIALS",
)
"""What decides which stack a command talks to, and as whom."""


@pytest.fixture(scope="session", autouse=True)
def _logging() -> None:
    """The product's logging (``configure_logging``, readable text) from the first test on, not
    structlog's defaults: what a test sees of logs, and what logging costs, is what ships."""
    configure_logging("tests", fmt="console", level="info")


@pytest.fixture(scope="session", autouse=True)
def _suite_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The default store of every command the suite runs without ``--store``: one of its own,
    never the user's ``.aios/stack`` in the working directory (``aios-rl demo`` leaves one
    there, with an admin of its own)."""
    store = tmp_path_factory.mktemp("store") / "stack"
    before = os.environ.get("AIOS_STORE")
    os.environ["AIOS_STORE"] = str(store)
    yield store
    if before is None:
        os.environ.pop("AIOS_STORE", None)
    else:
        os.environ["AIOS_STORE"] = before


@pytest.fixture(autouse=True)
def _connection_settings_unchanged(_suite_store: Path) -> Iterator[None]:
    """Fail a test that leaves ``CONNECTION_VARIABLES`` changed: every later test, and every
    process one starts, would inherit them (a command run in process once left a store's admin
    credentials behind, and two later tests' commands then ran on another stack)."""
    before = {name: os.environ.get(name) for name in CONNECTION_VARIABLES}
    yield
    after = {name: os.environ.get(name) for name in CONNECTION_VARIABLES}
    changed = sorted(name for name in CONNECTION_VARIABLES if before[name] != after[name])
    for name in changed:
        if before[name] is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before[name]  # type: ignore[assignment]
    if changed:
        pytest.fail(f"the test left {', '.join(changed)} changed in the environment")


LONGEST_FIRST = (
    "test_bench_harnesses.py",
    "test_cli.py",
    "test_browser_env.py",
    "test_student_lm.py",
    "test_engine_lm.py",
    "test_realrepo.py",
    "test_mixed.py",
    "test_cluster.py",
    "test_shell_tasks.py",
    "test_restart.py",
    "test_rail_stack.py",
    "test_miniwob.py",
    "test_dashboard_stack.py",
    "test_agentbench_osenv.py",
)
"""The test files that take longest (a suite run's ``--durations`` summed per file, 12-03, on
two workers), longest first."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files run first. On two workers (``-n 2 --dist loadfile``) files are handed
    out in collection order as workers free up (``--no-loadscope-reorder``: xdist would put the
    files with the most tests first, the unit tests), so a long file collected late ran alone at
    the end while the other worker idled (longest-processing-time-first scheduling). The order only
    moves whole files; within a file tests keep their order. Applies to one-process runs too
    (harmless: every test is independent of the order)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
