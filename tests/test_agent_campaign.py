"""``aios-rl shell train --agent-cmd``: each example agent (Python, TypeScript), unmodified,
plays a campaign's shell episodes (training and held-out) through the stack's OpenAI-compatible
endpoint and the environment API; the episodes on the stream carry, step for step, the tokens and log-probs the
engine returned (the gateway's record of each call); the trainer updates on them, and the
episodes after the update are served by the new checkpoint."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from aios_rl.stack.embedded import reader
from aios_rl.state.checkpoints import CheckpointRegistry
from contracts import AgentCall, Episode, decode
from contracts.subjects import STREAM_AGENTS, STREAM_EPISODES

from .test_agent_runner import PYTHON_AGENT, TS_AGENT, long_context_lm
from .test_realrepo import run_cli
from .test_student_hf import CHAT_TEMPLATE, HAVE_TRANSFORMERS, make_tokenizer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not HAVE_TRANSFORMERS, reason="transformers is not installed"),
]


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with a chat template and room for a shell observation, saved as a
    model directory (what ``--student hf --model-path`` reads)."""
    tok = make_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    model = tmp_path_factory.mktemp("chat-model")
    long_context_lm(tok).save_pretrained(model)
    tok.save_pretrained(model)
    return model


async def _recorded(
    store: Path, checkpoint: str
) -> tuple[list[Episode], dict[str, list[AgentCall]], dict[str, float]]:
    """Every completed episode on the store's stream, the gateway's record of each episode's
    calls (in order), and the update metrics of ``checkpoint``."""
    async with reader(None, store=store) as r:
        names = r.bus.names
        episodes = [
            decode(m.data, m.headers, Episode)
            async for m in r.bus.read_stream(
                names.stream(STREAM_EPISODES), names.episode("completed", "shell")
            )
        ]
        calls: dict[str, list[AgentCall]] = {}
        async for m in r.bus.read_stream(names.stream(STREAM_AGENTS), names.agent_call("*")):
            call = decode(m.data, m.headers, AgentCall)
            calls.setdefault(call.episode_id, []).append(call)
        metrics = (await CheckpointRegistry(r.bus).meta(checkpoint)).metrics
    return episodes, calls, metrics


def _train(
    store: Path,
    capsys: pytest.CaptureFixture[str],
    model: Path,
    command: str,
    heldout: int,
    tasks: int,
    *extra: str,
) -> dict:
    """``aios-rl shell train --agent-cmd command``: one epoch of ``tasks`` groups of 2 with
    ``heldout`` held-out tasks, PPO, no teacher; its JSON summary (checked finished)."""
    argv = ["shell", "train", "--epochs", "1", "--train-tasks", "4", "--heldout", str(heldout)]
    argv += ["--tasks-per-epoch", str(tasks), "--group-size", "2", *extra]
    argv += ["--teacher", "none", "--algorithm", "ppo"]
    argv += ["--student", "hf", "--model-path", str(model)]
    argv += ["--agent-cmd", command, "--agent-name", "coder"]
    argv += ["--store", str(store), "--nats-url", "nats://127.0.0.1:1", "--json"]
    assert run_cli(argv) == 0, capsys.readouterr().err[-3000:]
    doc = json.loads(capsys.readouterr().out)
    assert doc["end"] == "finished", doc
    return doc


@pytest.mark.parametrize("agent", ["python", "typescript"])
def test_an_example_agent_trains_in_a_campaign(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], chat_model: Path, agent: str
) -> None:
    """The Python example over 2 tasks a group of 2 with 2 held-out tasks; the TypeScript one,
    smaller (1 task, 1 held-out): the same checks."""
    if agent == "typescript":
        assert TS_AGENT.is_file(), f"{TS_AGENT} is missing: run deploy/setup.sh (npm ci, tsc)"
    command = PYTHON_AGENT if agent == "python" else f"node {TS_AGENT}"
    tasks, heldout = (2, 2) if agent == "python" else (1, 1)
    store = tmp_path / "store"
    doc = _train(store, capsys, chat_model, command, heldout, tasks)
    before, after = doc["before"]["checkpoint"], doc["after"]["checkpoint"]
    # The agent's token was written for the name asked, digest only.
    agents = json.loads((store / "auth" / "agents.json").read_text())["agents"]
    assert set(agents) == {"coder"}

    episodes, calls, metrics = asyncio.run(_recorded(store, after))
    by_agent = [e for e in episodes if e.info.get("driver") == "agent"]
    # Held-out before, the epoch's rollouts (tasks x 2), held-out after: all the agent's.
    assert len(by_agent) == len(episodes) >= 2 * heldout + 2 * tasks, [e.info for e in episodes]
    for ep in by_agent:
        recorded = calls.get(ep.episode_id, [])
        assert len(recorded) == len(ep.trajectory) >= 1, ep.info
        for step, call in zip(ep.trajectory, recorded, strict=True):
            assert call.agent == "coder" and call.response.checkpoint_id == ep.checkpoint_id
            assert step.token_ids == call.response.token_ids and step.token_ids
            assert step.token_logprobs == call.response.token_logprobs
    # The trainer updated on them (PPO: with every reward 0 here, a random model solves
    # nothing, a group-relative advantage is 0 and GRPO has nothing to step on; a value
    # baseline does); the episodes after the update were served by its checkpoint.
    assert doc["records"] and doc["records"][0]["new_checkpoint"], doc["records"]
    assert after != before, json.dumps(doc["records"])[:3000]
    assert metrics["policy_samples"] >= 1 and metrics["grad_norm"] > 0, metrics
    assert {e.checkpoint_id for e in by_agent} >= {before, after}


def test_a_branched_agent_episode_replays_its_parents_turns_then_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], chat_model: Path
) -> None:
    """``--strategy heuristic``: a task's second rollout branches off its first at its most
    uncertain call. The agent runs again from the start in the parent's environment; the
    gateway gives it its parent's answers again while it asks what the parent asked (replayed
    steps, the parent's very tokens, never trained on), then samples its own."""
    store = tmp_path / "store"
    doc = _train(store, capsys, chat_model, PYTHON_AGENT, 1, 1, "--strategy", "heuristic")
    episodes, calls, metrics = asyncio.run(_recorded(store, doc["after"]["checkpoint"]))
    by_id = {e.episode_id: e for e in episodes}
    (branch,) = [e for e in episodes if e.branch is not None]
    parent = by_id[branch.branch.parent_episode_id]
    k = branch.branch.branch_step
    assert k >= 1 and branch.seed == parent.seed  # the parent's environment
    assert branch.info["prefix_calls"] == str(k), branch.info
    # The replay holds while the agent asks what its parent asked: its first call always (the
    # task's first observation); a later one only while the environment says the same again
    # (a random model's command can run two processes whose output interleaves either way).
    n = int(branch.info["replayed_calls"])
    mine, theirs = calls[branch.episode_id], calls[parent.episode_id]
    assert 1 <= n <= k
    if n < k:
        assert mine[n].request.messages != theirs[n].request.messages
    assert [c.replayed for c in mine] == [s.replayed for s in branch.trajectory]
    assert [s.replayed for s in branch.trajectory] == [i < n for i in range(len(mine))]
    for step, call in zip(branch.trajectory[:n], theirs, strict=False):
        assert (step.token_ids, step.action) == (call.response.token_ids, call.response.text)
        assert step.progress == 0.0  # credited to the parent's step
    # Every step has the entropy its tokens were drawn with (where the strategy branched).
    assert all(s.token_entropies and s.entropy > 0 for s in parent.trajectory)
    # The update learned from each rollout's own steps only: the replayed ones are the parent's.
    own = sum(
        1
        for e in episodes
        if e.role == "rollout" and e.epoch == branch.epoch and e.campaign_id == branch.campaign_id
        for s in e.trajectory
        if not s.replayed
    )
    assert metrics["policy_samples"] == own, (metrics, own)
