"""Settings of the shell runner."""

from __future__ import annotations

from dataclasses import dataclass

from aios_rl.envs.runner import RunnerSettings


@dataclass(frozen=True, kw_only=True)
class ShellRunnerSettings(RunnerSettings):
    """Run shell bug-fix episodes: each step's action asked of the sampler, commands run in the
    sandbox (``AIOS_ALLOW_UNSANDBOXED=1`` is the only way to run without one). ``ack_wait_s`` 0
    keeps the contract's 300 s."""

    concurrency: int = 2
    """Episodes run at once by one replica (test runs are CPU-bound: about one per core)."""
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
    work_dir: str = ""
    """Where episodes' task directories go (default ``$TMPDIR/aios-shell-runner``): one folder
    per runner process; at start a runner removes the folders of processes that are gone (a
    killed runner cannot clean up after itself)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {self.max_steps}.")
