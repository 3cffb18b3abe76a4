"""Settings of a CLI teacher."""

from __future__ import annotations

from dataclasses import dataclass, field

from aios_rl.bus import ServiceSettings

from .logic import CLIS


@dataclass(frozen=True, kw_only=True)
class CliTeacherSettings(ServiceSettings):
    """A coding-agent CLI as a teacher: the service ``teacher-<cli>`` answers
    ``teacher.request.<cli>``."""

    cli: str = "claude"
    """Which CLI teaches: claude, codex, gemini or opencode (its output format follows)."""
    executable: str = ""
    """The CLI's executable, a name on PATH or a path (default: the CLI's own name)."""
    extra_args: list[str] = field(default_factory=list)
    """More arguments for the CLI, comma-separated (``--extra-args=--model,sonnet``)."""
    timeout_s: float = 120.0
    """How long one run may take before it is killed (answered with status ``timeout``)."""
    concurrency: int = 2
    """CLI processes run at once by this service; further requests wait their turn."""
    max_output_bytes: int = 4 * 1024 * 1024
    """Output kept from one run (stdout and stderr each); the rest is read and dropped."""
    workdir: str = ""
    """Directory the CLI runs in (default: a fresh, empty temporary directory per request)."""

    def __post_init__(self) -> None:
        if self.cli not in CLIS:
            raise ValueError(f"cli must be one of {', '.join(CLIS)}, got {self.cli!r}.")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}.")
        for name in ("concurrency", "max_output_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")

    @property
    def program(self) -> str:
        """The executable to run."""
        return self.executable or self.cli
