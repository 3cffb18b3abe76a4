"""One error tree for JetStream state (pure: the translation from nats errors is in
:mod:`._handles`).

Every store of the room (checkpoints, control, ledger, tasks, ...) has its own root class and
subclasses that are also one of the four kinds below, so a caller can catch "the state is
unavailable" without knowing which store said it, and a store's tests can still name its own
class. ``StateError`` is an :class:`aios_rl.errors.AiosError`, the root of every package's
errors::

    StateError
    ├── NotFoundError      the key, object or id is not stored
    ├── CorruptError       what is stored does not decode, or does not match its address
    ├── UnavailableError   NATS refused or did not answer (safe to retry later)
    └── ContentionError    a compare-and-set lost to other writers every time it was tried
"""

from __future__ import annotations

from aios_rl.errors import AiosError

__all__ = [
    "ContentionError",
    "CorruptError",
    "NotFoundError",
    "StaleRevisionError",
    "StateError",
    "UnavailableError",
]


class StateError(AiosError):
    """Root of every error the state room raises."""


class NotFoundError(StateError, LookupError):
    """The key, object or id is not stored."""


class CorruptError(StateError):
    """A stored value does not decode, or its content does not match its address."""


class UnavailableError(StateError):
    """NATS refused or did not answer (not connected, bucket missing, timeout)."""


class ContentionError(StateError):
    """A compare-and-set lost to other writers every time it was tried; nothing was written."""


class StaleRevisionError(StateError):
    """A write named a revision the key has moved past; nothing was written."""
