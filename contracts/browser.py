"""The browser environment: its tasks, and the requests a runner makes of the ``sites`` service
(open an episode's server-side session, read what the agent achieved, close it).

The reward of a ``site`` task is never read from the page: the runner asks ``sites.result`` over
NATS, which the page cannot reach, and the sites service answers from its own record of what the
agent did in that session."""

from __future__ import annotations

from typing import Literal

from ._base import Message
from .vocab import Outcome

__all__ = [
    "BROWSER_FLOWS",
    "BrowserTask",
    "SiteClose",
    "SiteOpen",
    "SiteResult",
    "SiteResultRequest",
    "SiteSession",
]

BROWSER_FLOWS = ("auth", "form", "scroll", "shop", "combo")
"""The flows the ``sites`` service serves (``combo``: log in, then buy, then fill the delivery
form)."""


class BrowserTask(Message, frozen=True, kw_only=True):
    """One browser task: a seeded variant of a flow on the local sites (``kind="site"``), or a
    MiniWoB++ task by name (``kind="miniwob"``)."""

    SCHEMA = "browser_task.v1"

    task_id: str
    """Content address (see ``aios_rl.envs.browser``)."""
    kind: Literal["site", "miniwob"] = "site"
    flow: str
    """A flow of ``BROWSER_FLOWS``, or the MiniWoB++ task's name (``click-button``, ...)."""
    template: str = ""
    """The variant's template; train and held-out share no (flow, template) pair."""
    split: str = "train"
    seed: int = 0
    statement: str = ""
    """What the agent is asked to do, in words (the page shows it too)."""
    params: dict[str, str] = {}
    """What the site renders this variant from (products, fields, credentials, distractors)."""
    goal: dict[str, str] = {}
    """Hidden ground truth the site judges against (never sent to the page)."""
    solution: list[str] = []
    """The oracle's path, in element names rather than ids: ``click "Sign in"``,
    ``fill "Username" "alice"``, ``select "Country" "France"``, ``check "I agree"``,
    ``scroll down``, ``press Enter``. The oracle teacher and the scripted tests follow it."""
    start_path: str = "/"
    max_steps: int = 16


class SiteOpen(Message, frozen=True, kw_only=True):
    """Open a fresh server-side session for one episode of ``task``."""

    SCHEMA = "site_open.v1"

    episode_id: str
    task: BrowserTask


class SiteSession(Message, frozen=True, kw_only=True):
    """Where the episode's browser goes: ``url`` carries the session (no cookie shared between
    episodes)."""

    SCHEMA = "site_session.v1"

    session: str
    url: str


class SiteResultRequest(Message, frozen=True, kw_only=True):
    SCHEMA = "site_result_request.v1"

    session: str
    typed: dict[str, str] | None = None
    """The values the page's form fields hold now, not yet sent (field name -> value,
    checkboxes ``on`` / ``off``), when the runner measures progress that way: the answer's
    ``potential`` then counts a right value as soon as it is typed. Never judged: ``done``,
    ``outcome`` and ``reward`` read only what the site received."""


class SiteResult(Message, frozen=True, kw_only=True):
    """What the agent achieved in a session, as the site recorded it."""

    SCHEMA = "site_result.v1"

    session: str
    done: bool = False
    """Whether the flow reached its end (a purchase, a submitted form, the protected page)."""
    outcome: Outcome = "failure"
    reward: float = 0.0
    potential: float = 0.0
    """How far along the flow the session is, in [0, 1] (the reward once done): its change from
    step to step is the browser environment's step-level progress."""
    info: dict[str, str] = {}
    events: list[str] = []
    """What happened, in order (``login_failed``, ``locked_out``, ``form_invalid``, ...)."""


class SiteClose(Message, frozen=True, kw_only=True):
    SCHEMA = "site_close.v1"

    session: str
