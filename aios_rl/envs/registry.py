"""The environment registry: a name -> its :class:`~aios_rl.envs.base.EnvSpec`.

The built-in environments are registered on first lookup (their adapters import what they
need: the sandbox, the task generators), so looking one up costs only that environment's
imports. A user's environment registers itself with :func:`register` in the process that runs
it (the runner, started with ``--env <name>``, after importing the module that registers it:
``--env-module my_pkg.my_env``).
"""

from __future__ import annotations

import importlib
from typing import Any

from aios_rl.bus import Bus
from aios_rl.errors import AiosError

from ..state.tasks import TaskStore
from .base import EnvSpec

__all__ = ["UnknownEnvironmentError", "get", "names", "register", "task_store"]

_BUILTIN = {
    "shell": "aios_rl.envs.shell.adapter",
    "orchestrator": "aios_rl.envs.orchestrator.adapter",
    "browser": "aios_rl.envs.browser.adapter",
    "agentbench_db": "aios_rl.envs.agentbench.db_adapter",
    "agentbench_os": "aios_rl.envs.agentbench.os_adapter",
}
"""Built-in environment -> the module whose ``SPEC`` describes it."""

_SPECS: dict[str, EnvSpec[Any]] = {}


class UnknownEnvironmentError(AiosError, KeyError):
    """No environment of that name is registered."""

    def __str__(self) -> str:
        return str(self.args[0])


def register(spec: EnvSpec[Any]) -> EnvSpec[Any]:
    """Make ``spec`` known by its name; returns it. Registering the same spec again is a
    no-op; another spec under a taken name raises ``ValueError``."""
    known = _SPECS.get(spec.name)
    if known is not None and known is not spec:
        raise ValueError(f"an environment named {spec.name!r} is already registered")
    _SPECS[spec.name] = spec
    return spec


def get(name: str) -> EnvSpec[Any]:
    """The spec of ``name``. Raises ``UnknownEnvironmentError`` naming the known ones."""
    if name not in _SPECS and name in _BUILTIN:
        register(importlib.import_module(_BUILTIN[name]).SPEC)
    try:
        return _SPECS[name]
    except KeyError:
        raise UnknownEnvironmentError(
            f"no environment named {name!r}: known are {', '.join(names())}"
        ) from None


def names() -> list[str]:
    """Every environment known in this process (built-in or registered), sorted."""
    return sorted({*_BUILTIN, *_SPECS})


def task_store(bus: Bus, name: str) -> TaskStore[Any]:
    """The task store typed for environment ``name``'s tasks. Raises
    ``UnknownEnvironmentError``."""
    return TaskStore(bus, get(name).tasks)
