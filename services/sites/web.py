"""The sites' HTTP side: one Starlette app (every page under ``/e/<session>/...``, nothing
outside it) and the uvicorn server the service runs it on, in its own event loop.

A request names its session in the path; an unknown or expired one gets a 404 page. There is no
route that tells the goal or the result: the runner asks ``sites.result`` over NATS. Every page
is sent with ``Cache-Control: no-store``, so going back fetches it again from the session's
state (what the same actions always lead to).
"""

from __future__ import annotations

import re
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from aios_rl.envs.browser.flows import products_of, slug
from aios_rl.httpserve import serve_state

from . import logic
from .handlers import SitesState
from .logic import Form
from .pages import View, chunk_more, not_found
from .settings import SitesSettings

__all__ = ["MAX_BODY", "build_app", "http_server"]

MAX_BODY = 64 * 1024
"""Largest form body read (bytes); a larger one is refused with 413."""

_NO_STORE = {"Cache-Control": "no-store"}


@dataclass(frozen=True)
class _Html:
    body: str
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Redirect:
    path: str
    """Inside the session."""


_Reply = _Html | _Redirect | None
"""A page, a redirect (303), or ``None``: no such page (404)."""


# -- routes of each flow --------------------------------------------------------------------------


def _login(v: View, method: str, form: Form) -> _Reply:
    if method == "POST":
        return _Redirect(logic.login(v.task, v.rec, form))
    return _Redirect("/") if v.rec.logged_in else _Html(v.login())


def _auth(v: View, method: str, path: str, query: Form, form: Form) -> _Reply:
    if path == "/" and method == "GET":
        return _Html(v.auth_home())
    if path == "/login":
        return _login(v, method, form)
    m = re.fullmatch(r"/page/([a-z0-9-]{1,40})", path)
    if m and method == "GET":
        name = logic.protected_page(v.task, m[1])
        if name is None:
            return None
        gate = logic.login_gate(v.rec, path)
        if gate is not None:
            return _Redirect(gate)
        logic.record_page(v.rec, name)
        return _Html(v.protected(name))
    return None


def _form(v: View, method: str, path: str, query: Form, form: Form) -> _Reply:
    task, rec = v.task, v.rec
    if path == "/" and method == "GET":
        return _Redirect("/form/1")
    m = re.fullmatch(r"/form/(\d)", path)
    if m:
        n = int(m[1])
        if method == "POST":
            return _Redirect(logic.submit_step(task, rec, n, form))
        gate = logic.form_step_gate(task, rec, n)
        return _Redirect(gate) if gate is not None else _Html(v.form_step(n))
    if path == "/review" and method == "GET":
        steps = len(logic.step_titles(task))
        missing = [k for k in range(1, steps + 1) if k not in rec.passed]
        return _Redirect(f"/form/{missing[0]}") if missing else _Html(v.review())
    if path == "/confirm" and method == "POST":
        return _Redirect(logic.confirm_form(task, rec))
    if path == "/done" and method == "GET":
        return _Html(v.done()) if rec.submitted is not None else _Redirect("/form/1")
    return None


def _scroll(v: View, method: str, path: str, query: Form, form: Form) -> _Reply:
    if path == "/" and method == "GET":
        return _Html(v.item_list())
    if path == "/more" and method == "POST":
        items, more = logic.load_more(v.task, v.rec)
        return _Html(v.chunk(items), headers=chunk_more(more))
    m = re.fullmatch(r"/(open|item)/(\d{1,4})", path)
    if m and m[1] == "open" and method == "POST":
        index = int(m[2])
        return _Redirect(f"/item/{index}") if logic.open_item(v.task, v.rec, index) else None
    if m and m[1] == "item" and method == "GET" and int(m[2]) in v.rec.items_opened:
        return _Html(v.item(int(m[2])))
    return None


def _shop(v: View, method: str, path: str, query: Form, form: Form) -> _Reply:
    task, rec, p = v.task, v.rec, v.task.params
    if method == "GET":
        if path == "/":
            return _Html(v.shop_home())
        if path == "/search" and p["home"] == "search":
            q = logic.first(query, "q")
            return _Html(v.results(logic.results(task, query=q, form=query), query=q))
        m = re.fullmatch(r"/category/([a-z0-9-]{1,40})", path)
        if m and p["home"] == "categories":
            kind = next((pr.type for pr in products_of(p) if slug(pr.type) == m[1]), None)
            if kind is None:
                return None
            return _Html(v.results(logic.results(task, category=kind, form=query), category=kind))
        m = re.fullmatch(r"/product/(p[0-9a-f]{6})", path)
        if m:
            product = next((pr for pr in products_of(p) if pr.id == m[1]), None)
            if product is None:
                return None
            logic.view_product(rec, product.id)
            return _Html(v.product(product))
        if path == "/cart":
            return _Html(v.cart())
        if path == "/checkout":
            gate = logic.checkout_gate(task, rec)
            return _Redirect(gate) if gate is not None else _Html(v.checkout())
        if path == "/thanks":
            return _Html(v.thanks()) if rec.order is not None else _Redirect("/")
    if method == "POST":
        if path == "/cart":
            return _Redirect(logic.add_to_cart(task, rec, form))
        if path == "/order":
            return _Redirect(logic.place_order(task, rec, form))
    if path == "/login" and task.flow == "combo":
        return _login(v, method, form)
    return None


_FLOWS: dict[str, Callable[[View, str, str, Form, Form], _Reply]] = {
    "auth": _auth,
    "form": _form,
    "scroll": _scroll,
    "shop": _shop,
    "combo": _shop,
}


def route(v: View, method: str, path: str, query: Form, form: Form) -> _Reply:
    """What ``method`` on ``path`` (inside the session) does and answers."""
    m = re.fullmatch(r"/dismiss/(cookies|newsletter)", path)
    if m and method == "POST":
        return _Redirect(logic.dismiss(v.rec, m[1], form))
    return _FLOWS[v.task.flow](v, method, path, query, form)


# -- the app --------------------------------------------------------------------------------------


class _TooLarge(Exception):
    pass


async def _read_form(request: Request) -> Form:
    body = b""
    async for part in request.stream():
        body += part
        if len(body) > MAX_BODY:
            raise _TooLarge
    pairs = urllib.parse.parse_qsl(
        body.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=500
    )
    return _multi(pairs)


def _multi(pairs: Iterator[tuple[str, str]] | list[tuple[str, str]]) -> Form:
    out: dict[str, list[str]] = {}
    for k, val in pairs:
        out.setdefault(k, []).append(val)
    return out


def build_app(state: SitesState, clock: Callable[[], float] = time.monotonic) -> Starlette:
    """The ASGI app serving ``state``'s sessions."""

    async def dispatch(request: Request) -> Response:
        state.http_requests += 1
        token = request.path_params["session"]
        session = state.sessions.get(token, clock())
        if session is None:
            return HTMLResponse(not_found("This session has ended, or never was."), 404)
        try:
            form = await _read_form(request) if request.method == "POST" else {}
        except _TooLarge:
            return HTMLResponse(not_found("That form is too large."), 413)
        except ValueError:
            return HTMLResponse(not_found("That form could not be read."), 400)
        path = "/" + request.path_params["rest"]
        here = path + (f"?{request.url.query}" if request.url.query else "")
        prefix = f"/e/{token}"
        view = View(prefix=prefix, task=session.task, rec=session.record, here=here)
        reply = route(view, request.method, path, _multi(request.query_params.multi_items()), form)
        if reply is None:
            state.not_found += 1
            return HTMLResponse(not_found(), 404, headers=_NO_STORE)
        if isinstance(reply, _Redirect):
            return RedirectResponse(prefix + reply.path, 303, headers=_NO_STORE)
        return HTMLResponse(reply.body, reply.status, headers={**_NO_STORE, **reply.headers})

    async def bare(request: Request) -> Response:
        return RedirectResponse(f"/e/{request.path_params['session']}/", 303)

    return Starlette(
        routes=[
            Route("/e/{session}/{rest:path}", dispatch, methods=["GET", "POST"]),
            Route("/e/{session}", bare, methods=["GET"]),
        ]
    )


# -- the server -----------------------------------------------------------------------------------


def http_server(app: Starlette, settings: SitesSettings, state: SitesState):
    """Background task: bind ``settings.host``:``settings.port`` (0: a free port), set
    ``state.base_url`` and ``state.listening``, serve ``app`` until cancelled, then shut down
    gracefully. Raises ``OSError`` when the address cannot be bound, ``RuntimeError`` when the
    server stops by itself."""
    return serve_state(
        app,
        state,
        service="sites",
        host=settings.host,
        port=settings.port,
        public_url=settings.public_url,
    )
