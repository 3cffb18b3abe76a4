"""Settings of the OpenAI-compatible teacher."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from aios_rl.bus import ServiceSettings

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"


@dataclass(frozen=True, kw_only=True)
class OpenAITeacherSettings(ServiceSettings):
    """An OpenAI-compatible chat-completions server as a teacher (``teacher.request.openai``)."""

    base_url: str = ""
    """API base URL, ending in ``/v1`` (falls back to ``OPENAI_BASE_URL``, then
    ``http://127.0.0.1:8000/v1``)."""
    model: str = ""
    """Model name sent with each request (falls back to ``OPENAI_MODEL``; required)."""
    api_key: str = field(default="", repr=False)
    """Bearer token (falls back to ``OPENAI_API_KEY``; none is sent when empty)."""
    json_mode: bool = True
    """Ask for ``response_format: {"type": "json_object"}`` (turn off for servers without it)."""
    temperature: float = 0.0
    """Sampling temperature of the teacher."""
    max_tokens: int = 1024
    """Longest answer the teacher may write."""
    timeout_s: float = 60.0
    """How long one HTTP request may take (then the answer is status ``timeout``)."""
    concurrency: int = 4
    """Requests in flight to the server from this service."""
    max_response_bytes: int = 4 * 1024 * 1024
    """Longest response body read."""

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}.")
        for name in ("max_tokens", "concurrency", "max_response_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if self.base_url and not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {self.base_url!r}.")

    def resolved(self, environ: Mapping[str, str]) -> OpenAITeacherSettings:
        """These settings with the OpenAI client conventions filled in from ``environ``
        (``OPENAI_BASE_URL``, ``OPENAI_MODEL``, ``OPENAI_API_KEY``) where not set.

        Raises ``ValueError`` when no model is named."""
        out = dataclasses.replace(
            self,
            base_url=self.base_url or environ.get("OPENAI_BASE_URL", "") or DEFAULT_BASE_URL,
            model=self.model or environ.get("OPENAI_MODEL", ""),
            api_key=self.api_key or environ.get("OPENAI_API_KEY", ""),
        )
        if not out.model:
            raise ValueError("no model: set --model, AIOS_MODEL or OPENAI_MODEL.")
        return out
