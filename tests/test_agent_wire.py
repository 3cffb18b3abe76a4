"""OpenAI's chat-completions wire format (pure): requests read and checked, refusals that name
their field, answers and streams as the ``openai`` clients read them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aios_rl.agents.wire import (
    ChatRequest,
    ChunkWriter,
    WireError,
    completion_body,
    error_body,
    parse_chat_request,
    split_tool_calls,
    stream_events,
    streamable,
    template_messages,
)
from contracts import ChatMessage, CompletionResponse, FunctionCall, ToolCall
from contracts.agents import TokenAlternative

CAP = 512


def parse(**body: Any) -> ChatRequest:
    doc = {"model": "active", "messages": [{"role": "user", "content": "hi"}], **body}
    return parse_chat_request(json.dumps(doc).encode(), max_tokens_cap=CAP)


def test_a_plain_request_and_every_field_the_student_serves() -> None:
    req = parse()
    assert req.model == "active" and req.messages == [ChatMessage(role="user", content="hi")]
    assert (req.temperature, req.top_p, req.max_tokens, req.stop, req.seed) == (
        1.0, 1.0, None, (), None
    )  # fmt: skip
    assert not (req.stream or req.logprobs or req.tools)
    full = parse(
        temperature=0,
        top_p=0.9,
        max_completion_tokens=64,
        stop=["\n\n", "END"],
        seed=7,
        logprobs=True,
        top_logprobs=3,
        stream=True,
        stream_options={"include_usage": True},
        user="ep-1",
        metadata={"ignored": "yes"},  # harmless fields OpenAI defines are ignored
        parallel_tool_calls=False,
        n=1,
        presence_penalty=0,
    )
    assert (full.temperature, full.top_p, full.max_tokens, full.stop, full.seed) == (
        0.0, 0.9, 64, ("\n\n", "END"), 7
    )  # fmt: skip
    assert (full.logprobs, full.top_logprobs, full.stream, full.include_usage, full.user) == (
        True, 3, True, True, "ep-1"
    )  # fmt: skip
    assert parse(max_tokens=5, stop="x").max_tokens == 5 and parse(stop="x").stop == ("x",)


def test_a_conversation_with_tools_and_content_parts() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "run", "arguments": "{}"}}
    tool = {"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}
    req = parse(
        messages=[
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "fix "}, {"type": "text", "text": "it"}]},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
        ],
        tools=[tool],
        tool_choice="auto",
    )  # fmt: skip
    assert [m.role for m in req.messages] == ["system", "user", "assistant", "tool"]
    assert req.messages[1].content == "fix it"
    assert req.messages[2].tool_calls == [
        ToolCall(id="call_1", function=FunctionCall(name="run", arguments="{}"))
    ]
    assert req.messages[3].tool_call_id == "call_1" and req.tools == [tool]
    assert parse(tools=[tool], tool_choice="none").tools == []  # not offered to the template


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"model": ""}, "model", "model is required"),
        ({"messages": []}, "messages", "non-empty list"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "robot"),
        ({"messages": [{"role": "user"}]}, "messages[0].content", "no content"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id", "needs"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "messages[0].content",
            "'image_url' are not supported",
        ),
        ({"n": 2}, "n", "one sample"),
        ({"temperature": 3}, "temperature", "from 0 to 2"),
        ({"temperature": "hot"}, "temperature", "number"),
        ({"top_p": 0}, "top_p", "above 0"),
        ({"max_tokens": 0}, "max_tokens", f"from 1 to {CAP}"),
        ({"max_tokens": CAP + 1}, "max_tokens", f"from 1 to {CAP}"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "up to 4"),
        ({"stop": [""]}, "stop", "non-empty"),
        ({"seed": 1.5}, "seed", "whole number"),
        ({"top_logprobs": 2}, "top_logprobs", "needs logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "0 to 20"),
        ({"frequency_penalty": 0.5}, "frequency_penalty", "log-probs would not be the policy's"),
        ({"logit_bias": {"42": 5}}, "logit_bias", "not supported"),
        ({"response_format": {"type": "json_object"}}, "response_format", "constrained"),
        ({"tool_choice": "required"}, "tool_choice", "constrained decoding"),
        ({"tools": [{"type": "function"}]}, "tools", "tools must be"),
    ],
)
def test_a_request_the_student_cannot_serve_faithfully_is_refused_naming_the_field(
    body: dict[str, Any], param: str, says: str
) -> None:
    with pytest.raises(WireError) as exc:
        parse(**body)
    assert exc.value.param == param and says in exc.value.message and exc.value.status == 400
    doc = error_body(exc.value)["error"]
    assert (doc["type"], doc["param"], doc["message"]) == (
        "invalid_request_error", param, exc.value.message
    )  # fmt: skip


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b"\xff\xfe"])
def test_a_body_that_is_not_a_json_object_is_refused(body: bytes) -> None:
    with pytest.raises(WireError, match="JSON"):
        parse_chat_request(body, max_tokens_cap=CAP)


def test_tool_calls_in_the_hermes_format_become_openai_tool_calls() -> None:
    text = (
        'Let me look.\n<tool_call>\n{"name": "run", "arguments": {"cmd": "ls"}}\n</tool_call>\n'
        '<tool_call>{"name": "read", "arguments": "{\\"path\\": \\"a\\"}"}</tool_call>'
    )
    rest, calls = split_tool_calls(text, "req-1")
    assert rest == "Let me look."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("run", {"cmd": "ls"}),
        ("read", {"path": "a"}),
    ]
    assert len({c.id for c in calls}) == 2 and calls == split_tool_calls(text, "req-1")[1]
    assert calls[0].id != split_tool_calls(text, "req-2")[1][0].id  # ids per request
    only, _ = split_tool_calls('<tool_call>{"name": "x"}</tool_call>', "r")
    assert only is None
    broken = "<tool_call>{not json}</tool_call> and <tool_call>[1]</tool_call>"
    assert split_tool_calls(broken, "r") == (broken, [])  # left for the agent to see
    assert split_tool_calls("plain", "r") == ("plain", [])


VOCAB = {1: "Hel", 2: "lo", 3: " world", 4: "<|im_end|>", 9: "Hi"}


def _resp(**kw: Any) -> CompletionResponse:
    base = dict(
        request_id="r1",
        checkpoint_id="ck-7",
        text="Hello world",
        finish_reason="stop",
        prompt_ids=[5, 6, 7],
        token_ids=[1, 2, 3, 4],
        token_logprobs=[-0.1, -0.2, -0.3, -0.05],
        top_logprobs=[[TokenAlternative(token_id=9, logprob=-2.5)]] * 4,
    )
    return CompletionResponse(**{**base, **kw})  # type: ignore[arg-type]


def test_the_answer_carries_the_checkpoint_usage_and_asked_logprobs() -> None:
    body = completion_body(parse(), _resp(), completion_id="c1", created=5, decode=VOCAB.get)
    assert (body["object"], body["model"], body["id"], body["created"]) == (
        "chat.completion", "ck-7", "c1", 5
    )  # fmt: skip
    (choice,) = body["choices"]
    assert choice["message"] == {"role": "assistant", "content": "Hello world"}
    assert choice["finish_reason"] == "stop" and choice["logprobs"] is None
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    asked = parse(logprobs=True, top_logprobs=1)
    lp = completion_body(asked, _resp(), completion_id="c", created=0, decode=VOCAB.get)
    content = lp["choices"][0]["logprobs"]["content"]
    assert [(e["token"], e["logprob"]) for e in content] == [
        ("Hel", -0.1), ("lo", -0.2), (" world", -0.3), ("<|im_end|>", -0.05)
    ]  # fmt: skip
    assert content[0]["bytes"] == list(b"Hel")
    assert content[0]["top_logprobs"] == [{"token": "Hi", "logprob": -2.5, "bytes": list(b"Hi")}]
    call = ToolCall(id="call_a", function=FunctionCall(name="run", arguments="{}"))
    tools = completion_body(
        parse(),
        _resp(text="", tool_calls=[call], finish_reason="tool_calls"),
        completion_id="c",
        created=0,
        decode=VOCAB.get,
    )["choices"][0]
    assert tools["finish_reason"] == "tool_calls" and tools["message"]["content"] is None
    assert tools["message"]["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "run", "arguments": "{}"}}
    ]


def _events(raw: list[bytes]) -> list[Any]:
    out = []
    for e in raw:
        text = e.decode()
        assert text.startswith("data: ") and text.endswith("\n\n")
        data = text[len("data: ") : -2]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_text_is_streamed_as_written_but_what_a_stop_or_a_tool_could_change() -> None:
    """``streamable``: all of the text so far, less what the longest stop string could still
    cut and a character not decoded whole; nothing with tools. The writer sends live text, then
    the answer's rest after it."""
    assert streamable("Hello wor", stop=[], tools=False) == "Hello wor"
    assert streamable("Hello wor", stop=["STOP", "\n"], tools=False) == "Hello "
    assert streamable("Hel\ufffd", stop=[], tools=False) == "Hel"
    assert streamable("a \ufffd b", stop=[], tools=False) == "a \ufffd b"  # mid-text: final
    assert streamable("Hello", stop=[], tools=True) == ""
    req = parse(stream=True)
    writer = ChunkWriter(req, completion_id="c1", created=5, model="ck-7")
    live = [writer.start(), writer.content("Hel"), writer.content(""), writer.content("lo")]
    events = _events([e for e in live if e is not None] + writer.finish(_resp(), VOCAB.get))
    text = [c["choices"][0]["delta"].get("content") for c in events[:-1] if c["choices"]]
    assert text == ["", "Hel", "lo", " world", None] and events[-1] == "[DONE]"
    assert events[1]["model"] == "ck-7"


def test_a_stream_concatenates_to_the_answer_and_ends_with_done() -> None:
    req = parse(stream=True, stream_options={"include_usage": True})
    events = _events(
        stream_events(req, _resp(), completion_id="c1", created=5, decode=VOCAB.get, pieces=["Hel", "lo world"])
    )  # fmt: skip
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "c1" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "Hello world"
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 7
    # With logprobs: one chunk per token, each with its entry; the text still concatenates
    # (the end-of-turn token adds none).
    lp = _events(
        stream_events(parse(stream=True, logprobs=True), _resp(), completion_id="c", created=0, decode=VOCAB.get)
    )[1:-2]  # fmt: skip
    assert [c["choices"][0]["logprobs"]["content"][0]["token"] for c in lp] == [
        "Hel", "lo", " world", "<|im_end|>"
    ]  # fmt: skip
    assert "".join(c["choices"][0]["delta"]["content"] for c in lp) == "Hello world"
    call = ToolCall(id="call_a", function=FunctionCall(name="run", arguments="{}"))
    tc = _events(
        stream_events(
            parse(stream=True),
            _resp(text="", tool_calls=[call], finish_reason="tool_calls"),
            completion_id="c",
            created=0,
            decode=VOCAB.get,
        )
    )
    assert tc[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "run"
    assert tc[1]["choices"][0]["delta"]["tool_calls"][0]["index"] == 0
    assert tc[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_the_openai_client_reads_the_answer_and_the_stream() -> None:
    # The client's own types (what `openai.OpenAI().chat.completions.create` returns).
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    call = ToolCall(id="call_a", function=FunctionCall(name="run", arguments='{"cmd": "ls"}'))
    for resp in (_resp(), _resp(text="", tool_calls=[call], finish_reason="tool_calls")):
        for req in (parse(), parse(logprobs=True, top_logprobs=1)):
            body = completion_body(req, resp, completion_id="c", created=1, decode=VOCAB.get)
            done = ChatCompletion.model_validate(body)
            assert done.choices[0].finish_reason == resp.finish_reason
            assert done.model == "ck-7" and done.usage is not None
            if resp.tool_calls:
                assert done.choices[0].message.tool_calls[0].function.name == "run"  # type: ignore[index,union-attr]
            streamed = parse(
                stream=True, logprobs=req.logprobs, stream_options={"include_usage": True}
            )
            events = _events(
                stream_events(streamed, resp, completion_id="c", created=1, decode=VOCAB.get)
            )
            chunks = [ChatCompletionChunk.model_validate(e) for e in events[:-1]]
            assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 7


def test_the_conversation_reaches_the_chat_template_in_openai_shape() -> None:
    call = ToolCall(id="c1", function=FunctionCall(name="run", arguments='{"cmd": "ls"}'))
    odd = ToolCall(id="c2", function=FunctionCall(name="run", arguments="not json"))
    msgs = [
        ChatMessage(role="system", content="be brief"),
        ChatMessage(role="assistant", tool_calls=[call, odd]),
        ChatMessage(role="tool", content="a.py", tool_call_id="c1", name="run"),
    ]
    out = template_messages(msgs)
    assert out[0] == {"role": "system", "content": "be brief"}
    assert out[1]["content"] == "" and [c["function"]["arguments"] for c in out[1]["tool_calls"]] == [
        {"cmd": "ls"}, "not json"
    ]  # fmt: skip
    assert out[2] == {"role": "tool", "content": "a.py", "name": "run", "tool_call_id": "c1"}


def _call(index: int, at: float, text: str = "ls", checkpoint: str = "ck-1", **kw: Any) -> Any:
    from contracts import AgentCall, CompletionRequest

    request = CompletionRequest(
        request_id=f"r{index}",
        checkpoint_id=checkpoint,
        messages=[
            ChatMessage(role="system", content="fix it"),
            ChatMessage(role="user", content=f"turn {index}"),
            ChatMessage(role="assistant", content="earlier"),
        ],
    )
    response = _resp(checkpoint_id=checkpoint, text=text, prompt_ids=[7, index], **kw)
    return AgentCall(
        episode_id="e", index=index, agent="a", request=request, response=response, at=at
    )


def test_an_agents_calls_become_its_trajectory_credited_by_its_moves() -> None:
    from aios_rl.agents.episodes import EnvMove, agent_trajectory

    calls = [_call(1, 20.0, text="cat a.py"), _call(0, 10.0)]
    moves = [EnvMove(5.0, "x", 0.1), EnvMove(15.0, "ls", 0.25), EnvMove(25.0, "cat", -0.5)]
    checkpoint, steps = agent_trajectory(calls, moves)
    assert checkpoint == "ck-1" and [s.index for s in steps] == [0, 1]
    assert [s.action for s in steps] == ["ls", "cat a.py"]
    assert [s.observation for s in steps] == ["turn 0", "turn 1"]  # the last non-assistant turn
    assert [s.progress for s in steps] == [0.35, -0.5]  # a move before any call: the first's
    assert steps[0].prompt_ids == [7, 0] and steps[0].token_ids == [1, 2, 3, 4]
    assert steps[0].logprob == pytest.approx(-0.65)
    call = ToolCall(id="c", function=FunctionCall(name="run", arguments='{"cmd":"ls"}'))
    _, (tool,) = agent_trajectory([_call(0, 1.0, text="", tool_calls=[call])])
    assert json.loads(tool.action)[0]["function"]["name"] == "run"
    with pytest.raises(ValueError, match="nothing"):
        agent_trajectory([])
    with pytest.raises(ValueError, match="2 checkpoints"):
        agent_trajectory([_call(0, 1.0), _call(1, 2.0, checkpoint="ck-2")])
    with pytest.raises(ValueError, match="calls missing"):
        agent_trajectory([_call(0, 1.0), _call(2, 2.0)])


def test_a_continuations_replayed_calls_are_replayed_steps() -> None:
    """A continuation's calls that gave its parent's answers again are replayed steps: never
    trained on (no credit either), and their checkpoint (the parent's) does not count against
    the one its own sampled calls were answered by. A step's entropy is its tokens' mean."""
    import msgspec

    from aios_rl.agents.episodes import EnvMove, agent_trajectory

    parent = _call(0, 1.0, checkpoint="ck-0", token_entropies=[0.5, 1.5])
    calls = [msgspec.structs.replace(parent, replayed=True), _call(1, 2.0, checkpoint="ck-1")]
    checkpoint, steps = agent_trajectory(calls, [EnvMove(1.5, "ls", 0.5), EnvMove(2.5, "x", 0.25)])
    assert checkpoint == "ck-1"
    assert [s.replayed for s in steps] == [True, False]
    assert [s.progress for s in steps] == [0.0, 0.25]  # the replayed step's move is its parent's
    assert steps[0].entropy == pytest.approx(1.0) and steps[0].token_entropies == [0.5, 1.5]
    only = agent_trajectory([msgspec.structs.replace(parent, replayed=True)])
    assert only[0] == "ck-0" and only[1][0].replayed
