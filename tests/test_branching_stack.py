"""Branching through the real stack: ``aios-rl up`` runs every service as a process and
``aios-rl shell train --strategy entropy`` runs a shell campaign on it. Continuations replay
their parent's prefix exactly (the state at the branch step is the parent's), sample afresh
after it, and the ledger's accounting is the sum over the episodes the stream holds."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import msgspec
import pytest

from aios_rl.state.ledger import Ledger
from contracts import Episode
from contracts.subjects import STREAM_EPISODES

from .support import stack_env, until_every_service, up_stack

CAMPAIGN = "branchy"


@pytest.mark.slow
async def test_an_entropy_campaign_branches_replays_prefixes_and_accounts_for_every_step(
    tmp_path: Path,
) -> None:
    env = stack_env()
    async with up_stack(tmp_path) as up, up.connect("test-branching") as bus:
        await until_every_service(bus)
        train = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "aios_rl.cli", "shell", "train",
            "--strategy", "entropy", "--branch-temperature", "1.5",
            "--epochs", "1", "--tasks-per-epoch", "3", "--group-size", "4",
            "--train-tasks", "6", "--heldout", "2", "--campaign-id", CAMPAIGN,
            "--nats-url", up.url, "--credentials", str(up.credentials),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        out, err = await asyncio.wait_for(train.communicate(), 600)
        assert train.returncode == 0, (out.decode()[-3000:], err.decode()[-3000:])
        (record,) = await Ledger(bus).records(CAMPAIGN)
        episodes: dict[str, Episode] = {}
        async for m in bus.read_stream(
            bus.names.stream(STREAM_EPISODES), bus.names.episode("compared", "shell")
        ):
            ep = msgspec.json.decode(m.data, type=Episode)
            if ep.campaign_id == CAMPAIGN:
                episodes[ep.episode_id] = ep
    text = out.decode()
    rollouts = [e for e in episodes.values() if e.role == "rollout"]
    continuations = [e for e in rollouts if e.branch is not None]
    assert continuations, "the entropy strategy branched nothing"
    differs = 0
    for c in continuations:
        assert c.branch is not None
        parent, t = episodes[c.branch.parent_episode_id], c.branch.branch_step
        assert c.group_id == parent.group_id and c.task_id == parent.task_id
        assert c.branch.decided_by == "entropy" and c.regime.temperature == 1.5
        assert 1 <= t < len(parent.trajectory)
        # The prefix replayed exactly: same actions, and the same state up to the branch step.
        assert [s.replayed for s in c.trajectory[:t]] == [True] * t
        assert [s.action for s in c.trajectory[:t]] == [s.action for s in parent.trajectory[:t]]
        assert [s.observation for s in c.trajectory[: t + 1]] == [
            s.observation for s in parent.trajectory[: t + 1]
        ]
        assert c.trajectory[t].candidates == parent.trajectory[t].candidates
        assert not any(s.replayed for s in c.trajectory[t:])
        # Compared with the reference on the same task, like any rollout.
        assert c.comparison is not None and parent.comparison is not None
        assert c.comparison.reference_checkpoint == parent.comparison.reference_checkpoint
        assert c.comparison.verdict in ("better", "same", "worse")
        differs += [s.action for s in c.trajectory[t:]] != [s.action for s in parent.trajectory[t:]]
    assert differs >= 1, "no continuation left its parent's path after the branch"
    # Every task spent its budget of 4 rollouts (2 base, then continuations or fresh ones).
    per_group: dict[str, int] = {}
    for e in rollouts:
        per_group[e.group_id] = per_group.get(e.group_id, 0) + 1
    assert sorted(per_group.values()) == [4, 4, 4], per_group
    # The ledger's accounting is the sum over the episodes.
    acc = record.rollouts
    sampled = sum(sum(not s.replayed for s in e.trajectory) for e in rollouts)
    replayed = sum(sum(s.replayed for s in e.trajectory) for e in rollouts)
    assert acc.strategy == "entropy" and acc.rounds >= 1 and acc.wall_s > 0
    assert acc.base == len(rollouts) - len(continuations)
    assert acc.continuations == len(continuations)
    assert (acc.steps_sampled, acc.steps_replayed, acc.policy_calls) == (sampled, replayed, sampled)
    assert acc.references == sum(e.role == "reference" for e in episodes.values()) == 3 * 2
    assert record.received == record.scheduled == len(episodes)
    assert len(record.groups) == 3 and all(g.base >= 2 for g in record.groups)
    assert sum(g.continuations for g in record.groups) == len(continuations)
    # The summary shows it, one row per epoch.
    row = r"\s*│\s*".join(
        str(x) for x in ("entropy", acc.base, acc.continuations, sampled, replayed, sampled)
    )
    assert re.search(row, text), text[-4000:]
