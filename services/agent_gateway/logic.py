"""The agent gateway's rules, pure: whose token a request carries, which checkpoint a model name
means, which checkpoint an episode is pinned to and whose episode it is.

**Tokens.** An agent authenticates with ``Authorization: Bearer <token>``; the gateway keeps
only each token's SHA-256 (``<store>/auth/agents.json``: ``{"agents": {name: digest}}``,
written by ``aios-rl auth agent-token NAME``), compared in constant time.

**Episodes.** A request tagged with an episode (the ``X-Aios-Episode`` header, else the body's
``user`` field) belongs to it: the first request of an episode claims it for its agent and pins
it to the checkpoint its ``model`` names at that moment (``active`` / ``last_stable`` resolved
once), so a pointer that moves mid-episode never mixes two policies in one trajectory; another
agent's request for that episode is refused (403). Episodes idle longer than ``idle_s`` are
forgotten, and at most ``max_open`` are kept (the longest idle go first).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from aios_rl.agents.wire import WireError
from contracts import CheckpointPointers

__all__ = [
    "EPISODE_HEADER",
    "Episodes",
    "Pinned",
    "Tokens",
    "new_token",
    "resolve_model",
    "token_digest",
]

EPISODE_HEADER = "x-aios-episode"
"""The request header that tags a request with its episode."""
TOKEN_PREFIX = "aios-agent-"


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple[str, str]:
    """A fresh agent token and its digest (what the gateway keeps)."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token, token_digest(token)


@dataclass(frozen=True)
class Tokens:
    """The agents' token digests, by agent name."""

    digests: dict[str, str]

    @classmethod
    def from_json(cls, text: str) -> Tokens:
        """``{"agents": {name: sha256 hex}}``. Raises ``ValueError`` saying what is wrong."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"the agents' token file is not JSON: {exc}") from None
        agents = doc.get("agents") if isinstance(doc, dict) else None
        if not isinstance(agents, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and len(v) == 64 for k, v in agents.items()
        ):
            raise ValueError('the agents\' token file must be {"agents": {name: sha256 hex}}')
        return cls(dict(agents))

    def agent(self, authorization: str | None) -> str:
        """The agent whose token ``authorization`` (``Bearer <token>``) carries. Raises
        :class:`WireError` 401 otherwise."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise WireError(
                "an agent token is required: Authorization: Bearer <token> "
                "(aios-rl auth agent-token NAME makes one)",
                code="invalid_api_key",
                status=401,
            )
        digest = token_digest(token.strip())
        found = ""
        for name, known in self.digests.items():  # every digest compared: constant time
            if hmac.compare_digest(digest, known):
                found = name
        if not found:
            raise WireError("the agent token is not valid", code="invalid_api_key", status=401)
        return found


def resolve_model(model: str, pointers: CheckpointPointers | None) -> str | None:
    """The checkpoint ``model`` names: ``active`` and ``last_stable`` through the pointers,
    anything else as a checkpoint id (``None``: the pointer is not set yet)."""
    if model in ("active", "last_stable"):
        return getattr(pointers, model, None) if pointers is not None else None
    return model


@dataclass
class Pinned:
    """An open episode: its agent, its checkpoint, its calls so far."""

    agent: str
    checkpoint_id: str
    calls: int = 0
    last: float = 0.0


class Episodes:
    """Open episodes, bounded (see the module docstring)."""

    def __init__(self, *, max_open: int = 10_000, idle_s: float = 3600.0) -> None:
        self.max_open, self.idle_s = max_open, idle_s
        self._open: OrderedDict[str, Pinned] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def get(self, episode_id: str) -> Pinned | None:
        return self._open.get(episode_id)

    def claim(
        self, episode_id: str, agent: str, checkpoint: Callable[[], str], now: float
    ) -> Pinned:
        """``episode_id`` for ``agent``: the open episode (403 when another agent's), or a new
        one pinned to ``checkpoint()``."""
        self._forget_idle(now)
        pinned = self._open.get(episode_id)
        if pinned is not None and pinned.agent != agent:
            raise WireError(
                f"episode {episode_id} belongs to another agent",
                code="episode_not_yours",
                status=403,
            )
        if pinned is None:
            pinned = Pinned(agent=agent, checkpoint_id=checkpoint())
            self._open[episode_id] = pinned
            while len(self._open) > self.max_open:
                self._open.popitem(last=False)
        pinned.last = now
        self._open.move_to_end(episode_id)
        return pinned

    def call_index(self, episode_id: str) -> int:
        """The next call's index in ``episode_id`` (counted as taken)."""
        pinned = self._open[episode_id]
        pinned.calls += 1
        return pinned.calls - 1

    def _forget_idle(self, now: float) -> None:
        while self._open:
            first = next(iter(self._open.values()))
            if now - first.last <= self.idle_s:
                return
            self._open.popitem(last=False)
