"""MiniWoB++ tasks in our browser environment: start a task seeded, read its instruction and its
own reward, act on it by element names, and solve the tasks we train on with scripted oracles.

Pure of NATS: a Playwright ``Page`` in, strings and numbers out. The task pages come from the
``miniwob`` wheel (``miniwob/html/miniwob/<name>.html``), opened as ``file://`` URLs.

How a task starts (what ``miniwob`` and BrowserGym do, and what :func:`start` does)
---------------------------------------------------------------------------------
A task page loads ``core/core.js``; its ``window.onload`` calls ``core.startEpisode()``, which
only shows a START cover (``core.js`` l. 72-84). ``core.startEpisodeReal()`` (l. 86-104) builds
the problem (the page's ``genProblem()``), zeroes ``WOB_DONE_GLOBAL`` / ``WOB_REWARD_GLOBAL`` /
``WOB_RAW_REWARD_GLOBAL``, hides the cover and arms the episode timer
(``setTimeout(core.endEpisode(-1), core.EPISODE_MAX_TIME)``, 10 s by default, l. 50). Every
random draw goes through ``Math.random`` (``core.randi`` / ``core.randf`` / ``core.sample``,
l. 10-21), which ``core.js`` replaces with David Bau's seedrandom (l. 8), so
``Math.seedrandom(seed)`` before ``core.startEpisodeReal()`` fixes the problem. That is
``miniwob/selenium_instance.py``'s ``begin_task`` (l. 307-331: ``set_seed`` =
``Math.seedrandom(repr(seed))``, l. 444-450, then ``core.startEpisodeReal()``, then poll
``WOB_TASK_READY``) and BrowserGym's ``AbstractMiniwobTask.setup``
(``browsergym/miniwob/base.py``: ``Math.seedrandom(seed); core.EPISODE_MAX_TIME = 1000000;
core.startEpisodeReal();`` then ``wait_for_function(WOB_TASK_READY)``). An integer seed is passed
as a JS number in both (seedrandom keys ``42`` and ``'42'`` differently): so do we.

:func:`start` goes further for our needs (the same (task, seed) must give the same page, and
replaying an action prefix must give the same observations):

- it loads the page afresh every time (``page.goto``): no widget state, uid counter or reward
  history leaks from a previous episode (the flakiness ``miniwob/registration.py`` notes for
  ``search-engine``, ``choose-date``, ``social-media``... comes from resetting in place);
- it sets ``core.EPISODE_MAX_TIME`` to :data:`EPISODE_MAX_TIME_MS` (24 h; ``setTimeout`` holds at
  most 2**31 - 1 ms). The timer cannot be removed: ``core.endEpisode`` rewards only while it is
  armed (l. 109-115). A long timer also makes the time-scaled reward about equal to the raw one;
- it stops the countdown display's 1 s interval (``core.clearTimer()``), so the page's text does
  not change by itself;
- it keeps the START cover from coming back after the episode ends (``core.endEpisode`` calls
  ``core.startEpisode()``, l. 143): a later click would otherwise start a new problem and reset
  the globals. The task stays on screen and its reward stays put (``core.endEpisode`` ignores
  calls once the timer is cleared, l. 112-114): done is sticky;
- where the page has jQuery, it turns jQuery's animations off (``jQuery.fx.off``: the datepicker
  and dialogs appear at once) and sets jQuery UI autocomplete's search delay to 0 (300 ms by
  default), before ``genProblem`` builds the widgets, so one short settle after an action
  (see :func:`act`) observes the page as it will stay.

Reward
------
:func:`reward` reads ``(WOB_DONE_GLOBAL, WOB_REWARD_GLOBAL, WOB_RAW_REWARD_GLOBAL)``, as
``selenium_instance.get_metadata`` (l. 404-424) and BrowserGym's ``_get_info`` do; they are set by
``core.endEpisode`` (l. 106-133). The raw reward is the task's verdict, +1 or -1 for every task
we train on but ``click-checkboxes``, which gives (right - wrong) / boxes in [-1, 1]
(``click-checkboxes.html`` l. 57); the other one is the raw reward scaled by the time left
(``reward * max(0, 1 - dt / EPISODE_MAX_TIME)``, l. 123-126).

Our outcome (:func:`outcome`): not done, or done with raw reward <= 0, is a failure; raw > 0 a
success (BrowserGym's ``validate``: ``reward = float(RAW_REWARD_GLOBAL > 0)``). Our reward is
``max(0, raw)`` in [0, 1]: the raw reward, never the time-scaled one, because our students run on
a shared CPU and take seconds to minutes per action; MiniWoB's time penalty (built for agents that
act in milliseconds) would grade the machine's load, not the policy.

Element names and the action grammar
------------------------------------
Actions name elements the way a person would: ``click "NAME"``, ``fill "NAME" "VALUE"``,
``select "NAME" "OPTION"``, ``check "NAME"``, ``uncheck "NAME"``, ``scroll down`` /
``scroll up``, ``press KEY`` (``press Enter``). Quoted strings are JSON strings (as in
:mod:`.actions`): :func:`format_step` writes them, :func:`parse_step` reads them.

The addressable elements ("targets") are the visible elements outside :data:`EXCLUDE` that are
widgets by tag or role (button, link, input, select, textarea, ``[role=tab]``,
``[role=option]``, a jQuery UI slider handle, ...), carry an ``onclick`` attribute, or show a
pointer cursor that their parent does not (MiniWoB's links in ``click-link`` are
``<span class="alink">``; jQuery UI's autocomplete items are ``<li>``; the datepicker's "Prev" /
"Next" are ``<a>`` without ``href``). A target's name is, in order:

1. its accessible name where it has one: ``aria-labelledby``, ``aria-label``; for a form control
   its ``<label>`` (``for=`` or wrapping, without the control's own text), else an unassociated
   ``<label>`` right before it (MiniWoB's ``<label>Password</label><input>``), else its
   ``placeholder``, else its ``title``; for anything else its visible text (``innerText``), else
   its ``title``, else an image's ``alt``; an ``<input type=submit>`` its value;
2. else its role: ``textbox``, ``checkbox``, ``slider``, ``combobox`` (a ``<select>``),
   ``listbox`` (a ``<select multiple>``), ``button``, ... (``clickable`` for a role-less
   clickable element);
3. then, when several targets share a name, the first in document order keeps it and the k-th
   is ``NAME (k)``: ``checkbox``, ``checkbox (2)``, ``checkbox (3)`` in ``form-sequence``,
   ``textbox`` (the text area) and ``textbox (2)`` (the answer field) in ``scroll-text``.
   Before counting, a target inside another target of the same name replaces it (a jQuery UI
   tab ``<li role=tab>`` and its ``<a>``: the ``<a>`` is "Tab #1").

:func:`element_name` gives a handle's name and :func:`element_names` every target's (role,
name): the observation must show these names, or the policy cannot address what it sees.
Elements that only a script listener makes clickable, with no role, ``onclick`` attribute or
pointer cursor, are not targets; neither is anything in an iframe or a shadow root. None of the
16 tasks of :data:`MINIWOB_TASKS` has such an element.

Verbs: ``click`` clicks with the mouse (Playwright: scrolled into view, actionability checked);
``fill`` replaces a field's text (an ``input`` event, which is what autocomplete listens to); on a
slider it presses the arrow keys until the slider shows VALUE; ``select`` picks the option whose
text is OPTION, and in a ``<select multiple>`` adds it to those already picked (a ctrl-click);
``check`` / ``uncheck`` set a checkbox or radio; ``scroll down|up`` scrolls the focused element's
scrollable ancestor, else the largest scrollable element in view, else the page, by 80 % of its
height; ``press KEY`` presses a Playwright key name on the focused element.
"""

from __future__ import annotations

import contextlib
import json
import re
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import miniwob
from playwright.async_api import ElementHandle, Page
from playwright.async_api import Error as PlaywrightError

from aios_rl.errors import AiosError
from contracts import Outcome

__all__ = [
    "CONTEXT_OPTIONS",
    "EPISODE_MAX_TIME_MS",
    "EXCLUDE",
    "MINIWOB_TASKS",
    "ActionError",
    "MiniwobError",
    "UnknownTaskError",
    "act",
    "element_name",
    "element_names",
    "format_step",
    "instruction",
    "outcome",
    "parse_step",
    "reward",
    "solve",
    "start",
    "task_names",
    "task_url",
]

MINIWOB_TASKS: tuple[str, ...] = (
    "click-button",
    "click-link",
    "click-checkboxes",
    "click-dialog",
    "click-tab",
    "enter-text",
    "enter-password",
    "focus-text",
    "login-user",
    "form-sequence",
    "scroll-text",
    "click-scroll-list",
    "search-engine",
    "choose-list",
    "book-flight",
    "use-autocomplete",
)
"""The MiniWoB++ tasks we train and evaluate on; :func:`solve` has an oracle for each."""

EXCLUDE: tuple[str, ...] = ("#query", "#reward-display", "#click-canvas", "#sync-task-cover")
"""CSS selectors of the page's furniture, to leave out of an observation (``core.getDOMInfo``
skips the same four, ``core.js`` l. 341-344): ``#query`` is the instruction bar (the instruction
is given separately: :func:`start`, :func:`instruction`), ``#reward-display`` the human's
reward / timer / episode counter, ``#click-canvas`` a click visualiser, ``#sync-task-cover`` the
START cover. Targets are never looked for inside them."""

CONTEXT_OPTIONS: dict[str, str] = {"locale": "en-US", "timezone_id": "UTC"}
"""Browser-context options for MiniWoB pages: a task's page is the same for the same (task, seed)
only in the same locale and time zone (``book-flight`` draws dates in local time and prints them
with ``toLocaleTimeString``). ``browser.new_context(**CONTEXT_OPTIONS)``."""

EPISODE_MAX_TIME_MS = 86_400_000
"""The episode timer :func:`start` sets: 24 h, for a slow agent (the pages' own are 10-30 s)."""

HTML_DIR = Path(miniwob.__file__).resolve().parent / "html" / "miniwob"

RESOLVE_TIMEOUT_MS = 2_000
"""How long :func:`act` waits for an element of the given name to appear (an autocomplete
menu, a datepicker) before it gives up with :class:`ActionError`."""

_ACTION_TIMEOUT_MS = 5_000
"""Playwright's own wait for an element to be visible, stable, enabled and unobscured."""


class MiniwobError(AiosError):
    """Root of this module's errors."""


class UnknownTaskError(MiniwobError, ValueError):
    """No MiniWoB++ task of that name ships with the installed ``miniwob`` package."""


class ActionError(MiniwobError):
    """A step that does not parse, names no element on the page, or cannot be done to it."""


# --------------------------------------------------------------------------------------------
# Tasks, start, instruction, reward


def task_names() -> tuple[str, ...]:
    """Every MiniWoB++ task the installed package ships (``html/miniwob/*.html``), sorted.
    FlightWoB (``flight.*``) is not among them: its pages need an HTTP server."""
    return tuple(sorted(p.stem for p in HTML_DIR.glob("*.html")))


def task_url(name: str) -> str:
    """The ``file://`` URL of task ``name``'s page. Raises :class:`UnknownTaskError` (a
    ``ValueError``) for a name the package does not ship."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name) or not (HTML_DIR / f"{name}.html").is_file():
        hint = (
            " (FlightWoB needs an HTTP server; not supported)" if name.startswith("flight") else ""
        )
        raise UnknownTaskError(
            f"no MiniWoB++ task named {name!r}{hint}: the miniwob package in {HTML_DIR} ships "
            f"{len(task_names())} tasks, e.g. {', '.join(MINIWOB_TASKS[:4])}"
        )
    return (HTML_DIR / f"{name}.html").as_uri()


_STARTED: weakref.WeakKeyDictionary[Page, tuple[str, int]] = weakref.WeakKeyDictionary()
"""Page -> the (task, seed) :func:`start` opened in it; :func:`solve` replays it in a scratch
page where a task's path depends on what earlier steps reveal."""

_START_JS = r"""
([seed, maxTime]) => {
  if (window.jQuery) {
    jQuery.fx.off = true;
    if (jQuery.ui && jQuery.ui.autocomplete) jQuery.ui.autocomplete.prototype.options.delay = 0;
  }
  Math.seedrandom(seed);
  core.EPISODE_MAX_TIME = maxTime;
  core.startEpisodeReal();
  core.clearTimer();
  core.startEpisode = function () { core.createDisplay(); };
}
"""


async def start(page: Page, name: str, seed: int) -> str:
    """Open task ``name`` in ``page``, seeded with ``seed``, its timer set to
    :data:`EPISODE_MAX_TIME_MS`, and return its instruction (see the module docstring). The same
    (name, seed) gives the same page, given the same browser, locale and time zone (the page
    formats dates and times with them). Raises :class:`UnknownTaskError`."""
    url = task_url(name)
    await page.goto(url)
    await page.wait_for_function("() => typeof core !== 'undefined' && core.cover_div !== null")
    await page.evaluate(_START_JS, [int(seed), EPISODE_MAX_TIME_MS])
    await page.wait_for_function("() => WOB_TASK_READY")
    _STARTED[page] = (name, int(seed))
    return await instruction(page)


async def instruction(page: Page) -> str:
    """The task's instruction (``core.getUtterance()``: the ``#query`` bar's text, whitespace
    collapsed, ``core.js`` l. 315-318; a few tasks return ``{utterance, fields}``)."""
    said = await page.evaluate("() => core.getUtterance()")
    return str(said["utterance"] if isinstance(said, dict) else said)


async def reward(page: Page) -> tuple[bool, float, float]:
    """``(done, reward, raw_reward)`` as the task set them: ``WOB_DONE_GLOBAL``,
    ``WOB_REWARD_GLOBAL`` (time-scaled) and ``WOB_RAW_REWARD_GLOBAL``; both rewards are 0 until
    done. See :func:`outcome` for what they mean to us."""
    done, scaled, raw = await page.evaluate(
        "() => [WOB_DONE_GLOBAL, WOB_REWARD_GLOBAL, WOB_RAW_REWARD_GLOBAL]"
    )
    return bool(done), float(scaled), float(raw)


def outcome(done: bool, raw: float) -> tuple[Outcome, float]:
    """Our outcome and environment reward for a MiniWoB episode: ``("success", raw)`` when done
    with a raw reward > 0, else ``("failure", 0.0)``; the reward is ``max(0, raw)``, never the
    time-scaled one (see the module docstring)."""
    if done and raw > 0:
        return "success", min(1.0, raw)
    return "failure", 0.0


# --------------------------------------------------------------------------------------------
# Element names

_TARGETS_JS = r"""
(arg) => {
  const skip = arg.exclude.join(",");
  const clean = (s) => (s || "").replace(/\s+/g, " ").trim();
  const WIDGETS = new Set(["button", "link", "checkbox", "radio", "switch", "textbox",
    "searchbox", "combobox", "listbox", "slider", "spinbutton", "tab", "menuitem",
    "menuitemcheckbox", "menuitemradio", "option", "treeitem"]);
  const roleOf = (el) => {
    const explicit = (el.getAttribute("role") || "").trim().split(/\s+/)[0];
    if (explicit && explicit !== "presentation" && explicit !== "none") return explicit;
    const tag = el.tagName;
    if (tag === "BUTTON" || tag === "SUMMARY") return "button";
    if (tag === "A") return "link";
    if (tag === "TEXTAREA") return "textbox";
    if (tag === "SELECT") return el.multiple || el.size > 1 ? "listbox" : "combobox";
    if (tag === "INPUT") {
      const type = el.type;
      if (type === "hidden") return null;
      if (type === "checkbox" || type === "radio") return type;
      if (["button", "submit", "reset", "image"].includes(type)) return "button";
      if (type === "range") return "slider";
      if (type === "number") return "spinbutton";
      return "textbox";
    }
    if (el.classList.contains("ui-slider-handle")) return "slider";
    if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) {
      return "textbox";
    }
    return null;
  };
  const pointer = (el) => getComputedStyle(el).cursor === "pointer";
  const isTarget = (el, role) =>
    (role !== null && WIDGETS.has(role)) || el.hasAttribute("onclick") ||
    (pointer(el) && !(el.parentElement && pointer(el.parentElement)));
  const visible = (el) => {
    if (!el.checkVisibility({ visibilityProperty: true })) return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const labelText = (label) => {
    const copy = label.cloneNode(true);
    copy.querySelectorAll("input, select, textarea, button").forEach((c) => c.remove());
    return clean(copy.textContent);
  };
  const nameOf = (el, role) => {
    const ids = el.getAttribute("aria-labelledby");
    if (ids) {
      const t = clean(ids.split(/\s+/).map((id) => {
        const ref = document.getElementById(id);
        return ref ? ref.textContent : "";
      }).join(" "));
      if (t) return t;
    }
    const aria = clean(el.getAttribute("aria-label"));
    if (aria) return aria;
    const tag = el.tagName;
    if (tag === "INPUT" && ["button", "submit", "reset"].includes(el.type)) {
      return clean(el.value) || clean(el.getAttribute("title"));
    }
    if (tag === "INPUT" && el.type === "image") return clean(el.alt) || clean(el.title);
    if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA" || role === "slider") {
      const labels = el.labels ? Array.from(el.labels) : [];
      const own = clean(labels.map(labelText).join(" "));
      if (own) return own;
      const prev = el.previousElementSibling;
      if (prev && prev.tagName === "LABEL" && !prev.htmlFor &&
          !prev.querySelector("input, select, textarea")) {
        const t = clean(prev.textContent);
        if (t) return t;
      }
      return clean(el.getAttribute("placeholder")) || clean(el.getAttribute("title"));
    }
    const text = clean(el.innerText);
    if (text) return text;
    const title = clean(el.getAttribute("title"));
    if (title) return title;
    const img = el.querySelector("img[alt]");
    return img ? clean(img.alt) : "";
  };
  const found = [];
  // A page between documents (a navigation, about:blank) has no body yet: no targets.
  for (const el of document.body ? document.body.querySelectorAll("*") : []) {
    if (skip && el.closest(skip)) continue;
    const role = roleOf(el);
    if (!isTarget(el, role) || !visible(el)) continue;
    found.push({ el, role, base: nameOf(el, role) || role || "clickable" });
  }
  const byElement = new Map(found.map((t) => [t.el, t]));
  for (const t of found) {
    for (let p = t.el.parentElement; p; p = p.parentElement) {
      const outer = byElement.get(p);
      if (outer && outer.base === t.base) outer.dropped = true;
    }
  }
  const counts = new Map();
  const targets = [];
  for (const t of found) {
    if (t.dropped) continue;
    const k = (counts.get(t.base) || 0) + 1;
    counts.set(t.base, k);
    targets.push({ el: t.el, role: t.role || "", name: k === 1 ? t.base : `${t.base} (${k})` });
  }
  if (arg.op === "targets") return targets;  // for the observation script, in the page
  if (arg.op === "list") return targets.map((t) => [t.role, t.name]);
  if (arg.op === "name") {
    const t = targets.find((t) => t.el === arg.el);
    return t ? t.name : null;
  }
  const t = targets.find((t) => t.name === arg.name);
  return t ? [t.el, t.role] : null;
}
"""


async def element_names(page: Page) -> list[tuple[str, str]]:
    """Every target on the page as ``(role, name)``, in document order (see the module
    docstring); ``role`` is ``""`` for a role-less clickable element."""
    pairs = await page.evaluate(_TARGETS_JS, {"op": "list", "exclude": list(EXCLUDE)})
    return [(str(role), str(name)) for role, name in pairs]


async def element_name(handle: ElementHandle) -> str | None:
    """The name :func:`act` knows ``handle`` by, or ``None`` when it is not a target (not
    visible, inside :data:`EXCLUDE`, or not interactive)."""
    name = await handle.evaluate(
        f"(el, arg) => ({_TARGETS_JS})({{...arg, el}})",
        {"op": "name", "exclude": list(EXCLUDE)},
    )
    return None if name is None else str(name)


# --------------------------------------------------------------------------------------------
# The action grammar

_QUOTED = r'"((?:[^"\\]|\\.)*)"'
_STEP = re.compile(
    rf"(?P<verb>click|check|uncheck)\s+{_QUOTED}"
    rf"|(?P<verb2>fill|select)\s+{_QUOTED}\s+{_QUOTED}"
    r"|scroll\s+(?P<direction>down|up)"
    r"|press\s+(?P<key>[A-Za-z0-9+]+)"
)


def _unquote(quoted: str) -> str:
    try:
        return str(json.loads(f'"{quoted}"'))
    except json.JSONDecodeError as exc:
        raise ActionError(f'bad quoted string "{quoted}": {exc.msg}') from None


def format_step(verb: str, *args: str) -> str:
    """A step in the grammar: ``format_step("fill", "Username", "alice")`` is
    ``fill "Username" "alice"``; ``format_step("scroll", "down")``, ``format_step("press",
    "Enter")`` stay unquoted."""
    if verb in ("scroll", "press"):
        return " ".join((verb, *args))
    return " ".join((verb, *(json.dumps(a, ensure_ascii=False) for a in args)))


def parse_step(step: str) -> tuple[str, tuple[str, ...]]:
    """``(verb, args)`` of a step: ``parse_step('fill "Username" "alice"')`` is
    ``("fill", ("Username", "alice"))``. Raises :class:`ActionError` for anything else."""
    m = _STEP.fullmatch(step.strip())
    if m is None:
        raise ActionError(
            f'cannot parse {step!r}: expected click/check/uncheck "NAME", fill/select '
            '"NAME" "VALUE", scroll down|up or press KEY'
        )
    if m["verb"]:
        return m["verb"], (_unquote(m[2]),)
    if m["verb2"]:
        return m["verb2"], (_unquote(m[4]), _unquote(m[5]))
    if m["direction"]:
        return "scroll", (m["direction"],)
    return "press", (m["key"],)


async def _resolve(page: Page, name: str, timeout_ms: int) -> tuple[ElementHandle, str]:
    """The target named ``name`` and its role, waiting up to ``timeout_ms`` for it to appear."""
    arg = {"op": "find", "name": name, "exclude": list(EXCLUDE)}
    try:
        found = await page.wait_for_function(_TARGETS_JS, arg=arg, timeout=timeout_ms)
    except PlaywrightError as exc:
        if page.is_closed():
            raise
        known = ", ".join(repr(n) for _, n in await element_names(page))
        raise ActionError(f"no element named {name!r} on the page (named: {known})") from exc
    element = (await found.get_property("0")).as_element()
    role = str(await (await found.get_property("1")).json_value())
    await found.dispose()
    assert element is not None
    return element, role


_SLIDER_JS = r"""
(el) => {
  if (el.tagName === "INPUT") return [Number(el.value), Number(el.step) || 1];
  const box = el.closest(".ui-slider");
  if (box && window.jQuery && jQuery(box).slider) {
    const s = jQuery(box);
    const values = s.slider("option", "values");
    const i = s.find(".ui-slider-handle").index(el);
    const v = values && values.length ? values[i] : s.slider("value");
    return [Number(v), Number(s.slider("option", "step")) || 1];
  }
  const now = el.getAttribute("aria-valuenow");
  return now === null ? null : [Number(now), 1];
}
"""


async def _set_slider(handle: ElementHandle, value: str) -> None:
    """Move a slider to ``value`` with the arrow keys, as a person with a keyboard would."""
    try:
        target = float(value)
    except ValueError:
        raise ActionError(f"a slider takes a number, not {value!r}") from None
    state = await handle.evaluate(_SLIDER_JS)
    if state is None:
        raise ActionError("this slider does not tell its value")
    current, step = state
    presses = round((target - current) / step)
    if abs(presses) > 1000:
        raise ActionError(f"{value} is too far from the slider's {current}")
    key = "ArrowRight" if presses > 0 else "ArrowLeft"
    for _ in range(abs(presses)):
        await handle.press(key, timeout=_ACTION_TIMEOUT_MS)
    reached = (await handle.evaluate(_SLIDER_JS))[0]
    if reached != target:
        raise ActionError(f"the slider stops at {reached:g}, not {value}")


async def _select(handle: ElementHandle, option: str) -> None:
    """Pick the option whose text is ``option`` (added to the picked ones in a multi-select)."""
    picked = await handle.evaluate(
        """(el, text) => {
          if (el.tagName !== "SELECT") return "not a list (a <select>)";
          const clean = (s) => s.replace(/\\s+/g, " ").trim();
          const options = Array.from(el.options);
          const i = options.findIndex((o) => clean(o.label) === text);
          if (i < 0) return "no option " + JSON.stringify(text) + " (options: " +
            options.map((o) => JSON.stringify(clean(o.label))).join(", ") + ")";
          const chosen = el.multiple ? options.filter((o) => o.selected).map((o) => o.index) : [];
          return chosen.includes(i) ? chosen : [...chosen, i];
        }""",
        option,
    )
    if isinstance(picked, str):
        raise ActionError(picked)
    await handle.select_option(index=picked, timeout=_ACTION_TIMEOUT_MS)


_SCROLL_JS = r"""
([down, exclude]) => {
  const skip = exclude.join(",");
  const scrollable = (el) => {
    if (el.scrollHeight <= el.clientHeight + 1) return false;
    const y = getComputedStyle(el).overflowY;
    return y === "auto" || y === "scroll" || el.tagName === "TEXTAREA" || el.tagName === "SELECT";
  };
  let box = null;
  for (let el = document.activeElement; el && el !== document.body; el = el.parentElement) {
    if (scrollable(el)) { box = el; break; }
  }
  if (box === null) {
    let area = 0;
    for (const el of document.body.querySelectorAll("*")) {
      if ((skip && el.closest(skip)) || !scrollable(el) || !el.checkVisibility()) continue;
      const r = el.getBoundingClientRect();
      if (r.width * r.height > area) { area = r.width * r.height; box = el; }
    }
  }
  box = box || document.scrollingElement;
  const by = Math.max(20, Math.round(0.8 * (box === document.scrollingElement ?
    window.innerHeight : box.clientHeight)));
  box.scrollBy(0, down ? by : -by);
}
"""

_SETTLE_JS = """() => new Promise((done) => setTimeout(
  () => requestAnimationFrame(() => requestAnimationFrame(() => done(null))), 0))"""


async def act(
    page: Page, step: str, *, timeout_ms: int = RESOLVE_TIMEOUT_MS, action_timeout_ms: int = 0
) -> None:
    """Do one step of the grammar on ``page`` (see the module docstring), then let the page
    settle (a timer turn and two animation frames: enough for MiniWoB pages as :func:`start`
    sets them up). Raises :class:`ActionError` when the step does not parse, no target of that
    name appears within ``timeout_ms``, or Playwright cannot do it to that element."""
    verb, args = parse_step(step)
    limit = action_timeout_ms or _ACTION_TIMEOUT_MS
    try:
        if verb == "scroll":
            await page.evaluate(_SCROLL_JS, [args[0] == "down", list(EXCLUDE)])
        elif verb == "press":
            await page.keyboard.press(args[0])
        else:
            handle, role = await _resolve(page, args[0], timeout_ms)
            if verb == "click":
                await handle.click(timeout=limit)
            elif verb == "check":
                await handle.check(timeout=limit)
            elif verb == "uncheck":
                await handle.uncheck(timeout=limit)
            elif verb == "select":
                await _select(handle, args[1])
            elif role == "slider":
                await _set_slider(handle, args[1])
            else:
                await handle.fill(args[1], timeout=limit)
        await page.evaluate(_SETTLE_JS)
    except PlaywrightError as exc:
        if page.is_closed():
            raise
        raise ActionError(f"{step}: {exc.message.splitlines()[0]}") from exc


# --------------------------------------------------------------------------------------------
# Oracles


class _Oracle:
    """What a solver reads the page with: elements found by CSS selector or script (oracle
    knowledge), expressed by the names :func:`act` knows them by."""

    def __init__(self, page: Page) -> None:
        self.page = page

    async def name(self, selector: str) -> str:
        """The name of the element at ``selector``."""
        return await self._name(await self.page.query_selector(selector), selector)

    async def pick(self, expression: str, arg: Any = None) -> str:
        """The name of the element a script returns."""
        handle = (await self.page.evaluate_handle(expression, arg)).as_element()
        return await self._name(handle, expression)

    async def js(self, expression: str, arg: Any = None) -> Any:
        return await self.page.evaluate(expression, arg)

    async def _name(self, handle: ElementHandle | None, where: str) -> str:
        name = None if handle is None else await element_name(handle)
        if name is None:
            raise MiniwobError(f"the oracle expected a target at {where!r}")
        return name


def _match(pattern: str, said: str) -> re.Match[str]:
    m = re.fullmatch(pattern, said)
    if m is None:
        raise MiniwobError(f"the oracle cannot read the instruction {said!r}")
    return m


@contextlib.asynccontextmanager
async def _replica(page: Page) -> AsyncIterator[Page]:
    """A scratch page showing the same task and seed as ``page`` (opened by :func:`start`), for
    solvers whose later steps depend on what earlier ones reveal."""
    if page not in _STARTED:
        raise MiniwobError("solve() needs a page opened by start()")
    name, seed = _STARTED[page]
    scratch = await page.context.new_page()
    try:
        await start(scratch, name, seed)
        yield scratch
    finally:
        await scratch.close()


_MONTHS = (
    "January February March April May June July August September October November December"
).split()

Solver = Callable[[Page, str], Awaitable[list[str]]]


async def _click_button(page: Page, said: str) -> list[str]:
    text = _match(r'Click on the "(.*)" button\.', said)[1]
    return [format_step("click", text)]


async def _click_link(page: Page, said: str) -> list[str]:
    text = _match(r'Click on the link "(.*)"\.', said)[1]
    return [format_step("click", text)]


async def _click_checkboxes(page: Page, said: str) -> list[str]:
    o = _Oracle(page)
    wanted = _match(r"Select (.*) and click Submit\.", said)[1]
    labels = await o.js(
        "() => Array.from(document.querySelectorAll('#boxes label'), (l) => l.textContent.trim())"
    )
    names = [] if wanted == "nothing" and "nothing" not in labels else wanted.split(", ")
    steps = []
    for i, label in enumerate(labels):
        if label in names:
            steps.append(format_step("check", await o.name(f"#ch{i}")))
    return [*steps, format_step("click", await o.name("#subbtn"))]


async def _click_dialog(page: Page, said: str) -> list[str]:
    return [format_step("click", await _Oracle(page).name(".ui-dialog-titlebar-close"))]


async def _click_tab(page: Page, said: str) -> list[str]:
    k = _match(r"Click on Tab #(\d)\.", said)[1]
    return [format_step("click", await _Oracle(page).name(f'#area ul a[href="#tabs-{k}"]'))]


async def _enter_text(page: Page, said: str) -> list[str]:
    o = _Oracle(page)
    text = _match(r'Enter "(.*)" into the text field and press Submit\.', said)[1]
    return [
        format_step("fill", await o.name("#tt"), text),
        format_step("click", await o.name("#subbtn")),
    ]


async def _enter_password(page: Page, said: str) -> list[str]:
    o = _Oracle(page)
    pw = _match(r'Enter the password "(.*)" into both text fields and press submit\.', said)[1]
    return [
        format_step("fill", await o.name("#password"), pw),
        format_step("fill", await o.name("#verify"), pw),
        format_step("click", await o.name("#subbtn")),
    ]


async def _focus_text(page: Page, said: str) -> list[str]:
    return [format_step("click", await _Oracle(page).name("#tt"))]


async def _login_user(page: Page, said: str) -> list[str]:
    o = _Oracle(page)
    m = _match(
        r'Enter the username "(.*)" and the password "(.*)" into the text fields and press login\.',
        said,
    )
    return [
        format_step("fill", await o.name("#username"), m[1]),
        format_step("fill", await o.name("#password"), m[2]),
        format_step("click", await o.name("#subbtn")),
    ]


async def _form_sequence(page: Page, said: str) -> list[str]:
    o = _Oracle(page)
    m = _match(
        r"Select (-?\d+) with the slider, click the (\d)\w\w checkbox, then hit Submit\.", said
    )
    return [
        format_step("fill", await o.name("#slider .ui-slider-handle"), m[1]),
        format_step("check", await o.name(f"#checkbox-{m[2]}")),
        format_step("click", await o.name("#subbtn")),
    ]


async def _scroll_text(page: Page, said: str) -> list[str]:
    o = _Oracle(page)
    _match(
        r"Find the last word in the text area, enter it into the text field and hit Submit\.", said
    )
    text = await o.js("() => document.getElementById('text-area').value")
    word = re.sub(r"[^a-zA-Z0-9]", "", text.split()[-1])
    return [
        format_step("fill", await o.name("#answer-input"), word),
        format_step("click", await o.name("#subbtn")),
    ]


async def _options(o: _Oracle) -> list[str]:
    return await o.js(
        "() => Array.from(document.querySelectorAll('#options option'), (x) => x.textContent)"
    )


async def _click_scroll_list(page: Page, said: str) -> list[str]:
    o = _Oracle(page)
    wanted = _match(r"Select (.*) from the scroll list and click Submit\.", said)[1]
    options = set(await _options(o))
    # one or two items joined by ", " (an item could hold ", " itself: split where both are items)
    items = [wanted] if wanted in options else []
    for m in re.finditer(", ", wanted):
        head, tail = wanted[: m.start()], wanted[m.end() :]
        if not items and head in options and tail in options:
            items = [head, tail]
    if not items:
        raise MiniwobError(f"the oracle finds no options for {wanted!r}")
    listbox = await o.name("#options")
    return [
        *(format_step("select", listbox, item) for item in items),
        format_step("click", await o.name("#area button")),
    ]


async def _choose_list(page: Page, said: str) -> list[str]:
    o = _Oracle(page)
    item = _match(r"Select (.*) from the list and click Submit\.", said)[1]
    return [
        format_step("select", await o.name("#options"), item),
        format_step("click", await o.name("#area button")),
    ]


async def _use_autocomplete(page: Page, said: str) -> list[str]:
    o = _Oracle(page)
    m = _match(r'Enter an item that starts with "(.*?)"(?: and ends with "(.*?)")?\.', said)
    head, tail = m[1], m[2] or ""
    items = await o.js("() => ui_utils.COUNTRIES")
    item = next(c for c in items if c.startswith(head) and c.endswith(tail))
    return [
        format_step("fill", await o.name("#tags"), head),
        format_step("click", item),
        format_step("click", await o.name("#subbtn")),
    ]


async def _search_engine(page: Page, said: str) -> list[str]:
    m = _match(
        r'Use the textbox to enter "(.*)" and press "Search", then find and click the '
        r"(\d+)\w\w search result\.",
        said,
    )
    query, rank = m[1], int(m[2])
    async with _replica(page) as scratch:
        o, path = _Oracle(scratch), []

        async def step(*words: str) -> None:
            path.append(format_step(*words))
            await act(scratch, path[-1])

        await step("fill", await o.name("#search-text"), query)
        await step("click", await o.name("#search"))
        if (rank - 1) // 3:
            await step(
                "click",
                await o.pick(
                    "(n) => Array.from(document.querySelectorAll('#pagination a.page-link'))"
                    ".find((a) => a.textContent.trim() === n)",
                    str((rank - 1) // 3 + 1),
                ),
            )
        await step("click", await o.name(f'#page-content a[data-result="{rank - 1}"]'))
    return path


async def _book_flight(page: Page, said: str) -> list[str]:
    m = _match(
        r"Book the (cheapest|shortest) one-way flight from: (.*) to: (.*) on "
        r"(\d\d)/(\d\d)/(\d{4})\.",
        said,
    )
    goal, origin, destination = m[1], m[2], m[3]
    month, day, year = int(m[4]), int(m[5]), int(m[6])
    airports = await page.evaluate("() => DOMESTIC_FLIGHTS")
    async with _replica(page) as scratch:
        o, path = _Oracle(scratch), []

        async def step(*words: str) -> None:
            path.append(format_step(*words))
            await act(scratch, path[-1])

        for field, city in (("#flight-from", origin), ("#flight-to", destination)):
            await step("fill", await o.name(field), city)
            await step("click", next(a for a in airports if city in a))
        await step("click", await o.name("#datepicker"))
        shown = await o.js(
            "() => [jQuery('.ui-datepicker-month').text(), jQuery('.ui-datepicker-year').text()]"
        )
        months = (year - int(shown[1])) * 12 + (month - 1 - _MONTHS.index(shown[0]))
        for _ in range(abs(months)):
            arrow = ".ui-datepicker-next" if months > 0 else ".ui-datepicker-prev"
            await step("click", await o.name(arrow))
        await step(
            "click",
            await o.pick(
                "(n) => Array.from(document.querySelectorAll('.ui-datepicker-calendar a'))"
                ".find((a) => a.textContent.trim() === n)",
                str(day),
            ),
        )
        await step("click", await o.name("#search"))
        await step(
            "click",
            await o.pick(
                """(key) => {
                  const value = (f) => Number(f.querySelector(`[${key}]`).getAttribute(key));
                  const flights = Array.from(document.querySelectorAll('#results .flight'));
                  const best = flights.reduce((a, b) => (value(b) < value(a) ? b : a));
                  return best.querySelector('.flight-price');
                }""",
                "data-price" if goal == "cheapest" else "data-duration",
            ),
        )
    return path


_SOLVERS: dict[str, Solver] = {
    "click-button": _click_button,
    "click-link": _click_link,
    "click-checkboxes": _click_checkboxes,
    "click-dialog": _click_dialog,
    "click-tab": _click_tab,
    "enter-text": _enter_text,
    "enter-password": _enter_password,
    "focus-text": _focus_text,
    "login-user": _login_user,
    "form-sequence": _form_sequence,
    "scroll-text": _scroll_text,
    "click-scroll-list": _click_scroll_list,
    "search-engine": _search_engine,
    "choose-list": _choose_list,
    "book-flight": _book_flight,
    "use-autocomplete": _use_autocomplete,
}


async def solve(page: Page, name: str) -> list[str]:
    """The oracle's path for task ``name`` as :func:`start` just opened it in ``page``: steps
    of the grammar, by element names, that :func:`act` can run in order to a raw reward of 1.
    It reads the instruction and the DOM (and, for ``search-engine`` and ``book-flight``, whose
    later steps depend on what earlier ones reveal, plays the steps in a scratch page of the
    same context showing the same task and seed); ``page`` itself is left untouched. Raises
    :class:`UnknownTaskError` for a task without an oracle (any task outside
    :data:`MINIWOB_TASKS`)."""
    if name not in _SOLVERS:
        raise UnknownTaskError(f"no oracle for {name!r}: oracles exist for {', '.join(_SOLVERS)}")
    return await _SOLVERS[name](page, await instruction(page))
