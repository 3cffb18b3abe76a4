"""The entry point every service shares: logging, connection, provisioning, then the service."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from contracts import Names

from ._bus import Bus, connect
from ._logging import configure_logging
from ._provision import provision
from ._settings import ServiceSettings

__all__ = ["run_service"]


def run_service(
    name: str, settings: ServiceSettings, serve: Callable[[Bus], Awaitable[None]]
) -> None:
    """Configure logging for ``name``, connect to ``settings.nats_url`` under its namespace, apply
    the topology, and run ``serve(bus)`` (build the service and run it) until it returns."""
    configure_logging(name, fmt=settings.log_format, level=settings.log_level)

    async def main() -> None:
        async with connect(settings.nats_url, name=name, names=Names(settings.namespace)) as bus:
            await provision(bus)
            await serve(bus)

    asyncio.run(main())
