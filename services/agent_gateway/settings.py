"""Settings of the agent gateway."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.bus import ServiceSettings
from aios_rl.httpserve import check_address


@dataclass(frozen=True, kw_only=True)
class AgentGatewaySettings(ServiceSettings):
    """An OpenAI-compatible endpoint in front of the sampler's ``policy.complete``."""

    host: str = "127.0.0.1"
    """Address the HTTP server binds (``0.0.0.0`` in a container)."""
    port: int = 8410
    """Port the HTTP server binds (0: any free port)."""
    port_fallback: bool = True
    """When ``port`` is taken, bind any free port instead (its ``$SRV.INFO`` metadata and the
    log line ``http.listening`` say which)."""
    public_url: str = ""
    """The base URL agents are given (``http://agent-gateway:8410`` in compose); empty:
    ``http://<host>:<bound port>``."""
    tokens_file: str = ""
    """The agents' token digests (``<store>/auth/agents.json``, written by ``aios-rl auth
    agent-token``). Required: the endpoint never serves without tokens."""
    max_tokens: int = 1024
    """The most tokens a completion may ask for (the sampler's ``max_completion_tokens``); a
    request without ``max_tokens`` gets this."""
    request_timeout_s: float = 300.0
    """How long one completion may take the sampler (a language model on CPU cores is slow)."""
    episode_idle_s: float = 3600.0
    """An episode without a request for this long is forgotten (its next request starts it
    afresh). Episodes are kept in the KV bucket ``agent_episodes`` (a day after their last
    request at most), shared by every replica."""

    def __post_init__(self) -> None:
        check_address(self.port, self.public_url)
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1.")
        if not self.request_timeout_s > 0 or not self.episode_idle_s > 0:
            raise ValueError("request_timeout_s and episode_idle_s must be > 0.")
