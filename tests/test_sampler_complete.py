"""``policy.complete`` on the real sampler service and a real nats-server: an agent's
conversation through a stored language-model student's chat template, the completion's token
ids and log-probs as the student computes them, and clear refusals."""

from __future__ import annotations

import asyncio

import pytest

from aios_rl.bus import Bus, RemoteError
from aios_rl.state.checkpoints import CheckpointRegistry
from aios_rl.student import Decision, Regime, load_student, new_student
from contracts import ChatMessage, CompletionRequest, CompletionResponse, Names
from services.sampler.main import build
from services.sampler.settings import SamplerSettings
from tests.support import running

from .test_student_hf import CHAT_TEMPLATE, HAVE_TRANSFORMERS, make_tokenizer, tiny_lm

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not HAVE_TRANSFORMERS, reason="transformers is not installed"),
]

MESSAGES = [
    ChatMessage(role="system", content="You fix bugs."),
    ChatMessage(role="user", content="$ pytest -q\nFAILED test_clamp"),
]


async def _store(registry: CheckpointRegistry, data: bytes, backend: str) -> str:
    meta = await registry.store(
        data, parent_id=None, created_by="test", algorithm="init", backend=backend
    )
    return meta.checkpoint_id


async def test_a_completion_is_served_with_the_tokens_and_log_probs_the_student_wrote(
    bus: Bus, names: Names
) -> None:
    from aios_rl.student.hf import HFConfig, HFStudent

    tok = make_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    student = HFStudent(tiny_lm(tok), tok, HFConfig())
    registry = CheckpointRegistry(bus)
    lm = await _store(registry, student.to_bytes(), "hf")
    tiny = await _store(registry, new_student("tiny", seed=0).to_bytes(), "tiny")
    await registry.init(lm)
    svc, state = build(bus, SamplerSettings(namespace=names.namespace, max_completion_tokens=16))

    async def complete(**kw: object) -> CompletionResponse:
        req = CompletionRequest(
            **{"request_id": "r", "checkpoint_id": "active", "messages": MESSAGES, **kw}  # type: ignore[arg-type]
        )
        return await bus.request(names.policy_complete(), req, CompletionResponse, timeout=60)

    async with running(svc):
        await asyncio.wait_for(state.until(lambda s: s.active == lm), 60)
        answers = await asyncio.gather(
            complete(seed=3, max_tokens=10, top_logprobs=2),
            complete(seed=3, max_tokens=10, top_logprobs=2, checkpoint_id=lm),
            complete(temperature=0, max_tokens=6),
        )
        refused = await asyncio.gather(
            complete(max_tokens=17),
            complete(temperature=2.5),
            complete(checkpoint_id=tiny, max_tokens=4),
            return_exceptions=True,
        )
    served = load_student(await registry.load(lm))
    prompt = served.chat_prompt_ids(  # type: ignore[attr-defined]
        [{"role": m.role, "content": m.content} for m in MESSAGES]
    )
    own = served.complete(prompt, Regime(1.0), max_tokens=10, seed=3, top_logprobs=2)  # type: ignore[attr-defined]
    a, b, greedy = answers
    assert a.checkpoint_id == b.checkpoint_id == lm and a.prompt_ids == prompt
    assert a.token_ids == b.token_ids == own.token_ids and a.text == own.text
    assert a.token_logprobs == pytest.approx(own.token_logprobs, abs=1e-6)
    assert [[x.token_id for x in alts] for alts in a.top_logprobs] == [
        [t for t, _ in alts] for alts in own.top_logprobs
    ]
    assert a.finish_reason == own.finish_reason
    assert a.token_texts == [served.tokenizer.decode([t]) for t in a.token_ids]  # type: ignore[attr-defined]
    assert all(
        x.text == served.tokenizer.decode([x.token_id]) for alts in a.top_logprobs for x in alts
    )  # type: ignore[attr-defined]
    # What the trainer recomputes for those tokens after that prompt.
    ev = served.evaluate([Decision("x", prompt_ids=tuple(prompt))], [tuple(a.token_ids)])
    assert ev.logprobs[0][ev.mask[0]].tolist() == pytest.approx(a.token_logprobs, abs=1e-4)
    # Temperature 0 is greedy: every token the likeliest.
    mine = served.complete(prompt, Regime(1e-4), max_tokens=6)  # type: ignore[attr-defined]
    assert greedy.token_ids == mine.token_ids and 1 <= len(greedy.token_ids) <= 6
    codes = [(e.code, e.description) for e in refused if isinstance(e, RemoteError)]
    assert len(codes) == 3 and {c for c, _ in codes} == {"422"}, refused
    assert "max_tokens must be from 1 to 16" in codes[0][1]
    assert "temperature" in codes[1][1]
    assert "does not write text" in codes[2][1]
