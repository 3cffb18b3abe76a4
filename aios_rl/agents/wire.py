"""OpenAI's chat-completions wire format, read and written (pure: msgspec and the standard
library).

An agent that speaks to ``/v1/chat/completions`` sends a JSON body the endpoint reads with
:func:`parse_chat_request` into a :class:`ChatRequest` (what the student is asked, checked field by
field; a request the student cannot serve faithfully is refused with a :class:`WireError` naming
the field, never silently changed), and gets back :func:`completion_body` (non-streaming) or
:func:`stream_events` (server-sent events, ``data: [DONE]`` last).

What is refused, and why: ``n`` above 1 (a turn of an episode is one sample), penalties and
``logit_bias`` (they change the distribution the completion is sampled from, so the recorded
log-probs would not be the policy's), ``tool_choice`` ``required`` or a named function and
``response_format`` other than text (both need constrained decoding, which the student does not
do), and content parts other than text.

Tool calls: a model whose chat template offers tools writes a call as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the Hermes format most open
templates use); :func:`split_tool_calls` turns those into OpenAI ``tool_calls``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from aios_rl.errors import AiosError
from contracts import ChatMessage, CompletionResponse, FunctionCall, ToolCall

__all__ = [
    "MAX_STOP",
    "MAX_TOP_LOGPROBS",
    "ChatRequest",
    "ChunkWriter",
    "WireError",
    "completion_body",
    "error_body",
    "parse_chat_request",
    "split_tool_calls",
    "stream_events",
    "streamable",
    "template_messages",
]

MAX_STOP = 4
"""Stop strings a request may give (OpenAI's limit)."""
MAX_TOP_LOGPROBS = 20
"""Alternatives per token a request may ask for (OpenAI's limit)."""


class WireError(AiosError):
    """A request the endpoint refuses: ``status`` (400 unless said), the field (``param``) and
    OpenAI's error ``code``."""

    def __init__(
        self, message: str, *, param: str | None = None, code: str | None = None, status: int = 400
    ) -> None:
        super().__init__(message)
        self.message, self.param, self.code, self.status = message, param, code, status


def error_body(err: WireError) -> dict[str, Any]:
    """OpenAI's error object for ``err``."""
    kind = {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}
    return {
        "error": {
            "message": err.message,
            "type": kind.get(err.status, "invalid_request_error"),
            "param": err.param,
            "code": err.code,
        }
    }


@dataclass(frozen=True)
class ChatRequest:
    """A chat-completions request, checked: what the student is asked to do."""

    model: str
    messages: list[ChatMessage]
    stream: bool = False
    include_usage: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    """``max_completion_tokens`` or ``max_tokens``; ``None``: the endpoint's limit."""
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    tools: list[dict[str, Any]] = field(default_factory=list)
    """Empty when ``tool_choice`` is ``none``: the template is not offered them."""
    user: str = ""


_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}
"""OpenAI's roles, as the chat template reads them (``developer`` is the newer ``system``)."""


def _number(body: dict[str, Any], key: str, low: float, high: float, default: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise WireError(f"{key} must be a number from {low:g} to {high:g}", param=key)
    return float(value)


def _top_p(body: dict[str, Any]) -> float:
    value = _number(body, "top_p", 0.0, 1.0, 1.0)
    if value == 0:
        raise WireError("top_p must be above 0 (and at most 1)", param="top_p")
    return value


def _text(content: Any, where: str) -> str | None:
    """A message's content as text: a string, or a list of ``text`` parts joined."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise WireError(
                    f"{where}: content parts of type {kind!r} are not supported (text only)",
                    param=where,
                )
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise WireError(f"{where}: content must be a string or a list of parts", param=where)


def _tool_calls(raw: Any, where: str) -> list[ToolCall]:
    if raw is None:
        return []
    try:
        return msgspec.convert(raw, list[ToolCall])
    except msgspec.ValidationError as exc:
        raise WireError(f"{where}.tool_calls: {exc}", param=f"{where}.tool_calls") from None


def _message(raw: Any, i: int) -> ChatMessage:
    where = f"messages[{i}]"
    if not isinstance(raw, dict):
        raise WireError(f"{where} must be an object", param=where)
    role = _ROLES.get(raw.get("role"))  # type: ignore[arg-type]
    if role is None:
        raise WireError(
            f"{where}.role must be system, developer, user, assistant or tool, "
            f"not {raw.get('role')!r}",
            param=f"{where}.role",
        )
    content = _text(raw.get("content"), f"{where}.content")
    calls = _tool_calls(raw.get("tool_calls"), where) if role == "assistant" else []
    if content is None and not calls:
        raise WireError(f"{where} has no content", param=f"{where}.content")
    call_id = raw.get("tool_call_id")
    if role == "tool" and not isinstance(call_id, str):
        raise WireError(
            f"{where}: a tool message needs tool_call_id", param=f"{where}.tool_call_id"
        )
    name = raw.get("name")
    return ChatMessage(
        role=role,  # type: ignore[arg-type]
        content=content,
        name=name if isinstance(name, str) else None,
        tool_calls=calls,
        tool_call_id=call_id if role == "tool" else None,
    )


def _refuse_sampling_changes(body: dict[str, Any]) -> None:
    n = body.get("n")
    if n is not None and n != 1:
        raise WireError("n must be 1: a turn of an episode is one sample", param="n")
    neutral = {"presence_penalty": 0, "frequency_penalty": 0, "repetition_penalty": 1}
    for key, value in neutral.items():
        if body.get(key, value) != value:
            raise WireError(
                f"{key} is not supported: it changes the distribution sampled from, so the "
                "recorded log-probs would not be the policy's",
                param=key,
            )
    if body.get("logit_bias"):
        raise WireError(
            "logit_bias is not supported: it changes the distribution sampled from, so the "
            "recorded log-probs would not be the policy's",
            param="logit_bias",
        )
    fmt = body.get("response_format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
        raise WireError(
            "response_format other than text is not supported (no constrained decoding)",
            param="response_format",
        )


def _tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(
        isinstance(t, dict)
        and t.get("type") == "function"
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
        for t in tools
    ):
        raise WireError(
            'tools must be a list of {"type": "function", "function": {"name": ...}}',
            param="tools",
        )
    choice = body.get("tool_choice")
    if choice in (None, "auto"):
        return tools
    if choice == "none":
        return []
    raise WireError(
        "tool_choice must be auto or none: required and named functions need constrained "
        "decoding, which the student does not do",
        param="tool_choice",
    )


def parse_chat_request(body: bytes, *, max_tokens_cap: int) -> ChatRequest:
    """The chat-completions request in ``body`` (JSON), checked. Fields OpenAI defines and the
    student ignores without harm (``metadata``, ``store``, ``parallel_tool_calls``, ...) are
    ignored; one that would change what is sampled without the record showing it is refused.
    Raises :class:`WireError`."""
    try:
        raw = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise WireError("the body is not JSON") from None
    if not isinstance(raw, dict):
        raise WireError("the body must be a JSON object")
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        raise WireError("model is required: a checkpoint id, active or last_stable", param="model")
    messages = raw.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError("messages must be a non-empty list", param="messages")
    _refuse_sampling_changes(raw)
    limit = raw.get("max_completion_tokens", raw.get("max_tokens"))
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= max_tokens_cap
    ):
        raise WireError(
            f"max_tokens must be a whole number from 1 to {max_tokens_cap}", param="max_tokens"
        )
    stop = raw.get("stop")
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if len(stops) > MAX_STOP or not all(isinstance(s, str) and s for s in stops):
        raise WireError(
            f"stop must be a string or up to {MAX_STOP} non-empty strings", param="stop"
        )
    seed = raw.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise WireError("seed must be a whole number", param="seed")
    logprobs = raw.get("logprobs") or False
    top = raw.get("top_logprobs") or 0
    if not isinstance(logprobs, bool):
        raise WireError("logprobs must be true or false", param="logprobs")
    if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
        raise WireError(
            f"top_logprobs must be a whole number from 0 to {MAX_TOP_LOGPROBS}",
            param="top_logprobs",
        )
    if top and not logprobs:
        raise WireError("top_logprobs needs logprobs: true", param="top_logprobs")
    stream = raw.get("stream") or False
    options = raw.get("stream_options") or {}
    if not isinstance(stream, bool) or not isinstance(options, dict):
        raise WireError("stream must be true or false, stream_options an object", param="stream")
    user = raw.get("user") or ""
    return ChatRequest(
        model=model,
        messages=[_message(m, i) for i, m in enumerate(messages)],
        stream=stream,
        include_usage=bool(options.get("include_usage")),
        temperature=_number(raw, "temperature", 0.0, 2.0, 1.0),
        top_p=_top_p(raw),
        max_tokens=limit,
        stop=stops,
        seed=seed,
        logprobs=logprobs,
        top_logprobs=top,
        tools=_tools(raw),
        user=user if isinstance(user, str) else "",
    )


def template_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The conversation as a chat template reads it: OpenAI's shape, a tool call's
    ``arguments`` given as the object its JSON text holds (what templates render with
    ``tojson``; text that is not a JSON object stays text)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        doc: dict[str, Any] = {"role": m.role, "content": m.content or ""}
        if m.name is not None:
            doc["name"] = m.name
        if m.tool_call_id is not None:
            doc["tool_call_id"] = m.tool_call_id
        if m.tool_calls:
            calls = []
            for c in m.tool_calls:
                try:
                    args: Any = json.loads(c.function.arguments)
                except ValueError:
                    args = c.function.arguments
                if not isinstance(args, dict):
                    args = c.function.arguments
                calls.append(
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": args},
                    }
                )
            doc["tool_calls"] = calls
        out.append(doc)
    return out


_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def split_tool_calls(text: str, request_id: str) -> tuple[str | None, list[ToolCall]]:
    """``text`` less the Hermes-format tool calls it holds, and those calls (ids derived from
    ``request_id``). A block that is not a JSON object with a string ``name`` stays in the text:
    the agent sees what the model wrote."""
    calls: list[ToolCall] = []
    kept: list[str] = []
    last = 0
    for m in _TOOL_CALL.finditer(text):
        try:
            doc = json.loads(m.group(1))
        except ValueError:
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
            continue
        args = doc.get("arguments", {})
        digest = hashlib.sha256(f"{request_id}/{len(calls)}".encode()).hexdigest()[:24]
        calls.append(
            ToolCall(
                id=f"call_{digest}",
                function=FunctionCall(
                    name=doc["name"], arguments=args if isinstance(args, str) else json.dumps(args)
                ),
            )
        )
        kept.append(text[last : m.start()])
        last = m.end()
    if not calls:
        return text, []
    kept.append(text[last:])
    rest = "".join(kept).strip()
    return (rest or None), calls


def _logprobs(
    resp: CompletionResponse, decode: Callable[[int], str], top: int
) -> dict[str, list[dict[str, Any]]]:
    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        text = decode(token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    content = []
    for i, (t, lp) in enumerate(zip(resp.token_ids, resp.token_logprobs, strict=True)):
        alts = resp.top_logprobs[i] if i < len(resp.top_logprobs) else []
        content.append(
            {**entry(t, lp), "top_logprobs": [entry(a.token_id, a.logprob) for a in alts[:top]]}
        )
    return {"content": content}


def _usage(resp: CompletionResponse) -> dict[str, int]:
    n_prompt, n_out = len(resp.prompt_ids), len(resp.token_ids)
    return {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}


def _message_out(resp: CompletionResponse) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": resp.text if resp.text else None}
    if resp.tool_calls:
        out["tool_calls"] = [msgspec.to_builtins(c) for c in resp.tool_calls]
    elif out["content"] is None:
        out["content"] = ""
    return out


def completion_body(
    req: ChatRequest,
    resp: CompletionResponse,
    *,
    completion_id: str,
    created: int,
    decode: Callable[[int], str],
) -> dict[str, Any]:
    """The non-streaming answer (``chat.completion``); ``model`` is the checkpoint that
    answered; ``decode`` turns a token id into its text (for ``logprobs``)."""
    choice: dict[str, Any] = {
        "index": 0,
        "message": _message_out(resp),
        "finish_reason": resp.finish_reason,
        "logprobs": _logprobs(resp, decode, req.top_logprobs) if req.logprobs else None,
    }
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": resp.checkpoint_id,
        "choices": [choice],
        "usage": _usage(resp),
        "system_fingerprint": resp.checkpoint_id,
    }


def _event(doc: dict[str, Any] | str) -> bytes:
    data = doc if isinstance(doc, str) else json.dumps(doc, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class ChunkWriter:
    """A streamed answer's server-sent events (``chat.completion.chunk``), written as the
    completion goes: :meth:`start` (the role), :meth:`content` for text as it is written, then
    :meth:`finish` with the whole answer."""

    def __init__(self, req: ChatRequest, *, completion_id: str, created: int, model: str) -> None:
        self.req = req
        self.head = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": model,
        }
        self.sent = ""
        """The content sent so far."""

    def chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None, **extra}
        doc = {**self.head, "choices": [choice]}
        if self.req.include_usage:
            doc["usage"] = None
        return _event(doc)

    def start(self) -> bytes:
        return self.chunk({"role": "assistant", "content": ""})

    def content(self, text: str) -> bytes | None:
        """A chunk of ``text`` written since the last (``None`` for none)."""
        if not text:
            return None
        self.sent += text
        return self.chunk({"content": text})

    def finish(
        self,
        resp: CompletionResponse,
        decode: Callable[[int], str],
        pieces: Sequence[str] | None = None,
    ) -> list[bytes]:
        """The rest of the answer ``resp``: its content beyond what was sent (``pieces``, e.g.
        one per token; default: at once; with ``logprobs`` and nothing sent yet, one chunk per
        token carrying its entry), the tool calls, the finish reason, the usage when asked for
        (``stream_options.include_usage``), then ``[DONE]``."""
        out: list[bytes] = []
        if self.req.logprobs and not self.sent:
            entries = _logprobs(resp, decode, self.req.top_logprobs)["content"]
            # One chunk per token; the content is the text's own slice so the chunks
            # concatenate to the message's text whatever the tokenizer's spacing.
            texts = _token_slices(resp.text, [e["token"] for e in entries])
            for text, entry in zip(texts, entries, strict=True):
                out.append(self.chunk({"content": text}, logprobs={"content": [entry]}))
            self.sent = resp.text
        elif resp.text.startswith(self.sent):
            rest = resp.text[len(self.sent) :]
            for piece in pieces if pieces is not None else [rest]:
                chunk = self.content(piece)
                if chunk is not None:
                    out.append(chunk)
        if resp.tool_calls:
            calls = [{"index": i, **msgspec.to_builtins(c)} for i, c in enumerate(resp.tool_calls)]
            out.append(self.chunk({"tool_calls": calls}))
        out.append(self.chunk({}, resp.finish_reason))
        if self.req.include_usage:
            out.append(_event({**self.head, "choices": [], "usage": _usage(resp)}))
        out.append(_event("[DONE]"))
        return out


def streamable(text: str, *, stop: Sequence[str], tools: bool) -> str:
    """What of ``text``, a completion's text so far, can be sent before it ends: all of it but
    what a stop string could still cut (its longest one's length less one, at the end) and a
    character not yet decoded whole; nothing when tools were offered (the text may turn out to
    be a tool call). A replacement character at the end may be a character whose bytes are not
    all written yet: held back too."""
    if tools:
        return ""
    hold = max((len(x) for x in stop if x), default=1) - 1
    out = text[: len(text) - hold] if hold else text
    return out.rstrip("\ufffd")


def stream_events(
    req: ChatRequest,
    resp: CompletionResponse,
    *,
    completion_id: str,
    created: int,
    decode: Callable[[int], str],
    pieces: Sequence[str] | None = None,
) -> list[bytes]:
    """The whole streamed answer at once (:class:`ChunkWriter`): the role, the content
    (``pieces``, e.g. one per token; default: the whole text at once; with ``logprobs``, one
    chunk per token carrying its entry), the tool calls, the finish reason, the usage when asked
    for, then ``[DONE]``."""
    writer = ChunkWriter(
        req, completion_id=completion_id, created=created, model=resp.checkpoint_id
    )
    return [writer.start(), *writer.finish(resp, decode, pieces)]


def _token_slices(text: str, tokens: Sequence[str]) -> list[str]:
    """``text`` cut into one slice per token, following the tokens' texts where they match it
    and giving what is left to the last one (a stop string or an end-of-turn token decodes to
    text the message does not hold)."""
    out: list[str] = []
    at = 0
    for tok in tokens:
        if tok and text.startswith(tok, at):
            out.append(tok)
            at += len(tok)
        else:
            out.append("")
    if out and at < len(text):
        out[-1] += text[at:]
    return out
