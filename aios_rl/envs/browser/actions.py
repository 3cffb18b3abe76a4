"""The browser environment's observation and action language, pure (no browser).

An observation is the page as text: the task, the URL, then one line per element the page shows,
interactive ones numbered (BrowserGym's convention of element ids in brackets)::

    Task: Sign in as "alice" with password "hunter2", then open "Reports".
    URL: /e/3f9c.../login
    heading "Sign in"
    [1] textbox "Username" value=""
    [2] textbox "Password" value=""
    [3] checkbox "Remember me" checked=false
    [4] button "Sign in"
    text "Wrong password: 2 tries left"

Actions (candidates carry a ``  # role "name"`` comment for students that read them; it is
ignored when the action is parsed):

==========================  ===============================================================
``click [N]``               click element N (buttons, links, checkboxes, radios, tabs, ...)
``fill [N] "text"``         replace the text of field N
``select [N] "option"``     choose an option of select N
``check [N]``/``uncheck``   set checkbox N
``scroll down|up``          scroll the page by most of a screen
``press Enter``             the Enter key, where the focus is
``go back``                 the browser's back button
==========================  ===============================================================
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from aios_rl.errors import AiosError

__all__ = [
    "GLOBAL_ACTIONS",
    "Action",
    "Element",
    "InvalidAction",
    "as_candidate",
    "candidates",
    "elements_from_observation",
    "observation",
    "parse",
    "quoted_values",
    "resolve_names",
]

GLOBAL_ACTIONS = ("scroll down", "scroll up", "press Enter", "go back")
"""Actions that name no element, offered at every step."""

TEXT_ROLES = ("textbox", "searchbox", "spinbutton")
CLICK_ROLES = (
    "button",
    "link",
    "checkbox",
    "radio",
    "tab",
    "option",
    "menuitem",
    "listitem",
    "generic",
    "switch",
    "cell",
    "img",
)

MAX_VALUES = 24
"""Most quoted values of a task statement offered to each text field."""
MAX_OPTIONS = 24
"""Most options of one select offered as candidates."""
MAX_LINES = 160
"""Most element lines of an observation (the rest is summarised as a count)."""


class InvalidAction(AiosError, ValueError):
    """An action that is not in the language, or names no element of the page."""


@dataclass(frozen=True)
class Element:
    """One element of the page as the observation script saw it."""

    id: int | None
    """Its number, for interactive elements (``None``: text only)."""
    role: str
    name: str
    value: str | None = None
    checked: bool | None = None
    options: tuple[str, ...] = ()
    disabled: bool = False

    @staticmethod
    def from_json(raw: dict) -> Element:  # type: ignore[type-arg]
        return Element(
            id=raw.get("id"),
            role=str(raw.get("role", "generic")),
            name=" ".join(str(raw.get("name", "")).split())[:120],
            value=None if raw.get("value") is None else str(raw["value"])[:200],
            checked=raw.get("checked"),
            options=tuple(str(o)[:80] for o in raw.get("options") or ()),
            disabled=bool(raw.get("disabled", False)),
        )

    def line(self) -> str:
        head = f"[{self.id}] " if self.id is not None else ""
        out = f"{head}{self.role} {json.dumps(self.name)}"
        if self.value is not None and self.role in (*TEXT_ROLES, "combobox"):
            out += f" value={json.dumps(self.value)}"
        if self.checked is not None:
            out += f" checked={'true' if self.checked else 'false'}"
        if self.options:
            out += " options=" + json.dumps(list(self.options[:MAX_OPTIONS]))
        if self.disabled:
            out += " disabled"
        return out


@dataclass(frozen=True)
class Action:
    """A parsed action."""

    verb: str
    """``click``, ``fill``, ``select``, ``check``, ``uncheck``, ``scroll``, ``press``, ``back``."""
    element: int | None = None
    text: str = ""
    extra: dict[str, str] = field(default_factory=dict)


_ELEMENT = re.compile(r'^(click|fill|select|check|uncheck)\s*\[(\d+)\](?:\s+("(?:[^"\\]|\\.)*"))?$')


def parse(action: str) -> Action:
    """``action`` in the language (a trailing ``# comment`` ignored). Raises ``InvalidAction``."""
    text = action.split("  #", 1)[0].strip()
    if text in ("scroll down", "scroll up"):
        return Action("scroll", text=text.split()[1])
    if text == "press Enter":
        return Action("press", text="Enter")
    if text == "go back":
        return Action("back")
    m = _ELEMENT.match(text)
    if not m:
        raise InvalidAction(f"not an action: {text[:80]!r}")
    verb, number, quoted = m.group(1), int(m.group(2)), m.group(3)
    if verb in ("fill", "select"):
        if quoted is None:
            raise InvalidAction(f"{verb} needs a quoted value: {text[:80]!r}")
        try:
            value = json.loads(quoted)
        except json.JSONDecodeError as exc:
            raise InvalidAction(f"bad quoted value in {text[:80]!r}") from exc
        return Action(verb, number, str(value))
    if quoted is not None:
        raise InvalidAction(f"{verb} takes no value: {text[:80]!r}")
    return Action(verb, number)


def quoted_values(statement: str) -> list[str]:
    """The values a task statement puts in double quotes, in order, without repeats."""
    out: list[str] = []
    for v in re.findall(r'"([^"]*)"', statement):
        if v not in out:
            out.append(v)
    return out[:MAX_VALUES]


def observation(statement: str, url: str, elements: Sequence[Element]) -> str:
    """The page as the policy reads it."""
    lines = [f"Task: {statement}", f"URL: {url}"]
    shown = [e.line() for e in elements[:MAX_LINES]]
    lines += shown
    if len(elements) > MAX_LINES:
        lines.append(f"... {len(elements) - MAX_LINES} more elements")
    return "\n".join(lines)


def _described(action: str, e: Element) -> str:
    return f"{action}  # {e.role} {json.dumps(e.name)}"


def candidates(statement: str, elements: Sequence[Element]) -> list[str]:
    """The actions offered: each interactive element's, with the statement's quoted values for
    text fields and the options of selects, then the global ones. A value a field already holds
    is not offered again (typing it, or selecting the option shown, would change nothing)."""
    values = quoted_values(statement)
    out: list[str] = []
    for e in elements:
        if e.id is None or e.disabled:
            continue
        if e.role in TEXT_ROLES:
            out += [_described(f"fill [{e.id}] {json.dumps(v)}", e) for v in values if v != e.value]
            out.append(_described(f"click [{e.id}]", e))
        elif e.role == "combobox" and e.options:
            out += [
                _described(f"select [{e.id}] {json.dumps(o)}", e)
                for o in e.options[:MAX_OPTIONS]
                if o != e.value
            ]
        else:
            out.append(_described(f"click [{e.id}]", e))
    out += list(GLOBAL_ACTIONS)
    return out


_NAMED = re.compile(
    r'^(click|fill|select|check|uncheck)\s+("(?:[^"\\]|\\.)*")(?:\s+("(?:[^"\\]|\\.)*"))?$'
)


def resolve_names(step: str, elements: Sequence[Element]) -> str:
    """An oracle step in element NAMES (``fill "Username" "alice"``) as an action on this page
    (``fill [1] "alice"``). Raises ``InvalidAction`` when no element has that name."""
    step = step.strip()
    if step in ("scroll down", "scroll up", "press Enter", "go back"):
        return step
    m = _NAMED.match(step)
    if not m:
        raise InvalidAction(f"not an oracle step: {step[:80]!r}")
    verb, name = m.group(1), json.loads(m.group(2))
    value = json.loads(m.group(3)) if m.group(3) else None
    matches = [e for e in elements if e.id is not None and e.name == name]
    if not matches:
        matches = [e for e in elements if e.id is not None and e.name.strip() == name.strip()]
    if not matches:
        raise InvalidAction(f"no element named {name!r} on the page")
    e = matches[0]
    if verb in ("check", "uncheck"):
        return f"click [{e.id}]"  # the candidates toggle a checkbox by clicking it
    if value is not None:
        return f"{verb} [{e.id}] {json.dumps(value)}"
    return f"{verb} [{e.id}]"


_LINE = re.compile(r'^\[(\d+)\] (\S+) ("(?:[^"\\]|\\.)*")(.*)$')


def elements_from_observation(text: str) -> list[Element]:
    """The numbered elements of an observation, read back from its text (what a teacher that
    sees only the trajectory has): id, role and name, checked state when shown."""
    out: list[Element] = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        rest = m.group(4)
        checked = None
        if " checked=true" in rest:
            checked = True
        elif " checked=false" in rest:
            checked = False
        out.append(Element(int(m.group(1)), m.group(2), json.loads(m.group(3)), checked=checked))
    return out


def as_candidate(action: str, offered: Sequence[str]) -> str | None:
    """The offered candidate that is ``action`` (candidates carry a description comment)."""
    want = parse(action)
    for c in offered:
        try:
            if parse(c) == want:
                return c
        except InvalidAction:
            continue
    return None
