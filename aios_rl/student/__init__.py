"""The student policy: backends behind one interface, and loading them from checkpoint bytes."""

from __future__ import annotations

import io

import torch

from .base import ActOutput, Decision, Evaluation, Regime, StudentBackend, StudentError
from .tiny import TinyConfig, TinyStudent

__all__ = [
    "ActOutput",
    "Decision",
    "Evaluation",
    "Regime",
    "StudentBackend",
    "StudentError",
    "TinyConfig",
    "TinyStudent",
    "load_student",
    "new_student",
]


def new_student(backend: str = "tiny", *, seed: int = 0) -> TinyStudent:
    """A freshly initialised student. Raises ``StudentError`` for an unknown backend."""
    if backend == "tiny":
        return TinyStudent(TinyConfig(seed=seed))
    raise StudentError(f"unknown student backend {backend!r}; known: tiny")


def load_student(data: bytes) -> TinyStudent:
    """A student from checkpoint bytes. Raises ``StudentError`` when they are not a checkpoint."""
    try:
        payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt input; translate them once here
        raise StudentError(f"checkpoint bytes do not load: {exc}") from exc
    backend = payload.get("backend") if isinstance(payload, dict) else None
    if backend == "tiny":
        return TinyStudent.from_payload(payload)
    raise StudentError(f"checkpoint names unknown backend {backend!r}")
