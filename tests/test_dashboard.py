"""The dashboard: its pure view (feed, latencies, campaign tables, lineage, Prometheus text) and
the service against a real nats-server, its page in real Chromium: epochs appear as they are
written without a reload, the lineage graph marks the three pointers, a click on an episode
shows its trajectory."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from aios_rl.bus import Bus, connect, provision
from aios_rl.stack.natsd import NatsServer
from aios_rl.state.checkpoints import CheckpointRegistry
from aios_rl.state.control import ControlStore
from aios_rl.state.ledger import Ledger
from contracts import (
    CheckpointMeta,
    CheckpointPointers,
    ComparisonResult,
    ControlSnapshot,
    EnvEpochStats,
    Episode,
    EpochRecord,
    HeldoutScore,
    Names,
    PointerMove,
    RailState,
    TeacherHint,
    TeacherSignal,
    TrajectoryStep,
)
from contracts.episode import Timings
from services.dashboard.handlers import DashboardState
from services.dashboard.logic import View, campaign_view, lineage, prometheus, stage_latencies
from services.dashboard.main import build
from services.dashboard.settings import DashboardSettings

from .support import eventually, running

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"


def episode(i: int, *, outcome: str = "success", env: str = "shell", t0: float = 100.0) -> Episode:
    return Episode(
        episode_id=f"ep-{i}",
        environment=env,  # type: ignore[arg-type]
        task_id=f"task-{i % 3}",
        campaign_id="c1",
        epoch=i // 4,
        outcome=outcome,  # type: ignore[arg-type]
        env_reward=1.0 if outcome == "success" else 0.0,
        reward=0.9 if outcome == "success" else -0.1,
        lane="positive" if outcome == "success" else "negative",
        comparison=ComparisonResult(verdict="better" if outcome == "success" else "worse"),
        trajectory=[
            TrajectoryStep(
                index=0,
                observation=f"statement of task {i}: 2 tests fail",
                candidates=["run the tests", "calc.py:2: fix", "submit"],
                action="calc.py:2: fix",
                action_index=1,
                logprob=-0.4,
                entropy=0.9,
            ),
            TrajectoryStep(
                index=1,
                observation="applied: calc.py:2: fix",
                candidates=["run the tests", "submit"],
                action="submit",
                action_index=1,
                logprob=-0.1,
                entropy=0.3,
            ),
        ],
        teacher_signal=TeacherSignal(
            backend="oracle",
            verdict="correct",
            score=1.0,
            hints=[TeacherHint(step=0, better_action="calc.py:2: fix", note="fixes the bug")],
            rationale="applied the fix",
        ),
        timings=Timings(
            started_at=t0,
            finished_at=t0 + 0.5,
            stages={
                "completed": t0 + 0.52,
                "taught": t0 + 0.6,
                "rewarded": t0 + 0.61,
                "compared": t0 + 0.7,
            },
        ),
    )


def record(epoch: int, *, verdict: str | None = "better", moves: int = 0) -> EpochRecord:
    return EpochRecord(
        campaign_id="c1",
        epoch=epoch,
        phase="done" if verdict else "collect",
        scheduled=16,
        received=16 if verdict else 3,
        verdict=verdict,  # type: ignore[arg-type]
        decision="promote" if verdict else None,
        per_env={
            "shell": EnvEpochStats(
                episodes=12,
                success=3 + epoch,
                reward_sum=2.0 + epoch,
                mean_reward=0.2,
                verdicts={"better": 5, "same": 4, "worse": 2, "comparison_failed": 1},
            ),
            "browser": EnvEpochStats(episodes=4, success=1, reward_sum=1.0, mean_reward=0.25),
        },
        pointer_moves=[
            PointerMove(pointer="active", old=f"k{epoch}", new=f"k{epoch + 1}")
            for _ in range(moves)
        ],
        timings={"collect": 1000.0 + epoch},
    )


# -- the pure view --------------------------------------------------------------------------------


def test_stage_latencies_follow_the_stamps_in_order() -> None:
    lat = stage_latencies(episode(0))
    assert lat == pytest.approx(
        {"run": 0.5, "completed": 0.02, "taught": 0.08, "rewarded": 0.01, "compared": 0.09}
    )
    late = msgspec.structs.replace(
        episode(0), timings=Timings(started_at=5, finished_at=4, stages={"taught": 3})
    )
    assert stage_latencies(late) == {}  # out-of-order stamps give nothing, never negatives


def test_the_feed_keeps_each_episode_once_newest_first_and_bounded() -> None:
    view = View(feed_size=3)
    for i in range(5):
        view.on_episode(episode(i, outcome="success" if i % 2 else "failure"))
    view.on_episode(episode(4))  # a redelivery
    assert [r["episode_id"] for r in view.feed_rows()] == ["ep-4", "ep-3", "ep-2"]
    assert sum(view.episodes_seen.values()) == 5
    assert [r["episode_id"] for r in view.feed_rows({"outcome": "success"})] == ["ep-3"]
    assert view.episode("ep-0") is None and view.episode("ep-3") is not None
    view.on_episode(episode(0))  # fell out of the feed: seen again, counted again
    assert view.episode("ep-0") is not None


def test_a_campaign_view_has_rates_lanes_and_curves_of_finished_epochs() -> None:
    c = campaign_view([record(1), record(0), record(2, verdict=None)])
    assert [e["epoch"] for e in c["epochs"]] == [0, 1, 2]
    e0 = c["epochs"][0]
    assert e0["success"] == pytest.approx(4 / 16)
    assert e0["mean_reward"] == pytest.approx(3.0 / 16)
    assert e0["per_env"]["shell"]["success"] == pytest.approx(3 / 12)
    assert e0["lanes"] == {"better": 5, "same": 4, "worse": 2, "failed": 1}
    assert c["curves"]["epoch"] == [0, 1]  # the unfinished epoch is not on the curve


def test_the_lineage_marks_each_pointer_and_links_parents() -> None:
    metas = {
        cid: CheckpointMeta(checkpoint_id=cid, parent_id=parent, seq=seq)
        for cid, parent, seq in (("a", None, 0), ("b", "a", 1), ("c", "b", 2), ("d", "b", 2))
    }
    g = lineage(CheckpointPointers(active="d", pre_update_ref="b", last_stable="a"), metas)
    marks = {n["id"]: n["markers"] for n in g["nodes"]}
    assert marks == {"a": ["last_stable"], "b": ["pre_update_ref"], "c": [], "d": ["active"]}
    assert g["edges"] == [("a", "b"), ("b", "c"), ("b", "d")]
    assert lineage(CheckpointPointers(active="zz"), metas)["unknown"] == ["zz"]


def test_the_metrics_parse_as_prometheus_text() -> None:
    view = View()
    for i in range(6):
        view.on_episode(episode(i, outcome="success" if i < 4 else "failure", t0=100.0 + i))
    view.on_epoch(record(0, moves=1))
    view.on_epoch(record(0, moves=1))  # the same record again: no new move
    view.on_dead_letters({'EPISODES"\\x': 2})
    view.on_lanes({"positive": {"shell": 4}})
    view.on_meta(CheckpointMeta(checkpoint_id="k1", metrics={"update_s": 1.5}))
    families = {f.name: f for f in text_string_to_metric_families(prometheus(view))}
    episodes = {
        (s.labels["environment"], s.labels["outcome"]): s.value
        for s in families["aios_episodes"].samples
    }
    assert episodes == {("shell", "success"): 4, ("shell", "failure"): 2}
    hist = families["aios_stage_latency_seconds"]
    counts = {s.labels["stage"]: s.value for s in hist.samples if s.name.endswith("_count")}
    assert counts["compared"] == 6
    assert [s.value for s in families["aios_pointer_moves"].samples] == [1]
    assert families["aios_dead_letters"].samples[0].labels["stream"] == 'EPISODES"\\x'
    assert families["aios_trainer_update_seconds"].samples[0].value == 1.5
    assert families["aios_replay_lane_messages"].samples[0].value == 4


# -- the service, its page in Chromium --------------------------------------------------------------


class Dash:
    def __init__(self, bus: Bus, url: str, state: DashboardState) -> None:
        self.bus = bus
        self.url = url
        self.state = state

    async def until(self, condition: Callable[[View], bool], timeout: float = 15.0) -> None:
        """Wait for the view to satisfy ``condition`` (each change wakes the check)."""
        async with asyncio.timeout(timeout):
            version = -1
            while not condition(self.state.view):
                version = await self.state.wait_change(version, timeout)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def dash(nats_server: NatsServer) -> AsyncIterator[Dash]:
    names = Names(f"t{uuid.uuid4().hex[:10]}")
    async with connect(nats_server.url, name="test-dashboard", names=names) as bus:
        await provision(bus)
        svc, state = build(bus, DashboardSettings(namespace=names.namespace, port=0, refresh_s=0.5))
        async with running(svc):
            await state.listening.wait()
            yield Dash(bus, state.base_url, state)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        b = await pw.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        yield b
        await b.close()


async def _shot(page: Any, name: str, tmp: Path) -> None:
    """A screenshot into the test's directory: it must be a real PNG (docs/ holds the real
    stack's, from tests/test_dashboard_stack.py)."""
    data = await page.screenshot(path=str(tmp / name), full_page=True)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


@pytest.mark.asyncio(loop_scope="module")
async def test_the_page_follows_the_bus_live_and_drills_down(
    dash: Dash, browser: Any, tmp_path: Path
) -> None:
    bus = dash.bus
    ledger, registry = Ledger(bus), CheckpointRegistry(bus)
    ids = []
    for k in range(3):
        meta = await registry.store(
            f"weights {k} {uuid.uuid4()}".encode(),
            parent_id=ids[-1] if ids else None,
            created_by="init" if k == 0 else f"update-{k}",
            algorithm="init" if k == 0 else "grpo",
            metrics={"update_s": 0.5 * k},
        )
        ids.append(meta.checkpoint_id)
    await registry.init(ids[0])
    await ledger.put(record(0))
    await ledger.put_heldout(
        HeldoutScore(campaign_id="c1", epoch=0, checkpoint_id=ids[0], tasks=10, successes=3)
    )

    page = await browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        await page.goto(dash.url)
        await page.locator('[data-testid="epoch-row"][data-epoch="0"]').wait_for(timeout=15_000)
        await page.evaluate("window.loadedOnce = true")
        # Epochs finish, pointers move, episodes are compared: the open page follows.
        await registry.advance(ids[1], "epoch 0 trained")
        await registry.advance(ids[2], "epoch 1 trained")
        await ledger.put(record(1, moves=1))
        for i in range(6):
            ep = episode(i, outcome="success" if i % 3 else "failure")
            await bus.publish_durable(
                bus.names.episode("compared", "shell"), ep, msg_id=f"{ep.episode_id}:compared"
            )
        await page.locator('[data-testid="epoch-row"][data-epoch="1"]').wait_for(timeout=15_000)
        held = page.locator('[data-testid="epoch-row"][data-epoch="0"]', has_text="30.0%")
        await held.wait_for(timeout=15_000)  # the held-out score of epoch 0's policy
        assert await page.evaluate("window.loadedOnce === true")  # no reload happened
        for cid, marker in zip(ids, ("last_stable", "pre_update_ref", "active"), strict=True):
            node = page.locator(f'[data-testid="checkpoint"][data-id="{cid}"]')
            await node.wait_for(timeout=15_000)
            assert marker in (await node.get_attribute("data-markers") or "").split()
        await ControlStore(bus).save(
            ControlSnapshot(
                key=Names.key_control("rail", "c1"),
                state=RailState(
                    mode="live", campaign_id="c1", traces_seen=42, sign_agreement=0.71,
                    mae_online=0.12, mae_frozen=0.2, eta=0.05,
                    actions={"branch": {"width-2": 5, "skip": 3}},
                ),
            ),
            0,
        )  # fmt: skip
        rail = page.locator('[data-testid="rail"]', has_text="0.710")
        await rail.wait_for(timeout=15_000)
        assert "live" in await rail.inner_text() and "width-2 5" in await rail.inner_text()
        row = page.locator('[data-testid="episode-row"][data-id="ep-4"]')
        await row.wait_for(timeout=15_000)
        await _shot(page, "dashboard.png", tmp_path)
        await row.click()
        detail = page.locator('[data-testid="episode-detail"]')
        await detail.locator('[data-testid="step"]').nth(1).wait_for(timeout=15_000)
        text = await detail.inner_text()
        assert "statement of task 4" in text and "teacher: better calc.py:2: fix" in text
        assert "applied the fix" in text
        await _shot(page, "dashboard-episode.png", tmp_path)
        # A filter reopens the stream: only failures are listed.
        await page.select_option('[data-testid="filter-outcome"]', "failure")
        await page.locator('[data-testid="episode-row"][data-id="ep-4"]').wait_for(
            state="detached", timeout=15_000
        )
        shown = await page.locator('[data-testid="episode-row"]').evaluate_all(
            "rows => rows.map(r => r.dataset.id)"
        )
        assert sorted(shown) == ["ep-0", "ep-3"]
    finally:
        await page.close()


@pytest.mark.asyncio(loop_scope="module")
async def test_the_metrics_endpoint_and_the_state_api(dash: Dash) -> None:
    def get(path: str) -> tuple[str, str]:
        with urllib.request.urlopen(dash.url + path, timeout=10) as r:
            return r.headers.get("Content-Type", ""), r.read().decode()

    await dash.until(lambda v: "dashboard" in {s.name for s in v.services})
    kind, text = await asyncio.to_thread(get, "/metrics")
    assert kind.startswith("text/plain") and "version=0.0.4" in kind
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"aios_episodes", "aios_stage_latency_seconds", "aios_consumer_lag"} <= names
    _, body = await asyncio.to_thread(get, "/api/state")
    state = json.loads(body)
    assert "dashboard" in {s["name"] for s in state["services"]}
    with pytest.raises(urllib.error.HTTPError) as err:
        await asyncio.to_thread(get, "/api/episode/no-such-episode")
    assert err.value.code == 404


# -- aios-rl report ---------------------------------------------------------------------------------


def test_the_report_writes_real_pngs_and_a_summary_that_embeds_them(tmp_path: Path) -> None:
    from PIL import Image

    from aios_rl.cli.plots import CAPTIONS, DPI, FIGURE_SIZE, write_report
    from contracts import HeldoutScore, RolloutAccount

    records = [
        msgspec.structs.replace(
            record(e, moves=1),
            rollouts=RolloutAccount(strategy="uniform", base=16, policy_calls=40 + e, references=4),
        )
        for e in range(3)
    ]
    heldout = [
        HeldoutScore(campaign_id="c1", epoch=e, checkpoint_id=f"k{e}", tasks=10, successes=e + 1)
        for e in range(4)
    ]
    written = write_report(tmp_path / "r", "c1", records, heldout)
    pngs = [p for p in written if p.suffix == ".png"]
    assert [p.stem for p in pngs] == list(CAPTIONS)
    want = (round(FIGURE_SIZE[0] * DPI), round(FIGURE_SIZE[1] * DPI))
    for p in pngs:
        with Image.open(p) as img:
            img.verify()
        with Image.open(p) as img:
            assert img.format == "PNG" and img.size == want
            # Not a blank canvas: a plot has many colours.
            assert len(img.convert("RGB").getcolors(maxcolors=1 << 20) or []) > 20
    md = (tmp_path / "r" / "README.md").read_text()
    assert all(f"]({p.name})" in md for p in pngs)
    assert "| 2 | better | promote | 16 | 37.5% |" in md  # (5 shell + 1 browser) / 16
    assert "Final policy k3: held-out success 40.0% over 10 tasks." in md


# -- aios-rl dashboard --------------------------------------------------------------------------------


async def _dashboard_command(bus: Bus, store: Path) -> tuple[asyncio.subprocess.Process, str]:
    """``aios-rl dashboard`` on ``bus``'s server and namespace: the process and its first line."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aios_rl.cli", "dashboard",
        "--nats-url", bus.nc.connected_url.geturl(),  # type: ignore[union-attr]
        "--namespace", bus.names.namespace, "--port", "0", "--store", str(store),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    if not line.startswith("dashboard at http://127.0.0.1:"):
        proc.terminate()
        raise AssertionError(line + (await proc.stderr.read()).decode()[-3000:])
    return proc, line


def _snapshot_with_epoch(url: str, campaign: str, epoch: int) -> dict:
    """Read the page's event stream until a snapshot shows ``epoch`` of ``campaign`` (the server
    pushes one per change; the socket timeout bounds the wait)."""
    with urllib.request.urlopen(url + "/events", timeout=30) as events:
        for raw in events:
            if raw.startswith(b"data: "):
                snap = json.loads(raw[6:])
                epochs = snap["campaigns"].get(campaign, {}).get("epochs", [])
                if epoch in [e["epoch"] for e in epochs]:
                    return snap
    raise AssertionError("the event stream ended")


@pytest.mark.asyncio(loop_scope="module")
async def test_the_dashboard_command_names_the_one_the_stack_serves(
    dash: Dash, tmp_path: Path
) -> None:
    proc, line = await _dashboard_command(dash.bus, tmp_path / "store")
    assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert line.split()[2] == dash.url and "served by the stack" in line


@pytest.mark.asyncio(loop_scope="module")
async def test_the_dashboard_command_serves_the_state_until_stopped(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    names = Names(f"t{uuid.uuid4().hex[:10]}")  # a stack without a dashboard
    async with connect(nats_server.url, name="test-dashboard-cli", names=names) as bus:
        await provision(bus)
        await Ledger(bus).put(record(5))
        proc, line = await _dashboard_command(bus, tmp_path / "store")
        try:
            assert "Ctrl-C to stop" in line
            snap = await asyncio.to_thread(_snapshot_with_epoch, line.split()[2], "c1", 5)
            assert snap["campaigns"]["c1"]["epochs"][-1]["received"] == 16
        finally:
            proc.terminate()
            code = await asyncio.wait_for(proc.wait(), 30)
    assert code in (0, 130, -15), code
    url = line.split()[2]

    async def stopped() -> bool | None:
        # The service the command started goes with it (it served on, orphaned, before).
        try:
            await asyncio.to_thread(urllib.request.urlopen, url, timeout=2)
        except OSError:
            return True
        return None

    await eventually(stopped, within=30, every=0.2, what="the dashboard service gone")
