"""Agent tokens: an agent authenticates to the agent gateway with ``Authorization: Bearer
<token>``; only each token's SHA-256 is kept (``<store>/auth/agents.json``: ``{"agents": {name:
digest}}``, written by ``aios-rl auth agent-token NAME``), compared in constant time. Pure but
for :func:`add_agent`'s file."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from .wire import WireError

__all__ = [
    "AGENTS_FILE",
    "TOKEN_PREFIX",
    "TokenFile",
    "Tokens",
    "add_agent",
    "new_token",
    "token_digest",
    "write_agents",
]

AGENTS_FILE = "agents.json"
"""The agents' token digests, in a data dir's ``auth/`` folder."""
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
        if not self.digests:
            raise WireError(
                "no agent has a token yet: aios-rl auth agent-token NAME makes one",
                code="invalid_api_key",
                status=401,
            )
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


class TokenFile:
    """The agents' token file, read again whenever it changes (a token made while the gateway
    runs works at once). A missing file is no tokens; a file that does not read keeps the last
    tokens read and says why in ``error``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._tokens = Tokens({})
        self.error = ""

    def current(self) -> Tokens:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._seen, self._tokens, self.error = None, Tokens({}), ""
            return self._tokens
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._seen:
            try:
                self._tokens, self.error = Tokens.from_json(self.path.read_text()), ""
            except (OSError, ValueError) as exc:
                self.error = str(exc)
            self._seen = stamp
        return self._tokens


def write_agents(path: Path, digests: dict[str, str]) -> None:
    """Write the agents' token file in place (the same inode: a container that bind-mounts it
    sees the change; a reader that catches it half-written keeps its last tokens). 0644: a
    digest does not give the token, and the gateway's container runs as another user."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump({"agents": dict(sorted(digests.items()))}, f, indent=2)
    os.chmod(path, 0o644)


def check_agent_name(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` can name an agent's token: 1 to 64 letters, digits,
    ``-`` or ``_``."""
    if not name or not all(c.isalnum() or c in "-_" for c in name) or len(name) > 64:
        raise ValueError(f"agent name {name!r}: use up to 64 letters, digits, '-' or '_'")


def add_agent(auth_dir: Path, name: str) -> str:
    """A new token for agent ``name`` (a new one replaces its old token), its digest written to
    ``auth_dir / AGENTS_FILE``. Returns the token: shown once, never kept. Raises
    ``ValueError`` for a name that is not letters, digits, ``-`` or ``_``, or a file that does
    not read (nothing is written then)."""
    check_agent_name(name)
    path = auth_dir / AGENTS_FILE
    digests = Tokens.from_json(path.read_text()).digests if path.exists() else {}
    token, digest = new_token()
    digests[name] = digest
    write_agents(path, digests)
    return token
