"""Settings of the sites service."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.bus import ServiceSettings
from aios_rl.httpserve import check_address


@dataclass(frozen=True, kw_only=True)
class SitesSettings(ServiceSettings):
    """The local sites browser episodes run against: HTTP for the browser, NATS for the runner."""

    host: str = "127.0.0.1"
    """Address the HTTP server binds (``0.0.0.0`` in a container)."""
    port: int = 0
    """Port the HTTP server binds; 0 (the default, so stacks on one machine never collide)
    picks a free one and the URLs handed out carry it. Compose binds 8300."""
    public_url: str = ""
    """Base of the URLs handed to runners (``http://sites:8300`` in compose); empty:
    ``http://<host>:<port>`` with the bound port."""
    max_sessions: int = 512
    """Most sessions held at once; opening one more (after idle ones expire) is refused (503)."""
    idle_expiry_s: float = 900.0
    """A session neither browsed nor asked about for this long is dropped."""
    concurrency: int = 16
    """NATS requests (open, result, close) answered at once."""
    start_timeout_s: float = 10.0
    """How long ``sites.open`` waits for the HTTP server to be listening."""

    def __post_init__(self) -> None:
        check_address(self.port, self.public_url)
        for name in ("max_sessions", "concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        for name in ("idle_expiry_s", "start_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}.")
