"""Serving an ASGI app (Starlette) on uvicorn inside a service: bound before it is announced,
stopped by cancelling its task (the service owns SIGTERM / SIGINT). Shared by the services
with an HTTP side (``sites``, ``dashboard``, ``agent-gateway``)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Protocol

import uvicorn

from .bus import get_logger

__all__ = [
    "Listening",
    "base_url_of",
    "bind",
    "check_address",
    "http_task",
    "listen",
    "serve_state",
    "url_host",
]


class Listening(Protocol):
    """A service's state that says where its HTTP side listens, once it does."""

    base_url: str
    listening: asyncio.Event


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the service owns SIGTERM / SIGINT and stops the
    server by cancelling its task."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def check_address(port: int, public_url: str = "") -> None:
    """A service setting's port and public URL, checked. Raises ``ValueError`` saying which is
    wrong."""
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be between 0 and 65535, got {port}.")
    if public_url and not public_url.startswith(("http://", "https://")):
        raise ValueError(f"public_url must start with http:// or https://, got {public_url!r}.")


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=256)


def url_host(host: str) -> str:
    """The host part of a URL that reaches a server bound to ``host`` from this machine."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def listen(host: str, port: int, *, service: str, fallback: bool = False) -> socket.socket:
    """A listening socket for ``service`` on ``host``:``port`` (0: any free port); with
    ``fallback``, a port already taken gives way to any free one. Raises ``OSError`` with a
    sentence saying what to change."""
    try:
        try:
            return bind(host, port)
        except OSError:
            if not (fallback and port):
                raise
            return bind(host, 0)
    except OSError as exc:
        raise OSError(
            exc.errno,
            f"the {service} service cannot listen on {host}:{port} "
            f"({exc.strerror}); choose another --port / AIOS_PORT (0: any free port)",
        ) from exc


def base_url_of(sock: socket.socket, host: str, public_url: str = "") -> str:
    """``public_url`` when given, else ``http://<host>:<the socket's port>``."""
    return public_url.rstrip("/") or f"http://{url_host(host)}:{sock.getsockname()[1]}"


def http_task(
    app: Any,
    *,
    service: str,
    host: str,
    port: int,
    public_url: str = "",
    on_listening: Callable[[str], None],
    on_stopped: Callable[[], None] = lambda: None,
    fallback: bool = False,
    sock: socket.socket | None = None,
) -> Callable[[], Coroutine[Any, Any, None]]:
    """Background task: bind ``host``:``port`` (0: a free port), call ``on_listening(base_url)``
    (``public_url`` when given, else ``http://<host>:<bound port>``), serve ``app`` until
    cancelled, then call ``on_stopped`` and shut down gracefully. With ``fallback``, a port
    already taken gives way to any free one; ``sock``, bound already (:func:`listen`), is
    served instead. Raises ``OSError`` when the address cannot be bound, ``RuntimeError`` when
    the server stops by itself."""

    async def serve_http() -> None:
        listening = sock or listen(host, port, service=service, fallback=fallback)
        bound = listening.getsockname()[1]
        base_url = base_url_of(listening, host, public_url)
        server = _Server(
            uvicorn.Config(
                app,
                host=host,
                port=bound,
                log_level="warning",
                log_config=None,
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=2,
            )
        )
        serving = asyncio.create_task(server.serve(sockets=[listening]), name=f"{service}-http")
        # The socket listens already: a browser sent here now waits in the backlog until
        # uvicorn accepts.
        on_listening(base_url)
        get_logger(service=service).info("http.listening", url=base_url, bound=f"{host}:{bound}")
        try:
            await asyncio.shield(serving)
        finally:
            on_stopped()
            server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await serving
            listening.close()
        raise RuntimeError("the HTTP server stopped by itself")

    serve_http.__name__ = "serve_http"
    return serve_http


def serve_state(
    app: Any,
    state: Listening,
    *,
    service: str,
    host: str,
    port: int,
    public_url: str = "",
    sock: socket.socket | None = None,
) -> Callable[[], Coroutine[Any, Any, None]]:
    """:func:`http_task` serving ``app`` that sets ``state.base_url`` and ``state.listening``
    once it listens and clears ``state.listening`` when it stops."""

    def listening(base_url: str) -> None:
        state.base_url = base_url
        state.listening.set()

    return http_task(
        app,
        service=service,
        host=host,
        port=port,
        public_url=public_url,
        on_listening=listening,
        on_stopped=state.listening.clear,
        sock=sock,
    )
