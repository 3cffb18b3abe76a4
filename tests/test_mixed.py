"""``aios-rl mixed``: ratios, and a mixed campaign through the real stack (every environment: shell
in the sandbox, browser in real Chromium against the sites service, orchestrator): every scheduled
episode of every environment in the ledger exactly once, one verdict and one decision per epoch."""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from aios_rl.bus import connect
from aios_rl.cli._common import CliError
from aios_rl.cli.mixed import DEFAULT_RATIO, parse_ratio
from aios_rl.stack.natsd import NatsServer, free_port
from aios_rl.state.ledger import Ledger
from contracts import Episode, Names, decode
from contracts.subjects import STREAM_EPISODES


def test_ratios_are_parsed_normalised_and_checked() -> None:
    assert parse_ratio("shell=0.4,browser=0.3,orchestrator=0.3") == pytest.approx(DEFAULT_RATIO)
    assert parse_ratio("shell=2, orchestrator=2") == {"shell": 0.5, "orchestrator": 0.5}
    for bad, needle in [
        ("shell=1,web=1", "unknown environment 'web'"),
        ("shell=0", "positive"),
        ("shell=-1", "positive"),
        ("shell=x", "not a number"),
        ("shell", "not env=weight"),
        ("shell=1,shell=2", "given twice"),
        ("shell=inf", "positive"),
        ("shell=nan", "positive"),
    ]:
        with pytest.raises(CliError, match=needle):
            parse_ratio(bad)


async def _run(*args: str, timeout: float) -> tuple[int, str, str]:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("NATS_URL", None)
    env.pop("AIOS_NAMESPACE", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aios_rl.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.slow
async def test_a_mixed_campaign_runs_every_environment_with_one_decision_per_epoch(
    tmp_path: Path,
) -> None:
    data = tmp_path / "stack"
    code, out, err = await _run(
        "mixed", "--mixed", "--epochs", "2", "--tasks-per-epoch", "6", "--group-size", "2",
        "--train-tasks", "6", "--heldout", "2", "--campaign-id", "mix-e2e",
        "--data-dir", str(data), "--nats-url", f"nats://127.0.0.1:{free_port()}",
        timeout=900,
    )  # fmt: skip
    assert code == 0, (out[-3000:], err[-3000:])
    assert "per environment: one verdict, one decision" in out
    assert "held-out per environment" in out
    # Read what the campaign left in JetStream: the embedded stack's store, served again.
    with NatsServer(data / "nats") as server:
        async with connect(server.url, name="test-mixed", names=Names("")) as bus:
            records = await Ledger(bus).records("mix-e2e")
            seen: dict[int, Counter[str]] = {0: Counter(), 1: Counter()}
            rollouts: dict[int, Counter[str]] = {0: Counter(), 1: Counter()}
            async for msg in bus.read_stream(
                bus.names.stream(STREAM_EPISODES), bus.names.episode("completed", "*")
            ):
                ep = decode(msg.data, msg.headers, Episode)
                if ep.campaign_id == "mix-e2e":
                    seen[ep.epoch][ep.episode_id] += 1
                    if ep.role == "rollout":
                        rollouts[ep.epoch][ep.environment] += 1
    assert [r.epoch for r in records] == [0, 1]
    for r in records:
        assert r.decision is not None and r.verdict is not None  # one of each per epoch
        # every scheduled episode (rollouts and reference runs) came back, each exactly once
        assert r.received == r.scheduled == len(seen[r.epoch]) > 0
        assert all(n == 1 for n in seen[r.epoch].values()), seen[r.epoch]
        assert set(r.per_env) == {"shell", "browser", "orchestrator"}, r.per_env
        assert {e: s.episodes for e, s in r.per_env.items()} == dict(rollouts[r.epoch])
