"""The sites service and its task generator: flows, judging and splits, pure; then the service on
a real nats-server (HTTP on a free port) driven by real Chromium through each task's solution,
by element names, as the oracle does."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
import pytest_asyncio

from aios_rl.bus import Bus, RemoteError, Service, connect
from aios_rl.envs.browser.actions import quoted_values
from aios_rl.envs.browser.flows import (
    EASY_FLOWS,
    FLOW_TEMPLATES,
    HELDOUT,
    CartLine,
    Field,
    Order,
    Product,
    Record,
    browser_task_id,
    check_task,
    generate,
    items_of,
    judge,
    make_task,
    potential,
    products_of,
    search,
    shop_goal,
    slug,
    validate_field,
    webshop_reward,
)
from aios_rl.envs.browser.store import BROWSER_TASKS
from aios_rl.stack.natsd import NatsServer
from contracts import (
    BROWSER_FLOWS,
    BrowserTask,
    Names,
    SiteClose,
    SiteOpen,
    SiteResult,
    SiteResultRequest,
    SiteSession,
)
from services.sites import logic
from services.sites.main import build
from services.sites.settings import SitesSettings
from tests.support import running

CHROMIUM = "/usr/bin/chromium"

# -- generation and splits ------------------------------------------------------------------------


def test_generation_is_deterministic_and_seeded() -> None:
    a = generate(12, 5, "train")
    assert a == generate(12, 5, "train")
    assert [t.task_id for t in a] != [t.task_id for t in generate(12, 6, "train")]
    assert len({t.task_id for t in a}) == 12
    assert generate(3, 5, "train") == a[:3]


def test_train_and_heldout_share_no_flow_template_pair() -> None:
    train = {(t.flow, t.template) for t in generate(40, 1, "train")}
    heldout = {(t.flow, t.template) for t in generate(40, 1, "heldout")}
    assert not train & heldout
    assert {f for f, _ in train} == {f for f, _ in heldout} == set(BROWSER_FLOWS)
    assert heldout == {(f, HELDOUT[f]) for f in BROWSER_FLOWS}
    assert len(train) == sum(len(t) - 1 for t in FLOW_TEMPLATES.values())
    assert {t.split for t in generate(5, 1, "heldout")} == {"heldout"}
    with pytest.raises(ValueError, match="split"):
        generate(1, 1, "test")


def test_easy_tasks_are_the_first_stage_of_auth_and_scroll() -> None:
    easy = generate(12, 5, "train", easy=True)
    assert easy == generate(12, 5, "train", easy=True)
    assert {t.flow for t in easy} == set(EASY_FLOWS) == {"auth", "scroll"}
    assert not {t.task_id for t in easy} & {t.task_id for t in generate(40, 5, "train")}
    for t in easy:
        check_task(t)
        if t.flow == "auth":  # opens on the page asked for: the sign-in alone is left
            assert t.start_path == f"/page/{slug(t.goal['page'])}"
            assert not any(s == f'click "{t.goal["page"]}"' for s in t.solution)
            assert t.solution[-1] == f'click "{t.params["submit_label"]}"'
        else:  # the target is in the first two chunks: one scroll at most
            names = [name for name, _ in items_of(t.params)]
            assert names.index(t.goal["item"]) < 2 * int(t.params["chunk"])
            assert t.solution.count("scroll down") <= 1
    full_scroll = [t for t in generate(40, 5, "train") if t.flow == "scroll"]
    assert all(t.solution.count("scroll down") >= 1 for t in full_scroll)
    with pytest.raises(ValueError, match="no easy stage"):
        make_task("form", "signup", 1, easy=True)
    # The browser environment's `easy` split: the same first stages, named by their split.
    from aios_rl.envs.browser.generate import generate as browser_tasks
    from aios_rl.envs.registry import benchmark

    stored = browser_tasks(6, 5, "easy")
    assert {t.split for t in stored} == {"easy"} and {t.kind for t in stored} == {"site"}
    assert [t.solution for t in stored] == [t.solution for t in easy[:6]]
    for t in stored:
        check_task(t)  # its id is its content's, split included
    assert "easy" in benchmark("browser").train_splits


def test_task_ids_are_content_addresses() -> None:
    for task in generate(10, 2, "train"):
        assert re.fullmatch(r"[0-9a-f]{16}", task.task_id)
        assert browser_task_id(task) == BROWSER_TASKS.content_id(task) == task.task_id
        check_task(task)
        changed = msgspec.structs.replace(task, statement=task.statement + " ")
        assert browser_task_id(changed) != task.task_id
        with pytest.raises(ValueError, match="does not match its id"):
            check_task(changed)
    assert BROWSER_TASKS.environment == "browser" and BROWSER_TASKS.type is BrowserTask


def test_every_value_the_solution_types_is_quoted_in_the_statement() -> None:
    for split in ("train", "heldout"):
        for task in generate(30, 3, split):
            quoted = set(re.findall(r'"([^"]*)"', task.statement))
            for step in task.solution:
                m = re.fullmatch(r'(fill|select) "[^"]*" "([^"]*)"', step)
                if m:
                    assert m[2] in quoted, (task.flow, task.template, step)
            assert task.max_steps >= len(task.solution)
            assert task.goal and task.params["site"]


def test_statements_quote_the_values_the_actions_need() -> None:
    task = make_task("auth", "classic", 7)
    user, password, page = task.params["user"], task.params["password"], task.goal["page"]
    assert task.statement == f'Sign in as "{user}" with password "{password}", then open "{page}".'
    assert quoted_values(task.statement) == [user, password, page]
    assert task.solution[-4:] == [
        f'click "{page}"',
        f'fill "Username" "{user}"',
        f'fill "Password" "{password}"',
        'click "Sign in"',
    ]


def test_distractors_are_dismissed_first_when_present() -> None:
    tasks = generate(60, 4, "train")
    with_modal = [t for t in tasks if t.params["modal"]]
    with_banner = [t for t in tasks if t.params["banner"] and not t.params["modal"]]
    assert with_modal and with_banner and any(not t.params["banner"] for t in tasks)
    assert all(t.solution[0] == 'click "No thanks"' for t in with_modal)
    assert all(
        t.solution[0] in ('click "Accept cookies"', 'click "Reject cookies"') for t in with_banner
    )


# -- validation, search, the WebShop reward -------------------------------------------------------


def test_fields_validate_formats_required_and_choices() -> None:
    email, phone = Field("e", "Email", "email"), Field("p", "Phone", "tel")
    day = Field("d", "Date", "date", fmt="DD/MM/YYYY")
    pick = Field("c", "Country", "select", options=("France", "Spain"))
    terms = Field("t", "I agree", "checkbox")
    news = Field("n", "News", "checkbox", required=False)
    assert validate_field(email, "ada@example.org") == ""
    assert validate_field(email, "ada@example") and validate_field(email, "")
    assert validate_field(phone, "+44 20 7946 0123") == ""
    assert validate_field(phone, "12") and validate_field(phone, "call me")
    assert validate_field(day, "31/12/2027") == ""
    assert validate_field(day, "2027-12-31") and validate_field(day, "31/02/2027")
    assert validate_field(pick, "Spain") == "" and validate_field(pick, "Chile")
    assert validate_field(terms, "on") == "" and validate_field(terms, "off")
    assert validate_field(news, "off") == ""
    assert validate_field(Field("x", "Name", "text", required=False), "") == ""


def _product(**kw: Any) -> Product:
    base: dict[str, Any] = {
        "id": "p000001",
        "title": "Alder t-shirt",
        "type": "t-shirt",
        "attrs": ("organic cotton", "slim fit"),
        "options": {"Size": ("S", "M"), "Colour": ("navy", "black")},
        "price": "25.99",
    }
    return Product(**{**base, **kw})


GOAL = {
    "type": "t-shirt",
    "attrs": json.dumps(["organic cotton", "machine washable"]),
    "options": json.dumps({"Size": "M", "Colour": "navy"}),
    "price_max": "30.00",
}


def test_webshop_reward_by_hand() -> None:
    # attrs 1 of 2, options 2 of 2, price ok: (1 + 2 + 1) / (2 + 2 + 1)
    assert webshop_reward(GOAL, _product(), {"Size": "M", "Colour": "navy"}) == pytest.approx(0.8)
    # one option wrong, too expensive: (1 + 1 + 0) / 5
    expensive = _product(price="31.00")
    assert webshop_reward(GOAL, expensive, {"Size": "M", "Colour": "black"}) == pytest.approx(0.4)
    full = _product(attrs=("organic cotton", "machine washable"))
    assert webshop_reward(GOAL, full, {"Size": "M", "Colour": "navy"}) == 1.0
    assert webshop_reward(GOAL, _product(type="backpack"), {"Size": "M", "Colour": "navy"}) == 0
    assert webshop_reward(GOAL, full, {}) == pytest.approx(3 / 5)


def test_search_matches_words_attributes_and_price() -> None:
    a = _product()
    b = _product(id="p000002", title="Birch backpack", type="backpack", attrs=("waterproof",))
    assert search([a, b], query="t-shirt") == [a]
    assert search([a, b], query="") == [a, b]
    assert search([a, b], query="slim t-shirt") == [a]
    assert search([a, b], attrs=["waterproof"]) == [b]
    assert search([a, b], category="backpack", max_price=20.0) == []


def test_each_generated_shop_has_exactly_one_full_reward_product() -> None:
    for task in generate(20, 9, "train") + generate(20, 9, "heldout"):
        if task.flow not in ("shop", "combo"):
            continue
        _, _, gopts, _ = shop_goal(task.goal)
        best = [p for p in products_of(task.params) if webshop_reward(task.goal, p, gopts) == 1.0]
        offered = [p for p in best if all(v in p.options[d] for d, v in gopts.items())]
        assert len(offered) == 1, task.task_id


# -- judging ------------------------------------------------------------------------------------


def test_auth_is_judged_on_the_page_reached() -> None:
    task = make_task("auth", "classic", 1)
    rec = Record()
    assert judge(task, rec).outcome == "failure" and not judge(task, rec).done
    rec.logged_in = True
    v = judge(task, rec)
    assert (v.outcome, v.reward, v.done) == ("partial", 0.5, False)
    rec.pages_opened.append(task.goal["page"])
    assert (judge(task, rec).outcome, judge(task, rec).reward, judge(task, rec).done) == (
        "success",
        1.0,
        True,
    )
    locked = Record(locked=True, failures=3)
    assert judge(task, locked).done and judge(task, locked).outcome == "failure"


def test_form_scroll_and_combo_rules() -> None:
    form = make_task("form", "signup", 2)
    rec = Record(submitted=dict(form.goal))
    assert judge(form, rec).reward == 1.0
    rec.submitted = {**form.goal, "email": "other@example.org"}
    v = judge(form, rec)
    assert (
        v.outcome == "partial"
        and v.reward == pytest.approx(8 / 9)
        and v.info["wrong_fields"] == "email"
    )

    scroll = make_task("scroll", "orders", 2)
    names = [n for n, _ in json.loads(scroll.params["items"])]
    target = names.index(scroll.goal["item"])
    assert judge(scroll, Record(items_opened=[target])).reward == 1.0
    assert judge(scroll, Record(items_opened=[0, target])).reward == 0.5
    assert judge(scroll, Record(items_opened=[0, 1, 2, target])).outcome == "failure"

    combo = make_task("combo", "login_first", 2)
    _, _, gopts, _ = shop_goal(combo.goal)
    right = next(
        p
        for p in products_of(combo.params)
        if webshop_reward(combo.goal, p, gopts) == 1.0
        and all(v in p.options[d] for d, v in gopts.items())
    )
    delivery = json.loads(combo.goal["delivery"])
    placed = Record(logged_in=True, order=Order(right.id, gopts, delivery))
    assert judge(combo, placed).outcome == "success"
    elsewhere = Record(logged_in=True, order=Order(right.id, gopts, {**delivery, "city": "Bath!"}))
    assert judge(combo, elsewhere).reward == 0.5
    carted = Record(logged_in=True, cart=CartLine(right.id, gopts))
    v = judge(combo, carted)
    assert (v.outcome, v.done) == ("partial", False) and v.reward == pytest.approx(0.3)
    assert judge(combo, Record()).reward == 0.0


def test_potential_rises_with_each_sub_goal_and_is_the_reward_once_done() -> None:
    # auth: the banner and modal dismissed, the right account named (two-step), signed in.
    auth = make_task("auth", "two_step", 1)
    auth.params.update(banner="1", modal="1")
    rec = Record()
    ladder = [potential(auth, rec)]
    rec.dismissed.add("newsletter")
    ladder.append(potential(auth, rec))
    rec.dismissed.add("cookies")
    ladder.append(potential(auth, rec))
    rec.pending_user = "somebody else"
    assert potential(auth, rec) == ladder[-1]  # a wrong account name is no progress
    rec.pending_user = auth.params["user"]
    ladder.append(potential(auth, rec))
    rec.logged_in = True
    ladder.append(potential(auth, rec))
    assert ladder == sorted(set(ladder)) and ladder[0] == 0.0 and ladder[-1] == 0.8
    rec.pages_opened.append(auth.goal["page"])
    assert potential(auth, rec) == judge(auth, rec).reward == judge(auth, rec).potential == 1.0
    assert potential(auth, Record(locked=True)) == 0.0  # locked out: done, reward 0

    def clear(**kw: Any) -> Record:  # a session whose distractors are dismissed
        return Record(dismissed={"cookies", "newsletter"}, **kw)

    # form: each step passed with the asked values, then confirmed (partly right: its reward).
    form = make_task("form", "signup", 2)
    steps = len(json.loads(form.params["steps"]))
    keys = {f.key: f.step for f in logic.fields_of(form.params)}
    rec = clear()
    ladder = [potential(form, rec)]
    for n in range(1, steps + 1):
        rec.drafts[n] = {k: v for k, v in form.goal.items() if keys[k] == n}
        ladder.append(potential(form, rec))
        rec.passed.add(n)
        ladder.append(potential(form, rec))
    assert ladder == sorted(set(ladder)) and ladder[-1] == pytest.approx(0.8)
    wrong = clear(drafts={1: {k: "x" for k in form.goal if keys[k] == 1}})
    assert potential(form, wrong) == ladder[0]
    rec.submitted = {**form.goal, "email": "other@example.org"}
    assert potential(form, rec) == judge(form, rec).reward == pytest.approx(8 / 9)

    # scroll: chunks loaded towards the target; a wrong item opened costs.
    scroll = make_task("scroll", "orders", 2)
    names = [n for n, _ in json.loads(scroll.params["items"])]
    target, chunk = names.index(scroll.goal["item"]), int(scroll.params["chunk"])
    needed = target // chunk
    assert needed >= 1, "the test wants a target beyond the first chunk"
    loads = [potential(scroll, clear(chunks=c)) for c in range(1, needed + 3)]
    assert loads[: needed + 1] == sorted(set(loads[: needed + 1]))
    assert loads[needed] == loads[-1] == pytest.approx(0.8)  # loading past the target: nothing
    assert potential(scroll, clear(chunks=needed + 1, items_opened=[0])) < loads[needed]

    # shop: the right product's page, then the cart, then the order.
    shop = make_task("shop", "classic", 4)
    _, _, gopts, _ = shop_goal(shop.goal)
    right = next(p for p in products_of(shop.params) if webshop_reward(shop.goal, p, gopts) == 1)
    wrong_type = next(p for p in products_of(shop.params) if p.type != shop.goal["type"])
    assert potential(shop, clear(products_viewed=[wrong_type.id])) == potential(shop, clear())
    viewed = clear(products_viewed=[wrong_type.id, right.id])
    carted = clear(products_viewed=[right.id], cart=CartLine(right.id, gopts))
    ordered = clear(products_viewed=[right.id], order=Order(right.id, gopts))
    ladder = [potential(shop, r) for r in (clear(), viewed, carted, ordered)]
    assert ladder == sorted(set(ladder)) and ladder[-1] == 1.0


def test_values_typed_but_not_sent_count_as_progress_when_given_and_never_as_reward() -> None:
    # form: a right value typed rises the potential as if it had been sent; a wrong one does not.
    form = make_task("form", "signup", 2)
    keys = {f.key: f.step for f in logic.fields_of(form.params)}
    first = {k: v for k, v in form.goal.items() if keys[k] == 1}
    rec = Record(dismissed={"cookies", "newsletter"})
    bare = potential(form, rec)
    assert potential(form, rec, typed={}) == bare  # nothing typed: as without the reading
    assert potential(form, rec, typed={k: "x" for k in first}) == bare
    assert potential(form, rec, typed={"q": "anything"}) == bare  # not a field of the goal
    typed = potential(form, rec, typed=first)
    assert typed > bare
    assert typed == potential(form, Record(dismissed=rec.dismissed, drafts={1: first}))
    # What the page holds is the latest: a right value sent, then typed over wrong, is gone.
    sent = Record(dismissed=rec.dismissed, drafts={1: first})
    assert potential(form, sent, typed={k: "x" for k in first}) == bare
    # The judgement reads only what the site received.
    v = judge(form, rec, typed=first)
    assert (v.done, v.reward, v.potential) == (False, 0.0, typed)
    assert judge(form, rec).potential == bare

    # auth: the account name and the password typed right are worth part of signing in.
    auth = make_task("auth", "classic", 1)
    user, password = auth.params["user"], auth.params["password"]
    ladder = [
        potential(auth, Record(), typed=t)
        for t in ({}, {"user": user}, {"user": user, "password": password})
    ]
    assert ladder == sorted(set(ladder))
    assert potential(auth, Record(), typed={"user": user, "password": "wrong"}) == ladder[1]
    assert ladder[-1] < potential(auth, Record(logged_in=True))
    assert potential(auth, Record(), typed={"user": user, "password": password}) != 0.0
    assert judge(auth, Record(), typed={"user": user, "password": password}).reward == 0.0

    # combo: delivery details typed count once the cart holds the product (as sent ones do).
    combo = make_task("combo", "login_first", 3)
    wanted = json.loads(combo.goal["delivery"])
    _, _, gopts, _ = shop_goal(combo.goal)
    right = next(p for p in products_of(combo.params) if webshop_reward(combo.goal, p, gopts) == 1)
    carted = Record(logged_in=True, cart=CartLine(right.id, gopts))
    assert potential(combo, carted, typed=wanted) > potential(combo, carted)
    assert potential(combo, carted, typed=wanted) == potential(
        combo, Record(logged_in=True, cart=carted.cart, delivery_draft=wanted)
    )
    assert potential(combo, Record(), typed=wanted) == potential(combo, Record())


# -- the session logic ----------------------------------------------------------------------------


def test_sessions_expire_when_idle_and_are_limited() -> None:
    task = make_task("auth", "classic", 1)
    s = logic.Sessions(limit=2, idle_s=10)
    s.open("a", task, "ep-a", now=0)
    s.open("b", task, "ep-b", now=5)
    with pytest.raises(logic.SessionLimitError):
        s.open("c", task, "ep-c", now=6)
    assert s.get("a", now=9) is not None  # used: its idle clock restarts
    s.open("c", task, "ep-c", now=16)  # b expired (idle 11 s)
    assert s.get("b", now=16) is None and s.expired == 1
    assert s.close("a") is not None and s.close("a") is None and len(s) == 1


def test_login_locks_after_three_failures_and_returns_to_the_page_asked_for() -> None:
    task = make_task("auth", "classic", 1)
    user, password = task.params["user"], task.params["password"]
    rec = Record()
    assert logic.login_gate(rec, "/page/reports") == "/login"
    assert logic.login_gate(rec, "/page/billing") == "/login"  # not the first asked for
    assert logic.login(task, rec, {"user": [user], "password": ["nope"]}) == "/login"
    assert "2 attempts left" in rec.login_error
    ok = logic.login(
        task, Record(after_login="/page/reports"), {"user": [user], "password": [password]}
    )
    assert ok == "/page/reports"
    logic.login(task, rec, {"user": [user], "password": ["nope"]})
    logic.login(task, rec, {"user": [user], "password": ["nope"]})
    assert rec.locked and rec.events == ["login_failed"] * 3 + ["locked_out"]
    assert logic.login(task, rec, {"user": [user], "password": [password]}) == "/login"
    assert not rec.logged_in and rec.events[-1] == "login_refused"


def test_list_loads_one_chunk_at_a_time_and_only_loaded_items_open() -> None:
    task = make_task("scroll", "contacts", 3)
    rec = Record()
    total = len(json.loads(task.params["items"]))
    assert not logic.open_item(task, rec, 10)  # chunk 10: only 0-9 are loaded
    items, more = logic.load_more(task, rec)
    assert [i for i, _, _ in items] == list(range(10, 20)) and more
    assert logic.open_item(task, rec, 19) and not logic.open_item(task, rec, 20)
    while more:
        _, more = logic.load_more(task, rec)
    assert rec.chunks * 10 >= total and logic.load_more(task, rec) == ([], False)


def test_cart_needs_every_option_and_only_the_first_order_counts() -> None:
    task = make_task("shop", "classic", 4)
    products = json.loads(task.params["products"])
    p = products[0]
    rec = Record()
    assert logic.add_to_cart(task, rec, {"product": [p["id"]]}) == f"/product/{p['id']}"
    assert rec.cart is None and rec.events == ["cart_invalid"]
    chosen = {f"opt-{d.lower()}": [v[0]] for d, v in p["options"].items()}
    assert logic.add_to_cart(task, rec, {"product": [p["id"]], **chosen}) == "/cart"
    assert logic.place_order(task, rec, {}) == "/thanks" and rec.order is not None
    assert logic.place_order(task, rec, {}) == "/thanks" and rec.events[-1] == "order_refused"
    assert (
        logic.safe_path("//evil.example/x") == "/"
        and logic.safe_path("/search?q=a") == "/search?q=a"
    )


# -- against a real nats-server and Chromium ------------------------------------------------------


@dataclass
class Site:
    bus: Bus
    svc: Service


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def site(nats_server: NatsServer) -> AsyncIterator[Site]:
    """One sites service (HTTP on a free port) for the module, in a namespace of its own."""
    names = Names(f"t{uuid.uuid4().hex[:10]}")
    async with connect(nats_server.url, name="test-sites", names=names) as bus:
        svc, _ = build(bus, SitesSettings(port=0))
        async with running(svc):
            yield Site(bus, svc)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        b = await pw.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        yield b
        await b.close()


async def _open(site: Site, task: BrowserTask, episode: str = "ep") -> SiteSession:
    return await site.bus.request(
        site.bus.names.sites("open"),
        SiteOpen(episode_id=episode, task=task),
        SiteSession,
        timeout=5,
    )


async def _result(site: Site, session: str) -> SiteResult:
    return await site.bus.request(
        site.bus.names.sites("result"), SiteResultRequest(session=session), SiteResult, timeout=5
    )


_SETTLED = """() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"""
_IDLE = """() => !document.querySelector('[aria-busy="true"]')"""


async def _settle(page: Any, *, scrolled: bool = False) -> None:
    """Wait for what an action started: a navigation (a click's), or the list's chunk request
    (a scroll's: its scroll event fires on the next frame)."""
    await page.wait_for_load_state("load")
    if scrolled:
        await page.evaluate(_SETTLED)
        await page.wait_for_function(_IDLE)


_STEP = re.compile(
    r'^(click|fill|select|check|uncheck) ("(?:[^"\\]|\\.)*")(?: ("(?:[^"\\]|\\.)*"))?$'
)


async def _act(page: Any, step: str) -> None:
    """Do one oracle step by names with Playwright's locators (``exact``: no partial matches;
    strict: two elements of one name on a page fail the step)."""
    if step == "scroll down":
        await page.evaluate("window.scrollBy(0, window.innerHeight * 0.8)")  # as the adapter
        await _settle(page, scrolled=True)
        return
    m = _STEP.match(step)
    assert m, step
    verb, name = m[1], json.loads(m[2])
    value = json.loads(m[3]) if m[3] else ""
    if verb == "click":
        target = page.get_by_role("button", name=name, exact=True).or_(
            page.get_by_role("link", name=name, exact=True)
        )
        await target.click()
    elif verb == "fill":
        await page.get_by_label(name, exact=True).fill(value)
    elif verb == "select":
        await page.get_by_label(name, exact=True).select_option(label=value)
    elif verb == "check":
        await page.get_by_label(name, exact=True).check()
    else:
        await page.get_by_label(name, exact=True).uncheck()
    if verb == "click":
        await _settle(page)


async def _run(browser: Any, url: str, steps: list[str], page: Any = None) -> Any:
    """``page`` (else a page in a fresh context, closed by the caller) at ``url``, through
    ``steps``; the page."""
    if page is None:
        context = await browser.new_context(viewport={"width": 1024, "height": 768})
        context.set_default_timeout(5000)
        page = await context.new_page()
    await page.goto(url)
    for step in steps:
        await _act(page, step)
    return page


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_the_oracle_solves_generated_tasks_of_every_flow_in_chromium(
    site: Site, browser: Any
) -> None:
    tasks = generate(15, 21, "train") + generate(15, 21, "heldout")
    assert {t.flow for t in tasks} == set(BROWSER_FLOWS)
    tasks += generate(6, 21, "train", easy=True)  # the first stages reach the goal too
    todo: asyncio.Queue[BrowserTask] = asyncio.Queue()
    for t in tasks:
        todo.put_nowait(t)
    failed: list[tuple[str, str, str, object]] = []

    async def worker() -> None:
        # One page per worker, reused: sessions live in the URL, so tasks cannot meet.
        context = await browser.new_context(viewport={"width": 1024, "height": 768})
        context.set_default_timeout(5000)
        page = await context.new_page()
        try:
            while not todo.empty():
                task = todo.get_nowait()
                opened = await _open(site, task, f"oracle-{task.task_id}")
                try:
                    await _run(browser, opened.url, task.solution, page)
                except Exception as exc:  # counted as a failure of that task, reported below
                    failed.append((task.flow, task.template, task.task_id, repr(exc)[:300]))
                    continue
                r = await _result(site, opened.session)
                if not (r.done and r.outcome == "success" and r.reward == 1.0):
                    failed.append((task.flow, task.template, task.task_id, r))
        finally:
            await context.close()

    await asyncio.gather(*(worker() for _ in range(3)))
    assert len(failed) <= len(tasks) * 0.05, failed


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_doing_nothing_or_the_wrong_password_is_not_a_success(
    site: Site, browser: Any
) -> None:
    task = next(t for t in generate(10, 8, "train") if t.flow == "auth" and t.template == "classic")
    idle = await _open(site, task, "idle")
    page = await _run(browser, idle.url, [])
    await page.context.close()
    got = await _result(site, idle.session)
    assert (got.done, got.outcome, got.reward) == (False, "failure", 0.0)

    wrong = await _open(site, task, "wrong")
    user, password = task.params["user"], task.params["password"]
    steps = [s for s in task.solution if "Username" in s or "Password" in s or "Sign in" in s]
    dismiss = [
        s
        for s in task.solution
        if s in ('click "No thanks"', 'click "Accept cookies"', 'click "Reject cookies"')
    ]
    attempt = [f'fill "Username" "{user}"', 'fill "Password" "letmein"', 'click "Sign in"']
    page = await _run(browser, wrong.url, [*dismiss, task.solution[len(dismiss)], *attempt])
    assert "2 attempts left" in await page.content()
    for step in attempt * 2:
        await _act(page, step)
    assert "locked" in await page.content()
    for step in steps[-3:]:  # the right password, now refused
        await _act(page, step)
    await page.context.close()
    got = await _result(site, wrong.session)
    assert got.done and got.outcome == "failure" and got.reward == 0.0
    signing_in = [e for e in got.events if e.startswith(("log", "locked"))]
    assert signing_in == ["login_failed"] * 3 + ["locked_out", "login_refused"]
    assert password not in json.dumps(got.events)


_CRAWL = r"""
async ([prefix, guesses]) => {
  const seen = new Set();
  const queue = [location.pathname, ...guesses.map(g => prefix + g)];
  const bodies = [];
  const junk = el => {
    const t = (el.type || '').toLowerCase();
    if (el.tagName === 'SELECT') return el.options.length ? el.options[el.options.length - 1].value : '';
    if (t === 'email') return 'mallory@example.org';
    if (t === 'tel') return '+1 202 555 0000';
    if (t === 'password') return 'hunter2';
    if (t === 'hidden') return el.value;
    return el.value || 'hacked';
  };
  const visit = async (url, init) => {
    const r = await fetch(url, init);
    const html = await r.text();
    bodies.push(r.status + ' ' + html);
    const doc = new DOMParser().parseFromString(html, 'text/html');
    for (const a of doc.querySelectorAll('a[href]')) queue.push(a.getAttribute('href'));
    for (const f of doc.querySelectorAll('form')) {
      const data = new URLSearchParams();
      for (const el of f.elements) {
        if (!el.name) continue;
        if ((el.type === 'checkbox' || el.type === 'radio')) { data.append(el.name, el.value || 'on'); continue; }
        data.append(el.name, junk(el));
      }
      data.append('product', 'p000000');
      data.append('user', 'admin');
      const action = f.getAttribute('action') || url;
      if ((f.getAttribute('method') || 'get').toLowerCase() === 'post') {
        queue.push(['POST', action, data.toString()]);
      } else {
        queue.push(action + '?' + data.toString());
      }
    }
  };
  let n = 0;
  while (queue.length && n < 60) {
    const item = queue.shift();
    const key = JSON.stringify(item);
    if (seen.has(key)) continue;
    seen.add(key);
    n += 1;
    if (Array.isArray(item)) {
      await visit(item[1], {method: 'POST', body: item[2], headers: {'Content-Type': 'application/x-www-form-urlencoded'}});
    } else {
      await visit(item, {method: 'GET'});
      await visit(item, {method: 'POST', body: 'user=admin&password=admin&product=p000000&next=/'});
    }
  }
  return bodies;
}
"""

_GUESSES = [
    "/result", "/results", "/goal", "/reward", "/admin", "/api/result", "/debug", "/order",
    "/confirm", "/done", "/thanks", "/checkout", "/cart", "/more", "/open/0", "/item/0",
    "/login", "/page/reports", "/form/3", "/review",
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_hostile_page_cannot_produce_a_success_or_read_the_goal(
    site: Site, browser: Any
) -> None:
    tasks = [next(t for t in generate(10, 13, "train") if t.flow == flow) for flow in BROWSER_FLOWS]

    async def attack(task: BrowserTask) -> None:
        opened = await _open(site, task, f"hostile-{task.flow}")
        page = await _run(browser, opened.url, [])
        bodies = await page.evaluate(_CRAWL, [f"/e/{opened.session}", _GUESSES])
        # and from outside any session: the server has no result route at all
        root = opened.url.split("/e/")[0]
        for path in ("/result", "/results", "/e/", "/e/x/result", "/goal"):
            assert (await page.request.get(root + path)).status == 404, path
        await page.context.close()
        got = await _result(site, opened.session)
        assert got.outcome != "success" and got.reward < 1.0, (task.flow, got)
        text = "\n".join(bodies)
        assert len(bodies) > 20
        assert "reward" not in text.lower() and "goal" not in text.lower()
        for value in task.goal.values():  # hidden ground truth is never on a page
            if len(value) > 3 and value not in task.statement:
                assert value not in text, (task.flow, value)

    await asyncio.gather(*(attack(t) for t in tasks))


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_each_scroll_down_loads_exactly_one_chunk_whatever_the_window(
    site: Site, browser: Any
) -> None:
    for template, (width, height), step in (
        ("orders", (1024, 768), 0.8),
        ("contacts", (1280, 600), 1.0),
        ("episodes", (800, 1000), 0.55),
    ):
        task = make_task("scroll", template, 31)
        opened = await _open(site, task, f"geometry-{template}")
        chunk, total = int(task.params["chunk"]), len(json.loads(task.params["items"]))
        context = await browser.new_context(viewport={"width": width, "height": height})
        page = await context.new_page()
        await page.goto(opened.url)
        for step_name in task.solution:
            if step_name.startswith('click "No thanks') or "cookies" in step_name:
                await _act(page, step_name)
        for k in range(1, 6):
            await page.evaluate(f"window.scrollBy(0, window.innerHeight * {step})")
            await _settle(page, scrolled=True)
            shown = await page.locator("#items li").count()
            assert shown == min(total, (k + 1) * chunk), (template, k, shown)
        await context.close()


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_two_sessions_of_one_task_do_not_see_each_other(site: Site, browser: Any) -> None:
    auth = next(t for t in generate(10, 17, "train") if t.flow == "auth")
    a, b = await _open(site, auth, "twin-a"), await _open(site, auth, "twin-b")
    assert a.session != b.session and len(a.session) >= 32
    page_b = await _run(browser, b.url, [])
    page_a = await _run(browser, a.url, auth.solution)
    await page_b.reload()
    assert "Signed in as" not in await page_b.content()
    assert (await _result(site, a.session)).outcome == "success"
    got_b = await _result(site, b.session)
    assert got_b.outcome == "failure" and got_b.events == []
    await page_a.context.close()
    await page_b.context.close()

    # The same actions at once in two sessions: the same record, each its own.
    scroll = next(t for t in generate(10, 17, "heldout") if t.flow == "scroll")
    x, y = await _open(site, scroll, "twin-x"), await _open(site, scroll, "twin-y")
    pages = await asyncio.gather(*(_run(browser, s.url, scroll.solution) for s in (x, y)))
    for p in pages:
        await p.context.close()
    rx, ry = await _result(site, x.session), await _result(site, y.session)
    assert rx.outcome == ry.outcome == "success" and rx.events == ry.events
    loads = [e for e in rx.events if e.startswith("chunk_loaded:")]
    assert len(loads) == scroll.solution.count("scroll down") > 0


@pytest.mark.asyncio(loop_scope="module")
async def test_result_and_close_of_sessions_over_nats(site: Site) -> None:
    task = make_task("form", "signup", 5)
    opened = await _open(site, task, "closing")
    assert opened.url.endswith(f"/e/{opened.session}/form/1")
    closed = await site.bus.request(
        site.bus.names.sites("close"), SiteClose(session=opened.session), SiteResult, timeout=5
    )
    assert closed.info["closed"] == "yes" and closed.outcome == "failure"
    again = await site.bus.request(
        site.bus.names.sites("close"), SiteClose(session=opened.session), SiteResult, timeout=5
    )
    assert again.info == {"closed": "unknown session"}
    with pytest.raises(RemoteError) as err:
        await _result(site, opened.session)
    assert err.value.code == "422"
    forged = msgspec.structs.replace(task, goal={**task.goal, "email": "x@example.org"})
    with pytest.raises(RemoteError) as err:
        await _open(site, forged)
    assert err.value.code == "422" and "does not match its id" in err.value.description


async def test_public_url_and_the_session_limit(bus: Bus) -> None:
    svc, state = build(bus, SitesSettings(port=0, public_url="http://sites:8300/", max_sessions=1))
    task = make_task("scroll", "orders", 1)
    async with running(svc):
        first = await bus.request(
            bus.names.sites("open"), SiteOpen(episode_id="a", task=task), SiteSession, timeout=5
        )
        assert first.url == f"http://sites:8300/e/{first.session}/"
        with pytest.raises(RemoteError) as err:
            await bus.request(
                bus.names.sites("open"), SiteOpen(episode_id="b", task=task), SiteSession, timeout=5
            )
        assert err.value.code == "503"
        assert svc.status().extra["sessions"] == 1.0 and state.listening.is_set()
    assert not state.listening.is_set()
