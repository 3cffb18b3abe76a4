"""The bus kit every service shares: a handful of names.

- :func:`connect` → :class:`Bus` (typed publish / durable publish / request / subscribe /
  replay from a time, and storing an object)
- :func:`provision` applies the JetStream topology declared in ``contracts.subjects``
- :func:`discover` → :class:`ServiceView` per running instance (``$SRV.INFO`` / ``$SRV.STATS``);
  :func:`merge` joins those replies (pure)
- :class:`Service` runs endpoints, durable consumers and tasks with graceful shutdown
- :func:`run_service`: a service process's entry point
- :func:`configure_logging`, :func:`get_logger`
- :class:`ServiceSettings`, :func:`load_settings`, :func:`explain_settings` (each value's source)
- errors: :class:`BusError` and its subclasses; :class:`ServiceError` for an endpoint's error reply
"""

from ._bus import Bus, StoredMessage, connect
from ._discovery import ServiceView, discover, merge
from ._errors import (
    BusError,
    ConnectError,
    NoResponders,
    PermanentError,
    ProvisionError,
    RemoteError,
    RequestTimeout,
    ServiceError,
)
from ._logging import configure_logging, get_logger
from ._provision import jetstream_ready, provision
from ._run import run_service
from ._service import ConsumerHandler, EndpointHandler, Service
from ._settings import ServiceSettings, explain_settings, field_docs, load_settings

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
    "ServiceError",
    "ServiceSettings",
    "ServiceView",
    "StoredMessage",
    "configure_logging",
    "connect",
    "discover",
    "explain_settings",
    "field_docs",
    "get_logger",
    "jetstream_ready",
    "load_settings",
    "merge",
    "provision",
    "run_service",
]
