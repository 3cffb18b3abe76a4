"""The browser environment's language, pure and in real Chromium: actions parse, candidates come
from the page's elements and the task's quoted values, oracle steps by name resolve to ids, and
the observation script numbers what a page shows the same way every time."""

from __future__ import annotations

import pytest

from aios_rl.envs.browser.actions import (
    Element,
    InvalidAction,
    candidates,
    observation,
    parse,
    quoted_values,
    resolve_names,
)
from aios_rl.envs.browser.observe import OBSERVE_JS

ELEMENTS = [
    Element(None, "heading", "Sign in"),
    Element(1, "textbox", "Username", value=""),
    Element(2, "textbox", "Password", value=""),
    Element(3, "checkbox", "Remember me", checked=False),
    Element(4, "combobox", "Country", value="France", options=("France", "Spain")),
    Element(5, "button", "Sign in"),
    Element(6, "button", "Gone", disabled=True),
]
TASK = 'Sign in as "alice" with password "hunter2".'


def test_a_value_a_field_already_holds_is_not_offered_again() -> None:
    filled = [Element(1, "textbox", "Username", value="alice"), *ELEMENTS[2:]]
    got = candidates(TASK, filled)
    assert 'fill [1] "hunter2"  # textbox "Username"' in got
    assert not any(c.startswith('fill [1] "alice"') for c in got)
    assert 'fill [2] "alice"  # textbox "Password"' in got  # another field still empty


def test_actions_parse_and_refuse_what_is_not_the_language() -> None:
    assert parse("click [5]").verb == "click" and parse("click [5]").element == 5
    a = parse('fill [1] "alice"  # textbox "Username"')
    assert (a.verb, a.element, a.text) == ("fill", 1, "alice")
    assert parse('select [4] "Spain"').text == "Spain"
    assert parse('fill [1] "say \\"hi\\""').text == 'say "hi"'
    assert parse("scroll down").text == "down" and parse("go back").verb == "back"
    for bad in ("", "click 5", "fill [1]", 'click [1] "x"', "rm -rf /", "scroll sideways"):
        with pytest.raises(InvalidAction):
            parse(bad)


def test_candidates_offer_each_element_the_task_values_and_the_global_actions() -> None:
    assert quoted_values(TASK) == ["alice", "hunter2"]
    got = candidates(TASK, ELEMENTS)
    assert got[:3] == [
        'fill [1] "alice"  # textbox "Username"',
        'fill [1] "hunter2"  # textbox "Username"',
        'click [1]  # textbox "Username"',
    ]
    assert 'click [3]  # checkbox "Remember me"' in got
    assert 'select [4] "Spain"  # combobox "Country"' in got
    assert not any(c.startswith('select [4] "France"') for c in got)  # already selected
    assert 'click [5]  # button "Sign in"' in got
    assert not any("[6]" in c for c in got)  # disabled
    assert got[-4:] == ["scroll down", "scroll up", "press Enter", "go back"]
    assert all(parse(c) for c in got)
    text = observation(TASK, "/login", ELEMENTS)
    assert text.splitlines()[:4] == [
        f"Task: {TASK}",
        "URL: /login",
        'heading "Sign in"',
        '[1] textbox "Username" value=""',
    ]
    assert '[3] checkbox "Remember me" checked=false' in text


def test_oracle_steps_by_name_resolve_to_the_pages_ids() -> None:
    assert resolve_names('fill "Username" "alice"', ELEMENTS) == 'fill [1] "alice"'
    assert resolve_names('click "Sign in"', ELEMENTS) == "click [5]"
    assert resolve_names('check "Remember me"', ELEMENTS) == "click [3]"
    assert resolve_names('select "Country" "Spain"', ELEMENTS) == 'select [4] "Spain"'
    assert resolve_names("scroll down", ELEMENTS) == "scroll down"
    with pytest.raises(InvalidAction, match="no element named"):
        resolve_names('click "Nowhere"', ELEMENTS)


PAGE = """<!doctype html><html><body>
<h1>Sign in</h1>
<p>Welcome back. <span style="display:none">hidden text</span></p>
<form><label for="u">Username</label><input id="u" value="bob">
<label>Password <input type="password" name="pw"></label>
<label><input type="checkbox" checked> Remember me</label>
<select aria-label="Country"><option>France</option><option selected>Spain</option></select>
<button type="submit">Sign in</button><button style="visibility:hidden">Ghost</button></form>
<a href="#help">Help</a></body></html>"""


@pytest.mark.slow
async def test_the_observation_script_numbers_what_the_page_shows() -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page()
            await page.set_content(PAGE)
            first = await page.evaluate(OBSERVE_JS, {"exclude": []})
            again = await page.evaluate(OBSERVE_JS, {"exclude": []})
        finally:
            await browser.close()
    assert first == again  # the same page, the same numbers
    els = [Element.from_json(e) for e in first["elements"]]
    lines = [e.line() for e in els]
    assert lines == [
        'heading "Sign in"',
        'text "Welcome back."',
        '[1] textbox "Username" value="bob"',
        '[2] textbox "Password" value=""',
        '[3] checkbox "Remember me" checked=true',
        '[4] combobox "Country" value="Spain" options=["France", "Spain"]',
        '[5] button "Sign in"',
        '[6] link "Help"',
    ]


def test_a_teacher_reads_the_elements_back_from_the_observation() -> None:
    from aios_rl.envs.browser.actions import as_candidate, elements_from_observation

    text = observation(TASK, "/login", ELEMENTS)
    back = elements_from_observation(text)
    assert [(e.id, e.role, e.name) for e in back] == [
        (e.id, e.role, e.name) for e in ELEMENTS if e.id is not None
    ]
    assert back[2].checked is False
    step = resolve_names('fill "Password" "hunter2"', back)
    assert (
        as_candidate(step, candidates(TASK, ELEMENTS)) == 'fill [2] "hunter2"  # textbox "Password"'
    )
    assert as_candidate('fill [2] "nope"', candidates(TASK, ELEMENTS)) is None


def test_the_oracle_teacher_hints_where_a_trajectory_leaves_the_solution_path() -> None:
    from contracts import BrowserTask, StepDigest, TeacherRequest
    from services.teacher_oracle.logic import judge_browser

    task = BrowserTask(
        task_id="t",
        flow="auth",
        template="classic",
        statement=TASK,
        solution=['fill "Username" "alice"', 'fill "Password" "hunter2"', 'click "Sign in"'],
    )
    obs = observation(TASK, "/login", ELEMENTS)
    offered = candidates(TASK, ELEMENTS)

    def req(actions: list[str], outcome: str) -> TeacherRequest:
        return TeacherRequest(
            request_id="r",
            episode_id="e",
            environment="browser",
            task_id="t",
            steps=[
                StepDigest(index=i, observation=obs, action=a, candidates=offered)
                for i, a in enumerate(actions)
            ],
            outcome=outcome,  # type: ignore[arg-type]
        )

    strayed = judge_browser(req(['fill [1] "alice"', "click [5]", "click [5]"], "failure"), task)
    assert [(h.step, h.better_action) for h in strayed.hints] == [
        (1, 'fill [2] "hunter2"  # textbox "Password"')
    ]
    assert (strayed.verdict, strayed.score) == ("incorrect", -1.0)
    clean = judge_browser(
        req(['fill [1] "alice"', 'fill [2] "hunter2"', "click [5]"], "success"), task
    )
    assert (clean.verdict, clean.score, clean.hints) == ("correct", 1.0, [])
    blocked = judge_browser(req(["scroll down"], "blocked"), task)
    assert blocked.verdict == "unsure" and blocked.boundary
    no_path = judge_browser(req([], "success"), BrowserTask(task_id="m", kind="miniwob", flow="x"))
    assert no_path.verdict == "unsure" and no_path.score == 0.0
