"""Sites handlers: open a session for an episode, report what the session achieved (judged from
the server's record, never from the page), close it.

One process holds the sessions (the browser's requests and the runner's must reach the same
one), so the service runs as a single instance (see ``main.py``).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aios_rl.bus import PermanentError, ServiceError, get_logger
from aios_rl.envs.browser.flows import check_task, judge
from contracts import SiteClose, SiteOpen, SiteResult, SiteResultRequest, SiteSession

from .logic import Session, SessionLimitError, Sessions
from .settings import SitesSettings

__all__ = ["SitesState", "close_session", "new_token", "open_session", "result", "stats"]

Clock = Callable[[], float]


def new_token() -> str:
    """A random, unguessable session token (URL-safe, 32 characters)."""
    return secrets.token_urlsafe(24)


@dataclass
class SitesState:
    """What one sites process holds: the sessions and where the HTTP server listens."""

    sessions: Sessions
    listening: asyncio.Event = field(default_factory=asyncio.Event)
    """Set while the HTTP server's socket is listening."""
    base_url: str = ""
    """Where the session URLs start (``public_url``, or the bound address)."""
    http_requests: int = 0
    not_found: int = 0
    results: int = 0


def stats(state: SitesState) -> dict[str, float]:
    """Sessions and counters for ``Service.stats``."""
    s = state.sessions
    return {
        "sessions": float(len(s)),
        "opened": float(s.opened),
        "closed": float(s.closed),
        "expired": float(s.expired),
        "results": float(state.results),
        "http_requests": float(state.http_requests),
        "http_not_found": float(state.not_found),
        "listening": 1.0 if state.listening.is_set() else 0.0,
    }


def _result(s: Session, typed: dict[str, str] | None = None, **info: str) -> SiteResult:
    v = judge(s.task, s.record, typed)
    return SiteResult(
        session=s.token,
        done=v.done,
        outcome=v.outcome,  # type: ignore[arg-type]
        reward=v.reward,
        potential=v.potential,
        info={**v.info, "episode_id": s.episode_id, **info},
        events=v.events,
    )


def open_session(
    settings: SitesSettings,
    state: SitesState,
    *,
    clock: Clock = time.monotonic,
    token: Callable[[], str] = new_token,
):
    """Endpoint ``sites.open``: a ``SiteOpen`` answered by a ``SiteSession`` whose URL is
    ``<base>/e/<session>/<start_path>``. 422 for a task the sites cannot serve, 503 when every
    session slot is taken or the HTTP server is not listening in time."""

    async def answer(req: SiteOpen) -> SiteSession:
        try:
            check_task(req.task)
        except ValueError as exc:
            raise PermanentError(str(exc)) from exc
        try:
            async with asyncio.timeout(settings.start_timeout_s):
                await state.listening.wait()
        except TimeoutError as exc:
            raise ServiceError(
                "503", f"the HTTP server is not listening after {settings.start_timeout_s}s"
            ) from exc
        try:
            s = state.sessions.open(token(), req.task, req.episode_id, clock())
        except SessionLimitError as exc:
            raise ServiceError("503", str(exc)) from exc
        get_logger(episode_id=req.episode_id).debug(
            "session.opened", task_id=req.task.task_id, flow=req.task.flow
        )
        url = f"{state.base_url}/e/{s.token}/{req.task.start_path.lstrip('/')}"
        return SiteSession(session=s.token, url=url)

    return answer


def result(state: SitesState, *, clock: Clock = time.monotonic):
    """Endpoint ``sites.result``: the session's record judged against its task's goal. 422 for
    a session that is not open (never opened, closed, or expired)."""

    async def answer(req: SiteResultRequest) -> SiteResult:
        s = state.sessions.get(req.session, clock())
        if s is None:
            raise PermanentError("no such session: never opened, closed, or expired")
        state.results += 1
        return _result(s, req.typed)

    return answer


def close_session(state: SitesState):
    """Endpoint ``sites.close``: drop the session and answer its final result; closing one that
    is not open answers an empty result with ``info["closed"] = "unknown session"``."""

    async def answer(req: SiteClose) -> SiteResult:
        s = state.sessions.close(req.session)
        if s is None:
            return SiteResult(session=req.session, info={"closed": "unknown session"})
        return _result(s, closed="yes")

    return answer
