"""How the system runs: the service registry, the supervisor of ``aios-rl up``, the embedded
``nats-server`` and the embedded stack of ``shell train`` / ``shell eval`` / ``demo``.

- :data:`SERVICES`, :class:`ServiceEntry`, :func:`by_name`: the registry (``services.py``)
- ``supervisor.py``: every service as a supervised OS process
- ``natsd.py``: the embedded ``nats-server -js``
- ``embedded.py``: the stack at a URL, or one started here
"""

from .services import SERVICES, ServiceEntry, by_name

__all__ = ["SERVICES", "ServiceEntry", "by_name"]
