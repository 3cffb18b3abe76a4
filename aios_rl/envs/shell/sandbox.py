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
  Writable: the task's ``workdir`` (bound at its host path), a private ``/tmp`` and ``/dev/shm``
  (tmpfs of ``tmp_bytes`` each), a minimal ``/dev`` and its own ``/proc``.
- An unprivileged identity. Run as root (the normal case on a host), bwrap sets up the
  namespaces, then ``setpriv`` drops to a uid of its own from ``SandboxConfig.uids`` (one per
  concurrent sandbox, held by a lock file in ``/run/aios-rl/``), with no capabilities, an empty
  bounding set and ``no_new_privs`` (setuid binaries stay powerless). The task dir is chowned to
  that uid for the run and back to the workdir's owner afterwards (setuid/setgid bits stripped).
  Run as non-root (a container's ``USER``), bwrap uses an unprivileged user namespace instead and
  the command keeps the caller's uid; nested user namespaces are disabled.
- A seccomp filter (x86-64) that refuses new namespaces (``unshare``, ``setns``, ``clone`` with
  namespace flags; ``clone3`` answers ENOSYS so libc falls back to ``clone``), mounts, keyrings,
  ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring`` and module/kexec calls, and kills a
  process that makes 32-bit or x32 system calls.
- Limits: per process ``RLIMIT_CPU`` (``cpu_seconds``; SIGXCPU), ``RLIMIT_AS``
  (``memory_bytes``), ``RLIMIT_FSIZE`` (``max_file_bytes``), ``RLIMIT_CORE`` 0 and 1024 open
  files; for the uid ``RLIMIT_NPROC`` (``max_processes``: processes and threads). While it runs,
  the sandbox is sampled every ``SAMPLE_INTERVAL_S``: reaching ``max_processes`` processes (a fork
  bomb) or more than ``memory_bytes`` of resident anonymous memory in total kills it. More than
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
- Disk space: ``RLIMIT_FSIZE`` bounds each file, not how many files a command writes into the
  task dir. Without cgroups there is no quota; size task dirs' filesystems accordingly.
- Exact memory accounting: the total is sampled (about 10 times a second) from resident
  anonymous memory, so a burst between samples can reach ``max_processes * memory_bytes`` of
  address space before the kill; pages shared after ``fork`` count once per process.
- CPU: ``RLIMIT_CPU`` is per process, so a tree of processes can use more CPU in total until the
  wall-clock timeout. Without cgroups there is no CPU share either.
- Which limit ended a command is partly inferred: an exit status above 128 means a signal (shell
  convention, as bwrap reports it), so ``exit 152`` reads as SIGXCPU; a failed allocation under
  ``RLIMIT_AS`` is recognised from the output (``MemoryError``, ``Cannot allocate memory``, ...).
- Other architectures than x86-64 get no seccomp filter (namespaces and limits still apply).
- What the command leaves in the task dir: after a run it is untrusted input. It may hold
  symlinks to host paths (harmless inside, followed by a host process that reads them), FIFOs
  or huge trees; read it with ``O_NOFOLLOW`` or inside the sandbox. (Hard links to host files
  are impossible: the task dir is a separate mount, so ``link`` fails with EXDEV.)
- ``LocalExecutor`` protects against nothing but runaway time, output, memory and file sizes.

Opting out
----------
``policy_executor()`` raises ``SandboxUnavailable`` when the check fails. Only with the
environment variable ``AIOS_ALLOW_UNSANDBOXED=1`` does it return a ``LocalExecutor`` instead, with
a warning in the log: the policy's commands then run with the runner's full privileges.
"""

from __future__ import annotations

import contextlib
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
from typing import Protocol

import structlog

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
)
_MiB = 1024 * 1024

_log = structlog.get_logger()


# -- errors ---------------------------------------------------------------------------------------


class SandboxError(Exception):
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
    reaching it with processes is treated as a fork bomb and kills the sandbox."""

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

    def __post_init__(self) -> None:
        for name in (
            "cpu_seconds",
            "memory_bytes",
            "max_processes",
            "max_output_bytes",
            "max_file_bytes",
            "tmp_bytes",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"SandboxConfig.{name} must be a positive integer, not {value!r}.")
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
    ``output_limit``, ``process_limit``, ``memory_limit``), a kernel limit (``cpu_limit`` for
    SIGXCPU, ``file_size_limit`` for SIGXFSZ) or the name of the signal (``SIGSEGV``, ...)."""

    blocked_reason: str | None
    """One sentence when a sandbox limit contained the command (fork bomb, memory, CPU, timeout,
    output flood, file size), else ``None``."""

    duration_s: float
    """Wall-clock seconds from start to the end of the last process."""


class Executor(Protocol):
    """Runs one command in a task directory."""

    def run(self, argv: list[str], workdir: Path, *, stdin: str = "") -> ExecResult:
        """Run ``argv`` (looked up on ``PATH``) in ``workdir`` and wait for it."""
        ...


# -- running and watching one process tree --------------------------------------------------------


@dataclass(slots=True)
class _Watch:
    """What ``_supervise`` needs to know about one running tree."""

    proc: subprocess.Popen[bytes]
    out_fd: int
    kill: Callable[[], None]
    """SIGKILL for the whole tree."""
    sample: Callable[[], tuple[int, int] | None] | None = None
    """(processes, resident anonymous bytes) of the tree now, or None when it cannot tell."""


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
    ``RLIMIT_AS`` (only when the command failed), ``RLIMIT_NPROC`` and ``RLIMIT_FSIZE``."""
    for pattern, limit in _LIMIT_MESSAGES:
        if (limit != "mem" or exit_code != 0) and pattern.search(out):
            return {
                "mem": f"memory limit: an allocation failed (address space limited to "
                f"{config.memory_bytes // _MiB} MiB per process)",
                "proc": f"process limit: a fork or thread failed (max_processes="
                f"{config.max_processes} processes and threads)",
                "fsize": f"file size limit: a write failed (max_file_bytes={config.max_file_bytes})",
            }[limit]
    return None


def _over_limits(
    usage: tuple[int, int] | None, config: SandboxConfig
) -> tuple[str | None, str | None]:
    """(killed_by, blocked_reason) when a sample of the tree is over a limit, else (None, None)."""
    if usage is None:
        return None, None
    processes, anon = usage
    if processes >= config.max_processes:
        return "process_limit", (
            f"process limit: {processes} processes reached max_processes={config.max_processes} "
            "(a fork bomb?); the sandbox was killed"
        )
    if anon > config.memory_bytes:
        return "memory_limit", (
            f"memory limit: its processes held {anon // _MiB} MiB, more than memory_bytes "
            f"({config.memory_bytes // _MiB} MiB); the sandbox was killed"
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


def _chown_tree(root: Path, uid: int, gid: int, *, only_uid: int | None = None) -> None:
    """chown ``root`` and everything under it to ``uid:gid``; with ``only_uid``, only what that
    uid owns. Works relative to directory fds and never follows a symlink, so a tree with hostile
    links cannot redirect it; strips setuid/setgid bits from regular files."""

    def fix(name: str, dir_fd: int | None) -> None:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if only_uid is not None and st.st_uid != only_uid:
            return
        os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(name, flags, dir_fd=dir_fd)
            try:
                os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
            finally:
                os.close(fd)

    fix(str(root), None)
    for _, dirnames, filenames, dir_fd in os.fwalk(root):
        for name in dirnames + filenames:
            fix(name, dir_fd)


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
        and the interpreter runs inside, unprivileged and without network. Raises
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
            "    print('network')\n"
            "except OSError:\n"
            "    print('no-network', os.getuid(), sys.executable)\n"
        )
        python = self.config.python
        with tempfile.TemporaryDirectory(prefix="aios-sandbox-check-") as tmp:
            result = self.run([python.name, "-c", probe], Path(tmp))
        words = result.output.split()
        if result.exit_code != 0 or words[:1] != ["no-network"]:
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

    def run(self, argv: list[str], workdir: Path, *, stdin: str = "") -> ExecResult:
        """Run ``argv`` (``argv[0]`` looked up on the sandbox's ``PATH``) in ``workdir`` inside
        the sandbox and wait for it. A command that cannot be found exits 127 with setpriv's or
        prlimit's message in the output. Raises ``SandboxError`` for a missing ``workdir`` or one
        that overlaps a read-only path, ``SandboxUnavailable`` when bwrap fails."""
        if not argv:
            raise ValueError("argv must name a command.")
        cwd = _check_workdir(workdir)
        read_only = [Path(p) for p in _SYSTEM_PATHS] + self._ro_paths
        for path in read_only + [Path(os.path.realpath(p)) for p in read_only]:
            if _under(cwd, path) or _under(path, cwd):
                raise SandboxError(f"the task directory {cwd} overlaps the read-only {path}.")
        if not self._as_root:
            return self._run(argv, cwd, stdin, uid=None)
        owner = cwd.stat()
        with _uid_slot(self.config.uids) as uid:
            try:
                _chown_tree(cwd, uid, uid)
                return self._run(argv, cwd, stdin, uid=uid)
            finally:
                _chown_tree(cwd, owner.st_uid, owner.st_gid, only_uid=uid)

    def _command(
        self, argv: list[str], cwd: Path, uid: int | None, fds: Mapping[str, int]
    ) -> list[str]:
        cfg = self.config
        cmd = ["bwrap", "--die-with-parent", "--new-session"]
        cmd += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
        cmd += ["--unshare-cgroup-try", "--hostname", "sandbox"]
        if uid is None:
            cmd += ["--unshare-user", "--disable-userns"]
        cmd += self._mounts
        cmd += [*_dirs_for(cwd, self._made), "--bind", str(cwd), str(cwd)]
        cmd += ["--remount-ro", "/dev", "--remount-ro", "/"]
        cmd += ["--chdir", str(cwd), "--clearenv"]
        for key, value in _base_env(cfg.python, "/tmp").items():
            cmd += ["--setenv", key, value]
        cmd += ["--info-fd", str(fds["info"])]
        if "seccomp" in fds:
            cmd += ["--seccomp", str(fds["seccomp"])]
        cmd += ["--", "prlimit", f"--cpu={cfg.cpu_seconds}:{cfg.cpu_seconds + 1}"]
        # As non-root, bwrap's init counts toward the user namespace's processes too.
        nproc = cfg.max_processes + (1 if uid is None else 0)
        cmd += [f"--as={cfg.memory_bytes}", f"--nproc={nproc}"]
        cmd += [f"--fsize={cfg.max_file_bytes}", "--core=0", "--nofile=1024", "--"]
        if uid is not None:
            cmd += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
            cmd += ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        return cmd + argv

    def _run(self, argv: list[str], cwd: Path, stdin: str, uid: int | None) -> ExecResult:
        out_r, out_w = os.pipe()
        info_r, info_w = os.pipe()
        open_fds = [out_r, out_w, info_r, info_w]
        fds = {"info": info_w}
        try:
            if self._seccomp is not None:
                bpf_r, bpf_w = os.pipe()
                open_fds.append(bpf_r)
                os.write(bpf_w, self._seccomp)  # a few hundred bytes: fits the pipe buffer
                os.close(bpf_w)  # bwrap reads the program up to end of file
                fds["seccomp"] = bpf_r
            cmd = self._command(argv, cwd, uid, fds)
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
            started, init = _read_info(info_r, proc, start + self.config.wall_timeout_s)
            if not started:  # bwrap failed before the command started: its message is the output
                result = _supervise(_Watch(proc, out_r, proc.kill), self.config, start)
                raise SandboxUnavailable(
                    f"bwrap could not set up the sandbox (exit {result.exit_code}): "
                    f"{result.output.strip()} (see docs/sandbox.md)"
                )
            if init is None:  # already over; killing bwrap would still end it (--die-with-parent)
                return _supervise(_Watch(proc, out_r, proc.kill), self.config, start)
            try:
                watch = _Watch(proc, out_r, _killer(init, proc), _sampler(init.pid))
                return _supervise(watch, self.config, start)
            finally:
                _await_end(init)  # bwrap may exit first: the task dir is touched only after this
                os.close(init.fd)
        finally:
            for fd in open_fds:
                os.close(fd)


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
    init is already gone (a command that ended at once) or cannot be verified to be it: its pid
    namespace must be the one bwrap reported, so a recycled pid is never signalled."""
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


def _sampler(init_pid: int) -> Callable[[], tuple[int, int] | None]:
    """Counts the namespace's processes (but its init) and their resident anonymous memory,
    through the sandbox's own ``/proc`` as seen from the host."""
    proc_dir = f"/proc/{init_pid}/root/proc"
    page = os.sysconf("SC_PAGE_SIZE")

    def sample() -> tuple[int, int] | None:
        try:
            pids = [p for p in os.listdir(proc_dir) if p.isdigit() and p != "1"]
        except OSError:
            return None
        anon = 0
        for pid in pids:
            try:
                with open(f"{proc_dir}/{pid}/statm", "rb") as f:
                    fields = f.read().split()
                anon += (int(fields[1]) - int(fields[2])) * page
            except (OSError, IndexError, ValueError):
                continue
        return len(pids), anon

    return sample


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
