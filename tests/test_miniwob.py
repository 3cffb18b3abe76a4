"""MiniWoB++ tasks in real Chromium (``aios_rl.envs.browser.miniwob``): the oracle solves the 16
tasks we train on by element names, a (task, seed) always gives the same page, and a replayed
action prefix the same observations; doing nothing or the wrong thing is no success. One browser
for the module; the grammar and unknown names need none."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, async_playwright

from aios_rl.envs.browser import miniwob as mw

CHROMIUM = "/usr/bin/chromium"
SEEDS = (0, 1, 2)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        b = await p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        yield b
        await b.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(**mw.CONTEXT_OPTIONS)
    yield await context.new_page()
    await context.close()


async def _snapshot(page: Page) -> tuple[str, str, list[tuple[str, str]]]:
    """What an observation could be made of: the instruction, the whole body with the fields'
    values, the targets' names."""
    body = await page.evaluate(
        "() => document.body.outerHTML + JSON.stringify(Array.from("
        "document.querySelectorAll('input, textarea, select'), (e) => [e.value, e.checked]))"
    )
    return await mw.instruction(page), body, await mw.element_names(page)


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_the_oracle_solves_every_task_by_element_names(page: Page) -> None:
    runs, failures = [], []
    for name in mw.MINIWOB_TASKS:
        for seed in SEEDS:
            said = await mw.start(page, name, seed)
            try:
                path = await mw.solve(page, name)
                for step in path:
                    await mw.act(page, step)
                done, _, raw = await mw.reward(page)
                verdict = "ok" if done and raw == 1 else f"done={done} raw={raw}"
            except mw.MiniwobError as exc:
                path, verdict = [], f"{type(exc).__name__}: {exc}"
            runs.append((name, seed))
            if verdict != "ok":
                failures.append(f"{name} seed {seed}: {verdict} | {said} | {path}")
            else:
                assert mw.outcome(True, raw) == ("success", 1.0)
    rate = 1 - len(failures) / len(runs)
    print(f"oracle: {len(runs) - len(failures)}/{len(runs)} runs solved", *failures, sep="\n")
    assert len(runs) == 48
    assert rate >= 0.95, "\n".join(failures)


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_the_same_task_and_seed_give_the_same_page(page: Page) -> None:
    for name in mw.MINIWOB_TASKS:
        said = await mw.start(page, name, 5)
        first = await _snapshot(page)
        assert said == first[0] and said
        await mw.start(page, name, 5)
        assert await _snapshot(page) == first, name
        await mw.start(page, name, 6)
        assert (await _snapshot(page))[1] != first[1], f"{name}: the seed changes nothing"
    # nor does a page change by itself (the countdown display ticked every second)
    await mw.start(page, "click-button", 5)
    first = await _snapshot(page)
    since = await page.evaluate("performance.now()")
    # The condition is the page's own clock passing the countdown's period (1 s), with a deadline.
    await page.wait_for_function(f"performance.now() > {since} + 1100", timeout=10_000)
    assert await _snapshot(page) == first


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_replaying_a_prefix_gives_the_same_pages(page: Page) -> None:
    for name in ("book-flight", "search-engine", "use-autocomplete"):
        runs = []
        for _ in range(2):
            await mw.start(page, name, 3)
            path = await mw.solve(page, name)
            pages = [await _snapshot(page)]
            for step in path[:-1]:
                await mw.act(page, step)
                pages.append(await _snapshot(page))
            runs.append(pages)
        assert runs[0] == runs[1], name
        # the steps change what is shown (an autocomplete menu, a datepicker, results)
        assert len({body for _, body, _ in runs[0]}) == len(runs[0]), name


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_doing_nothing_or_the_wrong_thing_is_no_success(page: Page) -> None:
    for name in mw.MINIWOB_TASKS:
        await mw.start(page, name, 0)
        done, scaled, raw = await mw.reward(page)
        assert (done, scaled, raw) == (False, 0.0, 0.0), name
        assert mw.outcome(done, raw) == ("failure", 0.0)

    said = await mw.start(page, "click-tab", 0)  # "Click on Tab #2."
    wrong = next(
        n for _, n in await mw.element_names(page) if n.startswith("Tab #") and n not in said
    )
    await mw.act(page, f'click "{wrong}"')
    done, _, raw = await mw.reward(page)
    assert (done, raw) == (True, -1.0)
    assert mw.outcome(done, raw) == ("failure", 0.0)

    # done is sticky: no START cover comes back, a further right answer changes nothing
    right = said.removeprefix("Click on ").removesuffix(".")
    await mw.act(page, f'click "{right}"')
    assert await mw.reward(page) == (True, -1.0, -1.0)
    assert await page.is_hidden("#sync-task-cover")


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_names_and_action_errors(page: Page) -> None:
    await mw.start(page, "enter-password", 0)
    assert await mw.element_names(page) == [
        ("textbox", "Password"),
        ("textbox", "Verify password"),
        ("button", "Submit"),
    ]
    assert await mw.element_name(await page.query_selector("#verify")) == "Verify password"
    assert await mw.element_name(await page.query_selector("#query")) is None  # excluded
    assert await mw.element_name(await page.query_selector("#form")) is None  # not a target

    await mw.start(page, "form-sequence", 0)  # unnamed elements: role, then (k)
    names = [n for _, n in await mw.element_names(page)]
    assert names == ["slider", "checkbox", "checkbox (2)", "checkbox (3)", "Submit"]
    await mw.act(page, 'fill "slider" "-7"')
    assert await page.text_content("#val") == "-7"

    await mw.start(page, "scroll-text", 1)  # its text overflows the text area
    await mw.act(page, "scroll down")
    assert await page.evaluate("document.getElementById('text-area').scrollTop") > 0

    with pytest.raises(mw.ActionError, match=r"no element named 'Nope'.*'Submit'"):
        await mw.act(page, 'click "Nope"', timeout_ms=100)
    with pytest.raises(mw.ActionError, match="not a list"):
        await mw.act(page, 'select "textbox" "a"')
    with pytest.raises(mw.ActionError, match="checkbox"):
        await mw.act(page, 'check "Submit"')
    with pytest.raises(mw.ActionError, match="cannot parse"):
        await mw.act(page, "click Submit")


async def test_an_unknown_task_is_a_value_error() -> None:
    for name in ("no-such-task", "flight.AA", "../miniwob/click-test", ""):
        with pytest.raises(ValueError, match="no MiniWoB"):
            mw.task_url(name)
    with pytest.raises(ValueError):
        await mw.start(None, "no-such-task", 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no oracle"):
        await mw.solve(None, "click-test")  # type: ignore[arg-type]
    assert mw.task_url("click-test").startswith("file://")
    assert set(mw.MINIWOB_TASKS) <= set(mw.task_names())
    assert len(mw.task_names()) > 100


def test_steps_round_trip_through_the_grammar() -> None:
    for step in (
        'click "Tab #1"',
        'fill "Username" "a \\"quoted\\" \\\\ value"',
        'select "listbox" "Côte"',
        'check "checkbox (2)"',
        'uncheck "I agree"',
        "scroll down",
        "press Enter",
    ):
        verb, args = mw.parse_step(step)
        assert mw.format_step(verb, *args) == step
    assert mw.parse_step('fill "Username" "a \\"b\\""') == ("fill", ("Username", 'a "b"'))
    for bad in ("click Submit", 'fill "x"', 'click "a" "b"', "scroll left", "jump", ""):
        with pytest.raises(mw.ActionError):
            mw.parse_step(bad)
