"""How each coding-agent CLI is run as a teacher, pure: no NATS, no processes here.

Every CLI gets the whole prompt (the request rendered by ``aios_rl.teachers.render_prompt``) on
standard input and prints its own JSON output format, which ``aios_rl.teachers.normalize`` reads:

- ``claude -p --output-format json`` reads the prompt from stdin;
- ``codex exec --json --skip-git-repo-check --sandbox read-only -`` (``-``: prompt from stdin);
- ``gemini --output-format json -p <instruction>`` appends stdin to the ``-p`` prompt;
- ``opencode run --format json <instruction>`` appends stdin to the message.

The short instruction on the command line only points at stdin, so the argument list stays
small whatever the episode's size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple, get_args

__all__ = ["CLIS", "INSTRUCTION", "Cli", "Invocation", "invocation", "with_diagnostics"]

Cli = Literal["claude", "codex", "gemini", "opencode"]
CLIS: tuple[str, ...] = get_args(Cli)

INSTRUCTION = (
    "Judge the episode described on standard input and reply with the JSON verdict object only."
)


class Invocation(NamedTuple):
    """One CLI run: its arguments and what goes to its standard input."""

    argv: list[str]
    stdin: bytes


def invocation(cli: Cli, program: str, prompt: str, extra_args: Sequence[str] = ()) -> Invocation:
    """The run of ``cli`` (executable ``program``) for ``prompt``. Raises ``ValueError`` for a
    CLI it does not know."""
    extra = list(extra_args)
    match cli:
        case "claude":
            argv = [program, "-p", "--output-format", "json", *extra]
        case "codex":
            argv = [
                program,
                "exec",
                "--json",
                "--skip-git-repo-check",
                "--sandbox",
                "read-only",
                *extra,
                "-",
            ]
        case "gemini":
            argv = [program, "--output-format", "json", *extra, "-p", INSTRUCTION]
        case "opencode":
            argv = [program, "run", "--format", "json", *extra, INSTRUCTION]
        case _:
            raise ValueError(f"unknown CLI {cli!r}; known: {', '.join(CLIS)}")
    return Invocation(argv, prompt.encode("utf-8"))


def with_diagnostics(stdout: str, stderr: str, returncode: int | None) -> str:
    """The output kept for diagnosis of an unusable answer: stdout, then the exit code and the
    stderr when there is something to say."""
    parts = [stdout]
    if returncode not in (0, None):
        parts.append(f"--- exit code {returncode} ---")
    if stderr.strip():
        parts.append(f"--- stderr ---\n{stderr}")
    return "\n".join(parts) if len(parts) > 1 else stdout
