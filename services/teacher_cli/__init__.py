"""``teacher-<cli>``: a coding-agent CLI (claude, codex, gemini, opencode) as a teacher, run as a
subprocess per request with a timeout and a concurrency limit."""

__version__ = "0.1.0"
