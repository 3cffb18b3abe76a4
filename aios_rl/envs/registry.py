"""The environment registry: a name -> its :class:`~aios_rl.envs.base.EnvSpec`.

The built-in environments are registered on first lookup (their adapters import what they
need: the sandbox, the task generators), so looking one up costs only that environment's
imports. A user's environment registers itself with :func:`register` in the process that runs
it (the runner, started with ``--env <name>``, after importing the module that registers it:
``--env-module my_pkg.my_env``).

A built-in environment whose tasks are generated also has a :class:`Benchmark`: how the command
line offers them (``aios-rl NAME benchmark-generate | train | eval``, declared once for every
such environment from :func:`benchmarks`). It names its generator as ``module:function``, so
reading it imports nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aios_rl.bus import Bus
from aios_rl.errors import AiosError

from ..state.tasks import TaskStore
from .base import EnvSpec

__all__ = [
    "Benchmark",
    "UnknownEnvironmentError",
    "benchmark",
    "benchmarks",
    "generator",
    "get",
    "names",
    "register",
    "task_store",
    "verified_generator",
]

_BUILTIN = {
    "shell": "aios_rl.envs.shell.adapter",
    "orchestrator": "aios_rl.envs.orchestrator.adapter",
    "browser": "aios_rl.envs.browser.adapter",
    "agentbench_db": "aios_rl.envs.agentbench.db_adapter",
    "agentbench_os": "aios_rl.envs.agentbench.os_adapter",
}
"""Built-in environment -> the module whose ``SPEC`` describes it."""


@dataclass(frozen=True)
class Benchmark:
    """A built-in environment's generated tasks as the command line offers them: the words and
    defaults of ``aios-rl NAME benchmark-generate``, ``train`` and ``eval``."""

    help: str
    """The command group's help (``aios-rl --help``)."""
    generate_help: str
    """``benchmark-generate``'s help."""
    generator: str
    """``module:function`` making ``count`` tasks of a split: ``f(count, seed=, split=)``."""
    train_tasks: int
    """``train --train-tasks``' default: tasks of the training split drawn from."""
    heldout: int
    """``train --heldout``'s default: held-out tasks scored before and after."""
    eval_limit: int
    """``eval --limit``'s default."""
    generate_splits: tuple[str, ...] = ("train", "heldout")
    train_splits: tuple[str, ...] = ("train",)
    """The splits a campaign may train on (``train --split``: the first is the default)."""
    eval_splits: tuple[str, ...] = ("heldout", "train")
    eval_help: str = "success rate, partial rate and mean reward of a checkpoint, with intervals"
    kinds: tuple[tuple[str, str], ...] = ()
    """(``task.kind``, what a count of them is called): the summary ``benchmark-generate``
    prints, e.g. ``12 train orchestrator tasks (9 runs, 3 clarity gates)``."""
    verified: str | None = None
    """``module:function`` of a generation that verifies every task and can also write them to
    a directory (``--out``, ``--no-store``): ``f(count, seed, split, out_dir=, nats_url=,
    namespace=)``, returning a summary with ``count`` and ``seconds``. ``None``: the generator's
    tasks are stored as they come."""


_BENCHMARKS = {
    "shell": Benchmark(
        help="the shell bug-fixing environment",
        generate_help="generate verified bug-fix tasks and store them for every runner",
        generator="aios_rl.envs.shell.generate:generate",
        verified="aios_rl.envs.shell.benchmark:benchmark_generate",
        train_tasks=100,
        heldout=50,
        eval_limit=50,
        generate_splits=("train", "heldout", "real"),
        train_splits=("train", "real"),
        eval_splits=("heldout", "train", "real", "real-heldout"),
    ),
    "orchestrator": Benchmark(
        help="the orchestrator environment: preflight, dispatch, clarity gates, quality review",
        generate_help="generate orchestrated-run tasks and store them",
        generator="aios_rl.envs.orchestrator:generate",
        train_tasks=120,
        heldout=60,
        eval_limit=60,
        eval_help="success, mean reward of a checkpoint with intervals, and the baselines' on "
        "the same tasks",
        kinds=(("run", "runs"), ("clarity", "clarity gates")),
    ),
    "browser": Benchmark(
        help="the browser environment: web flows on the sites service and MiniWoB++",
        generate_help="generate browser tasks (site flows and MiniWoB++ in equal shares) and "
        "store them",
        generator="aios_rl.envs.browser.generate:generate",
        train_tasks=40,
        heldout=24,
        eval_limit=24,
        generate_splits=("train", "heldout", "easy"),
        train_splits=("train", "easy"),
        eval_splits=("heldout", "train", "easy"),
    ),
}
"""The built-in environments whose tasks are generated (in ``contracts.ENVIRONMENTS``' order)."""

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


def benchmarks() -> dict[str, Benchmark]:
    """Every environment with generated tasks -> its :class:`Benchmark`."""
    return dict(_BENCHMARKS)


def benchmark(name: str) -> Benchmark:
    """The :class:`Benchmark` of ``name``. Raises ``UnknownEnvironmentError`` when ``name`` has
    none (an unknown environment, or one whose tasks are only imported)."""
    try:
        return _BENCHMARKS[name]
    except KeyError:
        raise UnknownEnvironmentError(
            f"no task generator for environment {name!r}: generated are {', '.join(_BENCHMARKS)}"
        ) from None


def _imported(target: str) -> Callable[..., Any]:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]


def generator(name: str) -> Callable[..., list[Any]]:
    """``name``'s task generator, ``f(count, seed=, split=) -> tasks`` (imported now). Raises
    ``UnknownEnvironmentError``."""
    return _imported(benchmark(name).generator)


def verified_generator(name: str) -> Callable[..., Any] | None:
    """``name``'s verifying generation (:attr:`Benchmark.verified`), or ``None``."""
    target = benchmark(name).verified
    return _imported(target) if target else None
