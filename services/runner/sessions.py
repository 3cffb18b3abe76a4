"""Episodes driven from outside (an agent through the agent gateway): the runner opens one on
its environment's host, the agent steps it with action text and closes it, and the runner
answers an ``EnvState`` each time: what the agent sees, and once done, the environment's own
verdict (the outcome, reward and evidence a runner's episode would have).

:class:`Sessions` is the table (pure: no NATS); :class:`SessionHandlers` the thin endpoints
(``env.open.<env>``, shared by the environment's runners; ``env.step`` / ``env.close`` on the
subject of the runner instance that holds the episode). An episode that reaches its step limit
without ending is closed ``blocked`` (as a runner's episode that does not end); one idle longer
than ``session_idle_s`` is closed; at most ``max_sessions`` are open at once (503 past that)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aios_rl.agents.episodes import EnvMove
from aios_rl.bus import PermanentError, ServiceError, get_logger
from aios_rl.envs.base import Environment, EnvironmentHost, EnvResult
from aios_rl.envs.runner import blocked_error, transient
from contracts import EnvClose, EnvOpen, EnvState, EnvStep

__all__ = ["KEEP_CLOSED", "Session", "SessionHandlers", "Sessions", "state_of"]

KEEP_CLOSED = 256
"""Closed episodes a runner remembers (their results), most recent last."""


@dataclass
class Session:
    """One open episode."""

    id: str
    env: Environment
    request: EnvOpen
    task_id: str
    max_steps: int
    task_info: dict[str, str] = field(default_factory=dict)
    steps: int = 0
    progress: float = 0.0
    last: float = 0.0
    result: EnvResult | None = None
    """Set once done (the environment's, or ``blocked`` at the step limit)."""
    moves: list[EnvMove] = field(default_factory=list)
    """The actions taken, with when and what they did (an agent's episode is credited by
    them)."""


def state_of(s: Session, instance: str) -> EnvState:
    """What the agent sees of ``s`` now."""
    r = s.result
    return EnvState(
        session=s.id,
        instance=instance,
        episode_id=s.request.episode_id,
        environment=s.request.environment,
        task_id=s.task_id,
        observation=s.env.observation if r is None else "",
        candidates=list(s.env.candidates) if r is None else [],
        steps=s.steps,
        max_steps=s.max_steps,
        done=r is not None,
        progress=s.progress,
        outcome=r.outcome if r is not None else None,
        reward=r.reward if r is not None else None,
        info=dict(r.info) if r is not None else {},
        evidence=list(r.evidence) if r is not None else [],
        task_info=s.task_info,
    )


class Sessions:
    """The open episodes of one runner (bounded; idle ones closed by :meth:`idle`)."""

    def __init__(self, *, max_open: int, idle_s: float) -> None:
        self.max_open, self.idle_s = max_open, idle_s
        self._open: dict[str, Session] = {}
        self.opened = 0
        self.expired = 0

    def __len__(self) -> int:
        return len(self._open)

    def has_room(self) -> bool:
        return len(self._open) < self.max_open

    def add(self, s: Session) -> None:
        self._open[s.id] = s
        self.opened += 1

    def get(self, session: str) -> Session | None:
        return self._open.get(session)

    def pop(self, session: str) -> Session | None:
        return self._open.pop(session, None)

    def idle(self, now: float) -> list[Session]:
        """Take out the sessions idle longer than ``idle_s`` (the caller closes them)."""
        old = [s for s in self._open.values() if now - s.last > self.idle_s]
        for s in old:
            del self._open[s.id]
        self.expired += len(old)
        return old


class SessionHandlers:
    """The endpoints of one runner process for episodes driven from outside."""

    def __init__(
        self,
        host: EnvironmentHost[Any],
        task_of: Callable[[str], Awaitable[Any]],
        task_ids: Callable[[str], Awaitable[list[str]]],
        *,
        max_steps: int,
        sessions: Sessions,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.host, self.task_of, self.task_ids = host, task_of, task_ids
        self.max_steps = max_steps
        self.sessions = sessions
        self.clock = clock
        self.closed: OrderedDict[str, Session] = OrderedDict()
        """The last ``KEEP_CLOSED`` episodes closed, by session (what an agent's runner reads
        after the agent closed its episode itself)."""
        self.instance = uuid.uuid4().hex[:12]
        """This process's name on ``env.step.<env>.<instance>`` / ``env.close...``."""
        self._locks: dict[str, asyncio.Lock] = {}

    async def _task_id(self, req: EnvOpen) -> str:
        if req.task_id:
            return req.task_id
        if not req.split:
            raise PermanentError("give a task_id, or a split to draw a task from")
        ids = await self.task_ids(req.split)
        if not ids:
            raise PermanentError(f"no {req.environment} task in split {req.split!r}")
        return sorted(ids)[req.seed % len(ids)]

    async def open(self, req: EnvOpen) -> EnvState:
        if not self.sessions.has_room():
            raise ServiceError(
                "503", f"this runner holds {self.sessions.max_open} episodes driven from outside"
            )
        if req.max_steps < 0:
            raise PermanentError("max_steps must be >= 0 (0: the runner's)")
        task_id = await self._task_id(req)
        try:
            task = await self.task_of(task_id)
        except LookupError as exc:
            raise PermanentError(f"no task {task_id}: {exc}") from exc
        max_steps = min(req.max_steps or self.max_steps, self.max_steps)
        try:
            env = await self.host.open(task, seed=req.seed, max_steps=max_steps)
        except Exception as exc:  # the task cannot be set up: say so, hold nothing
            raise PermanentError(f"the environment cannot open task {task_id}: {exc}") from exc
        s = Session(
            id=uuid.uuid4().hex,
            env=env,
            request=req,
            task_id=task_id,
            max_steps=max_steps,
            task_info=dict(self.host.task_info(task)),
            last=self.clock(),
        )
        if env.done:
            s.result = env.result()
        self.sessions.add(s)
        get_logger(episode_id=req.episode_id).info(
            "session.opened", task_id=task_id, session=s.id, agent=req.agent
        )
        return state_of(s, self.instance)

    def _held(self, session: str) -> Session:
        s = self.sessions.get(session)
        if s is None:
            raise ServiceError("404", f"no open episode {session} here (closed, or idled out)")
        return s

    async def step(self, req: EnvStep) -> EnvState:
        s = self._held(req.session)
        async with self._locks.setdefault(s.id, asyncio.Lock()):
            if s.result is not None:
                raise PermanentError("the episode is over: read its result, or close it")
            s.last = self.clock()
            try:
                await s.env.step(req.action)
            except Exception as exc:  # as in the runner's own loop: a blocked episode
                if transient(exc):
                    raise
                get_logger(episode_id=s.request.episode_id).exception(
                    "environment_crashed", session=s.id, error=str(exc)
                )
                s.steps += 1
                s.moves.append(EnvMove(time.time(), req.action, 0.0))
                s.result = EnvResult(
                    outcome="blocked",
                    reward=0.0,
                    info={"error": blocked_error("environment", exc)},
                )
                return state_of(s, self.instance)
            s.steps += 1
            s.progress = float(getattr(s.env, "progress", 0.0) or 0.0)
            s.moves.append(EnvMove(time.time(), req.action, s.progress))
            if s.env.done:
                s.result = s.env.result()
            elif s.steps >= s.max_steps:
                s.result = EnvResult(
                    outcome="blocked",
                    reward=0.0,
                    info={"reason": f"no end within {s.max_steps} steps"},
                )
            return state_of(s, self.instance)

    async def close(self, req: EnvClose) -> EnvState:
        s = self.sessions.pop(req.session)
        if s is None:
            raise ServiceError("404", f"no open episode {req.session} here (closed, or idled out)")
        self._locks.pop(s.id, None)
        await s.env.close()
        self.closed[s.id] = s
        while len(self.closed) > KEEP_CLOSED:
            self.closed.popitem(last=False)
        return state_of(s, self.instance)

    async def close_all(self) -> None:
        """Close every open episode (the runner is stopping)."""
        for s in self.sessions.idle(float("inf")):
            await s.env.close()

    async def expire_idle(self, every_s: float = 30.0) -> None:
        """Background task: close the episodes idle longer than ``session_idle_s``."""
        while True:
            await asyncio.sleep(every_s)
            for s in self.sessions.idle(self.clock()):
                self._locks.pop(s.id, None)
                await s.env.close()
                get_logger(episode_id=s.request.episode_id).info(
                    "session.idled_out", session=s.id, steps=s.steps
                )
