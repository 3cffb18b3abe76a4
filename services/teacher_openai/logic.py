"""The chat-completions request and the reading of its response, pure: no I/O here."""

from __future__ import annotations

from typing import Any

from aios_rl.teachers import VERDICT_INSTRUCTIONS, extract, normalize, render_episode, unusable
from contracts import TeacherRequest, TeacherSignal

__all__ = ["BACKEND", "chat_body", "endpoint_url", "headers", "read_response"]

BACKEND = "openai"


def endpoint_url(base_url: str) -> str:
    """``<base_url>/chat/completions`` (``base_url`` ends in ``/v1``, as OpenAI clients expect)."""
    return base_url.rstrip("/") + "/chat/completions"


def headers(api_key: str) -> dict[str, str]:
    """Request headers; ``Authorization`` only when there is a key."""
    out = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        out["Authorization"] = f"Bearer {api_key}"
    return out


def chat_body(
    req: TeacherRequest, *, model: str, temperature: float, max_tokens: int, json_mode: bool
) -> dict[str, Any]:
    """The chat request: the verdict instructions as the system message, the episode as the
    user's; JSON response mode when asked (its instructions mention JSON, as that mode needs)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": VERDICT_INSTRUCTIONS},
            {
                "role": "user",
                "content": render_episode(req) + "\nReply with the JSON verdict object only.",
            },
        ],
        "temperature": temperature,
        "max_tokens": max_tokens,
    }
    if json_mode:
        body["response_format"] = {"type": "json_object"}
    return body


def read_response(status: int, body: str, *, latency_s: float) -> TeacherSignal:
    """The signal for one HTTP response: a 200 is normalised as a chat completion; any other
    status is an ``error`` that carries the server's message and keeps the body."""
    if status != 200:
        env = extract("openai", body)
        message = env.error or body.strip()[:300] or "(empty body)"
        return unusable(
            "error", f"HTTP {status}: {message}", body, backend=BACKEND, latency_s=latency_s
        )
    return normalize("openai", body, backend=BACKEND, latency_s=latency_s)
