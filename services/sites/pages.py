"""The sites' pages as HTML, pure: a task, a session's record and a path in, a string out.

Plain server-rendered forms (POST, then a redirect); script only where a page needs it: the
``scroll`` list loads its next chunk when scrolled to the bottom. Every interactive element has
a unique accessible name on its page (a ``<label for>``, its text, or ``aria-label``), the one
the task's solution uses. Nothing rendered carries the goal or the judgement.

The ``scroll`` list is laid out in viewport units so that each scroll down of at least half a
screen loads exactly one chunk, whatever the window: the top block is at most 45vh, each chunk of
items 50vh, and a 55vh tail follows the list. A chunk loads when the page is scrolled to its very
bottom; the tail then still shows the whole new chunk, so clicking one of its items (which
scrolls it to the middle of the screen at most) never reaches the bottom again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from html import escape

from aios_rl.envs.browser.flows import (
    BANNER_ACCEPT,
    BANNER_REJECT,
    MODAL_DISMISS,
    Field,
    Product,
    Record,
    fields_of,
    items_of,
    pages_of,
    products_of,
    slug,
)
from contracts import BrowserTask

from .logic import Results, step_titles

__all__ = ["View", "chunk_more", "not_found"]

_CSS = """
*{box-sizing:border-box}
html,body{margin:0;padding:0;font:16px/1.4 system-ui,sans-serif;color:#1d1d1f;background:#fafafa}
header{display:flex;gap:1.5em;align-items:center;padding:.6em 1em;background:#24324a;color:#fff}
header a{color:#fff}
header .site{font-weight:600}
.task{margin:0;padding:.5em 1em;background:#fff7d6;border-bottom:1px solid #e5d9a6}
main{padding:1em}
h1{font-size:1.4em;margin:.2em 0 .6em}
.row{margin:.6em 0}
.row label{display:block;margin-bottom:.2em}
.row input[type=text],.row input[type=email],.row input[type=tel],.row input[type=password],.row select{
  width:22em;max-width:100%;padding:.35em}
.inline label{display:inline;margin-left:.3em}
fieldset{border:1px solid #ccc;margin:.6em 0;width:24em;max-width:100%}
.error{color:#b00020;margin:.2em 0}
.notice{padding:.5em;background:#eef4ff;border:1px solid #b7cdf5}
.products{list-style:none;padding:0}
.products li{margin:.4em 0}
.filters{background:#fff;border:1px solid #ddd;padding:.5em 1em;margin:.8em 0}
button{padding:.35em .9em;cursor:pointer}
dl{display:grid;grid-template-columns:max-content auto;gap:.3em 1em}
dt{font-weight:600}
.overlay{position:fixed;inset:0;display:flex;justify-content:center;background:rgba(0,0,0,.45)}
.overlay .box{background:#fff;padding:1.2em 1.5em;border-radius:6px;max-width:30em}
#newsletter{align-items:center;z-index:20}
#cookies{align-items:flex-end;z-index:10}
#cookies .box{max-width:none;width:100%;border-radius:0}
body.scroll .intro{max-height:45vh;overflow:hidden}
#tail{height:55vh;margin:0;padding:1em;color:#666}
body.scroll main{padding:0}
#items{list-style:none;margin:0;padding:0}
#items li{display:flex;align-items:center;gap:1em;padding:0 1em;overflow:hidden;
  border-bottom:1px solid #e5e5e5;background:#fff}
#items form{margin:0}
"""

_SCROLL_JS = """
(() => {
  const list = document.getElementById('items');
  let busy = false;
  addEventListener('scroll', async () => {
    if (busy || list.dataset.more !== '1') return;
    const root = document.documentElement;
    if (scrollY + innerHeight < root.scrollHeight - 4) return;
    busy = true;
    list.setAttribute('aria-busy', 'true');
    try {
      const r = await fetch(list.dataset.src, {method: 'POST'});
      if (r.ok) {
        list.insertAdjacentHTML('beforeend', await r.text());
        list.dataset.more = r.headers.get('X-More') === '1' ? '1' : '0';
        if (list.dataset.more === '0') document.getElementById('tail').textContent = 'End of the list.';
      }
    } finally {
      busy = false;
      list.setAttribute('aria-busy', 'false');
    }
  }, {passive: true});
})();
"""


def _e(text: object) -> str:
    return escape(str(text), quote=True)


@dataclass(frozen=True)
class View:
    """What a page is rendered from."""

    prefix: str
    """``/e/<session>``: every link and form action starts with it."""
    task: BrowserTask
    rec: Record
    here: str = "/"
    """This page's path inside the session (where a dismissed distractor goes back to)."""

    @property
    def p(self) -> dict[str, str]:
        return self.task.params

    def url(self, path: str) -> str:
        return _e(self.prefix + path)

    # -- the frame ----------------------------------------------------------------------------
    def _nav(self) -> str:
        flow, links = self.task.flow, []
        if flow in ("auth", "shop", "combo"):
            links.append(f'<a href="{self.url("/")}">Home</a>')
        if flow in ("shop", "combo"):
            links.append(f'<a href="{self.url("/cart")}">{_e(self.p["cart_link"])}</a>')
        if flow in ("auth", "combo"):
            if self.rec.logged_in:
                links.append(f"<span>Signed in as {_e(self.p['user'])}</span>")
            elif self.here != "/login":
                links.append(f'<a href="{self.url("/login")}">{_e(self.p["login_link"])}</a>')
        nav = f'<nav aria-label="Site">{" ".join(links)}</nav>' if links else ""
        return f'<header><span class="site">{_e(self.p["site"])}</span>{nav}</header>'

    def _overlays(self) -> str:
        out = []
        here = f'<input type="hidden" name="next" value="{_e(self.here)}">'
        if self.p.get("modal") and "newsletter" not in self.rec.dismissed:
            out.append(
                '<div class="overlay" id="newsletter" role="dialog" aria-modal="true" '
                'aria-labelledby="newsletter-title"><div class="box">'
                '<h2 id="newsletter-title">Join our newsletter</h2>'
                "<p>News and offers every week, straight to your inbox.</p>"
                f'<form method="post" action="{self.url("/dismiss/newsletter")}">{here}'
                f"<button>{_e(MODAL_DISMISS)}</button></form></div></div>"
            )
        if self.p.get("banner") and "cookies" not in self.rec.dismissed:
            out.append(
                '<div class="overlay" id="cookies" role="dialog" aria-label="Cookie consent">'
                '<div class="box"><p>We use cookies to run this site and to measure its use.</p>'
                f'<form method="post" action="{self.url("/dismiss/cookies")}">{here}'
                f'<button name="choice" value="{_e(BANNER_ACCEPT)}">{_e(BANNER_ACCEPT)}</button> '
                f'<button name="choice" value="{_e(BANNER_REJECT)}">{_e(BANNER_REJECT)}</button>'
                "</form></div></div>"
            )
        return "".join(out)

    def page(self, title: str, body: str, *, scroll: bool = False, script: str = "") -> str:
        top = (
            f"{self._nav()}"
            f'<p class="task" id="task"><strong>Task:</strong> {_e(self.task.statement)}</p>'
        )
        if scroll:
            top = f'<div class="intro">{top}<main><h1>{_e(title)}</h1></main></div>'
            body = f"<main>{body}</main>"
        else:
            body = f"<main><h1>{_e(title)}</h1>{body}</main>"
        js = f"<script>{script}</script>" if script else ""
        return (
            '<!doctype html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)} - {_e(self.p['site'])}</title><style>{_CSS}</style></head>"
            f'<body class="{"scroll" if scroll else ""}">{top}{body}{self._overlays()}{js}'
            "</body></html>"
        )

    # -- inputs -------------------------------------------------------------------------------
    @staticmethod
    def _error(key: str, errors: dict[str, str]) -> tuple[str, str]:
        """(attributes for the input, the error paragraph) for field ``key``."""
        if key not in errors:
            return "", ""
        return (
            f' aria-invalid="true" aria-describedby="err-{_e(key)}"',
            f'<p class="error" id="err-{_e(key)}">{_e(errors[key])}</p>',
        )

    def field(self, f: Field, value: str, errors: dict[str, str]) -> str:
        attrs, err = self._error(f.key, errors)
        fid = f"f-{_e(f.key)}"
        if f.kind == "checkbox":
            on = value == "on" if value else f.default == "on"
            return (
                f'<div class="row inline"><input type="checkbox" id="{fid}" name="{_e(f.key)}"'
                f'{" checked" if on else ""}{attrs}><label for="{fid}">{_e(f.label)}</label>'
                f"{err}</div>"
            )
        if f.kind == "radio":
            radios = "".join(
                f'<div class="inline"><input type="radio" id="{fid}-{i}" name="{_e(f.key)}" '
                f'value="{_e(o)}"{" checked" if o == value else ""}>'
                f'<label for="{fid}-{i}">{_e(o)}</label></div>'
                for i, o in enumerate(f.options)
            )
            return f"<fieldset{attrs}><legend>{_e(f.label)}</legend>{radios}{err}</fieldset>"
        if f.kind == "select":
            options = [f'<option value="">Choose {_e(f.label.lower())}</option>']
            options += [
                f'<option value="{_e(o)}"{" selected" if o == value else ""}>{_e(o)}</option>'
                for o in f.options
            ]
            return (
                f'<div class="row"><label for="{fid}">{_e(f.label)}</label>'
                f'<select id="{fid}" name="{_e(f.key)}"{attrs}>{"".join(options)}</select>{err}</div>'
            )
        kind = {"email": "email", "tel": "tel"}.get(f.kind, "text")
        hint = f' placeholder="{_e(f.fmt)}"' if f.fmt else ""
        return (
            f'<div class="row"><label for="{fid}">{_e(f.label)}</label>'
            f'<input type="{kind}" id="{fid}" name="{_e(f.key)}" value="{_e(value)}"'
            f' autocomplete="off"{hint}{attrs}>{err}</div>'
        )

    # -- auth ---------------------------------------------------------------------------------
    def auth_home(self) -> str:
        links = "".join(
            f'<li><a href="{self.url("/page/" + slug(n))}">{_e(n)}</a></li>'
            for n in pages_of(self.p)
        )
        who = (
            f"<p>You are signed in as {_e(self.p['user'])}.</p>"
            if self.rec.logged_in
            else "<p>Sign in to see the pages below.</p>"
        )
        return self.page(f"Welcome to {self.p['site']}", f"{who}<ul>{links}</ul>")

    def login(self) -> str:
        p, rec = self.p, self.rec
        err = f'<p class="error" role="alert">{_e(rec.login_error)}</p>' if rec.login_error else ""
        two_step = bool(p.get("next_label"))
        rows = []
        if not two_step or not rec.pending_user:
            rows.append(
                f'<div class="row"><label for="user">{_e(p["user_label"])}</label>'
                '<input type="text" id="user" name="user" autocomplete="off"></div>'
            )
        if not two_step or rec.pending_user:
            if two_step:
                rows.append(f"<p>Account: {_e(rec.pending_user)}</p>")
            rows.append(
                f'<div class="row"><label for="password">{_e(p["password_label"])}</label>'
                '<input type="password" id="password" name="password" autocomplete="off"></div>'
            )
        if p.get("remember") and (not two_step or rec.pending_user):
            rows.append(
                '<div class="row inline"><input type="checkbox" id="remember" name="remember">'
                f'<label for="remember">{_e(p["remember"])}</label></div>'
            )
        button = p["next_label"] if two_step and not rec.pending_user else p["submit_label"]
        restart = ""
        if two_step and rec.pending_user:
            restart = (
                f'<form method="post" action="{self.url("/login")}">'
                '<button name="restart" value="1">Use another account</button></form>'
            )
        body = (
            f'{err}<form method="post" action="{self.url("/login")}" novalidate>'
            f"{''.join(rows)}<button>{_e(button)}</button></form>{restart}"
        )
        return self.page("Sign in", body)

    def protected(self, name: str) -> str:
        return self.page(
            name,
            f"<p>Signed in as {_e(self.p['user'])}. This is the {_e(name)} page.</p>"
            f'<p><a href="{self.url("/")}">Back to the start page</a></p>',
        )

    # -- form ---------------------------------------------------------------------------------
    def form_step(self, n: int) -> str:
        p, rec = self.p, self.rec
        titles = step_titles(self.task)
        fields = [f for f in fields_of(p) if f.step == n]
        draft, errors = rec.drafts.get(n, {}), rec.errors.get(n, {})
        rows = "".join(self.field(f, draft.get(f.key, ""), errors) for f in fields)
        last = n == len(titles)
        button = p["review_label"] if last else p["next_label"]
        back = (
            f'<p><a href="{self.url(f"/form/{n - 1}")}">{_e(p["back_label"])}</a></p>'
            if n > 1
            else ""
        )
        alert = (
            '<p class="error" role="alert">Please correct the fields marked below.</p>'
            if errors
            else ""
        )
        body = (
            f"<h2>Step {n} of {len(titles)}: {_e(titles[n - 1])}</h2>{alert}"
            f'<form method="post" action="{self.url(f"/form/{n}")}" novalidate>{rows}'
            f"<button>{_e(button)}</button></form>{back}"
        )
        return self.page(p["title"], body)

    def review(self) -> str:
        values = {k: v for d in self.rec.drafts.values() for k, v in d.items()}
        rows = []
        for f in fields_of(self.p):
            v = values.get(f.key, "")
            shown = ("Yes" if v == "on" else "No") if f.kind == "checkbox" else v
            rows.append(f"<dt>{_e(f.label)}</dt><dd>{_e(shown)}</dd>")
        body = (
            f"<h2>Check your answers</h2><dl>{''.join(rows)}</dl>"
            f'<form method="post" action="{self.url("/confirm")}">'
            f"<button>{_e(self.p['confirm_label'])}</button></form>"
            f'<p><a href="{self.url("/form/1")}">Edit answers</a></p>'
        )
        return self.page(self.p["title"], body)

    def done(self) -> str:
        return self.page(
            self.p["title"], '<p class="notice">Thank you: your answers have been sent.</p>'
        )

    # -- scroll -------------------------------------------------------------------------------
    def chunk(self, items: Iterable[tuple[int, str, str]]) -> str:
        per = int(self.p["chunk"])
        height = f"calc(50vh / {per})"
        return "".join(
            f'<li style="height:{height}"><form method="post" action="{self.url(f"/open/{i}")}">'
            f"<button>{_e(name)}</button></form><span>{_e(detail)}</span></li>"
            for i, name, detail in items
        )

    def item_list(self) -> str:
        items = items_of(self.p)
        loaded = min(self.rec.chunks * int(self.p["chunk"]), len(items))
        more = "1" if loaded < len(items) else "0"
        body = (
            f'<ul id="items" aria-label="{_e(self.p["title"])}" aria-busy="false" '
            f'data-src="{self.url("/more")}" data-more="{more}">'
            f"{self.chunk((i, *items[i]) for i in range(loaded))}</ul>"
            f'<p id="tail">{"Scroll down for more." if more == "1" else "End of the list."}</p>'
        )
        return self.page(self.p["title"], body, scroll=True, script=_SCROLL_JS)

    def item(self, index: int) -> str:
        name, detail = items_of(self.p)[index]
        return self.page(
            name,
            f'<p>{_e(detail)}</p><p><a href="{self.url("/")}">Back to the list</a></p>',
        )

    # -- shop ---------------------------------------------------------------------------------
    def _search_box(self, query: str = "") -> str:
        p = self.p
        return (
            f'<form method="get" action="{self.url("/search")}" role="search">'
            f'<label for="q">{_e(p["search_label"])}</label> '
            f'<input type="text" id="q" name="q" value="{_e(query)}" autocomplete="off"> '
            f"<button>{_e(p['search_button'])}</button></form>"
        )

    def shop_home(self) -> str:
        if self.p["home"] == "search":
            body = f"<p>Find what you need.</p>{self._search_box()}"
        else:
            kinds = sorted({pr.type for pr in products_of(self.p)})
            links = "".join(
                f'<li><a href="{self.url("/category/" + slug(k))}">{_e(k)}</a></li>' for k in kinds
            )
            body = f"<h2>Departments</h2><ul>{links}</ul>"
        return self.page(self.p["site"], body)

    def results(self, res: Results, *, query: str = "", category: str = "") -> str:
        p = self.p
        action = self.url("/category/" + slug(category) if category else "/search")
        keep = f'<input type="hidden" name="q" value="{_e(query)}">' if not category else ""
        boxes = "".join(
            f'<div class="inline"><input type="checkbox" id="attr-{slug(a)}" name="attr" '
            f'value="{_e(a)}"{" checked" if a in res.checked else ""}>'
            f'<label for="attr-{slug(a)}">{_e(a)}</label></div>'
            for a in res.attrs
        )
        price = ""
        if p.get("max_price_label"):
            err = f'<p class="error">{_e(res.price_error)}</p>' if res.price_error else ""
            price = (
                f'<div class="row"><label for="max">{_e(p["max_price_label"])}</label>'
                f'<input type="text" id="max" name="max" value="{_e(res.max_price)}" '
                f'placeholder="30.00" autocomplete="off">{err}</div>'
            )
        filters = (
            f'<form class="filters" method="get" action="{action}">{keep}'
            f"<p>Filter by features</p>{boxes}{price}<button>{_e(p['filter_button'])}</button></form>"
        )
        rows = "".join(
            f'<li><a href="{self.url("/product/" + pr.id)}">{_e(pr.title)}</a> '
            f"<span>${_e(pr.price)}</span></li>"
            for pr in res.products
        )
        listing = f'<ul class="products">{rows}</ul>' if rows else "<p>No products match.</p>"
        head = self._search_box(query) if not category else ""
        title = f"Results for {query}" if not category else category
        return self.page(title, f"{head}{filters}<p>{len(res.products)} products</p>{listing}")

    def product(self, pr: Product) -> str:
        p, rec = self.p, self.rec
        errors = rec.cart_errors if rec.cart_errors.get("_product") == pr.id else {}
        rows = []
        for dim, values in pr.options.items():
            key = f"opt-{slug(dim)}"
            attrs, err = self._error(dim, errors)
            if p["option_widget"] == "select":
                opts = [f'<option value="">Choose {_e(dim.lower())}</option>']
                opts += [f'<option value="{_e(v)}">{_e(v)}</option>' for v in values]
                rows.append(
                    f'<div class="row"><label for="{key}">{_e(dim)}</label>'
                    f'<select id="{key}" name="{key}"{attrs}>{"".join(opts)}</select>{err}</div>'
                )
            else:
                radios = "".join(
                    f'<div class="inline"><input type="radio" id="{key}-{i}" name="{key}" '
                    f'value="{_e(v)}"><label for="{key}-{i}">{_e(v)}</label></div>'
                    for i, v in enumerate(values)
                )
                rows.append(f"<fieldset{attrs}><legend>{_e(dim)}</legend>{radios}{err}</fieldset>")
        features = ", ".join(pr.attrs) or "none listed"
        body = (
            f"<p>${_e(pr.price)}</p><p>Features: {_e(features)}</p>"
            f'<form method="post" action="{self.url("/cart")}" novalidate>'
            f'<input type="hidden" name="product" value="{_e(pr.id)}">{"".join(rows)}'
            f"<button>{_e(p['add_label'])}</button></form>"
        )
        return self.page(pr.title, body)

    def _line(self, product_id: str, options: dict[str, str]) -> str:
        pr = next((x for x in products_of(self.p) if x.id == product_id), None)
        if pr is None:
            return "<p>(a product no longer sold)</p>"
        chosen = ", ".join(f"{d}: {v}" for d, v in options.items())
        return f"<p>{_e(pr.title)} ({_e(chosen)}), ${_e(pr.price)}</p>"

    def cart(self) -> str:
        line = self.rec.cart
        if line is None:
            body = f"<p>Your {_e(self.p['cart_link'].lower())} is empty.</p>"
        else:
            body = (
                f"{self._line(line.product_id, line.options)}"
                f'<p><a href="{self.url("/checkout")}">{_e(self.p["checkout_label"])}</a></p>'
            )
        return self.page(f"Your {self.p['cart_link'].lower()}", body)

    def checkout(self) -> str:
        rec = self.rec
        assert rec.cart is not None
        rows = ""
        if self.task.flow == "combo":
            fields = fields_of(self.p, "delivery")
            rows = "<h2>Delivery</h2>" + "".join(
                self.field(f, rec.delivery_draft.get(f.key, ""), rec.delivery_errors)
                for f in fields
            )
        body = (
            f"{self._line(rec.cart.product_id, rec.cart.options)}"
            f'<form method="post" action="{self.url("/order")}" novalidate>{rows}'
            f"<button>{_e(self.p['order_label'])}</button></form>"
        )
        return self.page("Checkout", body)

    def thanks(self) -> str:
        order = self.rec.order
        assert order is not None
        return self.page(
            "Thank you",
            f'<p class="notice">Your order is placed.</p>{self._line(order.product_id, order.options)}',
        )


def not_found(message: str = "There is nothing here.") -> str:
    """The page of an unknown session or path (no task, no frame)."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Not found</title>'
        f"</head><body><h1>Not found</h1><p>{_e(message)}</p></body></html>"
    )


def chunk_more(more: bool) -> dict[str, str]:
    """The headers of a chunk of the list (``X-More``: whether another chunk remains)."""
    return {"X-More": "1" if more else "0"}
