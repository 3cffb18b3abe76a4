"""One exception hierarchy for the bus kit."""

from __future__ import annotations

from nats.micro.service import ServiceError

from aios_rl.errors import AiosError

__all__ = [
    "BusError",
    "ConnectError",
    "NoResponders",
    "PermanentError",
    "ProvisionError",
    "RemoteError",
    "RequestTimeout",
    "ServiceError",
]


class BusError(AiosError):
    """Root of every error the bus kit raises."""


class ConnectError(BusError):
    """No NATS server answered at the URL before the connect deadline."""


class ProvisionError(BusError):
    """JetStream refused a stream, consumer or bucket the topology declares."""


class RequestTimeout(BusError):
    """A request got no reply before its deadline."""


class NoResponders(BusError):
    """Nobody listens on the subject a request went to (the service is not running)."""


class RemoteError(BusError):
    """The service answered with an error reply: ``code`` and ``description`` say which."""

    def __init__(self, code: str, description: str, subject: str = "") -> None:
        super().__init__(
            f"{subject}: error {code}: {description}" if subject else f"error {code}: {description}"
        )
        self.code = code
        self.description = description
        self.subject = subject


class PermanentError(BusError):
    """Raised by a handler for input that can never succeed: dead-lettered at once, no retry."""


ServiceError.__doc__ = (
    "Raised by an endpoint handler for an error reply: ``ServiceError(code, description)`` "
    "(``404``, ``409``, ``503``, ...); the caller's request raises ``RemoteError`` with both."
)
