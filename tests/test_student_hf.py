"""The hf student on a tiny randomly initialised causal LM and a tokenizer trained here (nothing is
downloaded): act/evaluate agreement, seeding, free text, bytes, heads, learning through the real
``update()``, and LoRA."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import io
import math
import subprocess
import sys

import pytest
import torch

from aios_rl.student import (
    Decision,
    HFConfig,
    HFStudent,
    Regime,
    StudentError,
    load_student,
    new_student,
)
from aios_rl.student.train import UpdateConfig, build_batch, update
from contracts import Episode, TrajectoryStep

from .toytask import one_step_group


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: blocked in sys.modules
        return False


HAVE_TRANSFORMERS = _importable("transformers")
HAVE_PEFT = _importable("peft")
needs_transformers = pytest.mark.skipif(
    not HAVE_TRANSFORMERS, reason="transformers is not installed (pip install -e '.[hf]')"
)
needs_peft = pytest.mark.skipif(
    not (HAVE_TRANSFORMERS and HAVE_PEFT), reason="peft is not installed (pip install -e '.[hf]')"
)

torch.set_num_threads(1)

CORPUS = [
    "Observation:\nthe light shows red\nCandidates:\n- press alpha\n- press bravo\nAction: press alpha",
    "Observation:\nthe light shows blue\nAction: press bravo",
    "$ pytest -q tests/test_clamp.py\nFAILED test_clamp - assert 3 == 2",
    "apply edit 1, apply edit 2, open the login page, click submit, scroll down",
]
TOY = Decision("the light shows red", ("press alpha", "press bravo"))


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level BPE tokenizer (any text encodes) trained on a few sentences."""
    if not HAVE_TRANSFORMERS:
        pytest.skip("transformers is not installed")
    return make_tokenizer()


def make_tokenizer():
    """:func:`tokenizer`, for other test modules."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<pad>", "<bos>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>"
    )


def conversation_lm(tokenizer, seed: int = 0):
    """:func:`tiny_lm` with room for a conversation (4096 positions): AgentBench's episodes."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(
        GPT2Config(
            n_positions=4096, n_embd=32, n_layer=2, n_head=2, vocab_size=len(tokenizer),
            bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    )  # fmt: skip


def text_policy(seen: list):  # type: ignore[no-untyped-def]
    """A policy answer function (tests' ``policy_service``) in which the hf student, a tiny
    random :func:`conversation_lm`, writes every turn as free text; requests land in ``seen``."""
    from aios_rl.student import Decision, HFConfig, HFStudent, Regime

    tok = make_tokenizer()
    model = HFStudent(conversation_lm(tok), tok, HFConfig(max_new_tokens=12))

    def write(req):  # type: ignore[no-untyped-def]
        seen.append(req)
        (out,) = model.act([Decision(req.observation, (), seed=req.step)], Regime(1.0))
        return out.action

    return write


def tiny_lm(tokenizer, arch: str = "gpt2", seed: int = 0):
    """A 2-layer causal LM of width 32, randomly initialised from ``seed``."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    ids = {
        "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    torch.manual_seed(seed)
    if arch == "gpt2":
        return GPT2LMHeadModel(GPT2Config(n_positions=256, n_embd=32, n_layer=2, n_head=2, **ids))
    return LlamaForCausalLM(
        LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=256,
            **ids,
        )
    )


def student(tokenizer, arch: str = "gpt2", **settings) -> HFStudent:
    settings.setdefault("max_new_tokens", 6)
    return HFStudent(tiny_lm(tokenizer, arch), tokenizer, HFConfig(**settings))


def mixed_decisions() -> list[Decision]:
    return [
        Decision("the light shows red", ("press alpha", "press bravo"), seed=1),
        Decision("$ pytest -q\nFAILED test_clamp", seed=2),
        Decision("login page", ("open the login page", "click submit", "scroll down"), seed=3),
    ]


def actions_of(outs) -> list[int | str]:
    return [o.action_index if o.action_index is not None else o.action for o in outs]


# -- the tiny path stays free of transformers -----------------------------------------------------------


def test_tiny_path_never_imports_transformers() -> None:
    code = (
        "import sys; from aios_rl.student import new_student, load_student;"
        "load_student(new_student('tiny').to_bytes());"
        "assert 'transformers' not in sys.modules and 'peft' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- act and evaluate ------------------------------------------------------------------------------------


@needs_transformers
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_act_logprob_is_evaluate_token_sum(tokenizer, arch: str) -> None:
    m = student(tokenizer, arch)
    d = mixed_decisions()
    outs = m.act(d, Regime(), want_hidden=True)
    ev = m.evaluate(d, actions_of(outs))
    n, t = ev.logprobs.shape
    assert n == 3 and t > 1 and ev.mask.shape == (n, t) and ev.mask.dtype == torch.bool
    assert ev.entropy.shape == (3,) and ev.values.shape == (3,)
    sums = torch.where(ev.mask, ev.logprobs, 0.0).sum(-1)
    for o, s, v in zip(outs, sums.tolist(), ev.values.tolist(), strict=True):
        assert o.logprob == pytest.approx(s, abs=1e-5)
        assert o.value == pytest.approx(v, abs=1e-5)
        assert len(o.hidden) == 8 and all(-1 < x < 1 for x in o.hidden)
        assert o.logprob < 0 and o.entropy > 0
    assert ev.logprobs.requires_grad
    # candidate_logprobs: log-softmax over the candidates' summed token scores.
    for i in (0, 2):
        k = len(d[i].candidates)
        with torch.no_grad():
            per = m.evaluate([d[i]] * k, list(range(k)))
        summed = torch.where(per.mask, per.logprobs, 0.0).sum(-1)
        assert torch.allclose(ev.candidate_logprobs[i], torch.log_softmax(summed, -1), atol=1e-5)
        assert outs[i].entropy == pytest.approx(
            float(-(summed.softmax(-1) * summed.log_softmax(-1)).sum()), abs=1e-5
        )
    assert ev.candidate_logprobs[1].numel() == 0  # free text has no candidate distribution
    assert outs[0].action in d[0].candidates and outs[1].action_index is None


@needs_transformers
def test_sampling_is_seeded_and_follows_the_regime(tokenizer) -> None:
    m = student(tokenizer)
    d = mixed_decisions()
    assert m.act(d, Regime()) == m.act(d, Regime())
    hot = {
        m.act([Decision(TOY.observation, TOY.candidates, seed=s)], Regime(temperature=50.0))[
            0
        ].action
        for s in range(30)
    }
    assert hot == set(TOY.candidates)
    best = int(m.evaluate([TOY], [0]).candidate_logprobs[0].argmax())
    unseeded = [TOY] * 6
    assert {o.action_index for o in m.act(unseeded, Regime(temperature=0.01))} == {best}
    nucleus = [Decision(TOY.observation, TOY.candidates, seed=s) for s in range(12)]
    assert {o.action_index for o in m.act(nucleus, Regime(top_p=0.01))} == {best}
    per_decision = m.act(d, [Regime(), Regime(temperature=0.01), Regime(top_p=0.5)])
    assert len(per_decision) == 3
    with pytest.raises(StudentError, match="regimes"):
        m.act(d, [Regime()])


@needs_transformers
def test_free_text_is_written_seeded_and_scored(tokenizer) -> None:
    m = student(tokenizer, max_new_tokens=5)
    d = [Decision("$ pytest -q\nFAILED test_clamp", seed=s) for s in range(4)]
    outs = m.act(d, Regime(temperature=1.5))
    assert outs == m.act(d, Regime(temperature=1.5))
    assert len({o.action for o in outs}) > 1  # different seeds write different text
    longest = max(len(tokenizer.convert_ids_to_tokens(i)) for i in range(len(tokenizer)))
    for o in outs:
        assert o.action_index is None and o.logprob < 0 and o.entropy > 0
        assert o.token_entropies  # one per token of the text as scored
        assert sum(o.token_entropies) / len(o.token_entropies) == pytest.approx(o.entropy)
        assert len(o.action) <= 5 * longest  # at most max_new_tokens tokens written
    one = student(tokenizer, max_new_tokens=1).act(d, Regime(temperature=1.5))
    singles = {tokenizer.decode([i], skip_special_tokens=True) for i in range(len(tokenizer))}
    assert {o.action for o in one} <= {s.removeprefix(" ") for s in singles}
    greedy = m.act([Decision("$ ls")] * 2, Regime(temperature=0.01))
    assert greedy[0] == greedy[1]
    ev = m.evaluate(d, [o.action for o in outs])
    sums = torch.where(ev.mask, ev.logprobs, 0.0).sum(-1)
    assert sums.tolist() == pytest.approx([o.logprob for o in outs], abs=1e-5)
    assert ev.entropy.tolist() == pytest.approx([o.entropy for o in outs], abs=1e-5)
    other = m.evaluate([d[0]], ["run the tests again"])  # any text scores, not only sampled text
    assert other.mask.sum() > 1
    with pytest.raises(StudentError, match="no candidates"):
        m.evaluate([d[0]], [0])
    with pytest.raises(StudentError, match="not among"):
        m.evaluate([TOY], ["press charlie"])


# -- bytes, directories and bad input -------------------------------------------------------------------


@needs_transformers
def test_bytes_round_trip_rebuilds_the_same_policy(tokenizer) -> None:
    m = student(tokenizer, arch="llama")
    data = m.to_bytes()
    assert hashlib.sha256(data).digest() == hashlib.sha256(m.to_bytes()).digest()
    again = load_student(data)
    assert isinstance(again, HFStudent) and again.config == m.config
    d = mixed_decisions()
    assert again.act(d, Regime(), want_hidden=True) == m.act(d, Regime(), want_hidden=True)
    assert again.to_bytes() == data
    with pytest.raises(StudentError, match="do not load"):
        load_student(b"not a checkpoint")
    payload = torch.load(io.BytesIO(data), weights_only=True)
    payload["lm_state"] = {"nonsense": torch.zeros(1)}
    buf = io.BytesIO()
    torch.save(payload, buf)
    with pytest.raises(StudentError, match="do not fit"):
        load_student(buf.getvalue())


@needs_transformers
def test_new_student_from_a_local_directory_and_errors(tokenizer, tmp_path) -> None:
    tiny_lm(tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    m = new_student("hf", model_path=tmp_path, seed=3, max_new_tokens=4)
    assert isinstance(m, HFStudent) and m.config.model_path == str(tmp_path.resolve())
    assert len(m.act([Decision("hello", seed=0)], Regime())) == 1
    with pytest.raises(StudentError, match="does not exist"):
        new_student("hf", model_path=tmp_path / "missing")
    with pytest.raises(StudentError, match="needs model_path"):
        new_student("hf")
    with pytest.raises(StudentError, match="unknown hf student setting"):
        new_student("hf", model_path=tmp_path, temperature=2.0)
    with pytest.raises(StudentError, match="exactly once"):
        HFConfig(prompt_template="{observation} only")
    with pytest.raises(StudentError, match="no room"):
        student(tokenizer, max_prompt_tokens=4).act([TOY], Regime())
    with pytest.raises(StudentError, match="no decisions"):
        m.act([], Regime())


# -- learning through the real trainer ---------------------------------------------------------------------


def rollouts(m: HFStudent, tag: str, group_size: int = 8) -> list[Episode]:
    """One GRPO group on the toy decision; pressing alpha is rewarded."""
    episodes = one_step_group(
        m, TOY, "press alpha", tag=f"hf-{tag}", group_size=group_size, temperature=4.0
    )
    assert {e.reward for e in episodes} == {0.0, 1.0}, "the group needs both outcomes"
    return episodes


def alpha_logprob(m: HFStudent) -> tuple[float, float]:
    """Summed token log-prob of the rewarded candidate, and its probability among candidates."""
    with torch.no_grad():
        ev = m.evaluate([TOY], [0])
    return float(torch.where(ev.mask, ev.logprobs, 0.0).sum()), float(
        ev.candidate_logprobs[0][0].exp()
    )


@needs_transformers
@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_update_raises_the_rewarded_candidate(tokenizer, algorithm: str) -> None:
    m = student(tokenizer)
    config = UpdateConfig(algorithm=algorithm, learning_rate=1e-2, update_epochs=1, seed=0)  # type: ignore[arg-type]
    before = alpha_logprob(m)
    head = m.value_head.weight.clone()
    first = update(m, None, build_batch(rollouts(m, "0"), config=config), config)
    # One epoch, one minibatch: the ratio starts at exactly 1 (act and evaluate agree).
    assert abs(first["approx_kl_old"]) < 1e-5 and first["clip_fraction"] == 0.0
    if algorithm == "ppo":
        assert math.isfinite(first["value_loss"])
    for i in range(1, 4):
        update(m, None, build_batch(rollouts(m, str(i)), config=config), config)
    after = alpha_logprob(m)
    assert after[0] > before[0] + 0.5 and after[1] > before[1], (before, after)
    # Only PPO trains the critic; GRPO leaves the value head as it was.
    assert torch.equal(m.value_head.weight, head) == (algorithm == "grpo")


@needs_transformers
def test_without_peft_lora_rank_falls_back_to_full_training(tokenizer, monkeypatch) -> None:
    monkeypatch.setattr("aios_rl.student.hf._peft", lambda: None)
    with pytest.warns(UserWarning, match="peft is not installed"):
        m = student(tokenizer, lora_rank=4)
    assert not m.uses_lora and m.config.lora_rank == 0
    assert all(p.requires_grad for p in m.parameters())
    assert load_student(m.to_bytes()).config.lora_rank == 0


# -- LoRA ---------------------------------------------------------------------------------------------------


@needs_peft
def test_lora_trains_only_the_adapter_and_round_trips(tokenizer, tmp_path) -> None:
    m = student(tokenizer, lora_rank=4)
    assert m.uses_lora
    frozen = {k: v.clone() for k, v in m.named_parameters() if "lora_" not in k}
    lora = {k: v.clone() for k, v in m.named_parameters() if "lora_B" in k}
    assert lora and not any(
        v.requires_grad for k, v in m.named_parameters() if k.startswith("lm.") and k in frozen
    )
    config = UpdateConfig(learning_rate=1e-2, update_epochs=2, seed=0)
    before = alpha_logprob(m)
    for i in range(3):
        update(m, None, build_batch(rollouts(m, f"lora{i}"), config=config), config)
    params = dict(m.named_parameters())
    assert all(torch.equal(params[k], v) for k, v in frozen.items())  # base and value head (GRPO)
    assert any(not torch.equal(params[k], v) for k, v in lora.items())
    assert alpha_logprob(m)[0] > before[0]
    d = mixed_decisions()
    again = load_student(m.to_bytes())  # built in memory: the bytes carry the base weights too
    assert again.act(d, Regime()) == m.act(d, Regime())

    # From a directory, a LoRA checkpoint holds only the adapter and reloads the base from there.
    tiny_lm(tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    from_dir = new_student("hf", model_path=tmp_path, lora_rank=4)
    update(from_dir, None, build_batch(rollouts(from_dir, "dir"), config=config), config)
    small = from_dir.to_bytes()
    assert len(small) < len(m.to_bytes()) / 2
    assert load_student(small).act(d, Regime()) == from_dir.act(d, Regime())
    for f in tmp_path.iterdir():
        f.unlink()
    tmp_path.rmdir()
    with pytest.raises(StudentError, match="does not exist"):
        load_student(small)


@needs_transformers
def test_free_text_actions_are_learned_through_update(tokenizer) -> None:
    m = student(tokenizer, max_new_tokens=3)
    obs = "$ pytest -q\nFAILED test_clamp"
    good, bad = "run the tests", "delete everything"

    def episode(i: int, text: str, reward: float) -> Episode:
        step = TrajectoryStep(index=0, observation=obs, action=text, logprob=score(text))
        return Episode(
            episode_id=f"ft{i}",
            environment="shell",
            task_id="t",
            group_id="g",
            trajectory=[step],
            env_reward=reward,
            reward=reward,
        )

    def score(text: str) -> float:
        with torch.no_grad():
            ev = m.evaluate([Decision(obs)], [text])
        return float(torch.where(ev.mask, ev.logprobs, 0.0).sum())

    episodes = [episode(i, good if i % 2 else bad, 1.0 if i % 2 else 0.0) for i in range(8)]
    config = UpdateConfig(learning_rate=5e-3, update_epochs=4)
    assert (
        len(build_batch(episodes, config=config).policy) == 0
    )  # tiny-style batches skip free text
    batch = build_batch(episodes, config=config, free_text=m.supports_free_text)
    assert len(batch.policy) == 8 and {s.action_index for s in batch.policy} == {good, bad}
    before = score(good) - score(bad)
    update(m, None, batch, config)
    assert score(good) - score(bad) > before


# -- token-level training ---------------------------------------------------------------------------------


def _token_episode(i: int, d: Decision, out, reward: float, shift: float = 0.0) -> Episode:
    """An episode of one free-text step as the runner records it, the sampler's token log-probs
    moved by ``shift`` (a sampler that disagrees with the trainer)."""
    step = TrajectoryStep(
        index=0,
        observation=d.observation,
        action=out.action,
        logprob=out.logprob,
        token_ids=list(out.token_ids),
        token_logprobs=[x + shift for x in out.token_logprobs],
    )
    return Episode(
        episode_id=f"tok{i}", environment="shell", task_id="t", group_id="g",
        trajectory=[step], env_reward=reward, reward=reward,
    )  # fmt: skip


@needs_transformers
def test_free_text_reports_its_tokens_and_evaluate_scores_exactly_those(tokenizer) -> None:
    m = student(tokenizer, max_new_tokens=5)
    d = [Decision("$ pytest -q\nFAILED test_clamp", seed=s) for s in range(3)]
    outs = m.act(d, Regime(temperature=1.5))
    for o in outs:
        assert o.token_ids and len(o.token_ids) == len(o.token_logprobs)
        assert sum(o.token_logprobs) == pytest.approx(o.logprob, abs=1e-5)
        assert o.token_ids[-1] == tokenizer.eos_token_id  # the action ended there
    ev = m.evaluate(d, [tuple(o.token_ids) for o in outs])
    for i, o in enumerate(outs):
        assert ev.logprobs[i][ev.mask[i]].tolist() == pytest.approx(o.token_logprobs, abs=1e-5)
    # Ids the tokenizer would never produce for the text still score as they are.
    odd = (tokenizer.convert_tokens_to_ids("a"), tokenizer.convert_tokens_to_ids("b"))
    assert int(m.evaluate([d[0]], [odd]).mask.sum()) == 2
    with pytest.raises(StudentError, match="outside the vocabulary"):
        m.evaluate([d[0]], [(len(tokenizer) + 7,)])
    chosen = m.act([TOY], Regime(1.0))[0]
    assert chosen.token_ids == [] and chosen.token_logprobs == []


@needs_transformers
def test_a_given_prompt_is_read_as_it_is_by_acting_scoring_and_training(tokenizer) -> None:
    """An agent's own conversation reaches the student as token ids (``prompt_ids``): acting and
    scoring read exactly those, whatever the observation says, and the trainer scores a step's
    action after the step's ``prompt_ids``."""
    m = student(tokenizer, max_new_tokens=5)
    rendered = Decision("$ pytest -q\nFAILED test_clamp", seed=1)
    ids = tuple(m.prompt_ids(rendered))
    given = Decision("not what the prompt says", seed=1, prompt_ids=ids)
    assert m.prompt_ids(given) == list(ids)
    a, b = m.act([rendered], Regime(1.0))[0], m.act([given], Regime(1.0))[0]
    assert a.token_ids == b.token_ids and b.token_logprobs == pytest.approx(a.token_logprobs)
    shorter = Decision(rendered.observation, seed=1, prompt_ids=ids[2:])
    ev = m.evaluate([given, shorter], [tuple(a.token_ids)] * 2)
    assert ev.logprobs[0][ev.mask[0]].tolist() == pytest.approx(a.token_logprobs, abs=1e-5)
    assert ev.logprobs[1][ev.mask[1]].tolist() != pytest.approx(a.token_logprobs, abs=1e-5)
    with pytest.raises(StudentError, match="prompt token ids outside the vocabulary"):
        m.prompt_ids(Decision("x", prompt_ids=(len(tokenizer) + 3,)))
    with pytest.raises(StudentError, match="positions for the action"):
        m.prompt_ids(Decision("x", prompt_ids=ids * 40))  # 256 positions in all
    # The trainer: the step's prompt ids, not its observation, make the decision it scores.
    step = TrajectoryStep(
        index=0,
        observation="not what the prompt says",
        action=b.action,
        token_ids=list(b.token_ids),
        token_logprobs=list(b.token_logprobs),
        prompt_ids=list(ids),
    )
    ep = Episode(
        episode_id="agent", environment="shell", task_id="t", group_id="g",
        trajectory=[step], env_reward=1.0, reward=1.0,
    )  # fmt: skip
    other = _token_episode(1, rendered, a, 0.0)
    batch = build_batch([ep, other], config=UpdateConfig(), free_text=True)
    (sample,) = [s for s in batch.policy if s.decision.observation == step.observation]
    assert sample.decision.prompt_ids == ids and sample.token_level


CHAT_TEMPLATE = (
    "{% if tools %}tools:{% for t in tools %} {{ t.function.name }}{% endfor %}\n{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content or '' }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


@needs_transformers
def test_a_completion_is_written_after_a_conversation_and_scored_as_the_trainer_scores_it(
    tokenizer,
) -> None:
    """``complete``: an agent's conversation through the chat template, one completion with
    each token's raw log-prob (what ``evaluate`` recomputes), ended by the turn, a stop string
    or ``max_tokens``; seeded."""
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = CHAT_TEMPLATE
    m = HFStudent(tiny_lm(tok), tok, HFConfig(max_new_tokens=6))
    messages = [{"role": "system", "content": "fix it"}, {"role": "user", "content": "press alpha"}]
    tools = [{"type": "function", "function": {"name": "run_shell"}}]
    ids = m.chat_prompt_ids(messages, tools)
    assert tok.decode(ids) == tok.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )
    assert "run_shell" in tok.decode(ids) and "run_shell" not in tok.decode(
        m.chat_prompt_ids(messages)
    )
    greedy = m.complete(ids, Regime(0.01), max_tokens=12, top_logprobs=3)
    assert greedy == m.complete(ids, Regime(0.01), max_tokens=12, top_logprobs=3)
    n = len(greedy.token_ids)
    assert 1 <= n <= 12 and len(greedy.token_logprobs) == len(greedy.top_logprobs) == n
    assert (greedy.finish_reason == "length") == (
        n == 12 and greedy.token_ids[-1] != tok.eos_token_id
    )
    for token, lp, top in zip(
        greedy.token_ids, greedy.token_logprobs, greedy.top_logprobs, strict=True
    ):
        assert top[0] == (token, pytest.approx(lp, abs=1e-6))  # greedy: the likeliest token
        assert len(top) == 3 and top[0][1] >= top[1][1] >= top[2][1]
    # Each token's entropy, exact: above what its top 3 alone bound, below uniform's.
    from aios_rl.student.engine import top_logprob_entropy

    assert len(greedy.token_entropies) == n
    for h, top in zip(greedy.token_entropies, greedy.top_logprobs, strict=True):
        bound = top_logprob_entropy([lp for _, lp in top])
        assert bound - 1e-4 <= h <= math.log(len(tok)) + 1e-4
    ev = m.evaluate([Decision("ignored", prompt_ids=tuple(ids))], [tuple(greedy.token_ids)])
    assert ev.logprobs[0][ev.mask[0]].tolist() == pytest.approx(greedy.token_logprobs, abs=1e-4)
    # Sampling: the same seed, the same completion; another seed, (here) another one.
    hot = [m.complete(ids, Regime(1.5), max_tokens=8, seed=s) for s in (1, 1, 2, 3)]
    assert hot[0] == hot[1] and len({tuple(h.token_ids) for h in hot}) > 1
    ev = m.evaluate([Decision("x", prompt_ids=tuple(ids))], [tuple(hot[0].token_ids)])
    assert ev.logprobs[0][ev.mask[0]].tolist() == pytest.approx(hot[0].token_logprobs, abs=1e-4)
    # A stop string: the text ends before it, the tokens end with the one that wrote it.
    long = m.complete(ids, Regime(1.5), max_tokens=12, seed=4)
    assert len(long.text) >= 3, long
    stop = long.text[2:4]
    cut = m.complete(ids, Regime(1.5), max_tokens=12, seed=4, stop=["\x00never", stop])
    assert (cut.text, cut.finish_reason) == (long.text[: long.text.find(stop)], "stop")
    assert long.token_ids[: len(cut.token_ids)] == cut.token_ids
    assert stop in tok.decode(cut.token_ids, skip_special_tokens=True)
    one = m.complete(ids, Regime(1.5), max_tokens=1, seed=4)
    assert len(one.token_ids) == 1 and one.token_ids == long.token_ids[:1]
    with pytest.raises(StudentError, match="max_tokens"):
        m.complete(ids, Regime(1.0), max_tokens=0)
    with pytest.raises(StudentError, match="no room to answer"):
        m.complete(ids * 60, Regime(1.0), max_tokens=4)
    bare = HFStudent(tiny_lm(tokenizer), tokenizer, HFConfig())
    with pytest.raises(StudentError, match="chat template does not render"):
        bare.chat_prompt_ids(messages)


@needs_transformers
def test_token_level_update_weighs_tokens_by_the_truncated_rollout_ratio(tokenizer) -> None:
    import copy

    base = student(tokenizer, max_new_tokens=4)
    d = [Decision("$ pytest -q\nFAILED test_clamp", seed=s) for s in range(6)]
    outs = base.act(d, Regime(temperature=1.5))
    one_step = UpdateConfig(learning_rate=1e-3, update_epochs=1, minibatch_size=64, is_cap=2.0)

    def run(shift: float, config: UpdateConfig = one_step) -> dict[str, float]:
        episodes = [_token_episode(i, d[i], o, float(i % 2), shift) for i, o in enumerate(outs)]
        batch = build_batch(episodes, config=config, free_text=True)
        assert all(s.token_level for s in batch.policy)
        assert {s.action_index for s in batch.policy} == {tuple(o.token_ids) for o in outs}
        return update(copy.deepcopy(base), None, batch, config)

    on = run(0.0)  # the sampler is the trainer: every ratio is 1, no token truncated
    assert on["rollout_ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert on["is_truncated_fraction"] == 0.0
    assert on["token_level_tokens"] == sum(len(o.token_ids) for o in outs)
    # The sampler gave every token twice the trainer's probability: weight 1/2 on each.
    half = run(math.log(2.0))
    assert half["rollout_ratio_mean"] == pytest.approx(0.5, abs=1e-4)
    assert half["pg_loss"] == pytest.approx(0.5 * on["pg_loss"], rel=1e-4)
    # A sampler far less sure than the trainer: the weight stops at the cap.
    far = run(-3.0)
    assert far["is_truncated_fraction"] == 1.0 and far["rollout_ratio_max"] > 2.0
    assert far["pg_loss"] == pytest.approx(2.0 * on["pg_loss"], rel=1e-4)
    uncapped = run(-3.0, dataclasses.replace(one_step, is_cap=0.0))  # correction off
    assert uncapped["pg_loss"] == pytest.approx(on["pg_loss"], rel=1e-4)
    # Several steps: the proximal log-probs are recomputed before the first one moves weights,
    # so the first step's ratios are still 1 and learning goes the rewarded way.
    many = dataclasses.replace(one_step, update_epochs=3, minibatch_size=2, learning_rate=5e-3)
    assert run(0.0, many)["rollout_ratio_mean"] == pytest.approx(1.0, abs=1e-5)


@needs_transformers
@pytest.mark.parametrize(
    ("algorithm", "aggregation"), [("grpo", "token"), ("ppo", "action"), ("grpo", "action")]
)
def test_a_step_taken_in_micro_batches_is_the_whole_minibatch_step(
    tokenizer, algorithm: str, aggregation: str
) -> None:
    """Gradients accumulated over micro-batches (what keeps a language model's long shell
    decisions inside memory) move the weights as one pass over the minibatch does: candidates
    and token-level free text, KL to a reference and imitation, whatever the aggregation."""
    import copy

    base = student(tokenizer, max_new_tokens=4)
    reference = copy.deepcopy(base)
    texts = [Decision("$ pytest -q\nFAILED test_clamp", seed=s) for s in range(4)]
    outs = base.act(texts, Regime(temperature=1.5))
    episodes = [_token_episode(i, texts[i], o, float(i % 2)) for i, o in enumerate(outs)]
    episodes += one_step_group(base, TOY, "press alpha", tag="micro", group_size=5, temperature=4.0)
    config = UpdateConfig(
        algorithm=algorithm, aggregation=aggregation, learning_rate=1e-2, update_epochs=2,  # type: ignore[arg-type]
        minibatch_size=16, kl_coef=0.1, imitation_coef=0.5,
    )  # fmt: skip
    batch = build_batch(episodes, config=config, positive=episodes[4:6], free_text=True)
    assert len(batch.policy) == 9 and len(batch.imitate) == 2

    def run(micro: int) -> tuple[HFStudent, dict[str, float]]:
        m = copy.deepcopy(base)
        got = update(m, reference, batch, dataclasses.replace(config, micro_batch_size=micro))
        return m, got

    whole, whole_metrics = run(64)
    for micro in (1, 4):
        parts, metrics = run(micro)
        # Adam moves each weight by about the learning rate (1e-2) a step whatever the gradient's
        # scale; float error in the sums moves them by ~1e-5: a term weighed wrongly, far more.
        for a, b in zip(whole.parameters(), parts.parameters(), strict=True):
            assert torch.allclose(a, b, atol=1e-4), (micro, float((a - b).abs().max()))
        # The gradient's scale, and each term's value, are the whole minibatch's.
        keys = ("pg_loss", "kl_ref", "entropy", "imitation_loss", "loss", "clip_fraction")
        for key in (*keys, "grad_norm"):
            assert metrics[key] == pytest.approx(whole_metrics[key], rel=1e-3, abs=1e-6), key
    assert whole.micro_batch_size == 4  # a language model's own, when the trainer leaves it 0
    assert base.action_token_counts(texts, [tuple(o.token_ids) for o in outs]) == [
        len(o.token_ids) for o in outs
    ]
    with pytest.raises(StudentError, match="micro_batch_size"):
        update(copy.deepcopy(base), None, batch, dataclasses.replace(config, micro_batch_size=-1))


@needs_transformers
def test_the_device_is_chosen_or_refused_clearly(tokenizer) -> None:
    m = student(tokenizer)  # auto: CPU here (no GPU is lent to this project)
    assert m.device == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert all(p.device == m.device for p in m.lm.parameters())
    if not torch.cuda.is_available():
        with pytest.raises(StudentError, match="no CUDA device"):
            student(tokenizer, device="cuda")
    with pytest.raises(StudentError, match="not a torch device"):
        student(tokenizer, device="abacus")


@needs_transformers
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_candidates_scored_over_one_prompt_pass_match_the_full_passes(tokenizer, arch) -> None:
    import copy

    shared = student(tokenizer, arch)
    full = copy.deepcopy(shared)
    full.config = dataclasses.replace(full.config, share_prompt=False)
    decisions = [*mixed_decisions(), Decision("the light shows red", ("press alpha",), seed=4)]
    a, b = shared.act(decisions, Regime(1.0)), full.act(decisions, Regime(1.0))
    for x, y in zip(a, b, strict=True):
        assert x.action == y.action and x.logprob == pytest.approx(y.logprob, abs=1e-4)
        assert x.value == pytest.approx(y.value, abs=1e-4)
        assert x.token_entropies == pytest.approx(y.token_entropies, abs=1e-4)
    actions = actions_of(a)
    ev_shared, ev_full = shared.evaluate(decisions, actions), full.evaluate(decisions, actions)
    assert torch.allclose(ev_shared.logprobs, ev_full.logprobs, atol=1e-4)
    assert torch.equal(ev_shared.mask, ev_full.mask)
    for p, q in zip(ev_shared.candidate_logprobs, ev_full.candidate_logprobs, strict=True):
        assert torch.allclose(p, q, atol=1e-4)
    # Gradients flow through the shared prompt pass as through the full ones.
    ev_shared.logprobs.sum().backward()
    ev_full.logprobs.sum().backward()
    for (n, p), (_, q) in zip(
        shared.lm.named_parameters(), full.lm.named_parameters(), strict=True
    ):
        if p.grad is not None or q.grad is not None:
            assert torch.allclose(p.grad, q.grad, atol=1e-4), n
