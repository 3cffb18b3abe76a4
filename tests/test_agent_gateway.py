"""The agent gateway: its rules (tokens, model names, pinned and owned episodes; pure), then the
service on a real nats-server in front of the real sampler serving a stored language-model
student, driven by the ``openai`` client as an agent would."""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest

from aios_rl.agents.tokens import AGENTS_FILE, Tokens, add_agent, new_token, token_digest
from aios_rl.agents.wire import WireError
from aios_rl.bus import Bus, RemoteError
from aios_rl.envs.loop import step_seed
from aios_rl.state.checkpoints import CheckpointRegistry
from contracts import AgentCall, AgentEpisode, CheckpointPointers, DecodingRegime, Names, decode
from contracts.subjects import STREAM_AGENTS
from services.agent_gateway.logic import (
    claim,
    live,
    replayed_answer,
    resolve_model,
    sampling_of,
)
from services.agent_gateway.main import build as build_gateway
from services.agent_gateway.main import token_file
from services.agent_gateway.settings import AgentGatewaySettings
from services.sampler.main import build as build_sampler
from services.sampler.settings import SamplerSettings
from tests.support import running

from .test_student_hf import CHAT_TEMPLATE, HAVE_TRANSFORMERS, make_tokenizer, tiny_lm

# -- the rules (pure) -------------------------------------------------------------------------------


def test_an_agent_is_known_by_its_token_only() -> None:
    token, digest = new_token()
    assert token.startswith("aios-agent-") and digest == token_digest(token) and len(digest) == 64
    other, other_digest = new_token()
    tokens = Tokens({"coder": digest, "browser": other_digest})
    assert (
        tokens.agent(f"Bearer {token}") == "coder" and tokens.agent(f"bearer {other}") == "browser"
    )
    for bad in (None, "", "Bearer", "Bearer  ", f"Basic {token}", f"Bearer {token}x", token):
        with pytest.raises(WireError) as exc:
            tokens.agent(bad)
        assert exc.value.status == 401 and exc.value.code == "invalid_api_key"
    assert Tokens.from_json(json.dumps({"agents": {"coder": digest}})).digests == {"coder": digest}
    for text in ("not json", "[]", '{"agents": {"a": "short"}}', '{"agents": []}'):
        with pytest.raises(ValueError, match="token file"):
            Tokens.from_json(text)


def test_agent_tokens_are_made_once_and_kept_as_digests(tmp_path) -> None:  # type: ignore[no-untyped-def]
    auth = tmp_path / "auth"
    coder = add_agent(auth, "coder")
    browser = add_agent(auth, "web-agent_2")
    path = auth / AGENTS_FILE
    assert oct(path.stat().st_mode & 0o777) == "0o644"  # digests only: no secret
    assert coder not in path.read_text() and token_digest(coder) in path.read_text()
    tokens = token_file(AgentGatewaySettings(tokens_file=str(path))).current()
    assert (
        tokens.agent(f"Bearer {coder}") == "coder"
        and tokens.agent(f"Bearer {browser}") == "web-agent_2"
    )
    again = add_agent(auth, "coder")  # a new token replaces the old one
    tokens = token_file(AgentGatewaySettings(tokens_file=str(path))).current()
    assert tokens.agent(f"Bearer {again}") == "coder"
    with pytest.raises(WireError):
        tokens.agent(f"Bearer {coder}")
    for bad in ("", "a b", "x.y", "n" * 65):
        with pytest.raises(ValueError, match="agent name"):
            add_agent(auth, bad)


def test_the_cli_prints_a_token_once_and_the_gateway_knows_it(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from aios_rl.cli import main

    with pytest.raises(SystemExit) as done:
        main(["auth", "agent-token", "coder", "--store", str(tmp_path)])
    assert done.value.code == 0
    out = capsys.readouterr().out
    token = out.split("OPENAI_API_KEY=")[1].strip()
    tokens = token_file(
        AgentGatewaySettings(tokens_file=str(tmp_path / "auth" / AGENTS_FILE))
    ).current()
    assert tokens.agent(f"Bearer {token}") == "coder"
    with pytest.raises(SystemExit) as bad:
        main(["auth", "agent-token", "a.b", "--store", str(tmp_path)])
    assert bad.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "agent name 'a.b'" in err[0]


def test_the_token_file_is_read_again_when_it_changes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="tokens_file is required"):
        token_file(AgentGatewaySettings())
    auth = tmp_path / "auth"
    live = token_file(AgentGatewaySettings(tokens_file=str(auth / AGENTS_FILE)))
    with pytest.raises(WireError, match="no agent has a token yet"):  # no file yet: none
        live.current().agent("Bearer x")
    first = add_agent(auth, "coder")
    assert live.current().agent(f"Bearer {first}") == "coder"  # made while running: known
    (auth / AGENTS_FILE).write_text("garbage")
    assert live.current().agent(f"Bearer {first}") == "coder" and "not JSON" in live.error
    with pytest.raises(ValueError, match="not JSON"):  # nothing lost: the file is refused
        add_agent(auth, "other")
    (auth / AGENTS_FILE).unlink()
    second = add_agent(auth, "other")
    assert live.current().agent(f"Bearer {second}") == "other" and not live.error
    with pytest.raises(WireError, match="not valid"):
        live.current().agent(f"Bearer {first}")


def test_model_names_resolve_through_the_pointers() -> None:
    p = CheckpointPointers(active="ck-2", last_stable="ck-1")
    assert [resolve_model(m, p) for m in ("active", "last_stable", "ck-9")] == [
        "ck-2",
        "ck-1",
        "ck-9",
    ]
    assert (
        resolve_model("active", None) is None
        and resolve_model("active", CheckpointPointers()) is None
    )


def test_an_episode_is_owned_by_one_agent_and_forgotten_when_idle() -> None:
    from contracts import AgentEpisodeState

    first = claim(None, "e1", "coder", now=0, idle_s=100)
    assert first == AgentEpisodeState(agent="coder")
    pinned = msgspec.structs.replace(first, checkpoint_id="ck-1", last=0)
    assert claim(pinned, "e1", "coder", now=50, idle_s=100) is pinned  # still its own
    with pytest.raises(WireError) as exc:
        claim(pinned, "e1", "intruder", now=50, idle_s=100)
    assert exc.value.status == 403 and "another agent" in exc.value.message
    # Idle past idle_s: forgotten, so the next request (anyone's) starts it afresh.
    assert live(pinned, now=101, idle_s=100) is None
    assert claim(pinned, "e1", "intruder", now=101, idle_s=100).agent == "intruder"


def test_a_continuation_gets_its_parents_answers_while_it_asks_the_same() -> None:
    """The parent's answer again for call i while the agent asks what the parent's call i
    asked; from the first call that differs on, every call is sampled (replay over), under the
    episode's regime and a seed per call when the runner gave them."""
    from aios_rl.envs.loop import step_seed
    from contracts import AgentEpisodeState, ChatMessage, CompletionRequest, CompletionResponse

    def call(i: int, content: str) -> AgentCall:
        messages = [ChatMessage(role="user", content=content)]
        return AgentCall(
            episode_id="parent", index=i, agent="coder",
            request=CompletionRequest(request_id=f"r{i}", checkpoint_id="ck", messages=messages),
            response=CompletionResponse(request_id=f"r{i}", checkpoint_id="ck", text=f"a{i}"),
        )  # fmt: skip

    parent = [call(0, "$ ls"), call(1, "$ cat a.py"), call(2, "$ pytest")]
    state = AgentEpisodeState(agent="coder", checkpoint_id="ck", replay=parent)
    ask = [ChatMessage(role="user", content="$ ls")]
    first = replayed_answer(state, 0, ask, [])
    assert first is not None and first.text == "a0"
    state = msgspec.structs.replace(state, calls=1, replayed=1)  # recorded, replayed
    assert replayed_answer(state, 1, ask, []) is None  # asks another thing: sampled ...
    later = [ChatMessage(role="user", content="$ pytest")]
    gone = msgspec.structs.replace(state, calls=2)  # ... and, replayed no more, from on
    assert replayed_answer(gone, 2, later, []) is None
    tools = [{"type": "function", "function": {"name": "run"}}]
    fresh = AgentEpisodeState(agent="coder", checkpoint_id="ck", replay=parent)
    assert replayed_answer(fresh, 0, ask, tools) is None  # the tools are part of the question
    # Sampling: what the agent asks, unless the runner set the episode's regime and seeds.
    assert sampling_of(None, 3, 0.7, 0.9, 5) == (0.7, 0.9, 5)
    assert sampling_of(fresh, 3, 0.7, 0.9, 5) == (0.7, 0.9, 5)
    fresh = msgspec.structs.replace(
        fresh, regime=DecodingRegime(temperature=1.3, top_p=0.8), sampling_seed=11
    )
    assert sampling_of(fresh, 3, 0.7, 0.9, 5) == (1.3, 0.8, step_seed(11, 3))
    assert sampling_of(fresh, 4, 0.7, 0.9, 5)[2] != step_seed(11, 3)


# -- the service ------------------------------------------------------------------------------------

needs_transformers = pytest.mark.skipif(
    not HAVE_TRANSFORMERS, reason="transformers is not installed"
)


@needs_transformers
@pytest.mark.timeout(180)
async def test_an_openai_client_gets_completions_recorded_per_episode_pinned_and_owned(
    bus: Bus, names: Names
) -> None:
    import openai

    from aios_rl.student.hf import HFConfig, HFStudent

    tok = make_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    registry = CheckpointRegistry(bus)
    ids = []
    for seed in (0, 1):
        student = HFStudent(tiny_lm(tok, seed=seed), tok, HFConfig())
        meta = await registry.store(
            student.to_bytes(), parent_id=ids[-1] if ids else None, created_by="test",
            algorithm="init", backend="hf",
        )  # fmt: skip
        ids.append(meta.checkpoint_id)
    first, second = ids
    await registry.init(first)
    coder, coder_digest = new_token()
    intruder, intruder_digest = new_token()
    tokens = Tokens({"coder": coder_digest, "intruder": intruder_digest})
    sampler, state = build_sampler(
        bus, SamplerSettings(namespace=names.namespace, max_completion_tokens=32)
    )
    gateway, gw = build_gateway(
        bus, AgentGatewaySettings(namespace=names.namespace, port=0, max_tokens=32), tokens
    )  # the tokens given (the file is tested above)
    messages = [{"role": "user", "content": "$ pytest -q\nFAILED test_clamp"}]
    async with running(sampler), running(gateway):
        await asyncio.wait_for(state.until(lambda s: s.active == first), 60)
        await asyncio.wait_for(gw.listening.wait(), 30)
        agent = openai.AsyncOpenAI(base_url=f"{gw.base_url}/v1", api_key=coder, max_retries=0)
        other = openai.AsyncOpenAI(base_url=f"{gw.base_url}/v1", api_key=intruder, max_retries=0)
        nobody = openai.AsyncOpenAI(base_url=f"{gw.base_url}/v1", api_key="wrong", max_retries=0)

        models = [m.id for m in (await agent.models.list()).data]
        assert models == ["active", "last_stable", first]
        with pytest.raises(openai.AuthenticationError):
            await nobody.models.list()
        with pytest.raises(openai.AuthenticationError):
            await nobody.chat.completions.create(model="active", messages=messages)  # type: ignore[arg-type]

        async def ask(client: openai.AsyncOpenAI, episode: str, **kw: object):  # type: ignore[no-untyped-def]
            return await client.chat.completions.create(
                model="active", messages=messages, max_tokens=8, seed=1, logprobs=True,
                top_logprobs=2, extra_headers={"X-Aios-Episode": episode}, **kw,  # type: ignore[arg-type]
            )  # fmt: skip

        a0 = await ask(agent, "ep-1")
        await registry.advance(second, reason="a new checkpoint mid-episode")
        a1 = await ask(agent, "ep-1")
        b0 = await ask(agent, "ep-2")
        assert (a0.model, a1.model, b0.model) == (first, first, second)  # pinned per episode
        with pytest.raises(openai.PermissionDeniedError):
            await ask(other, "ep-1")
        # The episodes live in KV: another replica knows ep-1's pin, owner and call count.
        replica, gw2 = build_gateway(
            bus, AgentGatewaySettings(namespace=names.namespace, port=0, max_tokens=32), tokens
        )
        async with running(replica):
            await asyncio.wait_for(gw2.listening.wait(), 30)
            url2 = f"{gw2.base_url}/v1"
            agent2 = openai.AsyncOpenAI(base_url=url2, api_key=coder, max_retries=0)
            other2 = openai.AsyncOpenAI(base_url=url2, api_key=intruder, max_retries=0)
            a2 = await ask(agent2, "ep-1")
            assert a2.model == first
            with pytest.raises(openai.PermissionDeniedError):
                await ask(other2, "ep-1")
        with pytest.raises(openai.BadRequestError, match="one sample"):
            await ask(agent, "ep-1", n=2)
        with pytest.raises(openai.BadRequestError, match="pinned to checkpoint"):
            await agent.chat.completions.create(
                model=second,
                messages=messages,
                extra_headers={"X-Aios-Episode": "ep-1"},  # type: ignore[arg-type]
            )
        # Streaming: the chunks concatenate to what a non-streamed call of the same seed says.
        chunks = [
            c
            async for c in await agent.chat.completions.create(
                model="active", messages=messages, max_tokens=8, seed=1, stream=True,  # type: ignore[arg-type]
                stream_options={"include_usage": True}, user="ep-3",
            )
        ]  # fmt: skip
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        # ... sent as it was written: a chunk per delta the sampler published, not one at the end.
        pieces = [
            c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
        ]
        tokens = chunks[-1].usage.completion_tokens  # type: ignore[union-attr]
        assert len(pieces) >= min(3, tokens - 1), (pieces, tokens)
        plain = await agent.chat.completions.create(
            model="active",
            messages=messages,
            max_tokens=8,
            seed=1,  # type: ignore[arg-type]
        )
        assert streamed == plain.choices[0].message.content and chunks[-1].usage is not None
        # A runner hands an episode over: the agent's, answered by the active checkpoint
        # whatever model its code names.
        handed = await bus.request(
            names.agent_attach(),
            AgentEpisode(episode_id="ep-run", agent="coder", checkpoint_id="active"),
            AgentEpisode,
            timeout=10,
        )
        assert handed.gateway_url == gw.base_url
        named = await agent.chat.completions.create(
            model="gpt-4o-mini",
            messages=messages,
            max_tokens=4,
            user="ep-run",  # type: ignore[arg-type]
        )
        assert named.model == second
        with pytest.raises(RemoteError, match="another agent"):
            await bus.request(
                names.agent_attach(), AgentEpisode(episode_id="ep-run", agent="intruder"),
                AgentEpisode, timeout=10,
            )  # fmt: skip
        # A continuation of ep-run: its recorded answer again while the agent asks the same,
        # then a sample under the continuation's regime and seed.
        (parent,) = [
            decode(m.data, m.headers, AgentCall)
            async for m in bus.read_stream(names.stream(STREAM_AGENTS), names.agent_call("ep-run"))
        ]
        await bus.request(
            names.agent_attach(),
            AgentEpisode(
                episode_id="ep-branch", agent="coder", checkpoint_id=second, replay=[parent],
                regime=DecodingRegime(temperature=1.5, top_p=0.9), sampling_seed=77,
            ),
            AgentEpisode, timeout=10,
        )  # fmt: skip
        again = await agent.chat.completions.create(
            model="any",
            messages=messages,
            max_tokens=4,
            user="ep-branch",  # type: ignore[arg-type]
        )
        assert again.choices[0].message.content == named.choices[0].message.content
        await agent.chat.completions.create(
            model="any",
            messages=messages,
            max_tokens=4,
            user="ep-branch",  # type: ignore[arg-type]
        )
        calls = [
            decode(m.data, m.headers, AgentCall)
            async for m in bus.read_stream(names.stream(STREAM_AGENTS), names.agent_call("*"))
        ]
    # Every call of a tagged episode is on the stream, in order, as served.
    assert [(c.episode_id, c.index) for c in calls] == [
        ("ep-1", 0), ("ep-1", 1), ("ep-2", 0), ("ep-1", 2), ("ep-3", 0), ("ep-run", 0),
        ("ep-branch", 0), ("ep-branch", 1),
    ]  # fmt: skip
    replayed, sampled = calls[-2:]
    assert replayed.replayed and replayed.response.token_ids == parent.response.token_ids
    assert not sampled.replayed and sampled.response.token_entropies
    assert (sampled.request.temperature, sampled.request.top_p) == (1.5, 0.9)
    assert sampled.request.seed == step_seed(77, 1)
    for call, answer in zip(calls, (a0, a1, b0), strict=False):
        assert call.agent == "coder" and call.response.checkpoint_id == answer.model
        served = [e.logprob for e in answer.choices[0].logprobs.content]  # type: ignore[union-attr]
        assert call.response.token_logprobs == pytest.approx(served)
        assert len(call.response.token_ids) == answer.usage.completion_tokens  # type: ignore[union-attr]
        assert call.request.messages[0].content == messages[0]["content"]
        assert call.response.prompt_ids and call.request.max_tokens == 8
    assert gw.stats()["recorded"] == 7 and gw.stats()["replayed"] == 1  # and 1 by gw2
    assert gw.stats()["refused"] >= 5
