"""The sites service's sessions and what each action does to a session's record, pure: no NATS,
no HTTP (``web.py`` maps requests onto these functions, ``pages.py`` renders what they leave).

**Sessions** (:class:`Sessions`). One per episode, keyed by a random token that is the only
thing in the URL naming it; the record (:class:`~aios_rl.envs.browser.flows.Record`) is all the
state there is. A session unused (no page, no request) for ``idle_s`` is dropped when the table
is next touched; opening one beyond ``limit`` live sessions raises :class:`SessionLimitError`.

**Transitions.** Every function takes the session's task and record and the submitted form
(name -> values), changes the record, and returns the path (inside the session) the browser is
sent to next: every POST answers with a redirect, so going back or reloading never re-submits.
Each is deterministic in its inputs, so the same actions on a fresh session of the same task
give the same record and the same pages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aios_rl.envs.browser.flows import (
    BANNER_ACCEPT,
    MAX_EVENTS,
    CartLine,
    Field,
    Order,
    Product,
    Record,
    fields_of,
    items_of,
    pages_of,
    parse_price,
    products_of,
    search,
    slug,
    validate_field,
)
from aios_rl.errors import AiosError
from contracts import BrowserTask

__all__ = [
    "LOCKED",
    "MAX_FAILURES",
    "Form",
    "Results",
    "Session",
    "SessionLimitError",
    "Sessions",
    "add_to_cart",
    "checkout_gate",
    "confirm_form",
    "dismiss",
    "first",
    "form_step_gate",
    "load_more",
    "login",
    "login_gate",
    "open_item",
    "place_order",
    "protected_page",
    "record_page",
    "results",
    "safe_path",
    "step_titles",
    "submit_step",
]

Form = Mapping[str, Sequence[str]]
"""A submitted form or query string: name -> its values, in order."""

MAX_FAILURES = 3
"""Wrong passwords before the account locks."""
LOCKED = "Too many failed sign-ins: this account is locked."


def first(form: Form, name: str) -> str:
    """The first value of ``name`` in ``form`` (``""`` when absent), at most 200 characters."""
    values = form.get(name) or ()
    return str(values[0])[:200] if values else ""


def safe_path(path: str) -> str:
    """``path`` when it is a path inside a session (``/search?q=x``), else ``/``."""
    if not path.startswith("/") or path.startswith("//") or "\\" in path or len(path) > 500:
        return "/"
    return path


# -- sessions -------------------------------------------------------------------------------------


class SessionLimitError(AiosError):
    """Every session slot is taken by a live session."""


@dataclass
class Session:
    token: str
    task: BrowserTask
    episode_id: str
    record: Record
    opened_at: float
    last_used: float


class Sessions:
    """The live sessions, by token."""

    def __init__(self, *, limit: int, idle_s: float) -> None:
        self.limit = limit
        self.idle_s = idle_s
        self._by_token: dict[str, Session] = {}
        self.opened = 0
        self.expired = 0
        self.closed = 0

    def __len__(self) -> int:
        return len(self._by_token)

    def expire(self, now: float) -> int:
        """Drop the sessions idle for ``idle_s`` or more; how many went."""
        stale = [t for t, s in self._by_token.items() if now - s.last_used >= self.idle_s]
        for t in stale:
            del self._by_token[t]
        self.expired += len(stale)
        return len(stale)

    def open(self, token: str, task: BrowserTask, episode_id: str, now: float) -> Session:
        """A new session of ``task`` under ``token``. Raises ``SessionLimitError`` when ``limit``
        sessions are live, ``ValueError`` when the token is taken."""
        self.expire(now)
        if len(self._by_token) >= self.limit:
            raise SessionLimitError(
                f"{len(self._by_token)} sessions are open (the limit); close finished ones."
            )
        if token in self._by_token:
            raise ValueError("session token already in use")
        s = Session(token, task, episode_id, Record(), opened_at=now, last_used=now)
        self._by_token[token] = s
        self.opened += 1
        return s

    def get(self, token: str, now: float) -> Session | None:
        """The live session ``token`` (its idle clock restarted), or ``None``."""
        s = self._by_token.get(token)
        if s is None:
            return None
        if now - s.last_used >= self.idle_s:
            del self._by_token[token]
            self.expired += 1
            return None
        s.last_used = now
        return s

    def close(self, token: str) -> Session | None:
        """Drop ``token``'s session; the session, or ``None`` when there was none."""
        s = self._by_token.pop(token, None)
        if s is not None:
            self.closed += 1
        return s


# -- distractors ----------------------------------------------------------------------------------


def dismiss(rec: Record, which: str, form: Form) -> str:
    """A dismiss button of the cookie banner or the newsletter modal."""
    if which in ("cookies", "newsletter") and which not in rec.dismissed:
        rec.dismissed.add(which)
        if which == "cookies":
            choice = "accepted" if first(form, "choice") == BANNER_ACCEPT else "rejected"
            rec.event(f"cookies_{choice}")
        else:
            rec.event("newsletter_dismissed")
    return safe_path(first(form, "next"))


# -- sign-in --------------------------------------------------------------------------------------


def login_gate(rec: Record, path: str) -> str | None:
    """``None`` when signed in; else the sign-in path, remembering ``path`` when it is the
    first protected page asked for."""
    if rec.logged_in:
        return None
    if not rec.after_login:
        rec.after_login = path
    return "/login"


def login(task: BrowserTask, rec: Record, form: Form) -> str:
    """A sign-in form: one step (``user`` and ``password``), or the two of a two-step sign-in
    (``user`` alone, then ``password`` alone); ``restart`` forgets the account named."""
    p = task.params
    if rec.logged_in:
        return "/"
    if rec.locked:
        rec.event("login_refused")
        rec.login_error = LOCKED
        return "/login"
    if "restart" in form:
        rec.pending_user = ""
        rec.login_error = ""
        return "/login"
    if p.get("next_label") and not rec.pending_user:
        user = first(form, "user").strip()
        rec.login_error = "" if user else "Enter your account name."
        rec.pending_user = user
        return "/login"
    user = rec.pending_user if p.get("next_label") else first(form, "user").strip()
    if user == p["user"] and first(form, "password") == p["password"]:
        rec.logged_in = True
        rec.login_error = ""
        rec.event("logged_in")
        dest, rec.after_login = rec.after_login or "/", ""
        return dest
    rec.failures += 1
    rec.event("login_failed")
    if rec.failures >= MAX_FAILURES:
        rec.locked = True
        rec.event("locked_out")
        rec.login_error = LOCKED
    else:
        left = MAX_FAILURES - rec.failures
        rec.login_error = (
            f"The {p['user_label'].lower()} or password is incorrect. "
            f"{left} attempt{'s' if left > 1 else ''} left."
        )
    return "/login"


def protected_page(task: BrowserTask, name_slug: str) -> str | None:
    """The ``auth`` page named by ``name_slug``, or ``None``."""
    return next((n for n in pages_of(task.params) if slug(n) == name_slug), None)


def record_page(rec: Record, name: str) -> None:
    """A protected page shown to a signed-in session."""
    if len(rec.pages_opened) < MAX_EVENTS:
        rec.pages_opened.append(name)
    rec.event(f"opened:{slug(name)}")


# -- form -----------------------------------------------------------------------------------------


def _values(fields: Sequence[Field], form: Form) -> dict[str, str]:
    return {
        f.key: ("on" if f.key in form else "off") if f.kind == "checkbox" else first(form, f.key)
        for f in fields
    }


def form_step_gate(task: BrowserTask, rec: Record, n: int) -> str | None:
    """``None`` when step ``n`` may be shown; else where to go (the first step not passed)."""
    steps = len(step_titles(task))
    if not 1 <= n <= steps:
        return "/form/1"
    for k in range(1, n):
        if k not in rec.passed:
            return f"/form/{k}"
    return None


def step_titles(task: BrowserTask) -> list[str]:
    """The headings of the form's steps (one per page)."""
    return list(json.loads(task.params["steps"]))


def submit_step(task: BrowserTask, rec: Record, n: int, form: Form) -> str:
    """Step ``n`` of the form submitted: kept as typed; on to the next step (or the review)
    when every field is valid, else back with the errors."""
    gate = form_step_gate(task, rec, n)
    if gate is not None:
        return gate
    fields = [f for f in fields_of(task.params) if f.step == n]
    values = _values(fields, form)
    rec.drafts[n] = values
    errors = {f.key: e for f in fields if (e := validate_field(f, values[f.key]))}
    if errors:
        rec.errors[n] = errors
        rec.passed.discard(n)
        rec.event(f"form_invalid:{n}")
        return f"/form/{n}"
    rec.errors.pop(n, None)
    rec.passed.add(n)
    rec.event(f"form_step:{n}")
    return "/review" if n == len(step_titles(task)) else f"/form/{n + 1}"


def confirm_form(task: BrowserTask, rec: Record) -> str:
    """The review page's confirm button: the values become the submission (only the first)."""
    steps = len(step_titles(task))
    missing = [k for k in range(1, steps + 1) if k not in rec.passed]
    if missing:
        return f"/form/{missing[0]}"
    if rec.submitted is not None:
        rec.event("form_resubmitted")
        return "/done"
    rec.submitted = {k: v for n in range(1, steps + 1) for k, v in rec.drafts[n].items()}
    rec.event("form_confirmed")
    return "/done"


# -- scroll ---------------------------------------------------------------------------------------


def load_more(task: BrowserTask, rec: Record) -> tuple[list[tuple[int, str, str]], bool]:
    """The page scrolled to the bottom: the next chunk of items (index, name, detail), and
    whether more remain."""
    items = items_of(task.params)
    chunk = int(task.params["chunk"])
    start = rec.chunks * chunk
    if start >= len(items):
        return [], False
    rec.chunks += 1
    rec.event(f"chunk_loaded:{rec.chunks}")
    new = [(i, *items[i]) for i in range(start, min(start + chunk, len(items)))]
    return new, rec.chunks * chunk < len(items)


def open_item(task: BrowserTask, rec: Record, index: int) -> bool:
    """An item of the list clicked; ``False`` when no such item is loaded."""
    loaded = min(rec.chunks * int(task.params["chunk"]), len(items_of(task.params)))
    if not 0 <= index < loaded:
        return False
    if len(rec.items_opened) < MAX_EVENTS:
        rec.items_opened.append(index)
    rec.event(f"opened_item:{index}")
    return True


# -- shop -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Results:
    """A results page: the products shown and the filters as they stand."""

    products: list[Product]
    attrs: list[str]
    """The attributes offered as filters (those of the products before filtering)."""
    checked: list[str]
    max_price: str
    price_error: str


def results(task: BrowserTask, *, query: str = "", category: str = "", form: Form) -> Results:
    """A search (``query``) or a category page (``category``, a type), filtered by ``form``'s
    ``attr`` values and ``max`` price."""
    products = products_of(task.params)
    base = search(products, query=query, category=category)
    offered = sorted({a for p in base for a in p.attrs})
    checked = [a for a in dict.fromkeys(form.get("attr") or ()) if a in offered]
    max_text = first(form, "max").strip()
    price = parse_price(max_text) if max_text else None
    error = "Enter a price like 30.00." if max_text and price is None else ""
    shown = search(base, attrs=checked, max_price=price)
    return Results(shown, offered, checked, max_text, error)


def view_product(rec: Record, product_id: str) -> None:
    """A product page shown (the progress measure credits finding the right product)."""
    if len(rec.products_viewed) < MAX_EVENTS:
        rec.products_viewed.append(product_id)


def add_to_cart(task: BrowserTask, rec: Record, form: Form) -> str:
    """The product page's add button: the cart holds this one line (replacing what it held)
    when every option is chosen, else back to the product with the errors."""
    pid = first(form, "product")
    product = next((p for p in products_of(task.params) if p.id == pid), None)
    if product is None:
        rec.event("cart_invalid")
        return "/"
    chosen = {dim: first(form, f"opt-{slug(dim)}") for dim in product.options}
    errors = {
        dim: f"Choose a {dim.lower()}."
        for dim, values in product.options.items()
        if chosen[dim] not in values
    }
    if errors:
        rec.cart_errors = {"_product": pid, **errors}
        rec.event("cart_invalid")
        return f"/product/{pid}"
    rec.cart_errors = {}
    rec.cart = CartLine(pid, chosen)
    rec.event("cart_added")
    return "/cart"


def checkout_gate(task: BrowserTask, rec: Record) -> str | None:
    """``None`` when the checkout page may be shown; else where to go."""
    if rec.order is not None:
        return "/thanks"
    if task.flow == "combo":
        gate = login_gate(rec, "/checkout")
        if gate is not None:
            return gate
    if rec.cart is None:
        return "/cart"
    return None


def place_order(task: BrowserTask, rec: Record, form: Form) -> str:
    """The checkout's order button: the cart's line becomes the order (only the first order
    counts). In ``combo`` it needs the sign-in and a delivery form that passes validation."""
    if rec.order is not None:
        rec.event("order_refused")
        return "/thanks"
    gate = checkout_gate(task, rec)
    if gate is not None:
        return gate
    assert rec.cart is not None
    delivery: dict[str, str] = {}
    if task.flow == "combo":
        fields = fields_of(task.params, "delivery")
        delivery = _values(fields, form)
        rec.delivery_draft = delivery
        rec.delivery_errors = {
            f.key: e for f in fields if (e := validate_field(f, delivery[f.key]))
        }
        if rec.delivery_errors:
            rec.event("delivery_invalid")
            return "/checkout"
    rec.order = Order(rec.cart.product_id, dict(rec.cart.options), delivery)
    rec.cart = None
    rec.event("order_placed")
    return "/thanks"
