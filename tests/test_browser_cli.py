"""``aios-rl browser``: the generator of a split's tasks, and ``browser eval`` end to end on an
embedded stack (sites, a browser runner, the sampler) in real Chromium."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from aios_rl.envs.browser.generate import HELDOUT_SEED, generate
from aios_rl.envs.browser.store import browser_task_id


def test_a_split_is_half_site_flows_half_miniwob_with_disjoint_seeds() -> None:
    train, heldout = generate(8, 0, "train"), generate(8, 0, "heldout")
    assert [t.kind for t in train] == ["site"] * 4 + ["miniwob"] * 4
    assert all(t.task_id == browser_task_id(t) for t in [*train, *heldout])
    assert generate(8, 0, "train") == train  # deterministic
    mw_train = [t for t in train if t.kind == "miniwob"]
    mw_held = [t for t in heldout if t.kind == "miniwob"]
    assert all(t.seed < HELDOUT_SEED for t in mw_train)
    assert all(t.seed >= HELDOUT_SEED for t in mw_held)
    site = {(t.flow, t.template) for t in train if t.kind == "site"}
    assert not site & {(t.flow, t.template) for t in heldout if t.kind == "site"}


@pytest.mark.slow
async def test_browser_eval_runs_on_an_embedded_stack(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("NATS_URL", None)
    env.pop("AIOS_NAMESPACE", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aios_rl.cli", "browser", "eval", "--limit", "4",
        "--nats-url", "nats://127.0.0.1:1", "--data-dir", str(tmp_path / "stack"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    text = out.decode()
    assert proc.returncode == 0, (text[-2000:], err.decode()[-2000:])
    assert "browser eval: heldout, 4 tasks" in text and "4 heldout browser tasks stored" in text
    assert "episodes" in text and "%" in text
