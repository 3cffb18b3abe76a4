"""CLI teacher handlers: run the CLI on the rendered request, normalise what it printed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import time
from collections import Counter
from typing import NamedTuple, cast

from aios_rl.bus import Bus, get_logger
from aios_rl.teachers import keep_raw, normalize, render_prompt, unusable
from contracts import TeacherRequest, TeacherSignal

from .logic import Cli, invocation, with_diagnostics
from .settings import CliTeacherSettings

_CHUNK = 64 * 1024


class RunResult(NamedTuple):
    """What one CLI run left behind."""

    stdout: str
    stderr: str
    returncode: int | None
    """``None`` when the run was killed at its timeout."""


async def _read_capped(stream: asyncio.StreamReader, limit: int) -> bytes:
    """All of ``stream``, keeping the first ``limit`` bytes (the rest is read and dropped, so the
    process never blocks on a full pipe)."""
    kept = bytearray()
    while chunk := await stream.read(_CHUNK):
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    return bytes(kept)


async def run_cli(
    argv: list[str], stdin: bytes, *, timeout_s: float, cwd: str, max_output_bytes: int
) -> RunResult:
    """Run ``argv`` in its own process group with ``stdin``; past ``timeout_s`` the whole group is
    killed. Raises ``OSError`` when the program cannot be started."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        start_new_session=True,  # its own group: a timeout kills the CLI and whatever it spawned
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

    async def feed() -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(stdin)
            await proc.stdin.drain()
        proc.stdin.close()

    reading = asyncio.gather(
        feed(),
        _read_capped(proc.stdout, max_output_bytes),
        _read_capped(proc.stderr, max_output_bytes),
        proc.wait(),
    )
    try:
        async with asyncio.timeout(timeout_s):
            _, out, err, code = await reading
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
        return RunResult("", "", None)
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    return RunResult(
        out.decode("utf-8", errors="replace"), err.decode("utf-8", errors="replace"), code
    )


class CliTeacher:
    """Answers ``teacher.request.<cli>`` by running the CLI."""

    def __init__(self, bus: Bus, settings: CliTeacherSettings) -> None:
        self.bus = bus
        self.settings = settings
        self.cli = cast(Cli, settings.cli)
        self.counts: Counter[str] = Counter()
        self.log = get_logger(cli=settings.cli)

    async def _run(self, req: TeacherRequest) -> RunResult:
        inv = invocation(
            self.cli, self.settings.program, render_prompt(req), self.settings.extra_args
        )
        s = self.settings
        if s.workdir:
            return await run_cli(
                inv.argv,
                inv.stdin,
                timeout_s=s.timeout_s,
                cwd=s.workdir,
                max_output_bytes=s.max_output_bytes,
            )
        with tempfile.TemporaryDirectory(prefix=f"teacher-{self.cli}-") as cwd:
            return await run_cli(
                inv.argv,
                inv.stdin,
                timeout_s=s.timeout_s,
                cwd=cwd,
                max_output_bytes=s.max_output_bytes,
            )

    async def answer(self, req: TeacherRequest) -> TeacherSignal:
        """Endpoint handler: one CLI run, its output normalised into a signal (an unusable one
        keeps the output, stored whole in ``evidence`` when long)."""
        started = time.monotonic()
        try:
            result = await self._run(req)
        except OSError as exc:
            signal_ = unusable(
                "error",
                f"could not start {self.settings.program!r}: {exc}",
                "",
                backend=self.cli,
                latency_s=time.monotonic() - started,
            )
            self.counts["error"] += 1
            self.log.error("cli.not_started", program=self.settings.program, error=str(exc))
            return signal_
        latency = time.monotonic() - started
        kept = with_diagnostics(result.stdout, result.stderr, result.returncode)
        if result.returncode is None:
            signal_ = unusable(
                "timeout",
                f"{self.cli} gave no answer within {self.settings.timeout_s:g}s (killed)",
                kept,
                backend=self.cli,
                latency_s=latency,
            )
        else:
            signal_ = normalize(
                self.cli, result.stdout, backend=self.cli, latency_s=latency, kept=kept
            )
        signal_ = await keep_raw(self.bus, signal_, kept)
        self.counts[signal_.status] += 1
        self.log.debug(
            "cli.answered",
            episode_id=req.episode_id,
            status=signal_.status,
            returncode=result.returncode,
            latency_s=round(latency, 3),
        )
        return signal_

    def stats(self) -> dict[str, float]:
        return {f"status_{k}": float(v) for k, v in self.counts.items()}
