"""A time limit per test: a test that loops for ever is a failing test, not a run that cannot be
judged.

A task's test command ``{python} [flags] (-m MODULE | SCRIPT) ARGS`` runs as
``{python} [flags] -c <shim> SECONDS (-m MODULE | SCRIPT) ARGS``, where the shim
(``pertest_shim.py``, a program, not a module of ours) times each pytest or unittest test and
stops one that runs longer than ``SECONDS``: it fails (pytest: ``Failed: per-test timeout ...``;
unittest: ``ERROR`` with ``TestTimeout: per-test timeout ...``) and the run goes on. The shim
sits in the command line, not in the task directory, so a task's files stay its own.

The limit is the task's ``test_timeout_s``, set when it is imported or mined and used by every
run of its tests after that: the import's verification, localisation and candidate checks,
the shell environment's ``run the tests`` and its evaluation, :func:`~.verify.check_task`.
``0`` (generated tasks, and tasks stored before the field existed) means no per-test limit.
Other commands (``sh run_tests.sh``, ``make test``) cannot carry the shim; they keep the run's
wall-clock limit only (:func:`supports`).
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources

__all__ = ["DEFAULT_TEST_TIMEOUT_S", "SHIM", "supports", "timed_command"]

DEFAULT_TEST_TIMEOUT_S = 10.0
"""Per-test timeout of ``aios-rl shell import`` and ``shell mine`` unless ``--test-timeout``."""

SHIM = resources.files(__package__).joinpath("pertest_shim.py").read_text(encoding="utf-8")
"""The shim's program text (given to ``-c``)."""

_FLAGS = frozenset({"-B", "-S", "-s", "-u", "-E", "-I", "-P", "-q", "-O", "-OO", "-b", "-bb"})
"""Interpreter flags that may stand before the program (kept before ``-c``)."""


def _split(test_command: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """(interpreter flags, ``-m MODULE ...`` or ``SCRIPT ...``), or ``None`` when the command
    is not ``{python}`` running a module or a script."""
    if len(test_command) < 2 or test_command[0] != "{python}":
        return None
    rest = list(test_command[1:])
    flags = []
    while rest and rest[0] in _FLAGS:
        flags.append(rest.pop(0))
    if rest[:1] == ["-m"] and len(rest) >= 2 and not rest[1].startswith("-"):
        return flags, rest
    if rest and not rest[0].startswith("-"):
        return flags, rest
    return None


def supports(test_command: Sequence[str]) -> bool:
    """Whether a per-test timeout can apply to this test command: ``{python}`` (with flags such
    as ``-B``) followed by ``-m MODULE`` or a script."""
    return _split(test_command) is not None


def timed_command(test_command: Sequence[str], seconds: float) -> list[str]:
    """The test command with each test limited to ``seconds`` (``{python}`` kept, for
    :func:`~.verify.command_argv`); the command unchanged when ``seconds`` is 0 or the command
    is not supported."""
    parts = _split(test_command) if seconds > 0 else None
    if parts is None:
        return list(test_command)
    flags, program = parts
    return ["{python}", *flags, "-c", SHIM, f"{seconds:g}", *program]
