"""Episodes driven from outside: the shell runner on a real nats-server and the real sandbox opens
an episode for an agent, takes its actions as text and judges it as it judges its own episodes;
a split's task is drawn by seed; an episode past its step limit is blocked; what cannot be
served is refused with the reason."""

from __future__ import annotations

import pytest

from aios_rl.bus import Bus, RemoteError
from aios_rl.envs import registry
from aios_rl.envs.shell.adapter import ShellRunnerSettings
from aios_rl.envs.shell.episode import SUBMIT
from aios_rl.envs.shell.generate import generate
from aios_rl.envs.shell.store import ShellTaskStore as TaskStore
from aios_rl.envs.shell.verify import RunCache, default_cache_dir
from contracts import EnvClose, EnvOpen, EnvState, EnvStep, Names
from services.runner.main import build as build_runner

from .support import running

pytestmark = pytest.mark.timeout(180)


async def test_an_agent_drives_a_shell_episode_from_outside(bus: Bus, names: Names) -> None:
    tasks = generate(3, 11, "train", cache=RunCache(default_cache_dir()))
    await TaskStore(bus).put_all(tasks)
    settings = ShellRunnerSettings(
        nats_url="", namespace=names.namespace, max_sessions=2, max_steps=6
    )
    svc, runner = build_runner(bus, registry.get("shell"), settings)

    async def ask(subject: str, msg: object) -> EnvState:
        return await bus.request(subject, msg, EnvState, timeout=60)  # type: ignore[arg-type]

    task = tasks[0]
    fix = next(e.label for e in task.candidate_edits if e.is_fix)
    async with running(svc):
        first = await ask(
            names.env_open("shell"),
            EnvOpen(environment="shell", episode_id="ep-1", task_id=task.task_id, agent="coder"),
        )
        assert (first.task_id, first.steps, first.done, first.max_steps) == (
            task.task_id,
            0,
            False,
            6,
        )
        assert fix in first.candidates and first.observation and first.task_info
        step = names.env_step("shell", first.instance)
        close = names.env_close("shell", first.instance)
        fixed = await ask(step, EnvStep(session=first.session, action=fix))
        assert fixed.steps == 1 and not fixed.done and fixed.progress > 0  # the tests moved
        done = await ask(step, EnvStep(session=first.session, action=SUBMIT))
        assert (done.done, done.outcome, done.reward) == (True, "success", 1.0)
        assert done.candidates == [] and done.info
        with pytest.raises(RemoteError, match="the episode is over") as over:
            await ask(step, EnvStep(session=first.session, action=SUBMIT))
        assert over.value.code == "422"
        last = await ask(close, EnvClose(session=first.session))
        assert (last.outcome, last.reward) == ("success", 1.0)
        with pytest.raises(RemoteError, match="no open episode") as gone:
            await ask(step, EnvStep(session=first.session, action=SUBMIT))
        assert gone.value.code == "404"

        # A split's task drawn by seed: the same seed, the same task.
        drawn = [
            await ask(
                names.env_open("shell"),
                EnvOpen(environment="shell", episode_id=f"ep-s{i}", split="train", seed=4),
            )
            for i in range(2)
        ]
        assert drawn[0].task_id == drawn[1].task_id
        assert drawn[0].task_id in {t.task_id for t in tasks}
        # Both slots held: a third is refused until one closes.
        with pytest.raises(RemoteError) as full:
            await ask(
                names.env_open("shell"), EnvOpen(environment="shell", episode_id="x", split="train")
            )
        assert full.value.code == "503"
        # At the step limit the environment judges the episode as it stands (shell: failure).
        s = drawn[0]
        state = s
        while not state.done:
            state = await ask(step, EnvStep(session=s.session, action="show the failing test"))
        assert (state.outcome, state.steps, state.reward) == ("failure", 6, 0.0)
        for d in drawn:
            await ask(close, EnvClose(session=d.session))
        for bad, says in (
            (EnvOpen(environment="shell", episode_id="b1"), "give a task_id"),
            (EnvOpen(environment="shell", episode_id="b2", split="nope"), "no shell task in split"),
            (EnvOpen(environment="shell", episode_id="b3", task_id="0" * 64), "no task"),
        ):
            with pytest.raises(RemoteError, match=says) as refused:
                await ask(names.env_open("shell"), bad)
            assert refused.value.code == "422"
        stats = runner.stats()
    assert stats["sessions_open"] == 0 and stats["sessions_opened"] == 3


def test_the_sessions_table_closes_idle_episodes_and_keeps_its_bound() -> None:
    from services.runner.sessions import Session, Sessions

    table = Sessions(max_open=2, idle_s=10)
    for i, last in enumerate((0.0, 5.0)):
        table.add(Session(id=f"s{i}", env=None, request=EnvOpen(environment="shell", episode_id="e"),  # type: ignore[arg-type]
                          task_id="t", max_steps=3, last=last))  # fmt: skip
    assert not table.has_room() and len(table) == 2
    assert [s.id for s in table.idle(12.0)] == ["s0"] and table.has_room()
    assert table.get("s1") is not None and table.expired == 1
    assert [s.id for s in table.idle(float("inf"))] == ["s1"] and len(table) == 0


def test_runner_settings_refuse_a_bad_session_bound() -> None:
    with pytest.raises(ValueError, match="max_sessions"):
        ShellRunnerSettings(nats_url="", max_sessions=-1)


class Endless:
    """An environment that never ends by itself (a toy of the protocol)."""

    def __init__(self) -> None:
        self.observation, self.candidates, self.done, self.closed = "start", ["go"], False, False

    async def step(self, action: str) -> None:
        if action == "crash":
            raise ValueError("embedded null byte")
        self.observation = f"after {action}"

    def result(self) -> object:
        raise AssertionError("never done")

    async def close(self) -> None:
        self.closed = True


class EndlessHost:
    def __init__(self) -> None:
        self.envs: list[Endless] = []

    async def open(self, task: object, *, seed: int, max_steps: int) -> Endless:
        self.envs.append(Endless())
        return self.envs[-1]

    def task_info(self, task: object) -> dict[str, str]:
        return {"kind": "toy"}

    async def aclose(self) -> None:
        pass


async def test_an_episode_that_does_not_end_by_its_limit_is_blocked_and_idle_ones_close() -> None:
    from services.runner.sessions import SessionHandlers, Sessions

    now = [0.0]

    async def task_of(task_id: str) -> object:
        return task_id

    async def no_ids(split: str) -> list[str]:
        return []

    host = EndlessHost()
    h = SessionHandlers(
        host, task_of, no_ids, max_steps=3, sessions=Sessions(max_open=4, idle_s=60),  # type: ignore[arg-type]
        clock=lambda: now[0],
    )  # fmt: skip
    s = await h.open(EnvOpen(environment="shell", episode_id="e", task_id="t", max_steps=9))
    assert s.max_steps == 3  # capped by the runner's
    states = [await h.step(EnvStep(session=s.session, action="go")) for _ in range(3)]
    assert [x.done for x in states] == [False, False, True]
    held = h.sessions.get(s.session)
    assert held is not None and [m.action for m in held.moves] == ["go"] * 3
    assert (states[-1].outcome, states[-1].reward) == ("blocked", 0.0)
    assert "no end within 3 steps" in states[-1].info["reason"]
    # An environment that raises on a step: the episode ends blocked with the error (as in the
    # runner's own loop), the agent told so, not a failed request.
    crashed = await h.open(EnvOpen(environment="shell", episode_id="c", task_id="t"))
    after = await h.step(EnvStep(session=crashed.session, action="crash"))
    assert (after.done, after.outcome) == (True, "blocked")
    assert after.info["error"] == "environment: ValueError: embedded null byte"
    idle = await h.open(EnvOpen(environment="shell", episode_id="f", task_id="t"))
    now[0] = 100.0
    for old in h.sessions.idle(now[0]):
        await old.env.close()
    assert h.sessions.get(idle.session) is None and host.envs[2].closed


async def test_an_agent_drives_an_episode_over_http_through_the_gateway(
    bus: Bus, names: Names
) -> None:
    import httpx

    from aios_rl.agents.tokens import Tokens, new_token
    from services.agent_gateway.main import build as build_gateway
    from services.agent_gateway.settings import AgentGatewaySettings

    tasks = generate(3, 11, "train", cache=RunCache(default_cache_dir()))
    await TaskStore(bus).put_all(tasks)
    runner, _ = build_runner(
        bus,
        registry.get("shell"),
        ShellRunnerSettings(nats_url="", namespace=names.namespace, max_sessions=2),
    )
    (coder, coder_d), (other, other_d) = new_token(), new_token()
    gateway, gw = build_gateway(
        bus,
        AgentGatewaySettings(namespace=names.namespace, port=0),
        Tokens({"coder": coder_d, "other": other_d}),
    )
    task = tasks[1]
    fix = next(e.label for e in task.candidate_edits if e.is_fix)
    mine = {"Authorization": f"Bearer {coder}"}
    async with running(runner), running(gateway):
        await gw.listening.wait()
        async with httpx.AsyncClient(base_url=f"{gw.base_url}/v1", timeout=60) as http:
            opened = await http.post(
                "/environments/shell/episodes",
                json={"task_id": task.task_id, "episode_id": "ep-http"},
                headers=mine,
            )
            assert opened.status_code == 200, opened.text
            doc = opened.json()
            assert doc["episode_id"] == "ep-http" and fix in doc["candidates"]
            for action in (fix, SUBMIT):
                stepped = await http.post(
                    "/episodes/ep-http/step", json={"action": action}, headers=mine
                )
                assert stepped.status_code == 200, stepped.text
            end = stepped.json()
            assert (end["done"], end["outcome"], end["reward"]) == (True, "success", 1.0)
            assert (await http.get("/episodes/ep-http", headers=mine)).json() == end
            # Not another agent's, not without a token, not an episode nobody opened.
            theirs = {"Authorization": f"Bearer {other}"}
            assert (await http.get("/episodes/ep-http", headers=theirs)).status_code == 403
            step = await http.post(
                "/episodes/ep-http/step", json={"action": SUBMIT}, headers=theirs
            )
            assert step.status_code == 403 and "another agent" in step.json()["error"]["message"]
            assert (await http.get("/episodes/ep-http")).status_code == 401
            assert (await http.get("/episodes/nobody", headers=mine)).status_code == 404
            # What cannot be served says why.
            for path, body, status, says in (
                ("/environments/Bad!/episodes", {"split": "train"}, 400, "environment"),
                (
                    "/environments/orchestrator/episodes",
                    {"split": "train"},
                    404,
                    "no runner serves",
                ),
                ("/environments/shell/episodes", {"seed": "x"}, 400, "seed"),
                ("/environments/shell/episodes", {"split": "nope"}, 400, "no shell task in split"),
            ):
                r = await http.post(path, json=body, headers=mine)
                assert r.status_code == status and says in r.json()["error"]["message"], r.text
            bad = await http.post("/episodes/ep-http/step", json={"act": 1}, headers=mine)
            assert bad.status_code == 400 and "action" in bad.json()["error"]["message"]
            closed = await http.delete("/episodes/ep-http", headers=mine)
            assert closed.status_code == 200 and closed.json()["outcome"] == "success"
            drawn = await http.post(
                "/environments/shell/episodes", json={"split": "train", "seed": 2}, headers=mine
            )
            assert drawn.status_code == 200 and len(drawn.json()["episode_id"]) == 32
