"""The dashboard's HTTP side: one Starlette app, GET only (it cannot change anything).

- ``/``: the page (``pages.PAGE``)
- ``/events``: server-sent events, a JSON snapshot at once and after every change (filters
  ``environment``, ``outcome``, ``lane``, ``campaign_id`` in the query apply to the feed)
- ``/api/state``: the same snapshot once; ``/api/episode/<id>``: one episode's drill-down
- ``/evidence/<name>``: an evidence object (a browser episode's screenshot) from the Object Store
- ``/metrics``: Prometheus text exposition (0.0.4)
- ``/healthz``: ``ok``
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from .handlers import DashboardState
from .logic import episode_detail, prometheus
from .pages import PAGE

__all__ = ["KEEPALIVE_S", "build_app"]

KEEPALIVE_S = 15.0
"""An event stream with no change for this long gets a comment line (proxies keep it open)."""

_FILTERS = ("environment", "outcome", "lane", "campaign_id")


def _filters(request: Request) -> dict[str, str]:
    return {k: request.query_params.get(k, "") for k in _FILTERS}


def build_app(
    state: DashboardState, read_evidence: Callable[[str], Awaitable[bytes | None]]
) -> Starlette:
    """The app over ``state``; ``read_evidence(name)`` fetches an evidence object (``None``:
    no such object)."""
    view = state.view

    async def page(_: Request) -> Response:
        return HTMLResponse(PAGE, headers={"Cache-Control": "no-store"})

    async def events(request: Request) -> Response:
        filters = _filters(request)

        async def stream() -> AsyncIterator[str]:
            version = view.version
            yield f"data: {json.dumps(view.snapshot(filters))}\n\n"
            while not await request.is_disconnected():
                now = await state.wait_change(version, KEEPALIVE_S)
                if now == version:
                    yield ": keepalive\n\n"
                    continue
                version = now
                yield f"data: {json.dumps(view.snapshot(filters))}\n\n"

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def api_state(request: Request) -> Response:
        return JSONResponse(view.snapshot(_filters(request)))

    async def api_episode(request: Request) -> Response:
        episode_id = request.path_params["episode_id"]
        ep = view.episode(episode_id)
        if ep is None:
            return PlainTextResponse(
                f"episode {episode_id} is not among the {len(view.feed)} most recent", 404
            )
        return JSONResponse(episode_detail(ep))

    async def evidence(request: Request) -> Response:
        name = request.path_params["name"]
        data = await read_evidence(name)
        if data is None:
            return PlainTextResponse(f"no evidence object {name}", 404)
        media = "image/png" if name.endswith(".png") else "application/octet-stream"
        return Response(data, media_type=media)

    async def metrics(_: Request) -> Response:
        return PlainTextResponse(
            prometheus(view), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    return Starlette(
        routes=[
            Route("/", page),
            Route("/events", events),
            Route("/api/state", api_state),
            Route("/api/episode/{episode_id}", api_episode),
            Route("/evidence/{name:path}", evidence),
            Route("/metrics", metrics),
            Route("/healthz", healthz),
        ]
    )
