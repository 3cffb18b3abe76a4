"""OpenAI-compatible teacher handlers: one chat completion per request."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections import Counter

from aios_rl.bus import Bus, get_logger
from aios_rl.teachers import keep_raw, unusable
from contracts import TeacherRequest, TeacherSignal

from .logic import BACKEND, chat_body, endpoint_url, headers, read_response
from .settings import OpenAITeacherSettings


def post_json(
    url: str, body: bytes, hdrs: dict[str, str], *, timeout_s: float, max_bytes: int
) -> tuple[int, str]:
    """POST ``body`` and return the status and the (capped) response text, HTTP errors included.

    Raises ``urllib.error.URLError`` when the server cannot be reached and ``TimeoutError``
    past ``timeout_s``."""
    request = urllib.request.Request(url, data=body, headers=hdrs, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            return resp.status, resp.read(max_bytes).decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read(max_bytes).decode("utf-8", errors="replace")


class OpenAITeacher:
    """Answers ``teacher.request.openai`` from a chat-completions server."""

    def __init__(self, bus: Bus, settings: OpenAITeacherSettings) -> None:
        self.bus = bus
        self.settings = settings
        self.url = endpoint_url(settings.base_url)
        self.counts: Counter[str] = Counter()
        self.log = get_logger(url=self.url, model=settings.model)

    async def answer(self, req: TeacherRequest) -> TeacherSignal:
        """Endpoint handler: ask the server, normalise its answer (an unusable one keeps the
        body, stored whole in ``evidence`` when long)."""
        s = self.settings
        body = json.dumps(
            chat_body(
                req,
                model=s.model,
                temperature=s.temperature,
                max_tokens=s.max_tokens,
                json_mode=s.json_mode,
            )
        ).encode()
        started = time.monotonic()
        try:
            status, text = await asyncio.to_thread(
                post_json,
                self.url,
                body,
                headers(s.api_key),
                timeout_s=s.timeout_s,
                max_bytes=s.max_response_bytes,
            )
        except (TimeoutError, urllib.error.URLError) as exc:
            timed_out = isinstance(exc, TimeoutError) or isinstance(
                getattr(exc, "reason", None), TimeoutError
            )
            signal = unusable(
                "timeout" if timed_out else "error",
                f"no answer from {self.url} within {s.timeout_s:g}s"
                if timed_out
                else f"cannot reach {self.url}: {exc}",
                "",
                backend=BACKEND,
                latency_s=time.monotonic() - started,
            )
        except OSError as exc:  # the connection broke mid-response
            signal = unusable(
                "error",
                f"the exchange with {self.url} failed: {exc}",
                "",
                backend=BACKEND,
                latency_s=time.monotonic() - started,
            )
        else:
            signal = read_response(status, text, latency_s=time.monotonic() - started)
            signal = await keep_raw(self.bus, signal, text)
        self.counts[signal.status] += 1
        self.log.debug("openai.answered", episode_id=req.episode_id, status=signal.status)
        return signal

    def stats(self) -> dict[str, float]:
        return {f"status_{k}": float(v) for k, v in self.counts.items()}
