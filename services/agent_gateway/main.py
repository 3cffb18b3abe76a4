"""Entry point: ``python -m services.agent_gateway``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aios_rl.agents.tokens import TokenFile, Tokens
from aios_rl.bus import Bus, Service, load_settings, run_service
from aios_rl.httpserve import base_url_of, listen, serve_state
from contracts import AgentEpisode

from . import __version__
from .handlers import Gateway
from .settings import AgentGatewaySettings
from .web import build_app


def token_file(settings: AgentGatewaySettings) -> TokenFile:
    """The agents' token file ``tokens_file`` names (read again whenever it changes). Raises
    ``ValueError`` with a sentence saying what to do when none is named."""
    if not settings.tokens_file:
        raise ValueError(
            "tokens_file is required (the agents' token digests, <store>/auth/agents.json: "
            "aios-rl auth agent-token NAME writes it); the endpoint never serves without tokens."
        )
    return TokenFile(Path(settings.tokens_file))


def build(
    bus: Bus, settings: AgentGatewaySettings, tokens: Tokens | None = None
) -> tuple[Service, Gateway]:
    """The agent gateway on ``bus`` (not yet running) and its state; its port is bound already
    and its URL is in its ``$SRV.INFO`` metadata (``url``). ``tokens``: instead of the file
    ``tokens_file`` names. Raises ``OSError`` when the port cannot be bound, ``ValueError``
    without a token file."""
    current = (lambda: tokens) if tokens is not None else token_file(settings).current
    sock = listen(
        settings.host, settings.port, service="agent-gateway", fallback=settings.port_fallback
    )
    url = base_url_of(sock, settings.host, settings.public_url)
    svc = Service(
        bus,
        name="agent-gateway",
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description="OpenAI-compatible chat completions by the student, for agents users bring; "
        "each episode's calls recorded on the AGENTS stream.",
        metadata={"url": url, "openai_base_url": f"{url}/v1"},
    )
    gw = Gateway(bus, settings, current)

    svc.task(
        serve_state(
            build_app(gw),
            gw,
            service="agent-gateway",
            host=settings.host,
            port=settings.port,
            public_url=settings.public_url,
            sock=sock,
        )
    )
    svc.endpoint(
        "attach",
        bus.names.agent_attach(),
        AgentEpisode,
        gw.attach,
        concurrency=16,
        reply=AgentEpisode,
    )
    svc.stats(gw.stats)
    return svc, gw


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(AgentGatewaySettings, argv, prog="aios-rl-agent-gateway")
    run_service("agent-gateway", settings, lambda bus: build(bus, settings)[0].run())
