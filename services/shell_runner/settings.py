"""Settings of the shell runner."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.bus import ServiceSettings


@dataclass(frozen=True, kw_only=True)
class ShellRunnerSettings(ServiceSettings):
    """Run shell bug-fix episodes: each step's action asked of the sampler, commands run in the
    sandbox (``AIOS_ALLOW_UNSANDBOXED=1`` is the only way to run without one)."""

    concurrency: int = 2
    """Episodes run at once by one replica (test runs are CPU-bound: about one per core)."""
    act_timeout_s: float = 30.0
    """Deadline for the sampler's answer to one step."""
    max_steps: int = 12
    """Most actions an episode may take (a job's ``max_steps`` is capped by this)."""
    command_timeout_s: float = 60.0
    """Wall-clock limit of one sandboxed command (a test run or a free-text command)."""
    cpu_seconds: int = 30
    """CPU seconds per sandboxed process."""
    memory_mb: int = 1024
    """Address space per sandboxed process, and their resident total, in MiB."""
    max_processes: int = 64
    """Processes and threads a sandboxed command may have at once."""
    observation_chars: int = 2400
    """Command output kept in an observation."""
    allow_free_text: bool = True
    """Run actions that are not candidates as shell commands (students that write text)."""
    task_cache: int = 512
    """Tasks kept decoded in memory."""
    ack_wait_s: float = 0.0
    """Seconds before the jobs a dead replica held go to another (0: the contract's ack wait,
    300 s). Running episodes send heartbeats, so a short wait (e.g. 15) only speeds recovery.
    Give every replica the same value (env ``AIOS_ACK_WAIT_S``): the runner sets it on the shared
    consumer at start and other services' start-ups keep it; at 0 the runner restores the
    contract's. At least 1 s."""

    def __post_init__(self) -> None:
        if self.ack_wait_s != 0 and not self.ack_wait_s >= 1.0:
            raise ValueError(
                f"ack_wait_s must be 0 (the contract's) or at least 1 second, got {self.ack_wait_s}."
            )
        if self.concurrency < 1 or self.max_steps < 1:
            raise ValueError("concurrency and max_steps must be at least 1.")
