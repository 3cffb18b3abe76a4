"""``aios-rl orchestrator``: generate, import a user's log and mine the ledger into the task
store of a real nats-server; ``orchestrator eval`` end to end on an embedded stack, with the
baselines on the same tasks."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from aios_rl.bus import connect, provision
from aios_rl.envs.registry import task_store
from aios_rl.stack.natsd import NatsServer
from contracts import Episode, Names, TrajectoryStep, topology


async def cli(*args: str, timeout: float = 120) -> tuple[int, str, str]:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("NATS_URL", None)
    env.pop("AIOS_NAMESPACE", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aios_rl.cli", "orchestrator", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def blocked(eid: str, **info: str) -> Episode:
    return Episode(
        episode_id=eid,
        environment="shell",
        task_id="t" * 16,
        trajectory=[TrajectoryStep(index=0, observation="$", action="python big.py")],
        outcome="blocked",
        env_reward=0.0,
        info=info,
    )


async def test_generate_import_and_mine_fill_the_task_store(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    names = Names("orchcli")
    where = ("--nats-url", nats_server.url, "--namespace", names.namespace)
    async with connect(nats_server.url, name="test-orchestrator-cli", names=names) as bus:
        await provision(bus, topology(names))
        for i, info in enumerate(
            [
                {"ended": "limit", "blocked_reason": "memory over 512 MiB"},
                {"error": "environment: RuntimeError: sandbox died"},
                {"ended": "steps"},  # says nothing about a checkpoint: skipped
            ]
        ):
            ep = blocked(f"ep{i}", **info)
            await bus.publish_durable(names.episode("completed", "shell"), ep, msg_id=f"ep{i}:c")

        code, out, err = await cli("benchmark-generate", "--count", "12", *where)
        assert code == 0, err
        assert "12 train orchestrator tasks (9 runs, 3 clarity gates): 12 stored" in out

        log = tmp_path / "decisions.jsonl"
        log.write_text(
            '{"stage": "dispatch", "evidence": "rotate the DB password (production)", '
            '"decision": "send to a subagent", "outcome": "incident", '
            '"correct": "ask a human to approve", "split": "heldout"}\n'
        )
        code, out, err = await cli("import", str(log), *where)
        assert code == 0, err
        assert "1 imported decisions (1 dispatch): 1 stored" in out

        code, out, err = await cli("mine", *where)
        assert code == 0, err
        assert "3 shell/browser episodes read; 2 became clarity-gate tasks" in out
        assert "1 replan, 1 transient" in out

        store = task_store(bus, "orchestrator")
        held = [await store.get(i) for i in await store.list("heldout")]
        train = [await store.get(i) for i in await store.list("train")]
        assert any(t.kind == "imported" for t in held)
        mined = [t for t in held + train if t.checkpoint and t.checkpoint.source != "generated"]
        assert sorted(t.checkpoint.source for t in mined if t.checkpoint) == [
            "episode:shell:ep0",
            "episode:shell:ep1",
        ]
        # mining again stores nothing new: one task per episode, content-addressed
        code, out, _ = await cli("mine", *where)
        assert code == 0 and "0 stored, 2 already there" in out

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"stage": "deploy"}\n')
    code, out, err = await cli("import", str(bad), "--dry-run")
    assert code != 0 and "bad.jsonl:1" in err and "Traceback" not in err


@pytest.mark.slow
async def test_orchestrator_eval_runs_on_an_embedded_stack_with_baselines(tmp_path: Path) -> None:
    code, out, err = await cli(
        "eval", "--limit", "8",
        "--nats-url", "nats://127.0.0.1:1", "--data-dir", str(tmp_path / "stack"),
        timeout=300,
    )  # fmt: skip
    assert code == 0, (out[-2000:], err[-2000:])
    assert "orchestrator eval: heldout, 8 tasks" in out and "8 heldout orchestrator tasks" in out
    assert "baselines on the same 8 tasks" in out
    for name in ("oracle", "random", "always-subagent", "best one-feature rule"):
        assert name in out


def test_eval_baselines_score_the_same_tasks_as_the_student() -> None:
    """What ``orchestrator eval`` prints (and ``--json`` carries under ``baselines``): the
    reference policies' mean reward on the eval's tasks, the oracle best, imported tasks left
    out, the fitted rules present when there are train tasks to fit them on."""
    from aios_rl.cli.orchestrator import baseline_scores
    from aios_rl.envs.orchestrator import generate

    heldout = generate(24, seed=3, split="heldout")
    scores = baseline_scores(heldout, generate(80, seed=0, split="train"))
    assert {"oracle", "random", "majority per stage", "best one-feature rule"} <= set(scores)
    assert scores["oracle"] == max(scores.values()) and scores["oracle"] > scores["random"]
    assert "majority per stage" not in baseline_scores(heldout, [])
    assert baseline_scores([], heldout) == {}
