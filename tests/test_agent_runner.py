"""Agent-driven rollouts: the shell runner starts an example agent (unmodified: the Python one
over the ``openai`` package, the TypeScript one over the ``openai`` npm package, built by
``deploy/setup.sh``) for a rollout job; the agent plays the episode through the agent gateway
(completions from the real sampler serving a stored language-model student, steps in the real
sandbox); the published episode holds one token-level step per completion, with the tokens and
log-probs the student served, and the environment's verdict."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from aios_rl.agents.tokens import Tokens, new_token
from aios_rl.bus import Bus
from aios_rl.envs import registry
from aios_rl.envs.shell.adapter import ShellRunnerSettings
from aios_rl.envs.shell.generate import generate
from aios_rl.envs.shell.store import ShellTaskStore as TaskStore
from aios_rl.envs.shell.verify import RunCache, default_cache_dir
from aios_rl.state.checkpoints import CheckpointRegistry
from contracts import AgentCall, Episode, Names, RolloutJob, decode
from contracts.subjects import STREAM_AGENTS
from services.agent_gateway.main import build as build_gateway
from services.agent_gateway.settings import AgentGatewaySettings
from services.runner.main import build as build_runner
from services.sampler.main import build as build_sampler
from services.sampler.settings import SamplerSettings

from .support import running
from .test_student_hf import CHAT_TEMPLATE, HAVE_TRANSFORMERS, make_tokenizer

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not HAVE_TRANSFORMERS, reason="transformers is not installed"),
]

AGENTS = Path(__file__).resolve().parents[1] / "examples" / "agents"
PYTHON_AGENT = f"{sys.executable} {AGENTS / 'python' / 'shell_agent.py'}"
TS_AGENT = AGENTS / "typescript" / "dist" / "shell_agent.js"


def long_context_lm(tokenizer):  # type: ignore[no-untyped-def]
    """A 2-layer LM of width 32 with room for a shell observation (the toy tokenizer spends about
    a token a character)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=8192,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    )


@pytest.mark.parametrize("agent", ["python", "typescript"])
async def test_an_example_agent_plays_a_rollout_job_recorded_token_by_token(
    bus: Bus, names: Names, agent: str
) -> None:
    from aios_rl.student.hf import HFConfig, HFStudent

    if agent == "typescript":
        assert TS_AGENT.is_file(), f"{TS_AGENT} is missing: run deploy/setup.sh (npm ci, tsc)"
        command = f"node {TS_AGENT}"
    else:
        command = PYTHON_AGENT

    tasks = generate(2, 11, "train", cache=RunCache(default_cache_dir()))
    await TaskStore(bus).put_all(tasks)
    tok = make_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    student = HFStudent(long_context_lm(tok), tok, HFConfig())
    registry_ = CheckpointRegistry(bus)
    meta = await registry_.store(
        student.to_bytes(), parent_id=None, created_by="test", algorithm="init", backend="hf"
    )
    await registry_.init(meta.checkpoint_id)
    token, digest = new_token()
    sampler, state = build_sampler(bus, SamplerSettings(namespace=names.namespace))
    gateway, gw = build_gateway(
        bus, AgentGatewaySettings(namespace=names.namespace, port=0), Tokens({"coder": digest})
    )
    runner, _ = build_runner(
        bus,
        registry.get("shell"),
        ShellRunnerSettings(
            nats_url="",
            namespace=names.namespace,
            max_steps=3,
            agent_cmd=command,
            agent_name="coder",
            agent_token=token,
            agent_timeout_s=180,
        ),
    )
    got: asyncio.Queue[Episode] = asyncio.Queue()

    async def on_completed(msg: object, _raw: object) -> None:
        if isinstance(msg, Episode):
            await got.put(msg)

    sub = await bus.subscribe(names.episode("completed", "shell"), on_completed)
    job = RolloutJob(
        job_id="job-a", episode_id="ep-agent", environment="shell", task_id=tasks[0].task_id, seed=3
    )
    try:
        async with running(sampler), running(gateway), running(runner):
            await asyncio.wait_for(state.until(lambda s: s.active == meta.checkpoint_id), 60)
            await asyncio.wait_for(gw.listening.wait(), 30)
            runner.fetch_timeout_s = 0.2
            await bus.publish_durable(names.rollout_job("shell"), job, msg_id=job.job_id)
            ep = await asyncio.wait_for(got.get(), 200)
            calls = [
                decode(m.data, m.headers, AgentCall)
                async for m in bus.read_stream(
                    names.stream(STREAM_AGENTS), names.agent_call("ep-agent")
                )
            ]
    finally:
        await sub.unsubscribe()
    assert ep.episode_id == "ep-agent" and ep.info["driver"] == "agent", ep.info
    assert ep.info["agent_exit"] == "0", ep.info.get("agent_output_tail")
    assert ep.checkpoint_id == meta.checkpoint_id
    # One step per completion, each the tokens and log-probs the student served.
    assert len(calls) == len(ep.trajectory) >= 1
    for step, call in zip(ep.trajectory, calls, strict=True):
        assert step.token_ids == call.response.token_ids and step.token_ids
        assert step.token_logprobs == call.response.token_logprobs
        assert step.prompt_ids == call.response.prompt_ids
        assert call.agent == "coder" and call.response.checkpoint_id == meta.checkpoint_id
    # The environment's verdict: three steps of a random model do not fix the bug.
    assert ep.outcome in ("failure", "blocked") and ep.env_reward == 0.0
    assert ep.info["family"] == tasks[0].family


def test_an_agents_sandbox_shows_its_project_and_only_the_variables_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent runs as another uid, sees its project (the folder above its script holding a
    ``package.json``) and not the rest of the host, and has the URLs and token the runner
    gives it, not the runner's NATS credentials."""
    from services.runner.agent import AgentDriver, absolute_args, agent_paths

    project = tmp_path / "proj"
    (project / "dist").mkdir(parents=True)
    (project / "package.json").write_text("{}")
    (project / "lib.txt").write_text("beside the script")
    secret = tmp_path / "secret.txt"
    secret.write_text("the runner's")
    script = project / "dist" / "agent.py"
    script.write_text(
        "import os, sys\n"
        f"print(os.getuid() != 0, open(sys.argv[1]).read(), os.path.exists({str(secret)!r}),\n"
        "      os.environ.get('NATS_PASSWORD'), os.environ['OPENAI_API_KEY'])\n"
    )
    command = [sys.executable, str(script), str(project / "lib.txt")]
    # A relative path names the same file from the runner's directory; a bare word stays.
    assert absolute_args(["node", "dist/agent.py", "--fast"], cwd=project) == [
        "node",
        str(script.resolve()),
        "--fast",
    ]
    assert agent_paths(command) == (project.resolve(),)  # the interpreter: shown anyway
    assert agent_paths(["python", "x.py"], "/opt/a:/opt/b") == (Path("/opt/a"), Path("/opt/b"))
    monkeypatch.setenv("NATS_PASSWORD", "runner-secret")
    settings = ShellRunnerSettings(
        nats_url="", agent_cmd=" ".join(command), agent_token="tok", agent_timeout_s=60
    )
    driver = AgentDriver(None, "shell", settings, None)  # type: ignore[arg-type]
    code, output = driver._run_sandboxed({"OPENAI_API_KEY": "tok"})
    assert (code, output) == (0, "True beside the script False None tok\n"), output
