"""Run policy-chosen shell commands where they cannot escape, and trusted ones without that cost.

``Sandbox.run(argv, workdir)`` runs one command under bubblewrap (``bwrap``) and returns an
``ExecResult``; ``LocalExecutor.run`` has the same signature and no isolation, for trusted work
such as verifying generated tasks. Both satisfy the ``Executor`` protocol. ``Sandbox.check()``
proves the isolation works on this machine (or raises ``SandboxUnavailable``) and
``policy_executor()`` is how a runner gets an executor for policy commands: a checked sandbox,
never silently less.

What a sandboxed command gets
-----------------------------
- Namespaces of its own: mount, PID, network (only a loopback of its own: no route to the host or
  anywhere else, including the host's 127.0.0.1 and abstract Unix sockets), IPC, UTS, cgroup.
- A filesystem that is an allow-list, read-only: ``/usr``, ``/etc`` and the ``/bin``, ``/lib*``
  links or directories; the interpreter (``SandboxConfig.python``: its venv and its base
  installation); ``SandboxConfig.expose``. Nothing else of the host exists inside: not ``/root``,
  ``/home``, ``/work``, ``/var``, ``/run``, ``/sys``, the NATS data dir or other tasks' dirs.
  Writable: the task dir, a private ``/tmp`` and ``/dev/shm`` (tmpfs of ``tmp_bytes`` each), a
  minimal ``/dev`` and its own ``/proc``.
- The task dir as a quota: at the ``workdir``'s host path, a tmpfs of ``disk_bytes`` (held in
  RAM). bwrap sets the sandbox up and waits (``--block-fd``) while the host copies the workdir
  into it; after the command, once every process of the sandbox is gone, the host replaces the
  workdir's content with the tmpfs's, through a directory fd that keeps the tmpfs alive after
  the sandbox: directories, regular files (permissions without setuid/setgid/sticky bits,
  times) and symlinks (as links), at most ``max_files`` entries, ``disk_bytes`` bytes (hard links
  and sparse files count in full) and 64 levels; FIFOs, sockets and devices are left out. The
  host's workdir is never mounted into the sandbox, so nothing the command does reaches it
  but through that bounded copy.
- An unprivileged identity. Run as root (the normal case on a host), bwrap sets up the
  namespaces, then ``setpriv`` drops to a uid of its own from ``SandboxConfig.uids`` (one per
  concurrent sandbox, held by a lock file in ``/run/aios-rl/``), with no capabilities, an empty
  bounding set and ``no_new_privs`` (setuid binaries stay powerless). Inside, the task dir's
  files belong to that uid; copied back, to the workdir's owner. Run as non-root (a container's
  ``USER``), bwrap uses an unprivileged user namespace instead and the command keeps the caller's
  uid; nested user namespaces are disabled.
- A seccomp filter (x86-64) that refuses new namespaces (``unshare``, ``setns``, ``clone`` with
  namespace flags; ``clone3`` answers ENOSYS so libc falls back to ``clone``), mounts, keyrings,
  ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring`` and module/kexec calls, and kills a
  process that makes 32-bit or x32 system calls.
- Limits: per process ``RLIMIT_CPU`` (``cpu_seconds``; SIGXCPU), ``RLIMIT_AS``
  (``memory_bytes``), ``RLIMIT_FSIZE`` (``max_file_bytes``), ``RLIMIT_CORE`` 0 and 1024 open
  files; for the uid ``RLIMIT_NPROC`` (``max_processes``: processes and threads); the task dir's
  size (``disk_bytes``: writes beyond fail with ENOSPC). While it runs, the sandbox is sampled
  every ``SAMPLE_INTERVAL_S``: reaching ``max_processes`` processes and threads (every further
  fork fails: a fork bomb, whether of processes or of threaded processes), more than
  ``memory_bytes`` of resident anonymous memory in total, or more than ``max_files`` files and
  directories in the task dir, ``/tmp`` and ``/dev/shm`` kills it. More than
  ``max_output_bytes`` of output kills it too (the output keeps the first ``max_output_bytes``),
  and so does the wall-clock timeout. Killing means SIGKILL to the PID namespace's init, which the
  kernel turns into SIGKILL for every process in the namespace: nothing survives, whether it
  called ``setsid``, double-forked or ignores SIGTERM. The same happens when the command itself
  exits: background processes it left behind die with it.

What it does not protect against
--------------------------------
- Kernel and bubblewrap vulnerabilities: the isolation is the kernel's; seccomp narrows the
  attack surface, it does not remove it. Nor hardware side channels (Spectre-class, timing).
- Reading what the allow-list shows: ``/usr`` and world-readable ``/etc`` files, and everything
  in the interpreter's venv and base installation. If a task is "a real package with an injected
  bug" and the pristine package is installed in that venv, the command can read the original:
  give such tasks an interpreter whose environment does not hold it (``SandboxConfig.python``).
- RAM held by the tmpfs mounts: up to ``disk_bytes + 2 * tmp_bytes`` per running sandbox, not
  counted in ``memory_bytes``, and the kernel's memory for the inodes of up to ``max_files``
  files (more between two samples: a burst of file creation overshoots until the kill). The copy
  in and out costs time in proportion to the task dir (a few milliseconds for a small one).
- The host's disk beyond one task dir: the copy back bounds what a run leaves in the workdir
  (``max_files`` entries, ``disk_bytes`` bytes), but not how many task dirs a runner keeps.
- Exact memory accounting: the total is sampled (about 10 times a second) from resident
  anonymous memory, so a burst between samples can reach ``max_processes * memory_bytes`` of
  address space before the kill; pages shared after ``fork`` count once per process.
- CPU: ``RLIMIT_CPU`` is per process, so a tree of processes can use more CPU in total until the
  wall-clock timeout. Without cgroups there is no CPU share either.
- Which limit ended a command is partly inferred: an exit status above 128 means a signal (shell
  convention, as bwrap reports it), so ``exit 152`` reads as SIGXCPU; a failed allocation under
  ``RLIMIT_AS`` is recognised from the output (``MemoryError``, ``Cannot allocate memory``, ...);
  a full task dir from its tmpfs having been found full (sampled, and at the end) or "No space
  left on device" in the output.
- Other architectures than x86-64 get no seccomp filter (namespaces and limits still apply).
- What the command leaves in the task dir: after a run it is untrusted input. It may hold
  symlinks to host paths (harmless inside, followed by a host process that reads them); read it
  with ``O_NOFOLLOW`` or inside the sandbox. (No FIFOs, sockets or devices: they are not copied
  back. Hard links to host files are impossible: the task dir is a separate mount.)
- ``LocalExecutor`` protects against nothing but runaway time, output, memory and file sizes.

Opting out
----------
``policy_executor()`` raises ``SandboxUnavailable`` when the check fails. Only with the
environment variable ``AIOS_ALLOW_UNSANDBOXED=1`` does it return a ``LocalExecutor`` instead, with
a warning in the log: the policy's commands then run with the runner's full privileges.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import math
import os
import platform
import pwd
import re
import resource
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

import structlog

from aios_rl.errors import AiosError

__all__ = [
    "ALLOW_UNSANDBOXED_ENV",
    "SAMPLE_INTERVAL_S",
    "ExecResult",
    "Executor",
    "LocalExecutor",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxUnavailable",
    "policy_executor",
]

ALLOW_UNSANDBOXED_ENV = "AIOS_ALLOW_UNSANDBOXED"
"""Set to ``1`` to let ``policy_executor`` fall back to ``LocalExecutor`` when no sandbox works."""

SAMPLE_INTERVAL_S = 0.1
"""How often a running sandbox's processes and memory are counted."""

_READ_CHUNK = 64 * 1024
_KILL_GRACE_S = 5.0
_DRAIN_S = 1.0
_LOCK_DIR = Path("/run/aios-rl/sandbox-uids")
_SYSTEM_PATHS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_LIMIT_MESSAGES = (  # (pattern, limit) for a command that reports a limit it hit itself
    (re.compile(rb"MemoryError|Cannot allocate memory|std::bad_alloc|out of memory", re.I), "mem"),
    (
        re.compile(rb"fork(: retry)?: Resource temporarily unavailable|can(no|')t fork", re.I),
        "proc",
    ),
    (re.compile(rb"can't start new thread|BlockingIOError: \[Errno 11\]"), "proc"),
    (re.compile(rb"File too large"), "fsize"),
    (re.compile(rb"No space left on device"), "disk"),
)
_MiB = 1024 * 1024

_log = structlog.get_logger()


# -- errors ---------------------------------------------------------------------------------------


class SandboxError(AiosError):
    """Root of every error this module raises."""


class SandboxUnavailable(SandboxError):
    """The sandbox cannot run on this machine (no bwrap, no namespaces, ...): say why and how."""


# -- configuration and results --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    """Limits and exposure of one kind of sandbox. ``LocalExecutor`` uses the wall-clock timeout,
    the output limit, the per-process limits and ``python``."""

    cpu_seconds: int = 30
    """CPU time per process (``RLIMIT_CPU``, whole seconds): SIGXCPU at this, SIGKILL a second
    later."""

    memory_bytes: int = 1024 * _MiB
    """Address space per process (``RLIMIT_AS``), and the most resident anonymous memory all the
    sandbox's processes may hold together (sampled; exceeding it kills the sandbox)."""

    max_processes: int = 64
    """Processes and threads the command may have at once (``RLIMIT_NPROC`` of its uid);
    reaching it (sampled, processes and threads together) is treated as a fork bomb and kills
    the sandbox."""

    max_output_bytes: int = 1 * _MiB
    """Bytes of stdout and stderr kept; more kills the command and sets ``truncated``."""

    wall_timeout_s: float = 60.0
    """Wall-clock seconds before the whole process tree is killed."""

    python: Path = field(default_factory=lambda: Path(sys.executable))
    """The interpreter to expose, read-only: its directory goes first on ``PATH`` (so ``python``,
    ``pytest`` and the venv's other scripts resolve there), its venv and base installation are
    bound. Defaults to the interpreter running this code."""

    max_file_bytes: int = 64 * _MiB
    """Largest file a process may write (``RLIMIT_FSIZE``; SIGXFSZ beyond)."""

    tmp_bytes: int = 64 * _MiB
    """Size of the private ``/tmp`` and of ``/dev/shm`` (each a tmpfs, held in RAM)."""

    expose: tuple[Path, ...] = ()
    """More host paths to show read-only, at the same place (everything else stays hidden)."""

    uids: range = range(50_000, 50_256)
    """When run as root: the uids sandboxes run as, one per concurrent sandbox (uids that name an
    account in the passwd database are skipped). Its length bounds concurrent sandboxes."""

    disk_bytes: int = 128 * _MiB
    """Room in the task directory: inside the sandbox it is a tmpfs of this size (held in RAM),
    filled from the host's task dir before the command and copied back after it. A write beyond
    fails (ENOSPC) and is reported as ``disk limit``."""

    max_files: int = 20_000
    """Files and directories the task dir, ``/tmp`` and ``/dev/shm`` may hold together (sampled;
    more kills the sandbox as ``disk_limit``), and the most entries copied back to the host."""

    address_space_bytes: int = 0
    """Address space per process (``RLIMIT_AS``) when not ``memory_bytes`` (0): for a runtime
    that reserves far more than it touches (a JavaScript engine reserves gigabytes for
    WebAssembly); the resident memory stays bounded by ``memory_bytes``."""

    network: bool = False
    """Share the host's network namespace instead of a loopback of its own: for a program that
    must reach a service (an agent and its gateway). It then reaches whatever the host
    reaches; every other isolation and limit stays."""

    def __post_init__(self) -> None:
        for name in (
            "cpu_seconds",
            "memory_bytes",
            "max_processes",
            "max_output_bytes",
            "max_file_bytes",
            "tmp_bytes",
            "disk_bytes",
            "max_files",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"SandboxConfig.{name} must be a positive integer, not {value!r}.")
        if not isinstance(self.address_space_bytes, int) or self.address_space_bytes < 0:
            raise ValueError(
                f"SandboxConfig.address_space_bytes must be >= 0, not {self.address_space_bytes!r}."
            )
        if not self.wall_timeout_s > 0:
            raise ValueError(
                f"SandboxConfig.wall_timeout_s must be positive, not {self.wall_timeout_s!r}."
            )
        if not Path(self.python).is_absolute():
            raise ValueError(f"SandboxConfig.python must be an absolute path, not {self.python}.")
        for path in self.expose:
            if not Path(path).is_absolute():
                raise ValueError(f"SandboxConfig.expose holds {path}, which is not absolute.")
        if len(self.uids) == 0 or self.uids.start <= 0 or self.uids.step != 1:
            raise ValueError(
                f"SandboxConfig.uids must be a non-empty range of positive uids with step 1, "
                f"not {self.uids!r}."
            )


@dataclass(frozen=True, slots=True)
class ExecResult:
    """What one command did."""

    exit_code: int
    """Its exit status; 128 + N when signal N ended it (so 137 after a SIGKILL)."""

    output: str
    """stdout and stderr interleaved as written (one pipe), UTF-8 with replacement characters."""

    truncated: bool
    """The command wrote more than ``max_output_bytes``: ``output`` holds the first ones."""

    timed_out: bool
    """The wall-clock timeout killed it."""

    killed_by: str | None
    """What ended it, when not a normal exit: a limit the executor enforced (``wall_timeout``,
    ``output_limit``, ``process_limit``, ``memory_limit``, ``disk_limit``), a kernel limit
    (``cpu_limit`` for SIGXCPU, ``file_size_limit`` for SIGXFSZ) or the name of the signal
    (``SIGSEGV``, ...)."""

    blocked_reason: str | None
    """One sentence when a sandbox limit contained the command (fork bomb, memory, CPU, timeout,
    output flood, file size, disk quota), else ``None``."""

    duration_s: float
    """Wall-clock seconds from start to the end of the last process."""


class Executor(Protocol):
    """Runs one command in a task directory."""

    def run(self, argv: list[str], workdir: Path, *, stdin: str = "") -> ExecResult:
        """Run ``argv`` (looked up on ``PATH``) in ``workdir`` and wait for it."""
        ...


# -- running and watching one process tree --------------------------------------------------------


class _Usage(NamedTuple):
    """One sample of a running sandbox."""

    tasks: int
    """Processes and threads (what ``RLIMIT_NPROC`` counts), but the namespace's init."""
    anon_bytes: int
    """Their resident anonymous memory."""
    files: int
    """Files and directories in its tmpfs mounts (the task dir, ``/tmp``, ``/dev/shm``)."""


@dataclass(slots=True)
class _Watch:
    """What ``_supervise`` needs to know about one running tree."""

    proc: subprocess.Popen[bytes]
    out_fd: int
    kill: Callable[[], None]
    """SIGKILL for the whole tree."""
    sample: Callable[[], _Usage | None] | None = None
    """The tree's usage now, or None when it cannot tell."""


def _supervise(watch: _Watch, config: SandboxConfig, start: float) -> ExecResult:
    """Read output and enforce the limits until the tree has ended and its output is read."""
    deadline = start + config.wall_timeout_s
    next_sample = start + SAMPLE_INTERVAL_S
    limit = config.max_output_bytes
    out = bytearray()
    truncated = False
    killed: str | None = None
    detail: str | None = None
    killed_at = 0.0
    exited_at: float | None = None
    out_open = True
    proc_fd = os.pidfd_open(watch.proc.pid)
    try:
        while True:
            now = time.monotonic()
            if exited_at is not None:
                if not out_open or now >= exited_at + _DRAIN_S:
                    break  # a process outside our reach (LocalExecutor only) holds the pipe
                wake = exited_at + _DRAIN_S
            elif killed is not None:
                if now >= killed_at + _KILL_GRACE_S:
                    watch.proc.kill()  # the tree's kill did not end it: end at least its root
                    killed_at = now
                wake = killed_at + _KILL_GRACE_S
            else:
                if now >= deadline:
                    killed = "wall_timeout"
                    detail = (
                        f"wall-clock timeout: still running after {config.wall_timeout_s:g} s; "
                        "the whole process tree was killed"
                    )
                elif watch.sample is not None and now >= next_sample:
                    next_sample = now + SAMPLE_INTERVAL_S
                    killed, detail = _over_limits(watch.sample(), config)
                if killed is not None:
                    killed_at = now
                    watch.kill()
                    wake = killed_at + _KILL_GRACE_S
                elif watch.sample is not None:
                    wake = min(deadline, next_sample)
                else:
                    wake = deadline

            fds = [watch.out_fd] if out_open else []
            if exited_at is None:
                fds.append(proc_fd)
            ready = _readable(fds, wake - time.monotonic())

            if watch.out_fd in ready:
                chunk = os.read(watch.out_fd, _READ_CHUNK)
                if not chunk:
                    out_open = False
                elif len(out) + len(chunk) <= limit:
                    out += chunk
                else:
                    out += chunk[: limit - len(out)]
                    truncated = True
                    out_open = False  # read no more: the rest is never held in memory
                    if killed is None and exited_at is None:
                        killed, killed_at = "output_limit", time.monotonic()
                        detail = (
                            f"output flood: more than max_output_bytes={limit} bytes of output; "
                            "the command was killed"
                        )
                        watch.kill()
            if proc_fd in ready:
                watch.proc.wait()
                exited_at = time.monotonic()
                if out_open:
                    watch.kill()  # what the command left behind goes with it
    finally:
        os.close(proc_fd)
    end = time.monotonic()

    code = watch.proc.returncode
    exit_code = 128 - code if code < 0 else code
    if killed is None and exit_code > 128:
        killed, detail = _signal_verdict(exit_code - 128, config)
    if detail is None:
        detail = _limit_in_output(bytes(out), exit_code, config)
    return ExecResult(
        exit_code=exit_code,
        output=out.decode("utf-8", errors="replace"),
        truncated=truncated,
        timed_out=killed == "wall_timeout",
        killed_by=killed,
        blocked_reason=detail,
        duration_s=end - start,
    )


def _readable(fds: list[int], timeout_s: float) -> set[int]:
    """Which of ``fds`` are readable (or at end of file, or an exited pidfd) within the timeout.
    ``poll``, not ``select``: a busy runner's fds may be numbered beyond ``FD_SETSIZE``."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return {fd for fd, _ in poller.poll(math.ceil(max(0.0, timeout_s) * 1000))}


def _limit_in_output(out: bytes, exit_code: int, config: SandboxConfig) -> str | None:
    """A blocked reason read from the output, for limits that make a call fail rather than kill:
    ``RLIMIT_AS`` (only when the command failed), ``RLIMIT_NPROC``, ``RLIMIT_FSIZE`` and a full
    tmpfs."""
    for pattern, limit in _LIMIT_MESSAGES:
        if (limit != "mem" or exit_code != 0) and pattern.search(out):
            return {
                "mem": f"memory limit: an allocation failed (address space limited to "
                f"{config.memory_bytes // _MiB} MiB per process)",
                "proc": f"process limit: a fork or thread failed (max_processes="
                f"{config.max_processes} processes and threads)",
                "fsize": f"file size limit: a write failed (max_file_bytes={config.max_file_bytes})",
                "disk": f"disk limit: a write failed for want of space (disk_bytes="
                f"{config.disk_bytes} for the task dir, tmp_bytes={config.tmp_bytes} for /tmp)",
            }[limit]
    return None


def _over_limits(usage: _Usage | None, config: SandboxConfig) -> tuple[str | None, str | None]:
    """(killed_by, blocked_reason) when a sample of the tree is over a limit, else (None, None).
    Reaching ``max_processes`` tasks means every further fork or thread fails: a fork bomb, or a
    program that cannot go on, so it ends the sandbox."""
    if usage is None:
        return None, None
    if usage.tasks >= config.max_processes:
        return "process_limit", (
            f"process limit: {usage.tasks} processes and threads reached max_processes="
            f"{config.max_processes} (a fork bomb?); the sandbox was killed"
        )
    if usage.anon_bytes > config.memory_bytes:
        return "memory_limit", (
            f"memory limit: its processes held {usage.anon_bytes // _MiB} MiB, more than "
            f"memory_bytes ({config.memory_bytes // _MiB} MiB); the sandbox was killed"
        )
    if usage.files > config.max_files:
        return "disk_limit", (
            f"disk limit: {usage.files} files and directories, more than max_files="
            f"{config.max_files} (in the task dir, /tmp and /dev/shm); the sandbox was killed"
        )
    return None, None


def _signal_verdict(signum: int, config: SandboxConfig) -> tuple[str | None, str | None]:
    """(killed_by, blocked_reason) for a command that signal ``signum`` ended."""
    if signum == signal.SIGXCPU:
        return "cpu_limit", (
            f"CPU limit: a process used cpu_seconds={config.cpu_seconds} s of CPU time (SIGXCPU)"
        )
    if signum == signal.SIGXFSZ:
        return "file_size_limit", (
            f"file size limit: a process wrote past max_file_bytes={config.max_file_bytes} bytes "
            "(SIGXFSZ)"
        )
    try:
        return signal.Signals(signum).name, None
    except ValueError:
        return None, None


@contextlib.contextmanager
def _stdin_file(text: str) -> Iterator[int | None]:
    """A sealed, read-only memfd holding ``text`` (None for no input: /dev/null)."""
    if not text:
        yield None
        return
    fd = os.memfd_create("stdin", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        data = text.encode()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        yield fd
    finally:
        os.close(fd)


def _base_env(python: Path, home: str) -> dict[str, str]:
    """The whole environment a command sees: nothing is inherited from the runner."""
    return {
        "PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": "/tmp",
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",  # the same code gives the same test result, run after run
    }


def _check_workdir(workdir: Path) -> Path:
    resolved = Path(workdir).resolve()
    if not resolved.is_dir():
        raise SandboxError(f"the task directory {workdir} does not exist or is not a directory.")
    return resolved


# -- no isolation ---------------------------------------------------------------------------------


class LocalExecutor:
    """Runs a command as the caller, without isolation, for trusted commands only.

    Applies the wall-clock timeout and the output limit of ``config``, its per-process CPU,
    address-space and file-size limits (set on the command right after it starts; its children
    inherit them), and kills the command's process group at the end (a process that left the
    group with ``setsid`` escapes that). No process count limit: for a non-root caller it would
    count all of the caller's processes."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()

    def run(self, argv: list[str], workdir: Path, *, stdin: str = "") -> ExecResult:
        """Run ``argv`` in ``workdir`` with the sandbox's environment (``PATH`` extended by the
        caller's) and the caller's everything else. A command that cannot be found or executed
        exits 127 or 126 with a message, as in the sandbox. Raises ``SandboxError`` for a missing
        ``workdir``."""
        if not argv:
            raise ValueError("argv must name a command.")
        cwd = _check_workdir(workdir)
        env = _base_env(self.config.python, tempfile.gettempdir())
        env["TMPDIR"] = tempfile.gettempdir()
        env["PATH"] = f"{env['PATH']}:{os.environ.get('PATH', '')}"
        read_fd, write_fd = os.pipe()
        try:
            with _stdin_file(stdin) as stdin_fd:
                start = time.monotonic()
                try:
                    proc = subprocess.Popen(
                        argv,
                        cwd=cwd,
                        env=env,
                        stdin=subprocess.DEVNULL if stdin_fd is None else stdin_fd,
                        stdout=write_fd,
                        stderr=write_fd,
                        start_new_session=True,
                    )
                except OSError as exc:
                    return ExecResult(
                        exit_code=127 if isinstance(exc, FileNotFoundError) else 126,
                        output=f"failed to execute {argv[0]}: {exc.strerror}\n",
                        truncated=False,
                        timed_out=False,
                        killed_by=None,
                        blocked_reason=None,
                        duration_s=time.monotonic() - start,
                    )
            os.close(write_fd)
            write_fd = -1
            _limit_process(proc.pid, self.config)

            def kill() -> None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)

            return _supervise(_Watch(proc, read_fd, kill), self.config, start)
        finally:
            os.close(read_fd)
            if write_fd >= 0:
                os.close(write_fd)


def _limit_process(pid: int, config: SandboxConfig) -> None:
    """The per-process rlimits of ``config``, set on a running process (no ``preexec_fn``,
    which is unsafe in a threaded caller)."""
    limits = {
        resource.RLIMIT_CPU: (config.cpu_seconds, config.cpu_seconds + 1),
        resource.RLIMIT_AS: (config.memory_bytes, config.memory_bytes),
        resource.RLIMIT_FSIZE: (config.max_file_bytes, config.max_file_bytes),
        resource.RLIMIT_CORE: (0, 0),
    }
    for which, limit in limits.items():
        with contextlib.suppress(ProcessLookupError):  # it has already ended
            resource.prlimit(pid, which, limit)


# -- the sandbox ----------------------------------------------------------------------------------


def _seccomp_program() -> bytes | None:
    """A classic-BPF seccomp filter for x86-64 (None elsewhere); see the module docstring."""
    if platform.machine() != "x86_64":
        return None
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill = 0x7FFF0000, 0x80000000

    def errno(err: int) -> int:
        return 0x00050000 | err

    ns_flags = 0x7E020080  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
    refused = {
        435: errno(38),  # clone3: ENOSYS, so libc falls back to clone, which we can inspect
        308: errno(1),  # setns
        **dict.fromkeys((165, 166, 155, 161, 428, 429, 430, 431, 432, 433, 442), errno(1)),
        # mount, umount2, pivot_root, chroot, open_tree, move_mount, fs{open,config,mount,pick},
        # mount_setattr
        **dict.fromkeys((248, 249, 250), errno(1)),  # add_key, request_key, keyctl
        **dict.fromkeys((321, 298, 323, 304), errno(1)),
        # bpf, perf_event_open, userfaultfd, open_by_handle_at
        **dict.fromkeys((425, 426, 427), errno(38)),  # io_uring_*: ENOSYS, callers fall back
        **dict.fromkeys((246, 320, 175, 313, 176, 163, 103, 179, 167, 168, 169), errno(1)),
        # kexec_load, kexec_file_load, {init,finit,delete}_module, acct, syslog, quotactl,
        # swapon, swapoff, reboot
    }
    prog = [
        (ld, 0, 0, 4),  # A = arch
        (jeq, 1, 0, 0xC000003E),  # AUDIT_ARCH_X86_64
        (ret, 0, 0, kill),
        (ld, 0, 0, 0),  # A = syscall number
        (jge, 0, 1, 0x40000000),  # x32 ABI
        (ret, 0, 0, kill),
    ]
    for nr in (56, 272):  # clone, unshare: refuse namespace flags in the first argument
        prog += [
            (jeq, 0, 4, nr),
            (ld, 0, 0, 16),  # low 32 bits of args[0]
            (jset, 0, 1, ns_flags),
            (ret, 0, 0, errno(1)),
            (ret, 0, 0, allow),
        ]
    for nr, action in refused.items():
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, action)]
    prog.append((ret, 0, 0, allow))
    return b"".join(struct.pack("<HBBI", *ins) for ins in prog)


def _interpreter_paths(python: Path) -> list[Path]:
    """The directories ``python`` needs: its venv (if it is one) and its base installation."""
    found = []
    venv = python.parent.parent
    if (venv / "pyvenv.cfg").is_file():
        found.append(venv)
        for line in (venv / "pyvenv.cfg").read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                found.append(Path(value.strip()).parent)
    found.append(Path(os.path.realpath(python)).parent.parent)
    return found


def _under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def _read_only_paths(config: SandboxConfig) -> list[Path]:
    """Host paths bound read-only beyond the system ones, without duplicates or nesting."""
    system = [Path(p) for p in _SYSTEM_PATHS]
    wanted = [*_interpreter_paths(config.python), *map(Path, config.expose)]
    chosen: list[Path] = []
    # Normalised, not resolved: PATH names the venv as given, so it must exist inside as such.
    for path in sorted({Path(os.path.abspath(p)) for p in wanted}, key=lambda p: len(p.parts)):
        if not path.exists() or any(_under(path, p) for p in system + chosen):
            continue
        chosen.append(path)
    return chosen


@contextlib.contextmanager
def _uid_slot(uids: range) -> Iterator[int]:
    """Hold one uid of ``uids`` no other sandbox (in any process) is using, for the block."""
    _LOCK_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = _LOCK_DIR.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
        raise SandboxUnavailable(
            f"{_LOCK_DIR} must be a directory owned by root, not writable by others."
        )
    start = os.getpid() % len(uids)
    for i in range(len(uids)):
        uid = uids[(start + i) % len(uids)]
        with contextlib.suppress(KeyError):
            pwd.getpwuid(uid)
            continue  # an account of the host: not ours
        fd = os.open(
            _LOCK_DIR / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield uid
        finally:
            os.close(fd)
        return
    raise SandboxError(f"all {len(uids)} sandbox uids are in use: raise SandboxConfig.uids.")


@dataclass(slots=True)
class _Budget:
    """What a tree copy may still create: entries, and bytes of regular files."""

    entries: int
    bytes: int
    dropped: int = 0
    """Entries left out because the budget was spent or the tree was too deep."""

    def take(self, size: int) -> bool:
        if self.entries <= 0 or size > self.bytes:
            self.dropped += 1
            return False
        self.entries -= 1
        self.bytes -= size
        return True


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_DEPTH = 64


def _copy_tree(
    src: int, dst: int, owner: tuple[int, int] | None, budget: _Budget, depth: int = 0
) -> None:
    """Copy the directory open as ``src`` into the empty directory open as ``dst``: directories,
    regular files (contents, permissions without setuid/setgid/sticky bits, times) and symlinks
    (as links: never followed); FIFOs, sockets and devices are left out. Works relative to
    directory fds, so nothing in the tree can redirect it. ``owner``: chown what it creates to
    it. Entries beyond ``budget`` or deeper than ``_MAX_DEPTH`` are left out and counted in
    ``budget.dropped``. Raises ``OSError`` when writing fails (ENOSPC, ...)."""
    with os.scandir(src) as entries:
        for entry in entries:
            st = entry.stat(follow_symlinks=False)
            kind = stat.S_IFMT(st.st_mode)
            if kind not in (stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK):
                continue
            if kind == stat.S_IFDIR and depth >= _MAX_DEPTH:
                budget.dropped += 1
                continue
            if not budget.take(st.st_size if kind == stat.S_IFREG else 0):
                continue
            if kind == stat.S_IFLNK:
                os.symlink(os.readlink(entry.name, dir_fd=src), entry.name, dir_fd=dst)
                if owner is not None:
                    os.chown(entry.name, *owner, dir_fd=dst, follow_symlinks=False)
            else:
                _copy_node(entry.name, st, src, dst, owner, budget, depth)


def _copy_node(
    name: str,
    st: os.stat_result,
    src: int,
    dst: int,
    owner: tuple[int, int] | None,
    budget: _Budget,
    depth: int,
) -> None:
    """One directory (and what it holds) or regular file of ``_copy_tree``."""
    is_dir = stat.S_ISDIR(st.st_mode)
    mode = stat.S_IMODE(st.st_mode) & 0o777 | (0o700 if is_dir else 0)
    _let_owner_read(name, src, st.st_mode)
    if is_dir:
        os.mkdir(name, 0o700, dir_fd=dst)
        from_fd = os.open(name, _DIR_FLAGS, dir_fd=src)
        to_flags = _DIR_FLAGS
    else:
        from_fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src
        )
        to_flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        to_fd = os.open(name, to_flags, 0o600, dir_fd=dst)
        try:
            if is_dir:
                _copy_tree(from_fd, to_fd, owner, budget, depth + 1)
            else:
                _copy_bytes(from_fd, to_fd, st.st_size)
            if owner is not None:
                os.fchown(to_fd, *owner)
            os.fchmod(to_fd, mode)
            os.utime(to_fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(to_fd)
    finally:
        os.close(from_fd)


def _let_owner_read(name: str, dir_fd: int, mode: int) -> None:
    """A caller that is not root reads what it owns only with the owner's permission bits: give
    back the read (and, for a directory, write and search) permission a command took away from
    its own file (``name`` in ``dir_fd``, or the directory ``dir_fd`` itself when ``name`` is
    empty). Nothing else changes the tree meanwhile: the sandbox has not started or has ended."""
    needed = 0o700 if stat.S_ISDIR(mode) else 0o400
    if os.geteuid() == 0 or mode & needed == needed:
        return
    if name:
        os.chmod(name, stat.S_IMODE(mode) | needed, dir_fd=dir_fd)
    else:
        os.fchmod(dir_fd, stat.S_IMODE(mode) | needed)


def _copy_bytes(src: int, dst: int, size: int) -> None:
    """The first ``size`` bytes of ``src`` into ``dst``, in the kernel."""
    copied = 0
    while copied < size:
        sent = os.sendfile(dst, src, copied, min(size - copied, 16 * _MiB))
        if sent == 0:
            break
        copied += sent


def _clear_dir(fd: int) -> None:
    """Remove everything in the directory open as ``fd`` (symlinks removed, never followed)."""
    with os.scandir(fd) as entries:
        found = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in found:
        if is_dir:
            shutil.rmtree(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)


def _static_mounts(ro_paths: list[Path], tmp_bytes: int) -> tuple[list[str], frozenset[Path]]:
    """bwrap's mount arguments shared by every run, and the directories they create."""
    args = []
    for path in _SYSTEM_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for tmp in ("/tmp", "/dev/shm"):
        args += ["--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", tmp]
    made = {Path(p) for p in ("/", "/proc", "/dev", "/dev/shm", "/tmp", *_SYSTEM_PATHS)}
    for path in ro_paths:
        args += [*_dirs_for(path, made), "--ro-bind", str(path), str(path)]
        made.update([path, *path.parents])
    return args, frozenset(made)


def _dirs_for(path: Path, made: Set[Path]) -> list[str]:
    """``--dir`` for each parent of mount point ``path`` not in ``made``: bwrap would create
    them with mode 0700, which the sandbox's uid could not traverse; ``--dir`` makes them 0755."""
    missing = [p for p in reversed(path.parents) if p not in made]
    return [arg for parent in missing for arg in ("--dir", str(parent))]


class Sandbox:
    """Runs commands isolated by bubblewrap; see the module docstring for what that means.

    Thread-safe: ``run`` may be called from several threads at once (``asyncio.to_thread``), one
    call per task directory at a time. Raises ``SandboxUnavailable`` when bwrap is missing or
    cannot set the sandbox up."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self._as_root = os.geteuid() == 0
        self._ro_paths = _read_only_paths(self.config)
        self._seccomp = _seccomp_program()
        self._mounts, self._made = _static_mounts(self._ro_paths, self.config.tmp_bytes)

    def check(self) -> None:
        """Prove that sandboxing works here: the tools exist, bwrap can create the namespaces
        and the interpreter runs inside, unprivileged and (unless ``network``) without network. Raises
        ``SandboxUnavailable`` saying what is missing."""
        tools = ["bwrap", "prlimit"] + (["setpriv"] if self._as_root else [])
        missing = [t for t in tools if shutil.which(t) is None]
        if missing:
            raise SandboxUnavailable(
                f"missing {', '.join(missing)}: install Debian's bubblewrap and util-linux "
                "(deploy/setup.sh does), or see docs/sandbox.md."
            )
        if not os.access(self.config.python, os.X_OK):
            raise SandboxUnavailable(
                f"SandboxConfig.python {self.config.python} is not executable."
            )
        probe = (
            "import os, socket, sys\n"
            "s = socket.socket()\n"
            "s.settimeout(1)\n"
            "try:\n"
            "    s.connect(('1.1.1.1', 53))\n"
            "    net = 'network'\n"
            "except OSError:\n"
            "    net = 'no-network'\n"
            "print(net, os.getuid(), sys.executable)\n"
        )
        python = self.config.python
        with tempfile.TemporaryDirectory(prefix="aios-sandbox-check-") as tmp:
            result = self.run([python.name, "-c", probe], Path(tmp))
        words = result.output.split()
        wanted = {"network", "no-network"} if self.config.network else {"no-network"}
        if result.exit_code != 0 or len(words) < 3 or words[0] not in wanted:
            raise SandboxUnavailable(
                f"the sandbox probe failed (exit {result.exit_code}): {result.output.strip()!r}"
            )
        if self._as_root and words[1] == "0":
            raise SandboxUnavailable("the sandbox probe ran as root: the uid drop did not work.")
        if words[2:] != [str(python)]:
            raise SandboxUnavailable(
                f"{python.name!r} inside the sandbox is {words[2:]}, not {python}: is it readable "
                "by the sandbox's uid?"
            )

    def run(
        self,
        argv: list[str],
        workdir: Path,
        *,
        stdin: str = "",
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run ``argv`` (``argv[0]`` looked up on the sandbox's ``PATH``) in ``workdir`` inside
        the sandbox and wait for it (``env``: variables set over the sandbox's own, nothing
        else inherited); ``workdir`` then holds what the command left in the task dir (within
        the quota). A command that cannot be found exits 127 with setpriv's or
        prlimit's message in the output. Raises ``SandboxError`` for a missing ``workdir``, one
        that overlaps a read-only path or does not fit ``disk_bytes``/``max_files``, or when the
        task dir cannot be copied back; ``SandboxUnavailable`` when bwrap fails."""
        if not argv:
            raise ValueError("argv must name a command.")
        cwd = _check_workdir(workdir)
        read_only = [Path(p) for p in _SYSTEM_PATHS] + self._ro_paths
        for path in read_only + [Path(os.path.realpath(p)) for p in read_only]:
            if _under(cwd, path) or _under(path, cwd):
                raise SandboxError(f"the task directory {cwd} overlaps the read-only {path}.")
        extra = dict(env or {})
        if not self._as_root:
            return self._run(argv, cwd, stdin, uid=None, env=extra)
        with _uid_slot(self.config.uids) as uid:
            return self._run(argv, cwd, stdin, uid=uid, env=extra)

    def _command(
        self,
        argv: list[str],
        cwd: Path,
        uid: int | None,
        fds: Mapping[str, int],
        env: Mapping[str, str] | None = None,
    ) -> list[str]:
        cfg = self.config
        cmd = ["bwrap", "--die-with-parent", "--new-session"]
        cmd += ["--unshare-ipc", "--unshare-pid", "--unshare-uts"]
        cmd += [] if cfg.network else ["--unshare-net"]
        cmd += ["--unshare-cgroup-try", "--hostname", "sandbox"]
        if uid is None:
            cmd += ["--unshare-user", "--disable-userns"]
        cmd += self._mounts
        cmd += [*_dirs_for(cwd, self._made), "--perms", "0700", "--size", str(cfg.disk_bytes)]
        cmd += ["--tmpfs", str(cwd), "--remount-ro", "/dev", "--remount-ro", "/"]
        cmd += ["--chdir", str(cwd), "--clearenv"]
        for key, value in {**_base_env(cfg.python, "/tmp"), **(env or {})}.items():
            cmd += ["--setenv", key, value]
        cmd += ["--info-fd", str(fds["info"]), "--block-fd", str(fds["block"])]
        if "seccomp" in fds:
            cmd += ["--seccomp", str(fds["seccomp"])]
        cmd += ["--", "prlimit", f"--cpu={cfg.cpu_seconds}:{cfg.cpu_seconds + 1}"]
        # As non-root, bwrap's init counts toward the user namespace's processes too.
        nproc = cfg.max_processes + (1 if uid is None else 0)
        cmd += [f"--as={cfg.address_space_bytes or cfg.memory_bytes}", f"--nproc={nproc}"]
        cmd += [f"--fsize={cfg.max_file_bytes}", "--core=0", "--nofile=1024", "--"]
        if uid is not None:
            cmd += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
            cmd += ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        return cmd + argv

    def _run(
        self,
        argv: list[str],
        cwd: Path,
        stdin: str,
        uid: int | None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        out_r, out_w = os.pipe()
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        open_fds = [out_r, out_w, info_r, info_w, block_r, block_w]
        fds = {"info": info_w, "block": block_r}
        try:
            if self._seccomp is not None:
                bpf_r, bpf_w = os.pipe()
                open_fds.append(bpf_r)
                os.write(bpf_w, self._seccomp)  # a few hundred bytes: fits the pipe buffer
                os.close(bpf_w)  # bwrap reads the program up to end of file
                fds["seccomp"] = bpf_r
            cmd = self._command(argv, cwd, uid, fds, env)
            with _stdin_file(stdin) as stdin_fd:
                start = time.monotonic()
                try:
                    proc = subprocess.Popen(
                        cmd,
                        stdin=subprocess.DEVNULL if stdin_fd is None else stdin_fd,
                        stdout=out_w,
                        stderr=out_w,
                        pass_fds=tuple(fds.values()),
                    )
                except FileNotFoundError as exc:
                    raise SandboxUnavailable(
                        "bwrap is not installed: apt-get install -y bubblewrap (deploy/setup.sh)."
                    ) from exc
            for fd in [out_w, *fds.values()]:  # the child holds its own copies
                os.close(fd)
                open_fds.remove(fd)
            try:
                return self._set_up_and_run(proc, out_r, info_r, block_w, cwd, uid, start)
            except BaseException:
                proc.kill()  # the sandbox has ended or never started: reap bwrap
                proc.wait()
                raise
        finally:
            for fd in open_fds:
                os.close(fd)

    def _set_up_and_run(
        self,
        proc: subprocess.Popen[bytes],
        out_fd: int,
        info_fd: int,
        block_fd: int,
        cwd: Path,
        uid: int | None,
        start: float,
    ) -> ExecResult:
        """Wait for bwrap to set the sandbox up (it then waits on ``--block-fd``), then run the
        command in it. Raises ``SandboxUnavailable`` when bwrap fails."""
        deadline = start + self.config.wall_timeout_s
        started, init = _read_info(info_fd, proc, deadline)
        mounts = None
        if init is not None:
            try:
                mounts = _await_mounts(init, [str(cwd), "/tmp", "/dev/shm"], cwd, deadline)
            finally:
                if mounts is None:  # bwrap failed or hung setting up: end what there is
                    _kill_init(init)
                    _await_end(init)
                    os.close(init.fd)
        if init is None or mounts is None:  # bwrap's message is the output
            # bwrap has failed, or its init could not be verified: end it, which ends the init
            # (--die-with-parent). Not proc.kill(): it reaps, and _supervise needs a pidfd.
            os.kill(proc.pid, signal.SIGKILL)
            result = _supervise(_Watch(proc, out_fd, proc.kill), self.config, start)
            raise SandboxUnavailable(
                f"bwrap failed {'while' if started else 'before'} setting up the sandbox (exit "
                f"{result.exit_code}): {result.output.strip()} (see docs/sandbox.md)"
            )
        return self._run_in(proc, init, mounts, out_fd, block_fd, cwd, uid, start)

    def _run_in(
        self,
        proc: subprocess.Popen[bytes],
        init: _Init,
        mounts: dict[str, int],
        out_fd: int,
        block_fd: int,
        cwd: Path,
        uid: int | None,
        start: float,
    ) -> ExecResult:
        """Fill the sandbox's task dir, let the command start, watch it, and copy the task dir
        back once every process of the sandbox is gone."""
        cfg = self.config
        opened: list[int] = []  # the task dir's tmpfs first, then /tmp's and /dev/shm's
        try:
            try:
                host = cwd.stat()
                for path, dev in mounts.items():
                    opened.append(_open_mount(init, path, dev))
                _copy_in(cwd, host, opened[0], uid, cfg)
                sampler = _Sampler(init.pid, opened)  # its baseline: before the command runs
                os.write(block_fd, b"x")  # bwrap goes on: seccomp, then the command
                result = _supervise(_Watch(proc, out_fd, _killer(init, proc), sampler), cfg, start)
            except BaseException:
                _kill_init(init)
                raise
            finally:
                _await_end(init)  # then no process of the sandbox is left to write
                os.close(init.fd)
            owner = None if uid is None else (host.st_uid, host.st_gid)
            dropped = _copy_out(opened[0], cwd, owner, cfg)
            full = sampler.quota_full or os.fstatvfs(opened[0]).f_bavail == 0
        finally:
            for fd in opened:
                os.close(fd)
        return _with_disk_verdict(result, cfg, full=full, dropped=dropped)


def _copy_in(
    cwd: Path, host: os.stat_result, task_fd: int, uid: int | None, config: SandboxConfig
) -> None:
    """Fill the sandbox's task dir (``task_fd``, its tmpfs) from the host's, owned by ``uid``
    (root mode). Raises ``SandboxError`` when it does not fit the quota."""
    room = _Budget(config.max_files, config.disk_bytes)
    quota = (
        f"the task directory {cwd} does not fit the sandbox's quota (disk_bytes="
        f"{config.disk_bytes}, max_files={config.max_files}, {_MAX_DEPTH} levels)"
    )
    host_fd = os.open(cwd, _DIR_FLAGS)
    try:
        _copy_tree(host_fd, task_fd, None if uid is None else (uid, uid), room)
    except OSError as exc:
        raise SandboxError(f"{quota}: {exc.strerror}.") from exc
    finally:
        os.close(host_fd)
    if room.dropped:
        raise SandboxError(f"{quota}.")
    if uid is not None:
        os.fchown(task_fd, uid, uid)
    os.fchmod(task_fd, stat.S_IMODE(host.st_mode) & 0o777 | 0o700)


def _copy_out(task_fd: int, cwd: Path, owner: tuple[int, int] | None, config: SandboxConfig) -> int:
    """Replace the host's task dir with the sandbox's (``task_fd``, once the sandbox has
    ended), owned by ``owner`` (root mode). Returns how many entries were left out (over the
    quota: hard links and sparse files count in full). Raises ``SandboxError`` when the host
    refuses a write."""
    kept = _Budget(config.max_files, config.disk_bytes)
    host_fd = os.open(cwd, _DIR_FLAGS)
    try:
        _let_owner_read("", task_fd, os.fstat(task_fd).st_mode)
        _clear_dir(host_fd)
        _copy_tree(task_fd, host_fd, owner, kept)
    except OSError as exc:
        raise SandboxError(f"could not copy the task directory back to {cwd}: {exc}") from exc
    finally:
        os.close(host_fd)
    return kept.dropped


def _with_disk_verdict(
    result: ExecResult, config: SandboxConfig, *, full: bool, dropped: int
) -> ExecResult:
    """``result``, with a blocked reason when the task dir's quota was full at some point or
    not all of it was copied back (hard links or sparse files over the quota, too deep a tree),
    unless a limit already explains the end."""
    if result.blocked_reason is not None or not (full or dropped):
        return result
    if full:
        reason = (
            f"disk limit: the task directory was full (disk_bytes={config.disk_bytes}); "
            "writes beyond failed with ENOSPC"
        )
    else:
        reason = (
            f"disk limit: {dropped} entries of the task directory were not copied back "
            f"(max_files={config.max_files}, disk_bytes={config.disk_bytes}, "
            f"{_MAX_DEPTH} levels deep)"
        )
    return dataclasses.replace(result, blocked_reason=reason)


@dataclass(frozen=True, slots=True)
class _Init:
    """The sandbox's PID-namespace init: its host pid and a pidfd on it."""

    pid: int
    fd: int


def _read_info(
    info_fd: int, proc: subprocess.Popen[bytes], deadline: float
) -> tuple[bool, _Init | None]:
    """Read bwrap's ``--info-fd`` JSON, written once the namespaces exist: (started, init).

    ``started`` is False when bwrap failed before that. ``init`` is None when the namespace's
    init is already gone (bwrap failed setting it up: the command waits on ``--block-fd``) or
    cannot be verified to be it: its pid namespace must be the one bwrap reported, so a recycled
    pid is never signalled."""
    data = b""
    while time.monotonic() < deadline:
        ready = _readable([info_fd], deadline - time.monotonic())
        if not ready:
            break
        chunk = os.read(info_fd, 4096)
        if not chunk:
            break
        data += chunk
    try:
        info = json.loads(data)
        pid, pid_ns = int(info["child-pid"]), int(info["pid-namespace"])
    except (ValueError, KeyError, TypeError):
        return False, None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True, None
    try:
        verified = os.readlink(f"/proc/{pid}/ns/pid") == f"pid:[{pid_ns}]"
    except OSError:
        verified = False
    if not verified:
        os.close(fd)
        return True, None
    return True, _Init(pid, fd)


def _kill_init(init: _Init) -> None:
    """SIGKILL for the namespace's init, and so for every process of the namespace."""
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(init.fd, signal.SIGKILL)


def _await_mounts(
    init: _Init, paths: list[str], workdir: Path, deadline: float
) -> dict[str, int] | None:
    """Wait until bwrap has set up the sandbox: its init's mount table, as seen from its final
    root, has a tmpfs at each of ``paths`` (the first being the task dir, on a device other than
    the host's ``workdir``). bwrap then waits on ``--block-fd``, so no command runs yet. Returns
    each path's device number, or None when the init ended first. The mount table is pollable
    (POLLPRI after every change), so this waits for events, never a fixed time. Raises
    ``SandboxError`` at the deadline."""
    table = f"/proc/{init.pid}/mountinfo"
    host_dev = workdir.stat().st_dev
    try:
        events = os.open(table, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # the init is gone already
        return None
    try:
        poller = select.poll()
        poller.register(events, select.POLLPRI)
        poller.register(init.fd, select.POLLIN)
        while True:
            try:  # read afresh each time: a reader sees the mounts below the root it opened at
                with open(table, "rb") as f:
                    devs = _tmpfs_mounts(f.read(), paths)
            except OSError:
                return None
            if devs is not None and devs[paths[0]] != host_dev:
                return devs
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxError(
                    "bwrap did not set the sandbox up within the wall-clock timeout."
                )
            ready = poller.poll(math.ceil(remaining * 1000))
            if any(fd == init.fd for fd, _ in ready):
                return None
    finally:
        os.close(events)


def _tmpfs_mounts(mountinfo: bytes, paths: list[str]) -> dict[str, int] | None:
    """The device number of the tmpfs mounted (last) at each of ``paths`` in a mountinfo table,
    or None when one of them has none."""
    escape = {ord("\\"): "\\134", ord(" "): "\\040", ord("\t"): "\\011", ord("\n"): "\\012"}
    wanted = {os.fsencode(p.translate(escape)): p for p in paths}
    found: dict[str, int] = {}
    for line in mountinfo.splitlines():
        fields, _, after = line.partition(b" - ")
        parts = fields.split(b" ")
        if len(parts) < 5 or parts[4] not in wanted:
            continue
        path = wanted[parts[4]]
        found.pop(path, None)
        if after.split(b" ", 1)[0] == b"tmpfs":
            major, _, minor = parts[2].partition(b":")
            found[path] = os.makedev(int(major), int(minor))
    return {p: found[p] for p in paths} if len(found) == len(paths) else None  # in order


def _open_mount(init: _Init, path: str, dev: int) -> int:
    """A directory fd on the sandbox's mount at ``path`` (through its init's root), checked to be
    that mount. It stays usable after the sandbox has ended: the tmpfs lives as long as the fd."""
    fd = os.open(f"/proc/{init.pid}/root{path}", _DIR_FLAGS)
    if os.fstat(fd).st_dev != dev:
        os.close(fd)
        raise SandboxError(f"{path} inside the sandbox is not the tmpfs bwrap mounted there.")
    return fd


def _killer(init: _Init, proc: subprocess.Popen[bytes]) -> Callable[[], None]:
    """SIGKILL for the namespace's init: the kernel then kills every process in it, and bwrap,
    seeing its child die, exits (killing bwrap first would leave the init to the host's pid 1)."""

    def kill() -> None:
        try:
            signal.pidfd_send_signal(init.fd, signal.SIGKILL)
        except ProcessLookupError:
            proc.kill()

    return kill


def _await_end(init: _Init) -> None:
    """Return once the namespace's init has exited, which the kernel allows only after every
    other process of the namespace is gone. Raises ``SandboxError`` if even SIGKILL fails."""
    for _ in range(2):
        if _readable([init.fd], _KILL_GRACE_S):
            return
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(init.fd, signal.SIGKILL)
    raise SandboxError(f"the sandbox's init (pid {init.pid}) is still alive after SIGKILL.")


class _Sampler:
    """Samples one running sandbox through its own ``/proc`` (as seen from the host) and its
    tmpfs mounts: every process but the namespace's init, with its threads and resident
    anonymous memory, and the files in the mounts (all of the task dir's, the first of
    ``mount_fds``; those created in the others since this was made, before the command ran).
    Remembers whether the task dir's tmpfs was ever found full."""

    def __init__(self, init_pid: int, mount_fds: list[int]) -> None:
        self.proc_dir = f"/proc/{init_pid}/root/proc"
        self.mount_fds = mount_fds
        self.baseline = [1] + [_inodes(fd) for fd in mount_fds[1:]]  # 1: the task dir's root
        self.quota_full = False

    def __call__(self) -> _Usage | None:
        try:
            pids = [p for p in os.listdir(self.proc_dir) if p.isdigit() and p != "1"]
        except OSError:
            return None
        tasks = anon = 0
        for pid in pids:
            try:
                with open(f"{self.proc_dir}/{pid}/status", "rb") as f:
                    status = f.read()
            except OSError:
                continue
            tasks += _status_number(status, b"\nThreads:") or 1
            anon += _status_number(status, b"\nRssAnon:") * 1024
        files = sum(_inodes(fd) - n for fd, n in zip(self.mount_fds, self.baseline, strict=True))
        if os.fstatvfs(self.mount_fds[0]).f_bavail == 0:
            self.quota_full = True
        return _Usage(tasks, anon, files)


def _inodes(fd: int) -> int:
    """Inodes in use in the filesystem open as ``fd`` (a tmpfs: its files and directories)."""
    usage = os.fstatvfs(fd)
    return usage.f_files - usage.f_ffree


def _status_number(status: bytes, key: bytes) -> int:
    """The number after ``key`` in a ``/proc/<pid>/status`` text (0 when absent: a zombie has no
    memory lines)."""
    at = status.find(key)
    if at < 0:
        return 0
    try:
        return int(status[at + len(key) :].split(None, 1)[0])
    except (IndexError, ValueError):
        return 0


def policy_executor(
    config: SandboxConfig | None = None, *, environ: Mapping[str, str] = os.environ
) -> Executor:
    """The executor for policy-chosen commands: a ``Sandbox`` that passed ``check()``.

    Raises ``SandboxUnavailable`` when it did not, unless ``AIOS_ALLOW_UNSANDBOXED=1`` is set:
    then a ``LocalExecutor``, with a warning that commands run unisolated."""
    sandbox = Sandbox(config)
    try:
        sandbox.check()
    except SandboxUnavailable as exc:
        if environ.get(ALLOW_UNSANDBOXED_ENV) != "1":
            raise
        _log.warning(
            "sandbox.unavailable_running_unsandboxed",
            reason=str(exc),
            opt_out=f"{ALLOW_UNSANDBOXED_ENV}=1",
        )
        return LocalExecutor(config)
    return sandbox
