"""The pieces of ``shell train`` / ``shell eval`` (``aios_rl.cli.engine``, every environment's)
against a real nats-server: resolving what to evaluate, filling a split with tasks, waiting for
services."""

from __future__ import annotations

import pytest
from rich.console import Console

from aios_rl.bus import Bus
from aios_rl.cli.engine import ensure_tasks, resolve
from aios_rl.envs.shell.store import ShellTaskStore as TaskStore
from aios_rl.stack.embedded import StackError, wait_for_services
from aios_rl.state.checkpoints import CheckpointRegistry


async def test_resolve_pointer_names_and_ids(bus: Bus) -> None:
    registry = CheckpointRegistry(bus)
    meta = await registry.store(b"weights", parent_id=None, created_by="test", algorithm="init")
    await registry.init(meta.checkpoint_id, reason="test")
    assert await resolve(bus, "active") == meta.checkpoint_id
    assert await resolve(bus, meta.checkpoint_id) == meta.checkpoint_id
    with pytest.raises(StackError, match=r"no checkpoint 'f+' in the registry"):
        await resolve(bus, "f" * 16)
    with pytest.raises(StackError, match="no checkpoint 'not an id'"):
        await resolve(bus, "not an id")


async def test_ensure_tasks_generates_only_what_is_missing(bus: Bus) -> None:
    console = Console(quiet=True)
    first = await ensure_tasks(bus, "heldout", 3, console)
    assert len(first) == 3 and await TaskStore(bus).list("heldout") == first
    again = await ensure_tasks(bus, "heldout", 2, console)
    assert again == first[:2]  # enough stored: nothing generated, the first ones returned
    tasks = [await TaskStore(bus).get(t) for t in first]
    assert {t.split for t in tasks} == {"heldout"}


async def test_missing_services_are_named(bus: Bus) -> None:
    with pytest.raises(StackError, match="services not running after 1s: ghost-service"):
        await wait_for_services(bus, {"ghost-service"}, 1.0)
