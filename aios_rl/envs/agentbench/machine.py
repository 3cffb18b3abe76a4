"""A machine for one AgentBench OS task: what AgentBench gets from ``docker run`` on its Ubuntu
images, without Docker. Runs as root on the host (it writes a full uid map).

What a machine is
-----------------
- A root filesystem of its own: an overlay whose lower layer is a built image (:mod:`.images`,
  read-only and shared) and whose upper layer is a tmpfs of ``disk_bytes`` (everything the task
  writes, gone with the machine). The host's own root is never a layer.
- Root inside a user namespace with a full uid/gid map: uids 0-65535 inside are host uids
  :data:`~.images.UID_BASE` + n, which own nothing on the host but the image's files. Inside,
  root has capabilities over the machine's own namespaces only (``useradd``, ``su - user``,
  ``chown`` and ``find /`` work as in a container).
- Namespaces of its own for mounts, processes, network (only its own loopback: no route out),
  IPC and the hostname; its own ``/proc`` and a minimal ``/dev`` (with its own ``/dev/pts``).
- Set up in two steps, because Debian 12's bubblewrap has no overlay options: ``unshare``
  writes the uid map and makes a private mount namespace in which the overlay is mounted, then
  ``bwrap`` (as root of that namespace) makes the rest and runs ``sleep infinity`` as the
  machine's main process (bwrap is its pid 1 and reaps orphans).
- ``docker exec`` is ``nsenter`` into every namespace, the root and the working directory of the
  main process (entered only once it has exec'd, so the root is the machine's), with a clean
  environment. :meth:`Machine.exec` runs a command to completion (AgentBench's
  ``execute_independent``: init and check scripts); :meth:`Machine.shell` opens the persistent
  ``bash --login`` on a pty that the agent types into (AgentBench's ``execute``).
- Limits: a cgroup (v1 or v2, where the host lets root make one) holds every process of the
  machine, exec'd ones included: ``memory_bytes`` (1 GiB, as AgentBench's containers) and
  ``max_processes``; without cgroups, per-process ``RLIMIT_AS`` and the processes limit of the
  machine's uid stand in. The open-files limit is raised to ``open_files`` where the host allows
  it (one AgentBench task writes to fd 123321). Every exec has a timeout; on close (and on a
  timeout of the machine's start) the pid namespace's init is killed, which kills every process
  in it, the cgroup is emptied and removed and the tmpfs goes with the last process of the mount
  namespace: nothing survives the machine.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import select
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from dataclasses import dataclass
from pathlib import Path

from aios_rl.errors import AiosError

from .images import UID_BASE, UID_COUNT

__all__ = [
    "ENV_PATH",
    "Machine",
    "MachineError",
    "MachineLimits",
    "Shell",
    "clean_terminal",
]

ENV_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_CGROUP_ROOT = Path("/sys/fs/cgroup")


class MachineError(AiosError):
    """The machine could not be made or entered."""


@dataclass(frozen=True)
class MachineLimits:
    memory_bytes: int = 1 << 30
    max_processes: int = 512
    disk_bytes: int = 2 << 30
    """Size of the tmpfs that holds everything the task writes (RAM, counted in memory)."""
    open_files: int = 1 << 20
    start_timeout_s: float = 20.0
    exec_timeout_s: float = 60.0


class _Cgroup:
    """A cgroup of the machine's own under this process's cgroup: v2, or v1's memory and pids
    hierarchies. ``None`` from :meth:`make` when the host does not let us."""

    def __init__(self, dirs: list[Path], v2: bool) -> None:
        self.dirs = dirs
        self.v2 = v2

    @staticmethod
    def _own(controller: str) -> str | None:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            if (controller == "" and names == "") or controller in names.split(","):
                return path
        return None

    @classmethod
    def make(cls, name: str, limits: MachineLimits) -> _Cgroup | None:
        made: list[Path] = []
        try:
            if (_CGROUP_ROOT / "cgroup.controllers").exists():
                own = cls._own("")
                if own is None:
                    return None
                where = _CGROUP_ROOT / own.lstrip("/") / name
                where.mkdir()
                made.append(where)
                (where / "memory.max").write_text(str(limits.memory_bytes))
                (where / "pids.max").write_text(str(limits.max_processes))
                return cls(made, v2=True)
            for controller, knob, value in (
                ("memory", "memory.limit_in_bytes", limits.memory_bytes),
                ("pids", "pids.max", limits.max_processes),
            ):
                own = cls._own(controller)
                if own is None:
                    raise OSError(f"no {controller} cgroup")
                where = _CGROUP_ROOT / controller / own.lstrip("/") / name
                where.mkdir()
                made.append(where)
                (where / knob).write_text(str(value))
            return cls(made, v2=False)
        except OSError:
            for where in reversed(made):
                with contextlib.suppress(OSError):
                    where.rmdir()
            return None

    def join_command(self) -> str:
        """Shell text that moves the running shell (``$$``) into the cgroup."""
        return "; ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self.dirs)

    def pids(self) -> list[int]:
        out: set[int] = set()
        for where in self.dirs:
            with contextlib.suppress(OSError):
                out.update(int(x) for x in (where / "cgroup.procs").read_text().split())
        return sorted(out)

    def remove(self, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        for where in self.dirs:
            if self.v2 and (where / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (where / "cgroup.kill").write_text("1")
        while True:
            left = self.pids()
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            removed = True
            for where in self.dirs:
                try:
                    where.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    removed = False
            if removed or time.monotonic() > deadline:
                return
            _wait_a_little()

    def memory_peak(self) -> int:
        for where in self.dirs:
            for knob in ("memory.peak", "memory.max_usage_in_bytes"):
                with contextlib.suppress(OSError, ValueError):
                    return int((where / knob).read_text())
        return 0


def _wait_a_little(seconds: float = 0.02) -> None:
    """Block for a short while (polling the kernel for a state it does not signal)."""
    select.select([], [], [], seconds)


_MOUNT = r"""
set -eu
run=$1; lower=$2; disk=$3; base=$4
mount -t tmpfs -o "size=$disk,mode=0755" aios-os "$run"
mkdir "$run/upper" "$run/work" "$run/root"
chown "$base:$base" "$run/upper"
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$run/upper,workdir=$run/work" "$run/root"
shift 4
exec "$@"
"""
"""Run by host root in a private mount namespace: the machine's root filesystem."""

_HOSTS = r"""
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n' "$1" > /etc/hosts
echo "$1" > /etc/hostname
"""
"""As Docker writes them (the machine's only address is its loopback)."""

_BWRAP = r"""
set -eu
root=$1; host=$2
exec bwrap --bind "$root" / --proc /proc --tmpfs /proc/tty/driver --dev /dev --tmpfs /dev/shm \
  --unshare-pid --unshare-net --unshare-ipc --unshare-uts --unshare-cgroup-try \
  --hostname "$host" --die-with-parent --cap-add ALL --chdir / --clearenv \
  --setenv PATH "$3" --setenv HOME /root --setenv HOSTNAME "$host" \
  --info-fd "$4" -- /bin/sleep infinity
"""
"""Run by root of the machine's user namespace: the rest of the machine."""


def clean_terminal(raw: str) -> str:
    """Terminal output as text: escape sequences (CSI, OSC, charset selection) and carriage
    returns removed."""
    text = re.sub(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)", "", raw)
    text = re.sub(r"\x1b\[[0-?]*[ -/]*[@-~]", "", text)
    text = re.sub(r"\x1b[()][0-9A-Za-z]|\x1b[=>78DEHM]", "", text)
    return text.replace("\r\n", "\n").replace("\r", "")


class Machine:
    """One task's machine (see the module docstring). ``start()`` before use; ``close()``
    always (also a context manager)."""

    def __init__(
        self, image: Path, limits: MachineLimits | None = None, *, hostname: str = ""
    ) -> None:
        self.image = Path(image)
        self.limits = limits or MachineLimits()
        self.hostname = hostname or secrets.token_hex(6)
        self.cgroup: _Cgroup | None = None
        self.init_pid = 0
        """Host pid of the machine's pid 1 (bubblewrap's init)."""
        self.main_pid = 0
        """Host pid of the main process (``sleep infinity``), whose namespaces ``exec`` enters."""
        self._launcher: subprocess.Popen[bytes] | None = None
        self._run: Path | None = None
        self._shells: list[Shell] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Machine:
        if os.geteuid() != 0:
            raise MachineError("the agentbench_os machine needs root (it writes a full uid map)")
        for tool in ("unshare", "nsenter", "bwrap"):
            if shutil.which(tool) is None:
                raise MachineError(f"{tool} is not installed")
        if not (self.image / "bin").exists():
            raise MachineError(f"not a root filesystem: {self.image}")
        name = f"aios-os-{self.hostname}"
        self._run = Path(tempfile.mkdtemp(prefix=f"{name}-"))
        self.cgroup = _Cgroup.make(self._run.name, self.limits)  # unique, as the folder
        read_fd, write_fd = os.pipe()
        # Host root mounts the root filesystem in a private mount namespace (_MOUNT); a helper
        # makes the user namespace, the host writes its full uid map, then root of that
        # namespace makes the rest (_BWRAP).
        bwrap = [
            "/bin/sh",
            "-c",
            _BWRAP,
            "bwrap",
            str(self._run / "root"),
            self.hostname,
            ENV_PATH,
            str(write_fd),
        ]
        helper = [sys.executable, "-m", "aios_rl.envs.agentbench._userns", *bwrap]
        mount = [
            "/bin/sh",
            "-c",
            _MOUNT,
            "mount",
            str(self._run),
            str(self.image),
            str(self.limits.disk_bytes),
            str(UID_BASE),
            *helper,
        ]
        unshare = ["unshare", "--mount", "--propagation=private", "--", *mount]
        try:
            self._launcher = subprocess.Popen(
                ["/bin/sh", "-c", f'{self._prelude()}exec "$@"', "sh", *unshare],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(write_fd,),
                start_new_session=True,
                preexec_fn=_default_signals,
                env=host_env(),
            )
        finally:
            os.close(write_fd)
        try:
            self._write_maps()
            self.init_pid = self._read_init_pid(read_fd)
            self.main_pid = self._await_main()
            code, out = self.exec(["/bin/sh", "-c", _HOSTS, "hosts", self.hostname])
            if code != 0:
                raise MachineError(f"the machine's /etc/hosts could not be written: {out[:200]}")
        except Exception:
            self.close()
            raise
        finally:
            os.close(read_fd)
        return self

    def _write_maps(self) -> None:
        """Once the helper has made its user namespace: the full uid and gid map."""
        assert self._launcher is not None and self._launcher.stdout and self._launcher.stdin
        out = self._launcher.stdout
        ready, _, _ = select.select([out], [], [], self.limits.start_timeout_s)
        line = out.readline().decode() if ready else ""
        if not line.startswith("ready "):
            raise MachineError(self._launcher_error("the machine's namespaces were not made"))
        pid = int(line.split()[1])
        for kind in ("uid_map", "gid_map"):
            Path(f"/proc/{pid}/{kind}").write_text(f"0 {UID_BASE} {UID_COUNT}\n")
        self._launcher.stdin.write(b"go\n")
        self._launcher.stdin.close()

    def _launcher_error(self, what: str) -> str:
        err = b""
        if self._launcher is not None and self._launcher.stderr is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._launcher.wait(timeout=5)
            if self._launcher.poll() is not None:
                err = self._launcher.stderr.read()
        return f"{what}: {err.decode(errors='replace').strip()[-500:]}"

    def _prelude(self) -> str:
        """Shell text run on the host before entering: join the machine's cgroup, raise the
        open-files limit where the host allows it, and (without a cgroup) limit each process's
        address space."""
        parts = [self.cgroup.join_command()] if self.cgroup else []
        parts.append(f"ulimit -n {self.limits.open_files} 2>/dev/null || true")
        if self.cgroup is None:
            parts.append(f"ulimit -v {self.limits.memory_bytes // 1024}")
        return "; ".join(parts) + "; "

    def _read_init_pid(self, fd: int) -> int:
        deadline = time.monotonic() + self.limits.start_timeout_s
        buf = b""
        while b"child-pid" not in buf or b"}" not in buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(0.0, left))
            if not ready:
                raise MachineError("the machine did not start in time")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise MachineError(self._launcher_error("the machine failed to start"))
            buf += chunk
        match = re.search(rb'"child-pid"\s*:\s*(\d+)', buf)
        if match is None:
            raise MachineError(f"bwrap reported no pid: {buf[:200]!r}")
        return int(match.group(1))

    def _await_main(self) -> int:
        """The main process, once it has exec'd (its root is then the machine's)."""
        deadline = time.monotonic() + self.limits.start_timeout_s
        children = Path(f"/proc/{self.init_pid}/task/{self.init_pid}/children")
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                for pid in children.read_text().split():
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                    if cmdline == b"/bin/sleep\0infinity\0":
                        return int(pid)
            if self._launcher is not None and self._launcher.poll() is not None:
                raise MachineError("the machine's init ended during start")
            _wait_a_little()
        raise MachineError("the machine's main process did not start in time")

    def close(self) -> None:
        # the machine goes first, its shells' terminals after (a shell hung up on first would
        # keep the pid namespace alive while its terminal drains)
        if self.init_pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.init_pid, signal.SIGKILL)
        if self._launcher is not None:
            # the launcher (bubblewrap outside) reaps the machine's init once the kernel has
            # killed everything in its pid namespace; killed first, it would leave a zombie
            try:
                self._launcher.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._launcher.kill()
                self._launcher.wait(timeout=10)
            for stream in (self._launcher.stdin, self._launcher.stdout, self._launcher.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            self._launcher = None
        for shell in self._shells:
            shell.close()
        self._shells.clear()
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self._run is not None:
            with contextlib.suppress(OSError):
                self._run.rmdir()
            self._run = None
        self.init_pid = self.main_pid = 0

    def __enter__(self) -> Machine:
        return self.start() if not self.main_pid else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        return bool(self.main_pid) and Path(f"/proc/{self.main_pid}").exists()

    # ------------------------------------------------------------------ entering
    def _enter(self, argv: list[str], env: dict[str, str] | None = None) -> list[str]:
        if not self.main_pid:
            raise MachineError("the machine is not running")
        environment = {
            "PATH": ENV_PATH,
            "HOME": "/root",
            "HOSTNAME": self.hostname,
            **(env or {}),
        }
        enter = [
            "nsenter",
            "-t",
            str(self.main_pid),
            "-a",
            "-r",
            "-w",
            "--",
            "/usr/bin/env",
            "-i",
            *(f"{k}={v}" for k, v in environment.items()),
            *argv,
        ]
        return ["/bin/sh", "-c", f'{self._prelude()}exec "$@"', "sh", *enter]

    def exec(
        self, argv: list[str], *, timeout_s: float | None = None, stdin: str = ""
    ) -> tuple[int, str]:
        """Run ``argv`` in the machine as root in ``/`` and wait: (exit status, stdout and
        stderr together, as ``docker exec`` gives them). A timeout kills the command's process
        group in the machine and returns status 124 (as coreutils' ``timeout``)."""
        timeout = self.limits.exec_timeout_s if timeout_s is None else timeout_s
        wrapped = ["setsid", "--wait", *argv]
        proc = subprocess.Popen(
            self._enter(wrapped),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=_default_signals,
            env=host_env(),
        )
        try:
            out, _ = proc.communicate(stdin.encode() if stdin else None, timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill_entered(proc.pid)
            proc.kill()
            out, _ = proc.communicate()
            return 124, out.decode("utf-8", errors="replace")
        return proc.returncode, out.decode("utf-8", errors="replace")

    def _kill_entered(self, host_pid: int) -> None:
        """Kill what an ``nsenter`` started (its descendants inside the machine)."""
        for pid in _descendants(host_pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def shell(self) -> Shell:
        """The persistent ``bash --login`` on a pty (``TERM=xterm``, as ``docker exec -it``)."""
        shell = Shell(self)
        self._shells.append(shell)
        return shell


HOST_ONLY = ("LD_PRELOAD", "LD_LIBRARY_PATH")
"""Variables that name host files: a process that enters a machine must not carry them in
(its dynamic loader would look for them in the machine's root; vLLM, for one, sets
``LD_PRELOAD`` in the process that starts it)."""


def host_env() -> dict[str, str]:
    """This process's environment without :data:`HOST_ONLY`, for the commands that start or
    enter a machine."""
    return {k: v for k, v in os.environ.items() if k not in HOST_ONLY}


def _default_signals() -> None:
    """In a child before it execs: SIGINT and SIGQUIT back to their defaults. A parent started
    in the background of a non-interactive shell ignores them, every process inherits that,
    and bash cannot undo it, so a Ctrl-C typed in the machine's terminal stopped nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                kids = Path(f"/proc/{current}/task/{task}/children").read_text().split()
                for kid in kids:
                    out.append(int(kid))
                    todo.append(int(kid))
    return out


_TITLED = rb"(?:\x1b\[\?2004h)?\x1b\][^\x07]*\x07[^\x1b\n]*[#$] "
"""The images' prompt: the xterm title (``.bashrc`` from ``/etc/skel``), then ``user@host:dir# ``."""
_BARE = rb"\x1b\[\?2004h[^\x1b\n]*@[^\x1b\n]*[#$] "
"""A prompt without the title (a ``PS1`` of ``/etc/bash.bashrc``, or one an init script or the
agent set): readline's bracketed-paste switch, then ``user@host:dir# ``."""
_MOVES = rb"(?:\x1b\[[0-9;]*[A-Za-z])*"
_PS1 = re.compile(rb"(?:" + _TITLED + rb"|" + _BARE + rb")" + _MOVES + rb"$")
"""A prompt of bash at the end of what the terminal printed, in either form: what AgentBench's
reader looks for (an escape, then ``@``, then ``# `` or ``$ ``)."""
_PS1_ANYWHERE = re.compile(rb"(?:" + _TITLED + rb"|" + _BARE.replace(b"*", b"*?") + rb")" + _MOVES)
_ANY_PROMPT = re.compile(rb"[#$%>] " + _MOVES + rb"$")
"""Some prompt, unrecognised (no escape before it, or no ``user@host``): accepted as the shell's
first prompt; each command's output is then read until the shell is quiet, as AgentBench reads
it."""
_PS2 = re.compile(rb"(?:\n|\x1b\[\?2004h)> $")
_DRAIN_S = 15.0
"""Longest a Ctrl-C waits for the prompt, dropping what the terminal still prints."""
_DRAIN_QUIET_S = 2.0
"""Silence after a Ctrl-C that ends that wait (a program that ignores it prints nothing)."""


def _echo_of(typed: bytes) -> bytes:
    """What the terminal echoes of a typed line, when that is knowable: the line itself unless
    it holds control characters (readline completes on a tab, edits on others): then nothing."""
    line = typed.rstrip()
    return b"" if any(b < 0x20 or b == 0x7F for b in line) else line


class Shell:
    """AgentBench's persistent shell: commands are typed into ``bash --login`` on a pty and
    their output read until the shell prompts again (see :meth:`run`)."""

    idle_timeout_s = 5.0
    """Stop waiting when the shell prints nothing for this long (AgentBench's socket timeout)."""
    max_output_bytes = 1 << 20

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 4096, 0, 0))
        try:
            self.proc = subprocess.Popen(
                machine._enter(["setsid", "-c", "bash", "--login"], {"TERM": "xterm"}),
                stdin=slave,
                stdout=slave,
                stderr=slave,
                start_new_session=True,
                preexec_fn=_default_signals,
                env=host_env(),
            )
        finally:
            os.close(slave)
        os.set_blocking(self.master, False)
        self.greeting = self._read(last=True, hard_s=machine.limits.start_timeout_s)
        prompted = _PS1.search(self.greeting) or (
            self.proc.poll() is None and _ANY_PROMPT.search(self.greeting)
        )
        if not prompted:
            raise MachineError(f"the shell did not prompt: {self.greeting[-200:]!r}")

    def _read(self, *, last: bool, hard_s: float, echo: bytes = b"") -> bytes:
        """Read until a prompt ends the output (the secondary ``> `` too unless ``last``), the
        shell is quiet for :attr:`idle_timeout_s`, or ``hard_s`` passes (then Ctrl-C). With
        ``echo`` (the line just typed), only a prompt after its echo counts: one the shell
        printed before reading the line (a late prompt of an earlier command) does not."""
        deadline = time.monotonic() + hard_s
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or len(buf) > self.max_output_bytes:
                self._interrupt()
                return buf
            ready, _, _ = select.select([self.master], [], [], min(left, self.idle_timeout_s))
            if not ready:
                return buf
            try:
                chunk = os.read(self.master, 65536)
            except BlockingIOError:
                continue
            except OSError as exc:
                if exc.errno in (errno.EIO, errno.EBADF):
                    return buf
                raise
            if not chunk:
                return buf
            buf += chunk
            seen = buf.find(echo) if echo else 0
            if seen == -1:
                continue  # the line is not read yet: whatever prompt is there came before it
            tail = buf[seen + len(echo) :]
            if _PS1.search(tail) or (not last and _PS2.search(tail)):
                return buf

    def _interrupt(self) -> None:
        """Ctrl-C, as a person would; what the terminal still prints until the prompt is
        dropped (up to ``_DRAIN_S`` of it: on a loaded machine a flood's tail and the prompt
        took longer than 3 s, and the next command read the flood)."""
        os.write(self.master, b"\x03")
        deadline = time.monotonic() + _DRAIN_S
        tail = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], _DRAIN_QUIET_S)
            if not ready:
                return
            try:
                tail = (tail + os.read(self.master, 65536))[-4096:]
            except BlockingIOError:
                continue
            except OSError:
                return
            if _PS1.search(tail):
                return

    def run(self, command: str, *, hard_s: float = 60.0) -> str:
        """Type ``command`` line by line, each once the shell prompts for it, and return what
        the terminal showed until the last prompt, as text: the echo of the first line dropped
        (as AgentBench drops it), the final prompt and escape sequences removed. Later lines of
        a multi-line command show their prompt and echo, as in AgentBench's terminal. A command
        that keeps the shell busy (or reads the terminal) is left after :attr:`idle_timeout_s`
        of silence, as AgentBench leaves it; one that runs past ``hard_s`` gets Ctrl-C."""
        deadline = time.monotonic() + hard_s
        stale = self._pending()
        lines = command.split("\n")
        raw = b""
        for n, line in enumerate(lines):
            typed = line.encode()
            os.write(self.master, typed + b"\n")
            left = max(0.1, deadline - time.monotonic())
            raw += self._read(last=n == len(lines) - 1, hard_s=left, echo=_echo_of(typed))
        prompt = _PS1.search(raw)
        if prompt is not None:
            raw = raw[: prompt.start()]
        # What the terminal printed before this command's echo (a background job's output, a
        # late prompt): kept, without prompts; the echo of the first line dropped (AgentBench's
        # reader drops it too).
        first = _echo_of(lines[0].encode())
        at = raw.find(first) if first else -1
        if at != -1:
            stale, raw = stale + raw[:at], raw[at:]
        before = clean_terminal(_PS1_ANYWHERE.sub(b"", stale).decode("utf-8", errors="replace"))
        text = clean_terminal(raw.decode("utf-8", errors="replace"))
        _, _, rest = text.partition("\n")
        return before.lstrip("\n") + rest

    def _pending(self) -> bytes:
        """What the terminal printed since the last read (nothing waited for)."""
        out = b""
        while select.select([self.master], [], [], 0)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except (BlockingIOError, OSError):
                break
            if not chunk:
                break
            out += chunk
        return out

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.master)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
