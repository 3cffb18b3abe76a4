"""Settings of the dashboard service."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.bus import ServiceSettings
from aios_rl.httpserve import check_address


@dataclass(frozen=True, kw_only=True)
class DashboardSettings(ServiceSettings):
    """A web page and a Prometheus endpoint over what the bus holds; it never writes to it."""

    host: str = "127.0.0.1"
    """Address the HTTP server binds (``0.0.0.0`` in a container)."""
    port: int = 8400
    """Port the HTTP server binds (0: any free port). Compose publishes 8400."""
    port_fallback: bool = True
    """When ``port`` is taken (a second stack on this machine), bind any free port instead; the
    log line ``http.listening`` and ``aios-rl dashboard`` say which."""
    public_url: str = ""
    """The URL people open (logged at start); empty: ``http://<host>:<port>``."""
    feed_size: int = 500
    """Recent episodes kept for the live feed and the drill-down."""
    history_s: float = 3600.0
    """At start, the feed replays the episodes compared this many seconds back."""
    refresh_s: float = 2.0
    """How often services ($SRV discovery, consumer lag), replay lanes and dead letters are
    read again (KV changes and episodes arrive as they happen)."""

    def __post_init__(self) -> None:
        check_address(self.port, self.public_url)
        if self.feed_size < 1:
            raise ValueError(f"feed_size must be >= 1, got {self.feed_size}.")
        for name in ("refresh_s", "history_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}.")
