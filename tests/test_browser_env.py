"""The browser environment through the Environment protocol, in real Chromium: MiniWoB++ tasks
solved by the scripted oracle through the numbered observation and the candidate actions, a
random policy far below it, and a replayed prefix giving the same page."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import msgspec
import pytest
import pytest_asyncio

from aios_rl.bus import Bus, connect, provision
from aios_rl.envs.browser import miniwob
from aios_rl.envs.browser.actions import InvalidAction, as_candidate, resolve_names
from aios_rl.envs.browser.adapter import BrowserEnv, BrowserHost, BrowserRunnerSettings
from aios_rl.envs.browser.flows import Record, generate, potential
from aios_rl.stack.natsd import NatsServer
from aios_rl.state import Objects
from contracts import BROWSER_FLOWS, BrowserTask, Names, StepDigest, TeacherRequest, topology
from services.sites.main import build as build_sites
from services.sites.settings import SitesSettings

from .support import running

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


def task(name: str, seed: int) -> BrowserTask:
    return BrowserTask(task_id=f"{name}-{seed}", kind="miniwob", flow=name, seed=seed)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def host() -> AsyncIterator[BrowserHost]:
    h = BrowserHost(BrowserRunnerSettings(nats_url="", screenshots=False))
    try:
        yield h
    finally:
        await h.aclose()


async def oracle_episode(host: BrowserHost, name: str, seed: int) -> tuple[BrowserEnv, list[str]]:
    """Run the scripted oracle's path through the environment; returns it and the actions."""
    env = await host.open(task(name, seed), seed=seed, max_steps=30)
    path = await miniwob.solve(env.page, name)
    taken: list[str] = []
    for step in path:
        if env.done:
            break
        from aios_rl.envs.browser.actions import Element  # noqa: F401 - the elements it reads

        action = resolve_names(step, env._elements)
        chosen = as_candidate(action, env.candidates) or action
        taken.append(chosen)
        await env.step(chosen)
    return env, taken


async def test_the_oracle_solves_miniwob_tasks_through_the_environment(host: BrowserHost) -> None:
    results: dict[str, list[str]] = {}
    for name in miniwob.MINIWOB_TASKS:
        for seed in (0, 1):
            env, _ = await oracle_episode(host, name, seed)
            try:
                results.setdefault(name, []).append(env.result().outcome if env.done else "open")
            finally:
                await env.close()
    solved = sum(o == "success" for runs in results.values() for o in runs)
    total = sum(len(r) for r in results.values())
    assert solved >= 0.95 * total, {n: r for n, r in results.items() if r != ["success"] * 2}


async def test_a_random_policy_is_far_below_the_oracle(host: BrowserHost) -> None:
    rng = random.Random(0)
    wins = 0
    runs = 0
    for name in miniwob.MINIWOB_TASKS:
        env = await host.open(task(name, 3), seed=3, max_steps=6)
        try:
            while not env.done:
                await env.step(rng.choice(env.candidates))
            wins += env.result().outcome == "success"
            runs += 1
        finally:
            await env.close()
    # Far below the oracle's 95 %+: easy one-click tasks (click-button among a few buttons)
    # are won by chance now and then, multi-step ones never.
    assert wins <= runs // 2, wins


async def test_a_replayed_prefix_gives_the_same_page(host: BrowserHost) -> None:
    for name in ("login-user", "use-autocomplete", "book-flight"):
        parent, taken = await oracle_episode(host, name, 5)
        await parent.close()
        k = max(1, len(taken) - 1)
        first = await host.open(task(name, 5), seed=5, max_steps=30)
        second = await host.open(task(name, 5), seed=5, max_steps=30)
        try:
            seen: list[tuple[str, str]] = []
            for action in taken[:k]:
                seen.append((first.observation, second.observation))
                await first.step(action)
                await second.step(action)
            seen.append((first.observation, second.observation))
            for a, b in seen:
                assert a == b, name
            assert first.candidates == second.candidates
        finally:
            await first.close()
            await second.close()


async def test_a_miniwob_task_is_one_page_whatever_the_jobs_seed(host: BrowserHost) -> None:
    """The task's seed is the instance: a group's rollouts (jobs of other seeds) see one page."""
    envs = [
        await host.open(task("click-button", 4), seed=11, max_steps=5),
        await host.open(task("click-button", 4), seed=12, max_steps=5),
        await host.open(task("enter-text", 4), seed=11, max_steps=5),
        await host.open(task("enter-text", 9), seed=11, max_steps=5),
    ]
    try:
        button, again, text, other = envs
        assert button.observation == again.observation and button.candidates == again.candidates
        assert text.statement != other.statement  # another seed, another instance
    finally:
        for env in envs:
            await env.close()


async def test_the_oracle_judges_a_miniwob_episode_by_the_path_the_host_computed(
    host: BrowserHost,
) -> None:
    """A MiniWoB++ task's answer key comes from Chromium (``BrowserHost.solve``): with it the
    oracle teacher names the path's step where an episode left it; without it, it says nothing."""
    from services.teacher_oracle.logic import judge_browser

    bare = task("enter-password", 2)
    path = await host.solve(bare)
    assert path and all(step.split(" ", 1)[0] in ("click", "fill") for step in path), path
    solved = msgspec.structs.replace(bare, solution=path)
    env = await host.open(solved, seed=0, max_steps=4)
    try:
        expected = as_candidate(resolve_names(path[0], env._elements), env.candidates)
        assert expected is not None, (path[0], env.candidates)
        wrong = next(c for c in env.candidates if c != expected)
        obs, offered = env.observation, env.candidates
        await env.step(wrong)
    finally:
        await env.close()
    req = TeacherRequest(
        request_id="r",
        episode_id="e",
        environment="browser",
        task_id=solved.task_id,
        task_statement=env.statement,
        steps=[StepDigest(index=0, observation=obs, action=wrong, candidates=offered)],
        outcome="failure",
    )
    signal = judge_browser(req, solved)
    assert [h.better_action for h in signal.hints] == [expected]
    assert signal.verdict == "incorrect"
    assert judge_browser(req, bare).verdict == "unsure"  # no path: not judged


async def test_a_step_back_to_a_page_already_seen_costs_progress(host: BrowserHost) -> None:
    env = await host.open(task("login-user", 0), seed=0, max_steps=10)
    try:
        fills = [c for c in env.candidates if c.startswith("fill [1] ")]
        assert len(fills) == 2, env.candidates  # the username and the password, in one field
        first, other = fills
        await env.step(first)
        assert env.progress == 0.0 and env.no_effect_steps == 0  # a new page
        assert first not in env.candidates  # the field holds it: not offered again
        await env.step(other)
        assert env.progress == 0.0
        await env.step(first)  # back to the page after the first step: a loop
        assert env.progress == -host.settings.no_effect_cost
        assert env.no_effect_steps == 1 and not env.done
    finally:
        await env.close()


async def test_an_action_outside_the_language_is_invalid_and_ends_the_episode(
    host: BrowserHost,
) -> None:
    env = await host.open(task("click-button", 0), seed=0, max_steps=10)
    try:
        for _ in range(host.settings.max_invalid):
            await env.step("rm -rf /")
            # The page reads the same after it: a wasted step costs progress.
            assert env.progress == -host.settings.no_effect_cost
        assert env.done and env.result().outcome == "failure"
        assert env.no_effect_steps == host.settings.max_invalid
        with pytest.raises(InvalidAction):
            resolve_names('click "no such button"', env._elements)
    finally:
        await env.close()


# -- the local sites ---------------------------------------------------------------------------


@dataclass
class Sites:
    bus: Bus
    host: BrowserHost  # a 1 s action timeout, for random policies
    patient: BrowserHost  # the runner's own action timeout, for the oracle's flows


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sites(nats_server: NatsServer) -> AsyncIterator[Sites]:
    """The sites service on a free port and a browser host attached to the same bus."""
    names = Names(f"t{uuid.uuid4().hex[:10]}")
    async with connect(nats_server.url, name="test-browser-env", names=names) as bus:
        await provision(bus, topology(names))  # the evidence store the screenshots go to
        svc, _ = build_sites(bus, SitesSettings(port=0))
        # A short action timeout: a random click under a cookie banner waits for it.
        h = BrowserHost(BrowserRunnerSettings(nats_url="", screenshots=True, action_timeout_s=1))
        h.attach(bus)
        # The runner's own action timeout: the oracle never clicks under a banner, and a click
        # that loads the next page may take longer than 1 s on a loaded machine.
        patient = BrowserHost(BrowserRunnerSettings(nats_url="", screenshots=False))
        patient.attach(bus)
        async with running(svc):
            try:
                yield Sites(bus, h, patient)
            finally:
                try:
                    await h.aclose()
                finally:
                    await patient.aclose()


async def site_oracle(
    host: BrowserHost, t: BrowserTask, steps: int | None = None, progress: list[float] | None = None
) -> tuple[BrowserEnv, list[str]]:
    """The task's solution played by element names (``progress`` gets each step's)."""
    env = await host.open(t, seed=t.seed, max_steps=t.max_steps)
    taken: list[str] = []
    for step in t.solution[:steps]:
        if env.done:
            break
        action = as_candidate(resolve_names(step, env._elements), env.candidates)
        assert action is not None, (step, env.observation)  # the oracle's action is offered
        taken.append(action)
        await env.step(action)
        if progress is not None:
            progress.append(env.progress)
    return env, taken


async def test_the_oracle_solves_every_flow_through_the_environment(sites: Sites) -> None:
    # One task of every (flow, template) the train and held-out generators produce: a template
    # the oracle cannot finish shows up; more tasks of a template repeat it with other values.
    pool = generate(25, 3, "train") + generate(25, 3, "heldout")
    tasks = list({(t.flow, t.template): t for t in reversed(pool)}.values())
    assert {t.flow for t in tasks} == set(BROWSER_FLOWS)
    assert len(tasks) >= 10
    outcomes: dict[str, str] = {}
    await _every_flow(sites.patient, tasks, outcomes)
    solved = sum(o == "success" for o in outcomes.values())
    assert solved >= 0.95 * len(tasks), {k: o for k, o in outcomes.items() if o != "success"}


async def _every_flow(host: BrowserHost, tasks: list, outcomes: dict[str, str]) -> None:  # type: ignore[type-arg]
    for t in tasks:
        progress: list[float] = []
        env, _ = await site_oracle(host, t, progress=progress)
        start = potential(t, Record())  # a fresh session's
        try:
            outcomes[f"{t.flow}/{t.template}/{t.task_id}"] = (
                env.result().outcome if env.done else "open"
            )
            # Step-level progress: the oracle never goes backwards, and its steps add up to
            # the flow's reward less where the session started.
            assert min(progress) >= 0 and sum(progress) > 0, (t.flow, t.template, progress)
            if env.done:
                assert sum(progress) == pytest.approx(env.result().reward - start), progress
        finally:
            await env.close()


async def test_progress_can_count_a_right_value_as_soon_as_it_is_typed(sites: Sites) -> None:
    # progress_typed: the runner sends the page's unsent field values with each result request,
    # so the oracle's fills earn progress before the form is sent; without it they earn none.
    t = next(t for t in generate(12, 5, "train") if t.flow in ("form", "auth"))
    typed_host = BrowserHost(
        BrowserRunnerSettings(nats_url="", screenshots=False, progress_typed=True)
    )
    typed_host.attach(sites.bus)
    try:
        runs = {}
        for name, host in (("sent", sites.patient), ("typed", typed_host)):
            progress: list[float] = []
            env, taken = await site_oracle(host, t, progress=progress)
            try:
                assert env.done and env.result().outcome == "success", (name, taken)
                fills = [p for a, p in zip(taken, progress, strict=True) if a.startswith("fill")]
                runs[name] = (fills, sum(progress))
            finally:
                await env.close()
        assert runs["typed"][0] and all(p > 0 for p in runs["typed"][0]), runs
        assert all(p <= 0 for p in runs["sent"][0]), runs
        # Either way the steps add up to the reward less where the session started.
        assert runs["typed"][1] == pytest.approx(runs["sent"][1])
    finally:
        await typed_host.aclose()


async def test_a_random_policy_fails_the_flows_and_leaves_a_screenshot(sites: Sites) -> None:
    rng = random.Random(1)
    tasks = generate(10, 4, "train")
    results = []
    for t in tasks:
        env = await sites.host.open(t, seed=t.seed, max_steps=8)
        progress = []
        try:
            while not env.done:
                await env.step(rng.choice(env.candidates))
                progress.append(env.progress)
            results.append(env.result())
            # Whatever the policy does, its steps' progress adds up to where it got, less the
            # cost of the steps that left the page as it was.
            cost = env.no_effect_steps * env.settings.no_effect_cost
            assert sum(progress) == pytest.approx(env._potential - potential(t, Record()) - cost)
            # The result says how far along the flow the session got (its partial credit).
            assert float(env.result().info["potential"]) == pytest.approx(env._potential, abs=1e-4)
        finally:
            await env.close()
    assert sum(r.outcome == "success" for r in results) <= 1
    failed = [r for r in results if r.outcome != "success"]
    assert failed and all(r.evidence and r.evidence[0].kind == "screenshot" for r in failed)
    ref = failed[0].evidence[0]
    png = await Objects(sites.bus, ref.bucket).get(ref.name)
    assert png is not None and png[:8] == b"\x89PNG\r\n\x1a\n"


async def test_a_replayed_prefix_reaches_the_parents_page_in_a_new_session(sites: Sites) -> None:
    for t in generate(5, 6, "train"):
        parent, taken = await site_oracle(sites.patient, t, steps=max(1, len(t.solution) - 1))
        observed = parent.observation
        await parent.close()
        child = await sites.patient.open(t, seed=t.seed, max_steps=t.max_steps)
        try:
            assert child.session != parent.session  # a fresh server-side session
            for action in taken:
                await child.step(action)
            assert child.observation == observed, t.flow
        finally:
            await child.close()


async def test_going_back_from_the_first_page_stays_on_the_site(sites: Sites) -> None:
    t = generate(1, 8, "train")[0]
    env = await sites.host.open(t, seed=t.seed, max_steps=t.max_steps)
    try:
        first = env.observation
        await env.step("go back")
        assert env.observation == first and not env.done
        assert any("would leave the site" in e for e in env.events)
    finally:
        await env.close()


async def test_a_page_slower_than_an_action_still_opens(sites: Sites) -> None:
    """A page load is not an action: with a one-second action timeout (the ``sites`` host's), a
    page that takes longer than that to answer still opens, as it must on a busy machine."""
    import http.server
    import threading

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            threading.Event().wait(1.6)  # answers after the action timeout has passed
            body = b"<html><body><p id='x'>late</p></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    assert sites.host.settings.action_timeout_s < 1.6
    context = await sites.host._new_context()
    try:
        page = await context.new_page()
        await page.goto(f"http://127.0.0.1:{server.server_address[1]}/", wait_until="load")
        assert await page.text_content("#x") == "late"
    finally:
        await context.close()
        server.shutdown()
        server.server_close()
