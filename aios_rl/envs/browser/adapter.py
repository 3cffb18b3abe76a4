"""The browser environment behind the ``Environment`` protocol: one Chromium per runner process
(Debian's, through Playwright's ``executable_path``), a fresh browser context per episode, the
page observed as numbered elements (:mod:`.observe`, :mod:`.actions`).

Two kinds of tasks:

- ``site``: a flow on the ``sites`` service. The episode opens a server-side session
  (``sites.open``), browses it, and is judged by ``sites.result``: the server's record of what
  the agent achieved, read over NATS (the page cannot reach it), never the DOM.
- ``miniwob``: a MiniWoB++ task from the ``miniwob`` package's pages, seeded with the task's
  ``seed`` (the task is one instance: every episode of it, whatever the job's seed, shows the same
  page, as every episode of a site task shows the same site), judged by the task's own reward
  (:mod:`.miniwob`). Its oracle path is not in the task as generated: :meth:`BrowserHost.solve`
  computes it in Chromium.

Each step also reports its progress (``progress``): on a site flow, the change of the session's
potential, the sites service's measure of the flow's sub-goals reached
(:func:`.flows.potential`; MiniWoB++ pages only say how a task ended); on both kinds, less
``no_effect_cost`` when the page reads after the step as it already did in the episode (a wasted
step: one that changed nothing, such as what a greedy policy repeats for ever, or one that
undid what an earlier step did, such as typing one value then another then the first again).

An episode ends when the task says it is done, or after its step limit (then judged as it
stands). A failed episode's last screenshot goes to the Object Store ``evidence`` and is named in
the episode's evidence. A browser that crashed is relaunched for the next episode; the episode it
took down raises (the runner makes it ``blocked``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from aios_rl.bus import Bus, get_logger
from contracts import (
    BrowserTask,
    EvidenceRef,
    SiteClose,
    SiteOpen,
    SiteResult,
    SiteResultRequest,
    SiteSession,
)
from contracts.subjects import OBJECTS_EVIDENCE

from ..base import EnvResult, EnvSpec
from ..runner import RunnerSettings
from .actions import Element, InvalidAction, candidates, observation, parse
from .observe import AID, OBSERVE_JS
from .store import BROWSER_TASKS

__all__ = ["SPEC", "BrowserEnv", "BrowserHost", "BrowserRunnerSettings"]

CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


@dataclass(frozen=True, kw_only=True)
class BrowserRunnerSettings(RunnerSettings):
    """Run browser episodes in one Chromium per process, a fresh context per episode."""

    env: str = "browser"
    concurrency: int = 2
    """Episodes (browser contexts) at once in one replica."""
    max_steps: int = 32
    """Most actions an episode may take (the task's own limit caps it further: a combined flow
    needs 20 to 22, a MiniWoB++ task at most 10)."""
    chromium: str = "/usr/bin/chromium"
    """The Chromium Playwright drives (``playwright install`` is never needed)."""
    headless: bool = True
    action_timeout_s: float = 5.0
    """Longest one action (a click, a fill) may take before it counts as invalid."""
    settle_timeout_s: float = 5.0
    """Longest the page may take to settle after an action (load, pending requests)."""
    sites_timeout_s: float = 10.0
    """Deadline of a request to the sites service."""
    screenshots: bool = True
    """Keep a failed episode's last screenshot as evidence."""
    max_invalid: int = 4
    """Invalid actions in a row after which the episode ends (judged as it stands)."""
    progress: bool = True
    """Measure each step's progress: on a site flow the change of the session's potential (the
    sites service's record of the sub-goals reached, ``SiteResult.potential``), on any task
    less ``no_effect_cost`` for a step after which the page reads as it already did."""
    progress_typed: bool = False
    """Site flows, ``progress`` on: count the values the page's form fields hold now, not yet
    sent, in the session's potential (``SiteResultRequest.typed``), so typing a right value is
    progress at once; off, a value counts only once its form is sent. The reward never reads
    them."""
    no_effect_cost: float = 0.1
    """What a wasted step costs in progress: one after which the page reads as it already did
    in this episode (the same observation as before the step: a scroll with nowhere to go, a
    click on nothing, an invalid action; or as at any earlier step: a loop, such as filling a
    field with one value, then another, then the first again)."""


_TYPED_JS = """() => {
  const out = {};
  for (const e of document.querySelectorAll('form input[name], form select[name], form textarea[name]')) {
    if (e.type === 'hidden' || e.type === 'submit' || e.type === 'button') continue;
    if (e.type === 'checkbox') out[e.name] = e.checked ? 'on' : 'off';
    else if (e.type === 'radio') { if (e.checked) out[e.name] = e.value; }
    else out[e.name] = e.value;
  }
  return out;
}"""
"""The page's form field values by name (what ``progress_typed`` counts)."""
_FRAMES_JS = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
_IDLE_JS = "() => !document.querySelector('[aria-busy=\"true\"]')"


class BrowserHost:
    """One Chromium for the process; opens an episode in a fresh context."""

    def __init__(self, settings: BrowserRunnerSettings) -> None:
        self.settings = settings
        self.bus: Bus | None = None
        self._pw: Any = None
        self._browser: Any = None
        self._lock = asyncio.Lock()
        self.launches = 0
        self.log = get_logger()

    def attach(self, bus: Bus) -> None:
        """The runner's bus: for the sites service and the evidence store."""
        self.bus = bus

    async def browser(self) -> Any:
        """The running browser, (re)launched when there is none or it died."""
        async with self._lock:
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            if self._pw is None:
                from playwright.async_api import async_playwright

                self._pw = await async_playwright().start()
            self._browser = await self._pw.chromium.launch(
                executable_path=self.settings.chromium,
                headless=self.settings.headless,
                args=list(CHROMIUM_ARGS),
            )
            self.launches += 1
            if self.launches > 1:
                self.log.warning("browser_relaunched", launches=self.launches)
            return self._browser

    async def solve(self, task: BrowserTask) -> list[str]:
        """The oracle's path for ``task`` (steps by element names, :mod:`.miniwob`'s grammar):
        a site task's ``solution`` as generated; a MiniWoB++ task's computed in a fresh page of
        this browser showing the task's instance (:func:`.miniwob.solve`). Raises
        ``UnknownTaskError`` for a MiniWoB++ task without an oracle."""
        if task.kind != "miniwob":
            return list(task.solution)
        from . import miniwob

        context = await self._new_context()
        try:
            page = await context.new_page()
            await miniwob.start(page, task.flow, task.seed)
            return await miniwob.solve(page, task.flow)
        finally:
            await context.close()

    def task_info(self, task: BrowserTask) -> dict[str, str]:
        return {
            "kind": task.kind,
            "flow": task.flow,
            "template": task.template,
            "split": task.split,
            "task_statement": task.statement,
        }

    async def _new_context(self) -> Any:
        """A fresh context of the running browser: the viewport and options every page of an
        episode (or of the oracle's solving) is seen through."""
        from . import miniwob

        browser = await self.browser()
        context = await browser.new_context(
            viewport={"width": 1024, "height": 768}, **miniwob.CONTEXT_OPTIONS
        )
        context.set_default_timeout(self.settings.action_timeout_s * 1000)
        # Opening an episode's page is not an action: a short action timeout (one second in the
        # tests, where a click under a banner should fail fast) must not fail a page load on a
        # busy machine, so navigations wait as long as a page may take to settle.
        context.set_default_navigation_timeout(
            max(self.settings.action_timeout_s, self.settings.settle_timeout_s) * 1000
        )
        return context

    async def open(self, task: BrowserTask, *, seed: int, max_steps: int) -> BrowserEnv:
        context = await self._new_context()
        env = BrowserEnv(self, task, context, seed=seed, max_steps=max_steps)
        try:
            await env.start()
        except BaseException:
            await env.close()
            raise
        return env

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            if self._browser is not None:
                await self._browser.close()
        with contextlib.suppress(Exception):
            if self._pw is not None:
                await self._pw.stop()
        self._browser = self._pw = None


class BrowserEnv:
    """One episode in its own browser context."""

    def __init__(
        self, host: BrowserHost, task: BrowserTask, context: Any, *, seed: int, max_steps: int
    ) -> None:
        self.host = host
        self.settings = host.settings
        self.task = task
        self.context = context
        self.page: Any = None
        self.seed = seed
        self.max_steps = min(max_steps, task.max_steps or max_steps)
        self.session = ""
        self.prefix = ""
        self.statement = task.statement
        self.steps = 0
        self.invalid_in_a_row = 0
        self._done = False
        self._elements: list[Element] = []
        self._observation = ""
        self._candidates: list[str] = []
        self._result: EnvResult | None = None
        self.events: list[str] = []
        self.progress = 0.0
        """The last step's progress (site flows, ``progress`` on): the change of the
        session's potential; 0 for MiniWoB++ tasks."""
        self._potential = 0.0
        self.no_effect_steps = 0
        """Wasted steps: after which the page read as it already had in this episode (each
        cost ``no_effect_cost``)."""
        self._seen: set[str] = set()
        """Digests of the observations of this episode so far."""
        self._digest = ""
        """The digest of the current observation."""

    # -- lifecycle ----------------------------------------------------------------------------------
    async def start(self) -> None:
        self.page = await self.context.new_page()
        if self.task.kind == "miniwob":
            from . import miniwob

            self.statement = await miniwob.start(self.page, self.task.flow, self.task.seed)
        else:
            session = await self._sites(
                "open", SiteOpen(episode_id=f"{self.task.task_id}-{self.seed}", task=self.task)
            )
            assert isinstance(session, SiteSession)
            self.session = session.session
            self.prefix = f"/e/{session.session}"
            await self.page.goto(session.url, wait_until="load")
            if self.settings.progress:
                res = await self._sites("result", await self._result_request())
                self._potential = res.potential
        await self._observe()

    async def close(self) -> None:
        # Bounded: closing a context of a browser that died can wait for ever.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.settings.action_timeout_s):
                await self.context.close()
        if self.session:
            with contextlib.suppress(Exception):
                await self._sites("close", SiteClose(session=self.session))

    # -- the protocol -------------------------------------------------------------------------------
    @property
    def observation(self) -> str:
        return self._observation

    @property
    def candidates(self) -> list[str]:
        return [] if self._done else self._candidates

    @property
    def done(self) -> bool:
        return self._done

    async def step(self, action: str) -> None:
        if self._done:
            return
        self.steps += 1
        self.progress = 0.0
        self._seen.add(self._digest)
        try:
            await self._act(parse(action))
            self.invalid_in_a_row = 0
        except InvalidAction as exc:
            self.invalid_in_a_row += 1
            self.events.append(f"invalid: {exc}"[:200])
        await self._settle()
        await self._observe()
        finished = await self._judge()
        if self._digest in self._seen:
            self.no_effect_steps += 1
            if self.settings.progress:
                self.progress -= self.settings.no_effect_cost
        if (
            finished is not None
            or self.steps >= self.max_steps
            or self.invalid_in_a_row >= self.settings.max_invalid
        ):
            await self._finish(finished)

    def result(self) -> EnvResult:
        assert self._result is not None, "result() before the episode ended"
        return self._result

    # -- acting -------------------------------------------------------------------------------------
    def _locator(self, n: int | None) -> Any:
        if n is None or not any(e.id == n for e in self._elements):
            raise InvalidAction(f"no element [{n}] on the page")
        return self.page.locator(f"[{AID}='{n}']").first

    async def _act(self, a: Any) -> None:
        """Do ``a``: an element's number becomes its name (the observation's), and the name is
        resolved again in the page by the same rules (:func:`.miniwob.act`, which also knows
        multi-selects, sliders and inner scroll boxes). A failed action is invalid; a browser
        that died raises."""
        from . import miniwob

        if a.verb == "back":
            from playwright.async_api import Error as PlaywrightError

            timeout = self.settings.action_timeout_s * 1000
            try:
                await self.page.go_back(timeout=timeout)
                if self.prefix and self.prefix not in self.page.url:
                    await self.page.go_forward(timeout=timeout)  # stay on the site
                    raise InvalidAction("go back would leave the site")
            except PlaywrightError as exc:
                if self.page.is_closed():
                    raise
                raise InvalidAction(f"go back failed: {str(exc).splitlines()[0][:160]}") from exc
            return
        if a.verb == "scroll":
            step = f"scroll {a.text}"
        elif a.verb == "press":
            step = "press Enter"
        else:
            named = [e for e in self._elements if e.id == a.element]
            if not named:
                raise InvalidAction(f"no element [{a.element}] on the page")
            args = [named[0].name, *([a.text] if a.verb in ("fill", "select") else [])]
            step = miniwob.format_step(a.verb, *args)
        try:
            limit = int(self.settings.action_timeout_s * 1000)
            await miniwob.act(self.page, step, timeout_ms=limit, action_timeout_ms=limit)
        except miniwob.ActionError as exc:
            raise InvalidAction(str(exc)[:200]) from exc

    async def _settle(self) -> None:
        """Let a site page finish what the action started (a navigation, pending requests);
        MiniWoB pages are settled by the action itself."""
        if self.task.kind == "miniwob":
            return
        timeout = self.settings.settle_timeout_s * 1000
        with contextlib.suppress(Exception):
            await self.page.wait_for_load_state("load", timeout=timeout)
            # A scroll may start loading a chunk of a lazy list: two frames for the scroll
            # event to fire, then until no list is busy.
            await self.page.evaluate(_FRAMES_JS)
            await self.page.wait_for_function(_IDLE_JS, timeout=timeout)

    async def _observe(self) -> None:
        exclude = []
        if self.task.kind == "miniwob":
            from . import miniwob

            exclude = list(miniwob.EXCLUDE)
        raw = await self.page.evaluate(OBSERVE_JS, {"exclude": exclude})
        self._elements = [Element.from_json(e) for e in raw["elements"]]
        url = str(raw["url"])
        if self.prefix and url.startswith(self.prefix):
            url = url[len(self.prefix) :] or "/"
        if self.task.kind == "miniwob":
            url = f"miniwob/{self.task.flow}"
        self._observation = observation(self.statement, url, self._elements)
        self._digest = _digest(self._observation)
        offered = candidates(self.statement, self._elements)
        if self.task.kind == "miniwob":  # a task is one page: going back leaves it
            offered = [c for c in offered if c != "go back"]
        self._candidates = offered

    # -- judging ------------------------------------------------------------------------------------
    async def _result_request(self) -> SiteResultRequest:
        """The session's result request, with the page's unsent field values when progress
        counts them (``progress_typed``; best effort: a page that cannot be read sends none)."""
        typed = None
        if self.settings.progress and self.settings.progress_typed:
            try:
                raw = await self.page.evaluate(_TYPED_JS)
                typed = {str(k)[:100]: str(v)[:200] for k, v in dict(raw).items()}
            except Exception as exc:  # a page mid-navigation: potential from sent values
                self.host.log.debug("typed_values_not_read", error=repr(exc)[:200])
        return SiteResultRequest(session=self.session, typed=typed)

    async def _judge(self) -> tuple[str, float, dict[str, str]] | None:
        """(outcome, reward, info) once the task says it is done, else ``None``."""
        if self.task.kind == "miniwob":
            from . import miniwob

            try:
                done, _, raw = await miniwob.reward(self.page)
            except Exception as exc:  # the page left the task (a link, the back button)
                if self.page.is_closed() or not self.host._browser.is_connected():
                    raise
                return ("failure", 0.0, {"error": f"left the task page: {str(exc)[:120]}"})
            if not done:
                return None
            # The task's raw reward: 1 solved, -1 failed, in between partial credit (e.g.
            # click-checkboxes' (right - wrong) / boxes); no time penalty (a slow CPU is not a
            # worse policy).
            outcome = "success" if raw >= 1 else "partial" if raw > 0 else "failure"
            return (outcome, max(0.0, min(1.0, raw)), {"raw_reward": str(raw)})
        res = await self._sites("result", await self._result_request())
        assert isinstance(res, SiteResult)
        self.events = [*self.events[-20:], *res.events[-20:]]
        if self.settings.progress:
            self.progress = res.potential - self._potential
            self._potential = res.potential
        if not res.done:
            return None
        return (res.outcome, res.reward, dict(res.info))

    async def _finish(self, finished: tuple[str, float, dict[str, str]] | None) -> None:
        if finished is None:  # out of steps or of valid actions: judged as it stands
            if self.task.kind == "miniwob":
                from . import miniwob

                try:
                    _, _, raw = await miniwob.reward(self.page)
                except Exception:
                    raw = 0.0
                finished = ("failure", 0.0, {"raw_reward": str(raw)})
            else:
                res = await self._sites("result", SiteResultRequest(session=self.session))
                assert isinstance(res, SiteResult)
                outcome = res.outcome if res.outcome != "success" else "partial"
                finished = (outcome, res.reward, dict(res.info))
        outcome, reward, info = finished
        info = {**info, "steps": str(self.steps), "final_url": _short(self._observation)}
        if self.task.kind == "site" and self.settings.progress:
            # How far along its flow the session got (the reward once done): partial credit
            # a failed flow's reward of 0 does not show.
            info["potential"] = f"{self._potential:.4f}"
        evidence = []
        if outcome != "success" and self.settings.screenshots:
            try:
                evidence.append(await self._screenshot())
            except Exception as exc:  # evidence is best effort: the episode stands without it
                self.host.log.warning("screenshot_not_kept", error=repr(exc)[:300])
        self._done = True
        self._result = EnvResult(
            outcome=outcome,  # type: ignore[arg-type]
            reward=max(0.0, min(1.0, float(reward))),
            info=info,
            evidence=evidence,
        )

    async def _screenshot(self) -> EvidenceRef:
        data = await self.page.screenshot(full_page=False, type="png")
        bus = self.host.bus
        if bus is None:
            raise RuntimeError("no bus to keep the screenshot in")
        name = f"browser/{self.task.task_id}/{hashlib.sha256(data).hexdigest()[:16]}.png"
        bucket = bus.names.bucket(OBJECTS_EVIDENCE)
        await bus.put_object(bucket, name, data)
        return EvidenceRef(kind="screenshot", bucket=bucket, name=name, size_bytes=len(data))

    async def _sites(self, verb: str, msg: Any) -> Any:
        bus = self.host.bus
        if bus is None:
            raise RuntimeError("the browser environment needs the bus to reach the sites service")
        reply = {"open": SiteSession, "result": SiteResult, "close": SiteResult}[verb]
        return await bus.request(
            bus.names.sites(verb),  # type: ignore[arg-type]
            msg,
            reply,
            timeout=self.settings.sites_timeout_s,
        )


def _digest(obs: str) -> str:
    return hashlib.blake2b(obs.encode(), digest_size=16).hexdigest()


def _short(obs: str) -> str:
    m = re.search(r"^URL: (.*)$", obs, re.M)
    return m.group(1)[:200] if m else ""


SPEC = EnvSpec(
    name="browser",
    tasks=BROWSER_TASKS,
    host=BrowserHost,
    settings=BrowserRunnerSettings,
    description="Runs browser episodes in real Chromium: web flows on the sites service and "
    "MiniWoB++ tasks.",
)
