"""The ``aios-rl`` command line as a user runs it: real subprocesses on a real nats-server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from aios_rl.bus import Bus, connect, discover
from aios_rl.stack.natsd import free_port
from contracts import Episode, Names
from services.reward.main import build
from services.reward.settings import RewardSettings

from .support import admin_of, running

AIOS = [sys.executable, "-m", "aios_rl.cli"]


async def _spawn(*args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    full_env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "AIOS_NAMESPACE")}
    full_env.update(env or {})
    full_env.setdefault("AIOS_LOG_FORMAT", "json")
    return await asyncio.create_subprocess_exec(
        *AIOS,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=full_env,
        stdin=asyncio.subprocess.DEVNULL,
    )


async def _run(*args: str, timeout: float = 30.0) -> tuple[int, str, str]:
    proc = await _spawn(*args)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _line(stream: asyncio.StreamReader, timeout: float = 15.0) -> str:
    line = await asyncio.wait_for(stream.readline(), timeout)
    assert line, "stream closed before a line arrived"
    return line.decode()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["up", "--scale", "nope=2"], "unknown service 'nope'"),
        (["up", "--only", "ghost"], "unknown service(s) ghost"),
        (["tap", "episode.>", "--since", "5x"], "duration '5x'"),
        (
            ["services", "--nats-url", "nats://127.0.0.1:1", "--store", "/nonexistent/aios"],
            "no server is running",
        ),
        (
            ["checkpoints", "--nats-url", "nats://127.0.0.1:1", "--store", "/nonexistent/aios"],
            "run `aios-rl demo` or `aios-rl train` first",
        ),
        (["train", "--student", "hf"], "--student hf needs --model-path"),
        (["tap"], "the following arguments are required"),
        (["shell", "eval", "--limit", "0"], "must be at least 1"),
        (["shell", "train", "--learning-rate", "2"], "must be between 0 and 1"),
        (["train", "--distill", "-1"], "must be between 0 and 100"),
        (["shell", "eval", "--split", "nope"], "invalid choice: 'nope'"),
    ],
)
async def test_bad_arguments_get_one_line(args: list[str], needle: str) -> None:
    code, _out, err = await _run(*args)
    assert code in (1, 2)
    lines = [
        ln
        for ln in err.splitlines()
        if ln.strip() and not ln.startswith("usage:") and not ln.startswith(" ")
    ]
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert "Traceback" not in err


async def test_services_lists_running_service(bus: Bus, nats_url: str, names: Names) -> None:
    svc = build(bus, RewardSettings(nats_url=nats_url, namespace=names.namespace))
    async with running(svc):
        code, out, err = await _run(
            "services", "--json", "--nats-url", nats_url, "--namespace", names.namespace
        )
    assert code == 0, err
    views = json.loads(out)
    assert [v["name"] for v in views] == ["reward"]
    assert views[0]["pid"] == os.getpid()
    assert [c["consumer"] for c in views[0]["consumers"]] == ["reward"]


async def test_tap_prints_typed_and_undecodable_messages(
    bus: Bus, nats_url: str, names: Names
) -> None:
    proc = await _spawn(
        "tap", "episode.>", "--nats-url", nats_url, "--namespace", names.namespace, "--limit", "2"
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert "tapping episode.>" in await _line(proc.stderr)
    ep = Episode(
        episode_id="tap-ep-1", environment="shell", task_id="t", outcome="partial", env_reward=0.5
    )
    await bus.publish_durable(names.episode("completed", "shell"), ep, msg_id="tap-ep-1:completed")
    await bus.nc.publish(
        names.episode("taught", "shell"), b"{not json", headers={"Aios-Schema": "episode.v1"}
    )
    first, second = await _line(proc.stdout), await _line(proc.stdout)
    assert (
        "episode.completed.shell" in first
        and "episode.v1" in first
        and "episode_id=tap-ep-1" in first
    )
    assert "outcome=partial" in first
    assert "episode.taught.shell" in second and "undecodable" in second
    assert await asyncio.wait_for(proc.wait(), 10) == 0


async def test_tap_since_replays_stored_messages_as_json(
    bus: Bus, nats_url: str, names: Names
) -> None:
    for i in range(3):
        ep = Episode(
            episode_id=f"old-{i}",
            environment="browser",
            task_id="t",
            outcome="success",
            env_reward=1.0,
        )
        await bus.publish_durable(
            names.episode("rewarded", "browser"), ep, msg_id=f"old-{i}:rewarded"
        )
    code, out, err = await _run(
        "tap",
        "episode.rewarded.*",
        "--since",
        "5m",
        "--json",
        "--limit",
        "3",
        "--nats-url",
        nats_url,
        "--namespace",
        names.namespace,
    )
    assert code == 0, err
    docs = [json.loads(line) for line in out.splitlines()]
    assert [d["message"]["episode_id"] for d in docs] == ["old-0", "old-1", "old-2"]
    assert all(
        d["schema"] == "episode.v1" and d["subject"] == "episode.rewarded.browser" for d in docs
    )


async def _reward_pids(
    url: str,
    deadline: float,
    data_dir: Path,
    *,
    exclude: set[int] = frozenset(),  # type: ignore[assignment]
) -> set[int]:
    """Wait until a reward instance whose pid is not in ``exclude`` answers; return all pids.
    Connects as the stack's admin (``up`` runs with authorization)."""
    admin = await admin_of(data_dir, within=deadline)
    async with connect(url, name="test-up", connect_deadline=deadline, **admin) as bus:
        async with asyncio.timeout(deadline):
            while True:
                views = await discover(bus.nc, namespace="", window=0.2)
                pids = {v.pid for v in views if v.name == "reward" and v.pid}
                if pids - exclude:
                    return pids


@pytest.mark.slow
async def test_up_restarts_a_killed_service_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    proc = await _spawn("up", "--nats-port", str(port), "--data-dir", str(tmp_path / "aios"))
    url = f"nats://127.0.0.1:{port}"
    try:
        (first,) = await _reward_pids(url, 30, tmp_path / "aios")
        os.kill(first, signal.SIGKILL)
        pids = await _reward_pids(url, 30, tmp_path / "aios", exclude={first})
        assert first not in pids
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    text = out.decode()
    assert proc.returncode == 0
    assert "reward.1 exited with code -9; restarting" in text
    assert "all services stopped" in text and "embedded NATS stopped" in text
    assert (tmp_path / "aios" / "nats" / "jetstream").is_dir()


@pytest.mark.slow
async def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    code, out, err = await _run(
        "demo",
        "--epochs",
        "2",
        "--train-tasks",
        "20",
        "--heldout",
        "10",
        "--tasks-per-epoch",
        "8",
        "--data-dir",
        str(tmp_path / "demo"),
        timeout=600,
    )
    assert code == 0, err + out
    assert "before training: held-out success" in out
    assert "campaign demo-" in out and out.count("48/48") == 2  # both epochs got every episode back
    assert "held-out (10 tasks): before and after" in out
    assert "stack stopped cleanly" in out


@pytest.mark.slow
async def test_shell_train_then_eval_share_the_embedded_stack(tmp_path: Path) -> None:
    """Nothing answers at the URL: each command starts an embedded stack on the same data dir,
    so ``shell eval`` evaluates the checkpoint ``shell train`` left active."""
    data, url = str(tmp_path / "stack"), f"nats://127.0.0.1:{free_port()}"
    small = ["--train-tasks", "6", "--heldout", "4", "--tasks-per-epoch", "2", "--group-size", "2"]
    code, out, err = await _run(
        "shell",
        "train",
        "--epochs",
        "1",
        *small,
        "--data-dir",
        data,
        "--nats-url",
        url,
        timeout=600,
    )
    assert code == 0, err + out
    assert f"no NATS at {url}: starting an embedded stack" in out
    active = out.rsplit("active is ", 1)[1].split()[0]
    code, out, err = await _run(
        "shell",
        "eval",
        "--limit",
        "4",
        "--json",
        "--data-dir",
        data,
        "--nats-url",
        url,
        timeout=300,
    )
    assert code == 0, err + out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["checkpoint"] == active and result["episodes"] == 4
    assert 0.0 <= result["success"]["value"] <= 1.0


@pytest.mark.slow
async def test_the_users_journey_shares_one_store(tmp_path: Path) -> None:
    """demo -> eval -> checkpoints -> campaign status on one store, no server started by hand:
    eval scores the checkpoint the demo left active, checkpoints shows the demo's lineage (its
    updates PPO's, as --algorithm asked) and campaign status (no id: the newest) the demo's
    campaign. Nothing answers at the URL, so each command after the demo serves the store."""
    store, url = str(tmp_path / "store"), f"nats://127.0.0.1:{free_port()}"
    small = ["--train-tasks", "6", "--heldout", "4", "--tasks-per-epoch", "2", "--group-size", "2"]
    code, out, err = await _run(
        "demo", "--epochs", "1", *small, "--algorithm", "ppo", "--store", store, timeout=900
    )
    assert code == 0, err + out
    active = out.rsplit("active is ", 1)[1].split()[0]
    campaign = out.split("campaign demo-", 1)[1].split()[0]
    campaign = f"demo-{campaign}"
    assert "next: aios-rl eval" in out
    assert "learns from: environment reward; teacher shaping: yes (oracle" in out
    code, out, err = await _run(
        "eval", "--limit", "4", "--json", "--store", store, "--nats-url", url, timeout=600
    )
    assert code == 0, err + out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["checkpoint"] == active and result["episodes"] == 4
    assert f"no NATS at {url}: starting an embedded stack" in err  # progress goes to stderr
    code, out, err = await _run("checkpoints", "--json", "--store", store, "--nats-url", url)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["pointers"]["active"] == active
    lineage, at = [], active
    while at:
        lineage.append(doc["checkpoints"][at])
        at = lineage[-1]["parent_id"]
    assert lineage[-1]["created_by"] == "init"
    assert all(m["created_by"].startswith(campaign) for m in lineage[:-1]), lineage
    updates = [m for m in doc["checkpoints"].values() if m["created_by"].startswith(campaign)]
    assert updates and all(m["algorithm"] == "ppo" for m in updates), updates  # --algorithm
    code, out, err = await _run("checkpoints", "--store", store, "--nats-url", url)
    assert code == 0 and f"active          {active}" in out and "[active]" in out, err
    code, out, err = await _run("campaign", "status", "--store", store, "--nats-url", url)
    assert code == 0, err
    assert f"campaign {campaign}: finished" in out
    assert "hint distillation: off" in out  # the demo learns from reward
    code, out, err = await _run(
        "report", "--json", "--out", str(tmp_path / "report"), "--store", store, "--nats-url", url
    )
    assert code == 0, err
    files = [Path(f) for f in json.loads(out)["files"]]
    assert {f.suffix for f in files} == {".png", ".md"} and all(f.stat().st_size for f in files)
    summary = (tmp_path / "report" / "README.md").read_text()
    assert f"# Campaign {campaign}" in summary
    assert f"Final policy {active[:12]}: held-out success" in summary  # demo stored its scores
    code, out, err = await _run("services", "--store", store, "--nats-url", url)
    assert code == 1 and "no server is running" in err


async def test_checkpoints_prints_pointers_and_lineage(
    bus: Bus, nats_url: str, names: Names
) -> None:
    from aios_rl.state.checkpoints import CheckpointRegistry

    reg = CheckpointRegistry(bus)
    root = await reg.store(b"weights-0", parent_id=None, created_by="init", algorithm="init")
    child = await reg.store(
        b"weights-1",
        parent_id=root.checkpoint_id,
        created_by="update-1",
        algorithm="grpo",
        metrics={"loss": 0.25},
    )
    await reg.advance(root.checkpoint_id, "init")
    await reg.advance(child.checkpoint_id, "update-1")
    code, out, err = await _run(
        "checkpoints", "--nats-url", nats_url, "--namespace", names.namespace
    )
    assert code == 0, err
    assert f"active          {child.checkpoint_id}" in out
    assert f"pre_update_ref  {root.checkpoint_id}" in out
    tree = out.split("\n\n", 1)[1]
    assert tree.index(root.checkpoint_id) < tree.index(child.checkpoint_id)
    assert "[active]" in tree and "[last_stable]" in tree
    code, out, err = await _run(
        "checkpoints", "--json", "--nats-url", nats_url, "--namespace", names.namespace
    )
    doc = json.loads(out)
    assert doc["pointers"]["active"] == child.checkpoint_id
    assert set(doc["checkpoints"]) == {root.checkpoint_id, child.checkpoint_id}


async def test_publish_validates_and_publishes_durably(
    bus: Bus, nats_url: str, names: Names
) -> None:
    doc = json.dumps(
        {
            "episode_id": "pub-1",
            "environment": "shell",
            "task_id": "t",
            "outcome": "success",
            "env_reward": 1.0,
        }
    )
    code, out, err = await _run(
        "publish",
        "episode.taught.shell",
        "episode.v1",
        doc,
        "--msg-id",
        "pub-1:taught",
        "--nats-url",
        nats_url,
        "--namespace",
        names.namespace,
    )
    assert code == 0, err
    assert "stream sequence" in out
    stored = await bus.js.get_last_msg(names.stream("EPISODES"), names.episode("taught", "shell"))
    assert json.loads(stored.data)["episode_id"] == "pub-1"
    code, _out, err = await _run(
        "publish",
        "episode.taught.shell",
        "episode.v1",
        '{"episode_id": 3}',
        "--nats-url",
        nats_url,
        "--namespace",
        names.namespace,
    )
    assert code == 2 and "not a valid episode.v1" in err
    code, _out, err = await _run("publish", "x", "nope.v9", "{}", "--nats-url", nats_url)
    assert code == 2 and "unknown schema 'nope.v9'" in err


async def test_shell_benchmark_generate_stores_verified_tasks(
    bus: Bus, nats_url: str, names: Names, tmp_path: Path
) -> None:
    from aios_rl.state.tasks import task_ids as list_task_ids

    code, out, err = await _run(
        "shell",
        "benchmark-generate",
        "--count",
        "3",
        "--seed",
        "7",
        "--out",
        str(tmp_path),
        "--nats-url",
        nats_url,
        "--namespace",
        names.namespace,
        timeout=300,
    )
    assert code == 0, err
    assert "3 verified train tasks" in out
    assert len(await list_task_ids(bus, "shell", "train")) == 3
    assert (tmp_path / "index-train.json").exists()
