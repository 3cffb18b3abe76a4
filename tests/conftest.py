"""Shared fixtures: a real nats-server per test session, a unique namespace per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from aios_rl.bus import Bus, connect, provision
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
