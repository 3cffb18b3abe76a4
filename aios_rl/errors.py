"""The root of aios-rl's exceptions (pure: the standard library only).

Every package's own root derives from :class:`AiosError`, so a caller (the command line above
all) can catch "something aios-rl reports" in one clause and leave real bugs alone::

    AiosError
    ├── BusError           aios_rl.bus: connect, request, provision, handler errors
    ├── StateError         aios_rl.state: NotFound / Corrupt / Unavailable / Contention ...
    ├── CliError           aios_rl.cli: a message for the user
    ├── StackError         aios_rl.stack.embedded (NoStoreError)
    ├── NatsServerError    aios_rl.stack.natsd
    ├── TlsError, PlanError  aios_rl.stack
    ├── StudentError       aios_rl.student
    ├── VerdictError       aios_rl.teachers
    └── the environments' roots (SandboxError, MiniwobError, MachineError, ...)

A class that was a ``ValueError`` / ``LookupError`` / ``KeyError`` / ``OSError`` /
``RuntimeError`` before it joined the tree still is one, so existing ``except`` clauses keep
working. ``contracts.ContractError`` stays outside: ``contracts/`` imports only msgspec and the
standard library.
"""

from __future__ import annotations

__all__ = ["AiosError"]


class AiosError(Exception):
    """Root of every error aios-rl raises."""
