"""structlog, configured once per process: JSON when stderr is not a terminal, readable when it is."""

from __future__ import annotations

import logging
import os
import sys
from typing import Literal

import structlog

__all__ = ["configure_logging", "get_logger"]

LogFormat = Literal["auto", "json", "console"]

_configured = False


class _Stderr:
    """``sys.stderr`` as it is when a line is written, not when logging was configured: a
    program (or a test harness) that swaps ``sys.stderr`` later, and closes the old one, must
    not leave the logger writing to a closed file."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_STDERR = _Stderr()


def configure_logging(service: str = "", *, fmt: str = "auto", level: str = "info") -> None:
    """Configure structlog for this process and bind ``service`` into every line.

    ``fmt`` is ``auto`` (JSON unless stderr is a TTY), ``json`` or ``console``; the env vars
    ``AIOS_LOG_FORMAT`` and ``AIOS_LOG_LEVEL`` set the defaults. Raises ``ValueError`` for an
    unknown format or level."""
    global _configured
    fmt = os.environ.get("AIOS_LOG_FORMAT", fmt) if fmt == "auto" else fmt
    level = os.environ.get("AIOS_LOG_LEVEL", level)
    if fmt not in ("auto", "json", "console"):
        raise ValueError(f"log format {fmt!r} is not one of auto, json, console.")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"log level {level!r} is not one of debug, info, warning, error.")
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(),
            # Python's own traceback text, not rich's: rendering runs on the service's event
            # loop, and rich took 8 s on 2 cores for one exception whose message was 20 KB of
            # hostile input, time in which the service answered nothing.
            exception_formatter=structlog.dev.plain_traceback,
        )
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info if use_json else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=_STDERR),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.clear_contextvars()
    if service:
        structlog.contextvars.bind_contextvars(service=service)
    # nats-py logs through the standard library: route its warnings to the same stream.
    logging.basicConfig(
        level=max(numeric, logging.WARNING),
        stream=_STDERR,
        format="%(name)s %(levelname)s %(message)s",
    )
    _configured = True


def get_logger(**bound: object) -> structlog.typing.FilteringBoundLogger:
    """A logger with ``bound`` fields (episode_id, campaign_id, ...)."""
    return structlog.get_logger().bind(**bound)
