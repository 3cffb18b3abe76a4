"""The bus kit every service shares: a handful of names.

- :func:`connect` → :class:`Bus` (typed publish / durable publish / request / subscribe)
- :func:`provision` applies the JetStream topology declared in ``contracts.subjects``
- :class:`Service` runs endpoints, durable consumers and tasks with graceful shutdown
- :func:`run_service`: a service process's entry point
- :func:`configure_logging`, :func:`get_logger`
- :class:`ServiceSettings`, :func:`load_settings`
- errors: :class:`BusError` and its subclasses
"""

from ._bus import Bus, connect
from ._errors import (
    BusError,
    ConnectError,
    NoResponders,
    PermanentError,
    ProvisionError,
    RemoteError,
    RequestTimeout,
)
from ._logging import configure_logging, get_logger
from ._provision import provision
from ._run import run_service
from ._service import ConsumerHandler, EndpointHandler, Service
from ._settings import ServiceSettings, field_docs, load_settings

__all__ = [
    "Bus",
    "BusError",
    "ConnectError",
    "ConsumerHandler",
    "EndpointHandler",
    "NoResponders",
    "PermanentError",
    "ProvisionError",
    "RemoteError",
    "RequestTimeout",
    "Service",
    "ServiceSettings",
    "configure_logging",
    "connect",
    "field_docs",
    "get_logger",
    "load_settings",
    "provision",
    "run_service",
]
