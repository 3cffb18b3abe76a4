"""A MariaDB server of our own for DB episodes: Debian's ``mariadbd`` on a private data
directory, reachable only through a Unix socket in a 0700 folder (``--skip-networking``), one
database and one user per episode. PyMySQL talks to it. No NATS here.

Isolation: an episode's SQL runs as a user that holds every privilege on its own database and
nothing else (no ``FILE``, ``PROCESS``, ``SUPER``, no other database), with a per-statement time
limit (``max_statement_time``). ``group_concat_max_len`` is set to MySQL's default (1024; MariaDB's
is a megabyte) so AgentBench's table hash means the same here. The database and the user are
dropped when the episode closes.

AgentBench's server is MySQL 8 with its default ``sql_mode`` (strict); so is an episode's session
(:data:`MYSQL_SQL_MODE`). One place where MariaDB's strict mode refuses what MySQL's accepts is
matched: a blank text value read as a number (``WHERE col > 5`` on a row whose ``col`` is ``''``).
MySQL reads it as 0 without a warning; MariaDB warns, and in an ``UPDATE`` or ``INSERT`` strict
mode makes that warning the error ``1292 Truncated incorrect DECIMAL value: ''``. Such a statement
runs again with strict mode off, in a transaction (a savepoint inside the agent's), and is kept
only if every warning it raised is such a blank value; otherwise it is rolled back and the first
other warning is the error, as strict mode would have made it (:meth:`EpisodeDb.execute`).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

from aios_rl.errors import AiosError
from aios_rl.proc import popen_owned

__all__ = [
    "MYSQL_SQL_MODE",
    "EpisodeDb",
    "MariaDb",
    "MariaDbError",
    "MariaDbUnavailable",
    "reply_text",
]

GROUP_CONCAT_MAX_LEN = 1024
"""MySQL's default: AgentBench's hashes were computed with it."""

MYSQL_SQL_MODE = (
    "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
    "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"
)
"""MySQL 8's default ``sql_mode``, which AgentBench's ``mysql`` image keeps (MariaDB's default
has neither ``ONLY_FULL_GROUP_BY`` nor the zero-date modes)."""

_LENIENT_SQL_MODE = ",".join(m for m in MYSQL_SQL_MODE.split(",") if not m.startswith("STRICT_"))

_BLANK_AS_NUMBER = re.compile(r"Truncated incorrect (?:DECIMAL|DOUBLE) value: '[ \t\n\v\f\r]*'")
"""MariaDB's warning for a blank text value read as a number; MySQL reads it as 0 silently."""

_CHANGES_ROWS = re.compile(r"\s*(?:UPDATE|INSERT|REPLACE)\b", re.IGNORECASE)
"""Statements whose warnings strict mode makes errors in MariaDB (a ``DELETE``'s stay warnings)
and that a transaction can undo."""


class MariaDbError(AiosError, RuntimeError):
    """The server failed to start or to answer."""


class MariaDbUnavailable(MariaDbError):
    """No MariaDB server binaries on this machine (``deploy/setup.sh`` installs Debian's)."""


def _binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name) or next(
            (str(p) for d in ("/usr/sbin", "/usr/bin") if (p := Path(d) / name).is_file()), None
        )
        if found:
            return found
    raise MariaDbUnavailable(
        f"none of {', '.join(names)} is installed (apt-get install mariadb-server; "
        "deploy/setup.sh does)"
    )


def _copy_log(proc: subprocess.Popen[bytes], path: Path, ready: threading.Event) -> None:
    """Copy the server's stderr to ``path``; set ``ready`` once it accepts connections (or
    when it exits, so the waiter sees the exit at once)."""
    assert proc.stderr is not None
    with open(path, "ab") as log:
        for line in proc.stderr:
            log.write(line)
            log.flush()
            if b"ready for connections" in line:
                ready.set()
    ready.set()


def _blank_as_number(exc: pymysql.MySQLError) -> bool:
    """Whether ``exc`` is strict mode's error for a blank value read as a number."""
    args = exc.args
    return (
        len(args) == 2
        and args[0] == 1292
        and isinstance(args[1], str)
        and _BLANK_AS_NUMBER.fullmatch(args[1]) is not None
    )


def reply_text(rows: object, limit: int = 800) -> str:
    """A statement's result as AgentBench shows it: the text of the fetched rows (a list of
    tuples), cut at ``limit`` characters and marked."""
    text = str(list(rows)) if isinstance(rows, list | tuple) else str(rows)
    return text if len(text) <= limit else text[:limit] + "[TRUNCATED]"


@dataclass
class EpisodeDb:
    """One episode's database and the connection its SQL runs on (as its own user)."""

    name: str
    user: str
    conn: pymysql.connections.Connection
    server: MariaDb
    init_error: str = ""
    """Why the task's tables could not be made (the episode goes on without them, as it does in
    AgentBench, whose MySQL refuses the same statements), else empty."""

    def execute(self, sql: str, params: list[str] | None = None, *, limit: int = 800) -> str:
        """Run one statement as the episode's user; the reply text (rows, ``[]`` for a
        statement without rows, or the error). An ``UPDATE`` / ``INSERT`` / ``REPLACE`` that
        strict mode refuses only for a blank value read as a number runs as MySQL runs it
        (:meth:`_as_mysql`)."""
        try:
            with self.conn.cursor() as cur:
                try:
                    cur.execute(sql, params or None)
                    rows = cur.fetchall() if cur.description else []
                except pymysql.MySQLError as exc:
                    if not (_blank_as_number(exc) and _CHANGES_ROWS.match(sql)):
                        raise
                    rows = self._as_mysql(cur, sql, params)
        except pymysql.MySQLError as exc:
            return reply_text(str(exc), limit)
        return reply_text(rows, limit)

    def _as_mysql(
        self, cur: pymysql.cursors.Cursor, sql: str, params: list[str] | None
    ) -> list[tuple[object, ...]]:
        """Run ``sql`` again with strict mode off, in a transaction of its own (a savepoint in
        the agent's open one), and keep it only if each of its warnings is a blank value read
        as a number. Raises the first other warning as the error strict mode makes of it (the
        statement undone), or the statement's own error."""
        cur.execute("SELECT @@in_transaction")
        row = cur.fetchone()
        inside = bool(row and row[0])
        cur.execute("SAVEPOINT aios_as_mysql" if inside else "START TRANSACTION")
        undo = "ROLLBACK TO SAVEPOINT aios_as_mysql" if inside else "ROLLBACK"
        keep = "RELEASE SAVEPOINT aios_as_mysql" if inside else "COMMIT"
        cur.execute(f"SET SESSION sql_mode = '{_LENIENT_SQL_MODE}', max_error_count = 65535")
        try:
            cur.execute(sql, params or None)
            rows = list(cur.fetchall()) if cur.description else []
            cur.execute("SHOW WARNINGS")
            warnings = cur.fetchall()
        except pymysql.MySQLError:
            cur.execute(undo)
            raise
        finally:
            cur.execute(f"SET SESSION sql_mode = '{MYSQL_SQL_MODE}', max_error_count = DEFAULT")
        refused = next(
            (w for w in warnings if w[0] == "Warning" and not _BLANK_AS_NUMBER.fullmatch(w[2])),
            None,
        )
        if refused is not None:
            cur.execute(undo)
            raise pymysql.err.OperationalError(refused[1], refused[2])
        cur.execute(keep)
        return rows

    def close(self) -> None:
        with contextlib.suppress(pymysql.MySQLError):
            self.conn.close()
        self.server.drop(self.name, self.user)


@dataclass
class MariaDb:
    """A server on ``root`` (created 0700; a fresh temporary folder by default)."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="aios-mariadb-")))
    statement_timeout_s: float = 10.0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> Path:
        return self.root / "mysqld.sock"

    def start(self, timeout_s: float = 60.0) -> None:
        """Initialise the data directory (once) and start the server; returns when it answers.
        Raises ``MariaDbUnavailable`` without the binaries, ``MariaDbError`` otherwise."""
        if self.proc is not None and self.proc.poll() is None:
            return
        server = _binary("mariadbd", "mysqld")
        install = _binary("mariadb-install-db", "mysql_install_db")
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        data = self.root / "data"
        user = getpass.getuser()
        if not (data / "mysql").is_dir():
            done = subprocess.run(
                [
                    install,
                    "--no-defaults",
                    f"--datadir={data}",
                    f"--user={user}",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ],
                capture_output=True,
                timeout=timeout_s,
                check=False,
            )
            if done.returncode != 0:
                raise MariaDbError(
                    "mariadb-install-db failed: " + done.stderr.decode("utf-8", "replace")[-500:]
                )
        # Started from a thread that lives as long as the server, asking for SIGTERM when this
        # process dies: a runner or test that ends without close() leaves no server behind.
        self.proc = popen_owned(
            [
                server,
                "--no-defaults",
                f"--datadir={data}",
                f"--socket={self.socket}",
                "--skip-networking",
                f"--pid-file={self.root / 'mysqld.pid'}",
                f"--user={user}",
                "--innodb-buffer-pool-size=32M",
                "--skip-log-bin",
                "--performance-schema=OFF",
                f"--group-concat-max-len={GROUP_CONCAT_MAX_LEN}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        # Wait for the server to say it is ready (its log on stderr), then keep copying the log
        # to server.log so the pipe never fills.
        ready = threading.Event()
        threading.Thread(
            target=_copy_log, args=(self.proc, self.root / "server.log", ready), daemon=True
        ).start()
        if not ready.wait(timeout_s) or self.proc.poll() is not None:
            code = self.proc.poll()
            self.stop()
            tail = (self.root / "server.log").read_text("utf-8", "replace")[-800:]
            why = f"exited with {code}" if code is not None else f"not ready within {timeout_s}s"
            raise MariaDbError(f"mariadbd {why}: {tail}")
        self._root_conn().close()

    def _root_conn(self, database: str | None = None) -> pymysql.connections.Connection:
        return pymysql.connect(
            unix_socket=str(self.socket),
            user="root",
            password="",
            database=database,
            autocommit=True,
            connect_timeout=5,
        )

    def episode(self, tables: list[tuple[str, list[str]]]) -> EpisodeDb:
        """A new database with the ``(sql, parameters)`` statements run in it (as root), and a
        connection to it as a user of its own."""
        tag = secrets.token_hex(8)
        name, user, password = f"ep_{tag}", f"ep_{tag}", secrets.token_hex(16)
        with self._root_conn() as root, root.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
            cur.execute(f"CREATE USER '{user}'@'localhost' IDENTIFIED BY '{password}'")
            cur.execute(f"GRANT ALL PRIVILEGES ON `{name}`.* TO '{user}'@'localhost'")
            cur.execute(f"USE `{name}`")
            init_error = ""
            for sql, params in tables:
                try:
                    cur.execute(sql, params or None)
                except pymysql.MySQLError as exc:  # e.g. an empty column name: MySQL refuses it too
                    init_error = str(exc)
                    break
        conn = pymysql.connect(
            unix_socket=str(self.socket),
            user=user,
            password=password,
            database=name,
            autocommit=True,
            connect_timeout=5,
        )
        with conn.cursor() as cur:
            cur.execute(f"SET SESSION max_statement_time = {float(self.statement_timeout_s)}")
            cur.execute(f"SET SESSION group_concat_max_len = {GROUP_CONCAT_MAX_LEN}")
            cur.execute(f"SET SESSION sql_mode = '{MYSQL_SQL_MODE}'")
        return EpisodeDb(name=name, user=user, conn=conn, server=self, init_error=init_error)

    def drop(self, name: str, user: str) -> None:
        with contextlib.suppress(pymysql.MySQLError), self._root_conn() as root:
            with root.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
                cur.execute(f"DROP USER IF EXISTS '{user}'@'localhost'")

    def databases(self) -> list[str]:
        with self._root_conn() as root, root.cursor() as cur:
            cur.execute("SHOW DATABASES")
            return sorted(r[0] for r in cur.fetchall())

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        """Stop the server and remove its folder."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
