"""The ``sites`` service's flows as tasks, and how a session's record is judged. Pure: no NATS,
no HTTP, no browser.

A task is (flow, template, seed) -> ``params`` (what the site renders: wordings, fields,
products, credentials, distractors), ``goal`` (hidden: what counts as done), ``statement``
(what the agent is asked; every value it must type is in double quotes), ``solution`` (the
oracle's path in element names: ``click "NAME"``, ``fill "NAME" "VALUE"``, ``select "NAME"
"OPTION"``, ``check "NAME"``, ``uncheck "NAME"``, ``scroll down``) and ``start_path``. Params
and goal are ``dict[str, str]``: lists and tables in them are JSON text.

**Flows** (each has three templates; the last one of each is held out, :data:`HELDOUT`):

- ``auth``: pages behind a login. The credentials are in the statement; a wrong password shows
  an error with the attempts left; the third failure locks the account; after signing in the
  site goes back to the page first asked for. Judged: the target page opened while signed in
  (1.0, done); signed in but not there (partial 0.5); locked out (failure, done).
- ``form``: a 2-3 page form validated by the server (required fields, email / phone / date
  formats, a select, radios, checkboxes, one pre-ticked), a review page, a confirmation.
  Judged on the confirmed values: the share of fields equal to the goal's (success when all are;
  done once confirmed).
- ``scroll``: a long list loaded in chunks of ``chunk`` items as the page is scrolled to the
  bottom (one chunk per scroll, see the service's page script); the target item is in the DOM
  only once its chunk is loaded, and must be opened. Judged: 1.0 when it is the first item
  opened; 0.5 when it is the second or third; else 0 (done once it is opened).
- ``shop``: WebShop-like (search or categories, attribute filters, a product page with options,
  a one-line cart, checkout). The first order placed is judged with WebShop's reward
  ``r_type * (N_attr + N_opt + 1[price <= max]) / (|attrs| + |opts| + 1)`` against the goal
  (:func:`webshop_reward`; ``r_type`` is 1 when the product's type is the goal's, else 0).
- ``combo``: sign in, buy, fill the delivery form. Placing the order needs the sign-in and a
  delivery form that passes validation. The reward is the shop reward of the order when the
  delivery details are the goal's, half of it when they are other (valid) details; with no
  order, partial credit: 0.1 for being signed in plus 0.2 x the shop reward of what the cart
  holds (at most 0.3). Locked out: failure, done.

Some variants carry distractors: a cookie banner (``Accept cookies`` / ``Reject cookies``) and a
newsletter modal (``No thanks``) that cover every page until dismissed (the modal above the
banner), so the solution dismisses them first.

**First stages** (``easy``, :data:`EASY_FLOWS`): a curriculum's tasks, the same goal and judge
by a shorter way: ``auth`` opens on the page asked for, behind the sign-in form; ``scroll`` puts
the target in the first two chunks. Only the ``train`` split is meant to have them: a student
trained on them is still measured on the full held-out flows.

Outcomes: ``success`` when the reward is 1, ``partial`` when it is above 0, else ``failure``.

**Progress** (:func:`potential`): how far along its flow a session is, from the same record (the
reward once done; at most ``PRE_DONE`` before). The browser environment reports its change per
step as step-level progress, so a student can be credited for the sub-goal a step reached
without any teacher.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from contracts import BROWSER_FLOWS, BrowserTask

from . import _catalogue as cat

__all__ = [
    "BANNER_ACCEPT",
    "BANNER_REJECT",
    "EASY_FLOWS",
    "FLOW_TEMPLATES",
    "HELDOUT",
    "MAX_EVENTS",
    "MODAL_DISMISS",
    "CartLine",
    "Field",
    "Order",
    "Product",
    "Record",
    "Verdict",
    "browser_task_id",
    "check_task",
    "fields_of",
    "generate",
    "items_of",
    "judge",
    "make_task",
    "pages_of",
    "parse_price",
    "potential",
    "products_of",
    "search",
    "shop_goal",
    "slug",
    "validate_field",
    "webshop_reward",
]

FLOW_TEMPLATES: dict[str, tuple[str, ...]] = {
    "auth": ("classic", "deeplink", "two_step"),
    "form": ("signup", "appointment", "application"),
    "scroll": ("orders", "contacts", "episodes"),
    "shop": ("classic", "catalogue", "market"),
    "combo": ("login_first", "login_at_checkout", "express"),
}
"""Flow -> its templates (page layouts, wordings, field sets)."""

HELDOUT: dict[str, str] = {flow: templates[-1] for flow, templates in FLOW_TEMPLATES.items()}
"""The template of each flow that only the ``heldout`` split uses; ``train`` uses the others."""

EASY_FLOWS = ("auth", "scroll")
"""Flows with a first stage (``easy``: a curriculum's tasks, the same goal by a shorter way):
``auth`` starts on the page asked for, behind the sign-in form (the sign-in alone is left);
``scroll`` puts the target in the first two chunks of the list (at most one scroll)."""

BANNER_ACCEPT = "Accept cookies"
BANNER_REJECT = "Reject cookies"
MODAL_DISMISS = "No thanks"

MAX_EVENTS = 200
"""Most events a record keeps (the oldest go first); also the most pages and items it keeps as
opened."""

# -- small helpers --------------------------------------------------------------------------------


def _q(value: str) -> str:
    """``value`` in double quotes, as the statement and the solution write it."""
    return json.dumps(value, ensure_ascii=False)


def click(name: str) -> str:
    return f"click {_q(name)}"


def fill(name: str, value: str) -> str:
    return f"fill {_q(name)} {_q(value)}"


def select(name: str, option: str) -> str:
    return f"select {_q(name)} {_q(option)}"


def check(name: str) -> str:
    return f"check {_q(name)}"


def uncheck(name: str) -> str:
    return f"uncheck {_q(name)}"


def _and(items: Sequence[str]) -> str:
    """``"a"``, ``"a" and "b"``, ``"a", "b" and "c"``."""
    quoted = [_q(i) for i in items]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def slug(text: str) -> str:
    """``Audit log`` -> ``audit-log`` (a path segment)."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _person(rng: random.Random) -> tuple[str, str]:
    return rng.choice(cat.FIRST_NAMES), rng.choice(cat.LAST_NAMES)


def _email(first: str, last: str, rng: random.Random) -> str:
    return f"{first.lower()}.{last.lower()}@{rng.choice(cat.EMAIL_DOMAINS)}"


def _phone(rng: random.Random) -> str:
    d = lambda n: "".join(str(rng.randrange(10)) for _ in range(n))  # noqa: E731
    return rng.choice((f"+44 20 7946 0{d(3)}", f"+1 202 555 0{d(3)}", f"+33 1 70 18 {d(2)} {d(2)}"))


def _date(rng: random.Random, start: dt.date, end: dt.date) -> dt.date:
    return start + dt.timedelta(days=rng.randrange((end - start).days))


def _password(rng: random.Random) -> str:
    a, b = rng.sample(cat.WORDS, 2)
    return f"{a}-{b}-{rng.randrange(10, 100)}"


def _postcode(rng: random.Random) -> str:
    letters = "ABDEGHJLNPRSTUWXYZ"
    return (
        f"{rng.choice(letters)}{rng.choice(letters)}{rng.randrange(1, 20)} "
        f"{rng.randrange(1, 10)}{rng.choice(letters)}{rng.choice(letters)}"
    )


# -- form fields and their validation -------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One input of a form (the ``form`` flow, the ``combo`` delivery form)."""

    key: str
    label: str
    """The accessible name (a ``<label>``, or the legend of a radio group)."""
    kind: str
    """``text``, ``email``, ``tel``, ``date``, ``postcode``, ``select``, ``radio`` or
    ``checkbox``."""
    step: int = 1
    options: tuple[str, ...] = ()
    fmt: str = ""
    """For ``date``: ``YYYY-MM-DD`` or ``DD/MM/YYYY`` (shown as the placeholder)."""
    required: bool = True
    default: str = ""
    """For ``checkbox``: ``on`` when it starts ticked."""


_EMAIL = re.compile(r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}$")
_PHONE = re.compile(r"^\+?[0-9][0-9 -]*[0-9]$")
_POSTCODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 -]{1,8}[A-Za-z0-9]$")
_DATE_FORMATS = {"YYYY-MM-DD": "%Y-%m-%d", "DD/MM/YYYY": "%d/%m/%Y"}


def validate_field(f: Field, raw: str) -> str:
    """The error message for ``raw`` in field ``f`` (``""`` when valid). A checkbox's value is
    ``on`` or ``off``."""
    value = raw.strip()
    if f.kind == "checkbox":
        return "Tick this box to continue." if f.required and value != "on" else ""
    if not value:
        if not f.required:
            return ""
        return f"Choose {f.label.lower()}." if f.kind in ("select", "radio") else "Required."
    if len(value) > 100:
        return "Too long."
    if f.kind in ("select", "radio"):
        return "" if value in f.options else f"Choose one of the listed {f.label.lower()}s."
    if f.kind == "email" and not _EMAIL.match(value):
        return "Enter an email address like name@example.org."
    if f.kind == "tel":
        digits = sum(c.isdigit() for c in value)
        if not _PHONE.match(value) or not 7 <= digits <= 15:
            return "Enter a phone number of 7 to 15 digits, like +44 20 7946 0123."
    if f.kind == "postcode" and not _POSTCODE.match(value):
        return "Enter a postcode like NW1 6XE."
    if f.kind == "date":
        try:
            dt.datetime.strptime(value, _DATE_FORMATS[f.fmt])
        except ValueError:
            return f"Enter a date as {f.fmt}."
    return ""


def fields_of(params: Mapping[str, str], key: str = "fields") -> list[Field]:
    """The fields a task's params describe (JSON under ``key``)."""
    out = []
    for raw in json.loads(params[key]):
        raw = dict(raw)
        raw["options"] = tuple(raw.get("options", ()))
        out.append(Field(**raw))
    return out


def _fields_json(fields: Iterable[Field]) -> str:
    rows = []
    for f in fields:
        row = {k: v for k, v in dataclasses.asdict(f).items() if v not in ((), "", None)}
        row["required"] = f.required
        rows.append(row)
    return _dumps(rows)


# -- products, search, the WebShop reward ---------------------------------------------------------


@dataclass(frozen=True)
class Product:
    id: str
    title: str
    type: str
    attrs: tuple[str, ...]
    options: dict[str, tuple[str, ...]]
    """Dimension (``Size``, ``Colour``, ``Capacity``) -> the values offered."""
    price: str
    """Dollars, two decimals."""


def products_of(params: Mapping[str, str]) -> list[Product]:
    return [
        Product(
            id=p["id"],
            title=p["title"],
            type=p["type"],
            attrs=tuple(p["attrs"]),
            options={d: tuple(v) for d, v in p["options"].items()},
            price=p["price"],
        )
        for p in json.loads(params["products"])
    ]


_TOKEN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def _tokens(text: str) -> set[str]:
    return set(_TOKEN.findall(text.lower()))


def parse_price(text: str) -> float | None:
    """``"30"``, ``"30.00"``, ``"$30"`` -> 30.0; ``None`` when it is not a price."""
    m = re.fullmatch(r"\s*\$?\s*(\d{1,6}(?:\.\d{1,2})?)\s*", text)
    return float(m.group(1)) if m else None


def search(
    products: Sequence[Product],
    *,
    query: str = "",
    category: str = "",
    attrs: Iterable[str] = (),
    max_price: float | None = None,
) -> list[Product]:
    """The products, in catalogue order, whose words (title, type, attributes) hold every word
    of ``query``, of type ``category`` (when given), with every attribute of ``attrs`` and a
    price of at most ``max_price``."""
    want = _tokens(query)
    need = set(attrs)
    out = []
    for p in products:
        if category and p.type != category:
            continue
        if want and not want <= _tokens(" ".join((p.title, p.type, *p.attrs))):
            continue
        if not need <= set(p.attrs):
            continue
        if max_price is not None and float(p.price) > max_price + 1e-9:
            continue
        out.append(p)
    return out


def shop_goal(goal: Mapping[str, str]) -> tuple[str, list[str], dict[str, str], str]:
    """(type, attributes, options, price_max) of a shop or combo goal."""
    return goal["type"], json.loads(goal["attrs"]), json.loads(goal["options"]), goal["price_max"]


def webshop_reward(goal: Mapping[str, str], product: Product, chosen: Mapping[str, str]) -> float:
    """WebShop's reward for buying ``product`` with options ``chosen`` against ``goal``:
    ``r_type * (N_attr + N_opt + 1[price <= price_max]) / (|attrs| + |opts| + 1)``, where
    ``N_attr`` counts the goal's attributes the product has, ``N_opt`` the goal's option values
    among those chosen, and ``r_type`` is 1 when the product's type is the goal's, else 0."""
    gtype, gattrs, gopts, price_max = shop_goal(goal)
    if product.type != gtype:
        return 0.0
    n_attr = sum(a in product.attrs for a in gattrs)
    n_opt = sum(v in chosen.values() for v in gopts.values())
    price_ok = float(product.price) <= float(price_max) + 1e-9
    return (n_attr + n_opt + int(price_ok)) / (len(gattrs) + len(gopts) + 1)


# -- the other params ----------------------------------------------------------------------------


def pages_of(params: Mapping[str, str]) -> list[str]:
    """The ``auth`` flow's protected pages (link texts)."""
    return list(json.loads(params["pages"]))


def items_of(params: Mapping[str, str]) -> list[tuple[str, str]]:
    """The ``scroll`` flow's items: (name, detail)."""
    return [(str(n), str(d)) for n, d in json.loads(params["items"])]


def check_task(task: BrowserTask) -> None:
    """Raise ``ValueError`` when ``task`` is not a site task the service can serve."""
    if task.kind != "site":
        raise ValueError(f"task {task.task_id} is a {task.kind!r} task, not a site task.")
    if task.flow not in BROWSER_FLOWS:
        raise ValueError(f"task {task.task_id} names unknown flow {task.flow!r}.")
    if browser_task_id(task) != task.task_id:
        raise ValueError(f"task {task.task_id}: its content does not match its id.")
    p, g = task.params, task.goal
    try:
        if task.flow in ("auth", "combo"):
            _ = p["user"], p["password"], p["user_label"], p["password_label"], p["submit_label"]
        if task.flow == "auth":
            if g["page"] not in pages_of(p):
                raise ValueError("the goal page is not one of the pages")
        if task.flow == "form":
            keys = {f.key for f in fields_of(p)}
            if set(g) != keys:
                raise ValueError("the goal does not name exactly the form's fields")
        if task.flow == "scroll":
            if int(p["chunk"]) < 1 or g["item"] not in dict(items_of(p)):
                raise ValueError("bad chunk size or goal item")
        if task.flow in ("shop", "combo"):
            products_of(p)
            shop_goal(g)
        if task.flow == "combo":
            fields_of(p, "delivery")
            json.loads(g["delivery"])
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
        raise ValueError(f"task {task.task_id}: params or goal unreadable: {exc!r}") from exc


# -- the record of a session and its judgement ----------------------------------------------------


@dataclass
class CartLine:
    product_id: str
    options: dict[str, str]


@dataclass
class Order:
    product_id: str
    options: dict[str, str]
    delivery: dict[str, str] = field(default_factory=dict)


@dataclass
class Record:
    """What the site recorded of one session: every flow's state (each uses its part)."""

    events: list[str] = field(default_factory=list)
    dismissed: set[str] = field(default_factory=set)
    """``cookies`` and / or ``newsletter``, once dismissed."""
    # auth (and combo's sign-in)
    logged_in: bool = False
    failures: int = 0
    locked: bool = False
    pending_user: str = ""
    """Two-step sign-in: the account named on the first step."""
    after_login: str = ""
    """The protected path first asked for while signed out: where signing in goes."""
    login_error: str = ""
    pages_opened: list[str] = field(default_factory=list)
    # form
    drafts: dict[int, dict[str, str]] = field(default_factory=dict)
    """Step -> the values last submitted on it (checkboxes ``on`` / ``off``)."""
    errors: dict[int, dict[str, str]] = field(default_factory=dict)
    passed: set[int] = field(default_factory=set)
    submitted: dict[str, str] | None = None
    # scroll
    chunks: int = 1
    """Chunks of the list loaded (the first comes with the page)."""
    items_opened: list[int] = field(default_factory=list)
    # shop and combo
    products_viewed: list[str] = field(default_factory=list)
    """Product pages shown, in order (ids; at most ``MAX_EVENTS``)."""
    cart: CartLine | None = None
    cart_errors: dict[str, str] = field(default_factory=dict)
    order: Order | None = None
    delivery_draft: dict[str, str] = field(default_factory=dict)
    delivery_errors: dict[str, str] = field(default_factory=dict)

    def event(self, name: str) -> None:
        self.events.append(name)
        if len(self.events) > MAX_EVENTS:
            del self.events[: len(self.events) - MAX_EVENTS]


@dataclass(frozen=True)
class Verdict:
    """What :func:`judge` found (the fields of a ``SiteResult``)."""

    done: bool
    outcome: str
    reward: float
    events: list[str]
    info: dict[str, str]
    potential: float = 0.0
    """How far along the flow the session is (:func:`potential`)."""


def _outcome(reward: float) -> str:
    return "success" if reward >= 1.0 - 1e-9 else "partial" if reward > 0 else "failure"


def _verdict(task: BrowserTask, rec: Record, done: bool, reward: float, **info: str) -> Verdict:
    reward = max(0.0, min(1.0, reward))
    return Verdict(
        done=done,
        outcome=_outcome(reward),
        reward=1.0 if _outcome(reward) == "success" else round(reward, 6),
        events=list(rec.events),
        info={"flow": task.flow, "template": task.template, **info},
    )


def _judge_auth(task: BrowserTask, rec: Record) -> Verdict:
    target = task.goal["page"]
    if target in rec.pages_opened:
        return _verdict(task, rec, True, 1.0)
    if rec.locked:
        return _verdict(task, rec, True, 0.0, reason="locked out")
    if rec.logged_in:
        return _verdict(task, rec, False, 0.5, reason="signed in, target page not opened")
    return _verdict(task, rec, False, 0.0)


def _judge_form(task: BrowserTask, rec: Record) -> Verdict:
    if rec.submitted is None:
        return _verdict(task, rec, False, 0.0, reason="not confirmed")
    goal = task.goal
    right = [k for k, v in goal.items() if rec.submitted.get(k, "").strip() == v]
    wrong = sorted(set(goal) - set(right))
    info = {"wrong_fields": ",".join(wrong)} if wrong else {}
    return _verdict(task, rec, True, len(right) / len(goal), **info)


def _judge_scroll(task: BrowserTask, rec: Record) -> Verdict:
    names = [name for name, _ in items_of(task.params)]
    target = names.index(task.goal["item"])
    if target not in rec.items_opened:
        return _verdict(task, rec, False, 0.0, opened=str(len(rec.items_opened)))
    rank = rec.items_opened.index(target)
    reward = 1.0 if rank == 0 else 0.5 if rank <= 2 else 0.0
    return _verdict(task, rec, True, reward, opened_before=str(rank))


def _bought(task: BrowserTask, line: CartLine | Order) -> tuple[float, Product | None]:
    product = {p.id: p for p in products_of(task.params)}.get(line.product_id)
    if product is None:
        return 0.0, None
    return webshop_reward(task.goal, product, line.options), product


def _judge_shop(task: BrowserTask, rec: Record) -> Verdict:
    if rec.order is None:
        return _verdict(task, rec, False, 0.0, reason="no order")
    reward, product = _bought(task, rec.order)
    return _verdict(task, rec, True, reward, bought=product.title if product else "?")


def _judge_combo(task: BrowserTask, rec: Record) -> Verdict:
    if rec.order is not None:
        reward, product = _bought(task, rec.order)
        wanted = json.loads(task.goal["delivery"])
        matches = all(rec.order.delivery.get(k, "").strip() == v for k, v in wanted.items())
        if not matches:
            reward *= 0.5
        return _verdict(
            task,
            rec,
            True,
            reward,
            bought=product.title if product else "?",
            delivery="as asked" if matches else "other details",
        )
    credit = 0.1 if rec.logged_in else 0.0
    if rec.cart is not None:
        credit += 0.2 * _bought(task, rec.cart)[0]
    return _verdict(task, rec, rec.locked, credit, reason="no order")


_JUDGES: dict[str, Callable[[BrowserTask, Record], Verdict]] = {
    "auth": _judge_auth,
    "form": _judge_form,
    "scroll": _judge_scroll,
    "shop": _judge_shop,
    "combo": _judge_combo,
}


def judge(task: BrowserTask, rec: Record, typed: Mapping[str, str] | None = None) -> Verdict:
    """Judge ``rec`` against ``task``'s hidden goal (rules in the module docstring), with the
    session's :func:`potential` (counting ``typed``, the page's unsent field values, if given;
    the judgement never does)."""
    v = _JUDGES[task.flow](task, rec)
    return dataclasses.replace(v, potential=potential(task, rec, v, typed))


# -- progress: how far along the flow a session is ------------------------------------------------

PRE_DONE = 0.8
"""The most a session that has not finished can score: finishing right is always worth more."""
DISTRACTORS_SHARE = 0.15
"""Of an unfinished session's potential, the part for dismissing the banner and the modal."""


def _right_share(values: Mapping[str, str], wanted: Mapping[str, str]) -> float:
    if not wanted:
        return 1.0
    return sum(values.get(k, "").strip() == v for k, v in wanted.items()) / len(wanted)


def _best_viewed(task: BrowserTask, rec: Record) -> float:
    """The best WebShop reward (no option chosen) among the product pages shown."""
    products = {p.id: p for p in products_of(task.params)}
    return max(
        (webshop_reward(task.goal, products[i], {}) for i in rec.products_viewed if i in products),
        default=0.0,
    )


TYPED_CREDENTIALS = 0.2
"""Of an auth session's sub-goals (signed in: 1), the part for the account name and the password
typed right into the sign-in form, not yet sent (``typed`` given); on combo, the same part of its
share for signing in."""


def _typed_credentials(p: Mapping[str, str], rec: Record, typed: Mapping[str, str] | None) -> float:
    """The share of the sign-in form's fields holding the right value now (``typed``; the
    account already named on a two-step sign-in counts as typed)."""
    if typed is None:
        return 0.0
    named = rec.pending_user == p["user"] and bool(p.get("next_label"))
    user = named or typed.get("user", "").strip() == p["user"]
    return (user + (typed.get("password", "") == p["password"])) / 2


def _with_typed(
    sent: Mapping[str, str], typed: Mapping[str, str] | None, keys: Iterable[str]
) -> dict[str, str]:
    """``sent`` with the page's unsent values of ``keys`` over it (the page shows a form's sent
    values back, so what it holds now is the latest)."""
    out = dict(sent)
    if typed:
        out.update({k: typed[k] for k in keys if k in typed})
    return out


def _core(task: BrowserTask, rec: Record, typed: Mapping[str, str] | None = None) -> float:
    """An unfinished session's sub-goals reached, in [0, 1], flow by flow (``typed``: the
    page's unsent field values, counted where a flow's goal names the field)."""
    p = task.params
    if task.flow == "auth":
        if rec.logged_in:
            return 1.0
        pending = 0.3 if p.get("next_label") and rec.pending_user == p["user"] else 0.0
        return pending + TYPED_CREDENTIALS * _typed_credentials(p, rec, typed)
    if task.flow == "form":
        drafts = {k: v for n in sorted(rec.drafts) for k, v in rec.drafts[n].items()}
        drafts = _with_typed(drafts, typed, task.goal)
        steps = len(json.loads(p["steps"]))
        return 0.5 * _right_share(drafts, task.goal) + 0.5 * len(rec.passed) / steps
    if task.flow == "scroll":
        names = [name for name, _ in items_of(p)]
        chunk = int(p["chunk"])
        needed = names.index(task.goal["item"]) // chunk  # chunks to load beyond the first
        loaded = 1.0 if needed == 0 else min(rec.chunks - 1, needed) / needed
        return max(0.0, loaded - 0.3 * len(rec.items_opened))
    viewed = _best_viewed(task, rec)
    cart = 0.0
    if rec.cart is not None:
        products = {x.id: x for x in products_of(p)}
        product = products.get(rec.cart.product_id)
        cart = webshop_reward(task.goal, product, rec.cart.options) if product else 0.0
    if task.flow == "shop":
        return 0.4 * viewed + 0.6 * cart
    wanted = json.loads(task.goal["delivery"])
    delivery = _right_share(_with_typed(rec.delivery_draft, typed, wanted), wanted)
    signed = 1.0 if rec.logged_in else TYPED_CREDENTIALS * _typed_credentials(p, rec, typed)
    return 0.2 * signed + 0.2 * viewed + 0.3 * cart + 0.3 * delivery * bool(rec.cart)


def potential(
    task: BrowserTask,
    rec: Record,
    verdict: Verdict | None = None,
    typed: Mapping[str, str] | None = None,
) -> float:
    """How far along ``task``'s flow the session recorded in ``rec`` is, in [0, 1]: a finished
    session's reward; an unfinished one's ``PRE_DONE`` x (``DISTRACTORS_SHARE`` x the share of
    its distractors dismissed + the rest x the flow's sub-goals reached: signed in, or the
    right account named on a two-step sign-in; form fields typed as asked and steps passed;
    chunks of the list loaded towards the target, less for wrong items opened; the best
    product page shown for the goal, what the cart holds, the delivery details).

    ``typed``: the values the page's form fields hold now, not yet sent (field name -> value,
    checkboxes ``on`` / ``off``), read by the runner when it measures progress that way: a
    right value typed then counts at once (sign-in fields, the form's fields, the delivery
    details), where without it only sent values do. The judgement never reads them.

    The change of it from step to step is the browser environment's progress measure: it sums
    to the final reward less the start's, so going round in circles earns nothing."""
    v = verdict if verdict is not None else _JUDGES[task.flow](task, rec)
    if v.done:
        return v.reward
    present = {"cookies"} if task.params.get("banner") else set()
    present |= {"newsletter"} if task.params.get("modal") else set()
    dismissed = len(present & rec.dismissed) / len(present) if present else 1.0
    core = max(0.0, min(1.0, _core(task, rec, typed)))
    return PRE_DONE * (DISTRACTORS_SHARE * dismissed + (1 - DISTRACTORS_SHARE) * core)


# -- generation: distractors and sign-in ----------------------------------------------------------


@dataclass
class _Draft:
    """A task being made: its params, goal, statement sentences and solution steps."""

    params: dict[str, str]
    goal: dict[str, str] = field(default_factory=dict)
    statement: list[str] = field(default_factory=list)
    solution: list[str] = field(default_factory=list)
    start_path: str = "/"
    easy: bool = False
    """The flow's first stage (:data:`EASY_FLOWS`): a shorter way to the same goal."""


def _distractors(rng: random.Random, d: _Draft) -> None:
    banner, modal = rng.random() < 0.35, rng.random() < 0.3
    d.params["banner"] = "1" if banner else ""
    d.params["modal"] = "1" if modal else ""
    if modal:  # the modal sits above the banner: it goes first
        d.solution.append(click(MODAL_DISMISS))
    if banner:
        d.solution.append(click(rng.choice((BANNER_ACCEPT, BANNER_REJECT))))


_LOGINS: dict[str, dict[str, str]] = {
    # auth
    "classic": {"user_label": "Username", "password_label": "Password", "submit_label": "Sign in"},
    "deeplink": {
        "user_label": "Email address",
        "password_label": "Password",
        "submit_label": "Log in",
        "remember": "Remember me",
        "user_kind": "email",
    },
    "two_step": {
        "user_label": "Account name",
        "password_label": "Password",
        "submit_label": "Sign in",
        "next_label": "Continue",
    },
    # combo
    "login_first": {
        "user_label": "Username",
        "password_label": "Password",
        "submit_label": "Log in",
        "login_link": "Sign in",
    },
    "login_at_checkout": {
        "user_label": "Email",
        "password_label": "Password",
        "submit_label": "Sign in",
        "login_link": "Account",
        "user_kind": "email",
    },
    "express": {
        "user_label": "Account",
        "password_label": "Password",
        "submit_label": "Continue",
        "login_link": "My account",
        "remember": "Keep me signed in",
    },
}


def _credentials(rng: random.Random, d: _Draft, template: str) -> tuple[str, str]:
    spec = dict(_LOGINS[template])
    first, last = _person(rng)
    if spec.pop("user_kind", "") == "email":
        user = _email(first, last, rng)
    else:
        user = f"{first.lower()}{rng.randrange(10, 100)}"
    password = _password(rng)
    d.params.update(spec, user=user, password=password)
    return user, password


def _sign_in_steps(d: _Draft, user: str, password: str) -> list[str]:
    p = d.params
    steps = [fill(p["user_label"], user)]
    if p.get("next_label"):
        steps.append(click(p["next_label"]))
    steps += [fill(p["password_label"], password), click(p["submit_label"])]
    return steps


# -- auth -----------------------------------------------------------------------------------------


def _auth(rng: random.Random, template: str, d: _Draft) -> None:
    user, password = _credentials(rng, d, template)
    pages = rng.sample(cat.PROTECTED_PAGES, 4)
    target = rng.choice(pages)
    d.params["pages"] = _dumps(pages)
    d.params["login_link"] = "Sign in"
    d.goal["page"] = target
    if d.easy:  # the first stage: the page asked for is already open, behind the sign-in
        d.start_path = f"/page/{slug(target)}"
    if template == "classic":
        d.statement.append(
            f"Sign in as {_q(user)} with password {_q(password)}, then open {_q(target)}."
        )
        d.solution += [*([] if d.easy else [click(target)]), *_sign_in_steps(d, user, password)]
    elif template == "deeplink":
        d.start_path = f"/page/{slug(target)}"
        d.statement.append(
            f"Log in with the email address {_q(user)} and the password {_q(password)} "
            f"to see the {_q(target)} page."
        )
        d.solution += _sign_in_steps(d, user, password)
    else:
        d.statement.append(
            f"Open the {_q(target)} page. When asked, sign in with the account {_q(user)} "
            f"and the password {_q(password)}."
        )
        d.solution += [*([] if d.easy else [click(target)]), *_sign_in_steps(d, user, password)]


# -- form -----------------------------------------------------------------------------------------

_FORM_BUTTONS = {
    "signup": ("Create your account", ("Your details", "Contact", "Plan"), "Next", "Back", "Review", "Confirm"),
    "appointment": ("Book an appointment", ("Patient", "Appointment"), "Continue", "Previous", "Check answers", "Book appointment"),
    "application": ("Job application", ("About you", "The role", "Skills"), "Next step", "Go back", "Review application", "Submit application"),
}  # fmt: skip
"""Template -> (title, step headings, next, back, review, confirm)."""


def _form_fields(rng: random.Random, template: str) -> tuple[list[Field], dict[str, str]]:
    first, last = _person(rng)
    email, phone = _email(first, last, rng), _phone(rng)
    if template == "signup":
        countries = sorted(rng.sample(cat.COUNTRIES, 6))
        fields = [
            Field("first_name", "First name", "text", 1),
            Field("last_name", "Last name", "text", 1),
            Field("email", "Email", "email", 1),
            Field("phone", "Phone", "tel", 2),
            Field("birth", "Date of birth", "date", 2, fmt="YYYY-MM-DD"),
            Field("country", "Country", "select", 2, options=tuple(countries)),
            Field("plan", "Plan", "radio", 3, options=("Basic", "Standard", "Premium")),
            Field("news", "Send me product news", "checkbox", 3, required=False),
            Field("terms", "I accept the terms", "checkbox", 3),
        ]
        born = _date(rng, dt.date(1960, 1, 1), dt.date(2004, 12, 31))
        values = {
            "first_name": first,
            "last_name": last,
            "email": email,
            "phone": phone,
            "birth": born.isoformat(),
            "country": rng.choice(countries),
            "plan": rng.choice(("Basic", "Standard", "Premium")),
            "news": rng.choice(("on", "off")),
            "terms": "on",
        }
    elif template == "appointment":
        slots = sorted(rng.sample(cat.TIME_SLOTS, 5))
        visits = ("In person", "Video call", "Phone call")
        fields = [
            Field("name", "Full name", "text", 1),
            Field("email", "Email", "email", 1),
            Field("phone", "Phone", "tel", 1),
            Field("date", "Appointment date", "date", 2, fmt="DD/MM/YYYY"),
            Field("slot", "Time slot", "select", 2, options=tuple(slots)),
            Field("visit", "Visit type", "radio", 2, options=visits),
            Field("reminder", "Text me a reminder", "checkbox", 2, required=False, default="on"),
        ]
        day = _date(rng, dt.date(2027, 1, 4), dt.date(2027, 12, 20))
        values = {
            "name": f"{first} {last}",
            "email": email,
            "phone": phone,
            "date": day.strftime("%d/%m/%Y"),
            "slot": rng.choice(slots),
            "visit": rng.choice(visits),
            "reminder": rng.choice(("on", "off")),
        }
    else:
        positions = sorted(rng.sample(cat.POSITIONS, 4))
        levels = ("0-2 years", "3-5 years", "6+ years")
        fields = [
            Field("name", "Name", "text", 1),
            Field("email", "Email address", "email", 1),
            Field("phone", "Phone number", "tel", 1),
            Field("position", "Position", "select", 2, options=tuple(positions)),
            Field("start", "Start date", "date", 2, fmt="YYYY-MM-DD"),
            Field("experience", "Experience", "radio", 2, options=levels),
            *(Field(f"skill_{slug(s)}", s, "checkbox", 3, required=False) for s in cat.SKILLS),
            Field("confirm", "I confirm these details are correct", "checkbox", 3),
        ]
        skills = set(rng.sample(cat.SKILLS, rng.randint(1, 3)))
        values = {
            "name": f"{first} {last}",
            "email": email,
            "phone": phone,
            "position": rng.choice(positions),
            "start": _date(rng, dt.date(2027, 1, 4), dt.date(2027, 12, 20)).isoformat(),
            "experience": rng.choice(levels),
            **{f"skill_{slug(s)}": "on" if s in skills else "off" for s in cat.SKILLS},
            "confirm": "on",
        }
    return fields, values


def _form_statement(template: str, fields: list[Field], v: dict[str, str]) -> str:
    if template == "signup":
        news = (
            f"tick {_q('Send me product news')}"
            if v["news"] == "on"
            else f"leave {_q('Send me product news')} unticked"
        )
        return (
            f"Create an account with first name {_q(v['first_name'])}, last name "
            f"{_q(v['last_name'])}, email {_q(v['email'])}, phone {_q(v['phone'])}, date of "
            f"birth {_q(v['birth'])}, country {_q(v['country'])} and the {_q(v['plan'])} plan; "
            f"{news}, tick {_q('I accept the terms')}, then confirm."
        )
    if template == "appointment":
        reminder = (
            f"keep {_q('Text me a reminder')} ticked"
            if v["reminder"] == "on"
            else f"untick {_q('Text me a reminder')}"
        )
        return (
            f"Book an appointment for {_q(v['name'])} (email {_q(v['email'])}, phone "
            f"{_q(v['phone'])}) on {_q(v['date'])} at {_q(v['slot'])} as a {_q(v['visit'])}; "
            f"{reminder}, then book it."
        )
    skills = [f.label for f in fields if f.key.startswith("skill_") and v[f.key] == "on"]
    return (
        f"Apply as {_q(v['name'])} (email address {_q(v['email'])}, phone number "
        f"{_q(v['phone'])}) for the {_q(v['position'])} position starting {_q(v['start'])} "
        f"with {_q(v['experience'])} of experience; tick the skills {_and(skills)}, tick "
        f"{_q('I confirm these details are correct')} and submit the application."
    )


def _fill_steps(fields: Iterable[Field], values: Mapping[str, str]) -> list[str]:
    """The oracle's steps that put ``values`` into ``fields`` (as they start out)."""
    steps = []
    for f in fields:
        v = values[f.key]
        if f.kind == "select":
            steps.append(select(f.label, v))
        elif f.kind == "radio":
            steps.append(check(v))
        elif f.kind == "checkbox":
            if v == "on" and f.default != "on":
                steps.append(check(f.label))
            elif v == "off" and f.default == "on":
                steps.append(uncheck(f.label))
        else:
            steps.append(fill(f.label, v))
    return steps


def _form(rng: random.Random, template: str, d: _Draft) -> None:
    title, steps, nxt, back, review, confirm = _FORM_BUTTONS[template]
    fields, values = _form_fields(rng, template)
    d.params.update(
        title=title,
        steps=_dumps(steps),
        fields=_fields_json(fields),
        next_label=nxt,
        back_label=back,
        review_label=review,
        confirm_label=confirm,
    )
    d.goal.update(values)
    d.start_path = "/form/1"
    d.statement.append(_form_statement(template, fields, values))
    for n in range(1, len(steps) + 1):
        d.solution += _fill_steps([f for f in fields if f.step == n], values)
        d.solution.append(click(review if n == len(steps) else nxt))
    d.solution.append(click(confirm))


# -- scroll ---------------------------------------------------------------------------------------


def _scroll(rng: random.Random, template: str, d: _Draft) -> None:
    if template == "orders":
        chunk, title = 5, "Your orders"
        numbers = sorted(rng.sample(range(10000, 99999), rng.randint(40, 70)), reverse=True)
        items = [
            (
                f"Order #{n}",
                f"{(k := rng.randint(1, 6))} item{'s' if k > 1 else ''}, "
                f"${rng.randint(5, 400)}.{rng.randrange(100):02d}",
            )
            for n in numbers
        ]
    elif template == "contacts":
        chunk, title = 10, "Contacts"
        people = rng.sample(
            [(f, la) for f in cat.FIRST_NAMES for la in cat.LAST_NAMES], rng.randint(50, 90)
        )
        people.sort(key=lambda p: (p[1], p[0]))
        items = [(f"{f} {la}", _email(f, la, rng)) for f, la in people]
    else:
        chunk, title = 8, "Podcast episodes"
        n = rng.randint(40, 70)
        offset = rng.randrange(len(cat.TOPICS))
        items = [
            (
                f"Episode {k}: {cat.TOPICS[(k * 7 + offset) % len(cat.TOPICS)]}",
                f"{rng.randint(18, 75)} minutes",
            )
            for k in range(n, 0, -1)
        ]
    # The target is never on the first screen: at least one scroll; the first stage (easy) puts
    # it in the first two chunks (at most one scroll).
    index = (
        rng.randrange(0, 2 * chunk) if d.easy else rng.randrange(chunk, min(len(items), 11 * chunk))
    )
    target = items[index][0]
    d.params.update(title=title, chunk=str(chunk), items=_dumps(items))
    d.goal["item"] = target
    d.statement.append(
        {
            "orders": f"Scroll down your orders and open {_q(target)}.",
            "contacts": f"Find {_q(target)} in the contact list and open the contact.",
            "episodes": f"Open the podcast episode {_q(target)}.",
        }[template]
    )
    d.solution += ["scroll down"] * (index // chunk) + [click(target)]


# -- shop -----------------------------------------------------------------------------------------

_SHOPS: dict[str, dict[str, str]] = {
    "classic": {
        "home": "search",
        "search_label": "Search products",
        "search_button": "Search",
        "filter_button": "Apply filters",
        "option_widget": "select",
        "add_label": "Add to cart",
        "cart_link": "Cart",
        "checkout_label": "Checkout",
        "order_label": "Place order",
    },
    "catalogue": {
        "home": "categories",
        "filter_button": "Filter",
        "max_price_label": "Max price",
        "option_widget": "radio",
        "add_label": "Add to basket",
        "cart_link": "Basket",
        "checkout_label": "Go to checkout",
        "order_label": "Confirm purchase",
    },
    "market": {
        "home": "search",
        "search_label": "What are you looking for?",
        "search_button": "Go",
        "filter_button": "Refine",
        "max_price_label": "Max price",
        "option_widget": "select",
        "add_label": "Add to bag",
        "cart_link": "Bag",
        "checkout_label": "Checkout now",
        "order_label": "Pay now",
    },
}
"""Shop layout -> its wordings (``home``: a search box or category links)."""


def _price(x: float) -> str:
    return f"{max(1.0, round(x) - 0.01):.2f}"


def _offer(
    rng: random.Random, dims: Mapping[str, Sequence[str]], keep: Mapping[str, str], drop: str = ""
) -> dict[str, list[str]]:
    """Option values a product offers: at least two per dimension, ``keep``'s value included,
    and (for dimension ``drop``) ``keep``'s value excluded."""
    out = {}
    for dim, values in dims.items():
        must = keep.get(dim)
        if dim == drop:
            pool = [v for v in values if v != must]
            chosen = set(rng.sample(pool, rng.randint(min(2, len(pool)), len(pool))))
        else:
            chosen = set(rng.sample(list(values), rng.randint(2, len(values))))
            if must:
                chosen.add(must)
        out[dim] = [v for v in values if v in chosen]
    return out


def _catalogue(rng: random.Random) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, Any]]:
    """A seeded catalogue with exactly one product that meets the goal, and near misses of its
    type: one lacking a goal attribute, one over the price, one not offering a goal option, one
    with loose attributes; then products of four other types. (Each ``add`` names the role of
    the product it adds, for the reader.)"""
    ptype = rng.choice(sorted(cat.PRODUCT_TYPES))
    spec = cat.PRODUCT_TYPES[ptype]
    pool: list[str] = list(spec["attrs"])  # type: ignore[call-overload]
    dims: dict[str, tuple[str, ...]] = spec["options"]  # type: ignore[assignment]
    lo, hi = spec["price"]  # type: ignore[misc]
    gattrs = rng.sample(pool, rng.choice((1, 2, 2, 3)))
    gopts = {dim: rng.choice(values) for dim, values in dims.items()}
    price_max = float(5 * round((lo + (hi - lo) * rng.uniform(0.4, 0.8)) / 5))
    others = [a for a in pool if a not in gattrs]
    brands = iter(rng.sample(cat.BRANDS, 14))
    products: list[dict[str, Any]] = []

    def add(
        kind: str, attrs: list[str], options: dict[str, list[str]], price: str, of: str = ptype
    ) -> dict[str, Any]:
        title = f"{next(brands)} {of}"
        p = {
            "id": "p" + hashlib.sha256(title.encode()).hexdigest()[:6],
            "title": title,
            "type": of,
            "attrs": [a for a in cat.PRODUCT_TYPES[of]["attrs"] if a in attrs],  # type: ignore[attr-defined]
            "options": options,
            "price": price,
        }
        products.append(p)
        return p

    ok = lambda: _price(price_max * rng.uniform(0.45, 0.95))  # noqa: E731
    extra = rng.sample(others, rng.randint(0, min(1, len(others))))
    target = add("target", gattrs + extra, _offer(rng, dims, gopts), ok())
    missing = rng.choice(gattrs)
    add(
        "miss_attr",
        [a for a in gattrs if a != missing] + rng.sample(others, min(1, len(others))),
        _offer(rng, dims, gopts),
        ok(),
    )
    add(
        "over_price",
        gattrs + rng.sample(others, min(1, len(others))),
        _offer(rng, dims, gopts),
        _price(price_max * rng.uniform(1.15, 1.6)),
    )
    drop = rng.choice(sorted(dims))
    add("miss_option", list(gattrs), _offer(rng, dims, gopts, drop), ok())
    loose = rng.sample(pool, rng.randint(1, 3))
    if set(gattrs) <= set(loose):
        loose.remove(rng.choice(gattrs))
    add("loose", loose, _offer(rng, dims, {}), _price(rng.uniform(lo, hi)))
    for other in rng.sample([t for t in sorted(cat.PRODUCT_TYPES) if t != ptype], 4):
        ospec = cat.PRODUCT_TYPES[other]
        olo, ohi = ospec["price"]  # type: ignore[misc]
        for _ in range(rng.randint(1, 2)):
            oattrs = rng.sample(list(ospec["attrs"]), rng.randint(1, 3))  # type: ignore[call-overload]
            odims: dict[str, tuple[str, ...]] = ospec["options"]  # type: ignore[assignment]
            add("other", oattrs, _offer(rng, odims, {}), _price(rng.uniform(olo, ohi)), of=other)
    rng.shuffle(products)
    goal = {
        "type": ptype,
        "attrs": _dumps(gattrs),
        "options": _dumps(gopts),
        "price_max": f"{price_max:.2f}",
    }
    return products, goal, target


def _shop_part(rng: random.Random, layout: str, d: _Draft) -> tuple[str, list[str]]:
    """Add a shop in ``layout`` to ``d``'s params and goal; return the purchase's statement
    clause and the oracle's steps from the home page to the checkout page."""
    products, goal, target = _catalogue(rng)
    words = _SHOPS[layout]
    d.params.update(words, products=_dumps(products))
    d.goal.update(goal)
    ptype, gattrs, gopts, price_max = shop_goal(goal)
    opts = " and ".join(f"{dim.lower()} {_q(v)}" for dim, v in gopts.items())
    article = "a pair of" if ptype.endswith("s") else "a"
    clause = (
        f"buy {article} {_q(ptype)} that is {_and(gattrs)}, in {opts}, for at most "
        f"{_q(price_max)} dollars"
    )
    steps: list[str] = []
    if words["home"] == "search":
        steps += [fill(words["search_label"], ptype), click(words["search_button"])]
    else:
        steps.append(click(ptype))
    if words.get("max_price_label") and layout == "market":
        steps.append(fill(words["max_price_label"], price_max))
    steps += [check(a) for a in gattrs]
    if words.get("max_price_label") and layout != "market":
        steps.append(fill(words["max_price_label"], price_max))
    steps += [click(words["filter_button"]), click(target["title"])]
    for dim, v in gopts.items():
        steps.append(select(dim, v) if words["option_widget"] == "select" else check(v))
    steps += [click(words["add_label"]), click(words["checkout_label"])]
    return clause, steps


def _shop(rng: random.Random, template: str, d: _Draft) -> None:
    clause, steps = _shop_part(rng, template, d)
    d.statement.append(clause[0].upper() + clause[1:] + ".")
    d.solution += [*steps, click(d.params["order_label"])]


# -- combo ----------------------------------------------------------------------------------------

_DELIVERY = {
    "login_first": ("classic", ("Full name", "Address", "City", "Postcode", "Phone"), ""),
    "login_at_checkout": ("catalogue", ("Recipient", "Street", "Town", "Postcode", "Phone"), ""),
    "express": ("market", ("Full name", "Address line", "City", "Postcode", "Phone number"), "Delivery date"),
}  # fmt: skip
"""Combo template -> (shop layout, delivery labels: name, street, city, postcode, phone; the
label of a delivery date field, if any)."""


def _combo(rng: random.Random, template: str, d: _Draft) -> None:
    layout, labels, date_label = _DELIVERY[template]
    user, password = _credentials(rng, d, template)
    first, last = _person(rng)
    kinds = ("text", "text", "text", "postcode", "tel")
    keys = ("name", "street", "city", "postcode", "phone")
    fields = [Field(k, label, kind) for k, label, kind in zip(keys, labels, kinds, strict=True)]
    values = {
        "name": f"{first} {last}",
        "street": f"{rng.randint(1, 180)} {rng.choice(cat.STREETS)}",
        "city": rng.choice(cat.CITIES),
        "postcode": _postcode(rng),
        "phone": _phone(rng),
    }
    if date_label:
        fields.append(Field("date", date_label, "date", fmt="YYYY-MM-DD"))
        values["date"] = _date(rng, dt.date(2027, 1, 4), dt.date(2027, 12, 20)).isoformat()
    d.params["delivery"] = _fields_json(fields)
    d.goal["delivery"] = _dumps(values)
    clause, shop_steps = _shop_part(rng, layout, d)
    delivery = ", ".join(f"{f.label.lower()} {_q(values[f.key])}" for f in fields)
    sign_in = f"sign in as {_q(user)} with password {_q(password)}"
    fill_in = [*_fill_steps(fields, values), click(d.params["order_label"])]
    login = _sign_in_steps(d, user, password)
    if template == "login_first":
        d.statement.append(f"First {sign_in}. Then {clause}, delivered to {delivery}.")
        d.solution += [click(d.params["login_link"]), *login, *shop_steps, *fill_in]
    elif template == "login_at_checkout":
        d.statement.append(
            f"{clause[0].upper() + clause[1:]}; at checkout {sign_in}, and have it delivered "
            f"to {delivery}."
        )
        d.solution += [*shop_steps, *login, *fill_in]
    else:
        d.start_path = "/login"
        d.statement.append(f"Please {sign_in}, {clause}, and ship it to {delivery}.")
        d.solution += [*login, *shop_steps, *fill_in]


# -- tasks ----------------------------------------------------------------------------------------

_MAKERS: dict[str, Callable[[random.Random, str, _Draft], None]] = {
    "auth": _auth,
    "form": _form,
    "scroll": _scroll,
    "shop": _shop,
    "combo": _combo,
}

_SITE_SUFFIX = {
    "auth": "Portal",
    "form": "Forms",
    "scroll": "Hub",
    "shop": "Store",
    "combo": "Market",
}


def browser_task_id(task: BrowserTask) -> str:
    """The content address of a browser task: the first 16 hex digits of the sha256 of the
    canonical JSON (sorted keys, no spaces) of the task without its ``task_id``."""
    body = msgspec.to_builtins(task)
    body.pop("task_id", None)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def make_task(
    flow: str, template: str, seed: int, split: str = "train", *, easy: bool = False
) -> BrowserTask:
    """The task of (``flow``, ``template``, ``seed``); ``easy``: its first stage (a flow of
    :data:`EASY_FLOWS`). Raises ``KeyError`` for an unknown flow or template, ``ValueError`` for
    ``easy`` on a flow with no first stage."""
    if template not in FLOW_TEMPLATES[flow]:
        raise KeyError(f"flow {flow!r} has no template {template!r}")
    if easy and flow not in EASY_FLOWS:
        raise ValueError(
            f"flow {flow!r} has no easy stage (those that do: {', '.join(EASY_FLOWS)})"
        )
    rng = random.Random(f"{flow}/{template}/{seed}")
    d = _Draft(params={"site": f"{rng.choice(cat.SITE_NAMES)} {_SITE_SUFFIX[flow]}"}, easy=easy)
    _distractors(rng, d)
    _MAKERS[flow](rng, template, d)
    task = BrowserTask(
        task_id="",
        kind="site",
        flow=flow,
        template=template,
        split=split,
        seed=seed,
        statement=" ".join(d.statement),
        params=d.params,
        goal=d.goal,
        solution=d.solution,
        start_path=d.start_path,
        max_steps=len(d.solution) + 8,
    )
    return msgspec.structs.replace(task, task_id=browser_task_id(task))


def _pairs(split: str, easy: bool = False) -> list[tuple[str, str]]:
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}.")
    return [
        (flow, t)
        for flow in BROWSER_FLOWS
        for t in FLOW_TEMPLATES[flow]
        if (t == HELDOUT[flow]) == (split == "heldout") and (not easy or flow in EASY_FLOWS)
    ]


def generate(count: int, seed: int, split: str, *, easy: bool = False) -> list[BrowserTask]:
    """``count`` site tasks of ``split`` (``train``: every template but the held-out one of each
    flow; ``heldout``: those), cycling through the split's (flow, template) pairs; the same
    arguments give the same tasks. ``easy``: the first stage of the flows that have one
    (:data:`EASY_FLOWS`), a curriculum's tasks, other seeds than the full flows'. Raises
    ``ValueError`` for an unknown split."""
    pairs = _pairs(split, easy)
    stage = "easy/" if easy else ""
    out: list[BrowserTask] = []
    seen: set[str] = set()
    i = 0
    while len(out) < count:
        flow, template = pairs[i % len(pairs)]
        key = f"browser/{split}/{stage}{seed}/{i}"
        task_seed = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
        task = make_task(flow, template, task_seed, split, easy=easy)
        i += 1
        if task.task_id not in seen:
            seen.add(task.task_id)
            out.append(task)
    return out
