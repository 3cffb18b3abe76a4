"""The shell sandbox, against the real bubblewrap and kernel: no mocks.

Each containment test ends by running a normal command in the same sandbox and, when run as root,
by checking that no process of a sandbox uid is left on the host."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import platform
import pwd
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aios_rl.envs.shell.sandbox import (
    ALLOW_UNSANDBOXED_ENV,
    ExecResult,
    Executor,
    LocalExecutor,
    Sandbox,
    SandboxConfig,
    SandboxError,
    SandboxUnavailable,
    policy_executor,
)

REPO = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024
AS_ROOT = os.geteuid() == 0

# A uid range of this session's own, so that the check for leftover processes cannot see the
# sandboxes of a concurrent test session or of a shell-runner on the same machine.
UIDS = range(53_000 + os.getpid() % 200 * 32, 53_000 + os.getpid() % 200 * 32 + 32)
CONFIG = SandboxConfig(
    cpu_seconds=10,
    memory_bytes=512 * MiB,
    max_processes=32,
    max_output_bytes=64 * 1024,
    wall_timeout_s=20,
    uids=UIDS,
)


def config(**changes: Any) -> SandboxConfig:
    return dataclasses.replace(CONFIG, **changes)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    """One checked sandbox for the module: a machine without working bwrap fails here, loudly."""
    box = Sandbox(CONFIG)
    box.check()
    return box


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    task = tmp_path / "task"
    task.mkdir()
    return task


def py(code: str, *args: str) -> list[str]:
    return ["python", "-c", code, *args]


def sandbox_processes() -> list[str]:
    """Host processes whose real uid is one of this session's sandbox uids (root mode)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        uid = int(status.split("\nUid:")[1].split()[0])
        if uid in CONFIG.uids:
            found.append(f"{entry} {status.splitlines()[0]}")
    return found


def was_killed(pid: int) -> bool:
    """The process is gone, a zombie, or has a SIGKILL pending (it dies when next scheduled)."""
    try:
        status = dict(
            line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
    except FileNotFoundError:
        return True
    pending = int(status["SigPnd"], 16) | int(status["ShdPnd"], 16)
    return status["State"].startswith(("Z", "X")) or bool(pending & 1 << (signal.SIGKILL - 1))


def assert_recovered(box: Executor, workdir: Path) -> None:
    """Nothing of the previous command survives and the next one runs normally."""
    assert sandbox_processes() == []
    result = box.run(py("print('still fine')"), workdir)
    assert (result.exit_code, result.output, result.blocked_reason) == (0, "still fine\n", None)


# -- isolation ---------------------------------------------------------------------------------


def test_commands_run_unprivileged_and_cannot_make_namespaces(
    sandbox: Sandbox, workdir: Path
) -> None:
    result = sandbox.run(
        [
            "sh",
            "-c",
            "id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; "
            "unshare --user --map-root-user true || echo no-userns",
        ],
        workdir,
    )
    lines = result.output.splitlines()
    assert result.exit_code == 0, result.output
    if AS_ROOT:
        assert int(lines[0]) in CONFIG.uids
    assert "CapEff:\t0000000000000000" in lines
    assert "NoNewPrivs:\t1" in lines
    if platform.machine() == "x86_64":
        assert "Seccomp:\t2" in lines
    assert lines[-1] == "no-userns"


@contextlib.contextmanager
def host_listener() -> Iterator[tuple[socket.socket, int]]:
    """A TCP socket listening on the host's 127.0.0.1, and its port."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener, listener.getsockname()[1]


def test_no_network_not_even_the_hosts_loopback(sandbox: Sandbox, workdir: Path) -> None:
    with host_listener() as (listener, port):
        code = (
            "import socket, sys\n"
            "for host, port in [('127.0.0.1', int(sys.argv[1])), ('1.1.1.1', 53)]:\n"
            "    try:\n"
            "        socket.create_connection((host, port), timeout=2).close()\n"
            "        print('connected', host)\n"
            "    except OSError as exc:\n"
            "        print('failed', host, type(exc).__name__)\n"
        )
        result = sandbox.run(py(code, str(port)), workdir)
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # a connection would be waiting in the backlog by now
    assert result.exit_code == 0, result.output
    assert "connected" not in result.output
    assert result.output.count("failed") == 2


def test_with_network_it_reaches_the_hosts_loopback_and_sees_only_the_env_given(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``network=True`` (an agent and its gateway): the host's 127.0.0.1 answers; the
    environment is the sandbox's own plus what ``env`` sets (nothing of the caller's); the rest
    of the isolation stays (no ``/work``-like host path, an unprivileged uid)."""
    box = Sandbox(config(network=True))
    box.check()  # its probe may find a network
    monkeypatch.setenv("AIOS_SANDBOX_LEAK_PROBE", "leaked")
    code = (
        "import os, socket, sys\n"
        "socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5).close()\n"
        "print('connected', os.environ.get('OPENAI_BASE_URL'),"
        " os.environ.get('AIOS_SANDBOX_LEAK_PROBE'), os.getuid() != 0,"
        " os.path.exists(sys.argv[2]))\n"
    )
    with host_listener() as (_, port):
        result = box.run(
            py(code, str(port), str(REPO / "services")),
            workdir,
            env={"OPENAI_BASE_URL": "http://127.0.0.1:8410/v1"},
        )
    assert result.exit_code == 0, result.output
    assert result.output == "connected http://127.0.0.1:8410/v1 None True False\n"


def test_writes_are_confined_to_the_task_dir(
    sandbox: Sandbox, workdir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "existing").write_text("not for the sandbox")
    marker = f"aios-sandbox-{uuid.uuid4().hex}"
    targets = [
        outside / "new",
        outside / "existing",
        Path(sys.prefix) / marker,  # the interpreter's venv: visible, read-only
        Path("/etc") / marker,
        Path("/usr") / marker,
        Path("/") / marker,
    ]
    code = (
        "import os, sys\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        with open(path, 'a') as f:\n"
        "            f.write('escaped')\n"
        "        print('WROTE', path)\n"
        "    except OSError as exc:\n"
        "        print('refused', path, exc.strerror)\n"
        f"open('/tmp/{marker}', 'w').write('private tmp')\n"
        "open('inside.txt', 'w').write('fixed')\n"
        "os.chmod('inside.txt', 0o6755)\n"
        "os.symlink('/etc/passwd', 'link')\n"
        "try:\n"
        "    os.link('/etc/passwd', 'hardlink')\n"
        "except OSError as exc:\n"
        "    print('no hard link', exc.strerror)\n"
    )
    passwd_before = os.stat("/etc/passwd")
    result = sandbox.run(py(code, *map(str, targets)), workdir)

    assert result.exit_code == 0, result.output
    assert "WROTE" not in result.output
    assert result.output.count("refused") == len(targets)
    assert "no hard link" in result.output and not (workdir / "hardlink").exists()
    assert not (outside / "new").exists()
    assert (outside / "existing").read_text() == "not for the sandbox"
    for target in targets[2:]:
        assert not target.exists()
    assert not Path(f"/tmp/{marker}").exists()
    # Inside the task dir the write landed, and the tree is the workdir owner's again, with the
    # setuid bits the command set stripped; the symlink did not redirect the chown.
    inside = workdir / "inside.txt"
    assert inside.read_text() == "fixed"
    owner = workdir.stat()
    assert (inside.stat().st_uid, inside.stat().st_gid) == (owner.st_uid, owner.st_gid)
    assert inside.stat().st_mode & 0o7777 == 0o755
    assert (workdir / "link").lstat().st_uid == owner.st_uid
    passwd_after = os.stat("/etc/passwd")
    assert (passwd_after.st_uid, passwd_after.st_mode) == (
        passwd_before.st_uid,
        passwd_before.st_mode,
    )


def test_the_host_beyond_the_allow_list_is_not_there(
    sandbox: Sandbox, workdir: Path, tmp_path: Path
) -> None:
    other_task = tmp_path / "other-task"
    other_task.mkdir()
    candidates = [str(other_task), str(REPO / "services"), "/home", "/var", "/run", "/sys", "/srv"]
    hidden = [p for p in candidates if os.path.exists(p)]
    code = (
        "import os, sys\n"
        "print([p for p in sys.argv[1:] if os.path.exists(p)])\n"
        "try:\n"
        "    open('/etc/shadow').read()\n"
        "    print('read shadow')\n"
        "except OSError:\n"
        "    pass\n"
    )
    result = sandbox.run(py(code, *hidden), workdir)
    assert (result.exit_code, result.output) == (0, "[]\n")


def test_the_projects_python_runs_a_tasks_tests(workdir: Path) -> None:
    sandbox = Sandbox(config(disk_bytes=4 * MiB, max_files=100))  # a task needs little room
    (workdir / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (workdir / "test_calc.py").write_text(
        "import unittest\n\nfrom calc import add\n\n\n"
        "class AddTest(unittest.TestCase):\n"
        "    def test_add(self):\n"
        "        self.assertEqual(add(2, 3), 5)\n"
    )
    where = sandbox.run(py("import sys; print(sys.prefix); print(sys.executable)"), workdir)
    assert where.output.splitlines() == [sys.prefix, sys.executable]

    # Without the venv's own plugins (asyncio, hypothesis, ...), which take seconds to import.
    quick = ["env", "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1"]
    pytest_run = sandbox.run(
        [*quick, "python", "-m", "pytest", "-q", "-p", "no:cacheprovider"], workdir
    )
    assert pytest_run.exit_code == 0, pytest_run.output
    assert "1 passed" in pytest_run.output

    unittest_run = sandbox.run(["python", "-m", "unittest", "-q"], workdir)
    assert unittest_run.exit_code == 0, unittest_run.output
    assert "OK" in unittest_run.output


def test_stdin_exit_codes_and_interleaved_output(sandbox: Sandbox, workdir: Path) -> None:
    echoed = sandbox.run(["sh", "-c", "cat; echo err >&2; echo out; exit 3"], workdir, stdin="in\n")
    assert (echoed.exit_code, echoed.output) == (3, "in\nerr\nout\n")
    assert (echoed.truncated, echoed.timed_out, echoed.killed_by) == (False, False, None)
    assert echoed.blocked_reason is None and echoed.duration_s > 0

    missing = sandbox.run(["no-such-command"], workdir)
    assert missing.exit_code == 127 and "no-such-command" in missing.output

    crashed = sandbox.run(["sh", "-c", "kill -SEGV $$"], workdir)
    assert (crashed.exit_code, crashed.killed_by, crashed.blocked_reason) == (139, "SIGSEGV", None)


# -- limits ------------------------------------------------------------------------------------


def test_a_python_fork_bomb_is_contained(sandbox: Sandbox, workdir: Path) -> None:
    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    result = sandbox.run(py(bomb), workdir)
    assert result.killed_by == "process_limit"
    assert result.blocked_reason and "process limit" in result.blocked_reason
    assert result.duration_s < CONFIG.wall_timeout_s / 2
    assert_recovered(sandbox, workdir)


def test_a_fork_bomb_of_threaded_processes_is_contained(sandbox: Sandbox, workdir: Path) -> None:
    # Each process holds threads, so RLIMIT_NPROC (processes and threads) is reached with few
    # processes: the bomb must be seen by its tasks, not its process count.
    bomb = (
        "import os, threading, time\n"
        "def threads():\n"
        "    for _ in range(3):\n"
        "        threading.Thread(target=time.sleep, args=(1000,), daemon=True).start()\n"
        "threads()\n"
        "while True:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            threads()\n"
        "    except (OSError, RuntimeError):\n"
        "        pass\n"
    )
    result = sandbox.run(py(bomb), workdir)
    assert (result.killed_by, result.timed_out) == ("process_limit", False), result.blocked_reason
    assert result.blocked_reason and "process limit" in result.blocked_reason
    assert_recovered(sandbox, workdir)


def test_a_shell_fork_bomb_is_contained(sandbox: Sandbox, workdir: Path) -> None:
    result = sandbox.run(["bash", "-c", ":(){ :|:& };:; exec sleep 60"], workdir)
    assert result.killed_by == "process_limit"
    assert result.blocked_reason and "process limit" in result.blocked_reason
    assert_recovered(sandbox, workdir)


def test_a_memory_hog_is_contained(workdir: Path) -> None:
    box = Sandbox(config(memory_bytes=256 * MiB))
    at_once = box.run(py("b = bytearray(8 * 2**30)"), workdir)
    gradual = box.run(py("chunks = []\nwhile True:\n    chunks.append(b'x' * 2**24)"), workdir)
    for result in (at_once, gradual):
        assert result.exit_code != 0
        assert "MemoryError" in result.output
        assert result.blocked_reason and "memory limit" in result.blocked_reason
    assert_recovered(box, workdir)


def test_memory_is_summed_over_processes(workdir: Path) -> None:
    # Each child stays under the per-process limit; together they hold 400 MiB > 256 MiB.
    box = Sandbox(config(memory_bytes=256 * MiB))
    code = (
        "import os, signal\n"
        "for _ in range(4):\n"
        "    if os.fork() == 0:\n"
        "        held = b'x' * (100 * 2**20)\n"
        "        signal.pause()\n"
        "signal.pause()\n"
    )
    result = box.run(py(code), workdir)
    assert result.killed_by == "memory_limit"
    assert result.blocked_reason and "memory limit" in result.blocked_reason
    assert_recovered(box, workdir)


def test_an_infinite_loop_ends_at_the_cpu_limit(workdir: Path) -> None:
    box = Sandbox(config(cpu_seconds=1))
    result = box.run(py("while True:\n    pass"), workdir)
    assert (result.exit_code, result.killed_by, result.timed_out) == (152, "cpu_limit", False)
    assert result.blocked_reason and "CPU limit" in result.blocked_reason
    assert result.duration_s < 10
    assert_recovered(box, workdir)


def test_an_output_flood_is_truncated_without_being_read(sandbox: Sandbox, workdir: Path) -> None:
    flood = "import sys\nfor _ in range(100):\n    sys.stdout.buffer.write(b'x' * 2**20)\n"
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    result = sandbox.run(py(flood), workdir)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert result.truncated
    assert result.output == "x" * CONFIG.max_output_bytes
    assert result.killed_by == "output_limit"
    assert result.blocked_reason and "output flood" in result.blocked_reason
    assert rss_after - rss_before < 50 * 1024  # 100 MiB were written; far less was held
    assert_recovered(sandbox, workdir)


def test_a_large_file_is_refused(sandbox: Sandbox, workdir: Path) -> None:
    result = sandbox.run(py("open('big', 'wb').write(b'x' * (65 * 2**20))"), workdir)
    assert result.exit_code != 0
    assert result.blocked_reason and "file size limit" in result.blocked_reason
    assert (workdir / "big").stat().st_size <= CONFIG.max_file_bytes


def tree_size(root: Path) -> tuple[int, int]:
    """(entries, bytes of regular files) under ``root``, not following symlinks."""
    entries = size = 0
    for _, dirnames, filenames, dir_fd in os.fwalk(root):
        for name in dirnames + filenames:
            entries += 1
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            size += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return entries, size


def test_the_task_dir_has_a_disk_quota(workdir: Path) -> None:
    box = Sandbox(config(disk_bytes=16 * MiB))
    flood = (
        "import errno\n"
        "for i in range(100_000):\n"
        "    try:\n"
        "        with open(f'f{i}', 'wb') as f:\n"
        "            f.write(b'x' * 65536)\n"
        "    except OSError as exc:\n"
        "        print('refused', errno.errorcode[exc.errno], 'after', i)\n"
        "        break\n"
    )
    result = box.run(py(flood), workdir)
    assert "refused ENOSPC" in result.output, result.output
    assert result.blocked_reason and "disk limit" in result.blocked_reason
    entries, size = tree_size(workdir)
    assert size <= 16 * MiB and 200 < entries <= 257  # what fitted is kept, and no more
    again = box.run(["true"], workdir)  # the task dir is still full: said again
    assert again.blocked_reason and "disk limit" in again.blocked_reason
    shutil.rmtree(workdir)
    workdir.mkdir()
    assert_recovered(box, workdir)


def test_a_flood_of_files_is_stopped(workdir: Path) -> None:
    box = Sandbox(config(max_files=500))
    result = box.run(py("import os\nfor i in range(10**7):\n    os.mkdir(f'd{i}')"), workdir)
    assert result.killed_by == "disk_limit"
    assert result.blocked_reason and "disk limit" in result.blocked_reason
    assert tree_size(workdir)[0] <= 500
    assert_recovered(box, workdir)


def test_the_task_dir_carries_over_between_runs(sandbox: Sandbox, workdir: Path) -> None:
    (workdir / "kept.txt").write_text("host\n")
    (workdir / "removed.txt").write_text("x")
    script = (
        "cat kept.txt; echo sandbox >> kept.txt; rm removed.txt; mkdir -p d/e; "
        "echo new > d/e/new.txt; chmod 0640 d/e/new.txt; chmod 4755 kept.txt; "
        "ln -s kept.txt link; mkfifo fifo; python -c 'import socket; "
        'socket.socket(socket.AF_UNIX).bind("sock")\''
    )
    first = sandbox.run(["sh", "-c", script], workdir)
    assert (first.exit_code, first.output, first.blocked_reason) == (0, "host\n", None)
    assert (workdir / "kept.txt").read_text() == "host\nsandbox\n"
    assert (workdir / "kept.txt").stat().st_mode & 0o7777 == 0o755  # setuid stripped
    assert not (workdir / "removed.txt").exists()
    assert (workdir / "d/e/new.txt").read_text() == "new\n"
    assert (workdir / "d/e/new.txt").stat().st_mode & 0o777 == 0o640
    assert os.readlink(workdir / "link") == "kept.txt"
    # FIFOs and sockets are not carried back to the host, where a reader could block on them.
    assert not (workdir / "fifo").exists() and not (workdir / "sock").exists()
    owner = workdir.stat()
    for path in [workdir / "d", workdir / "d/e/new.txt", workdir / "link"]:
        assert (path.lstat().st_uid, path.lstat().st_gid) == (owner.st_uid, owner.st_gid)
    (workdir / "d/e/new.txt").write_text("edited on the host\n")
    second = sandbox.run(["sh", "-c", "cat d/e/new.txt link"], workdir)
    assert second.output == "edited on the host\nhost\nsandbox\n"


def test_the_timeout_kills_the_whole_tree(workdir: Path) -> None:
    box = Sandbox(config(wall_timeout_s=1.5))
    stubborn = (
        "setsid bash -c 'trap \"\" TERM HUP INT; while :; do :; done' & "
        "(trap '' TERM; setsid sh -c 'trap \"\" TERM; exec sleep 1000' &) ; "
        "trap '' TERM; wait"
    )
    result = box.run(["bash", "-c", stubborn], workdir)
    assert result.timed_out and result.killed_by == "wall_timeout"
    assert result.blocked_reason and "timeout" in result.blocked_reason
    assert 1.5 <= result.duration_s < 5
    assert_recovered(box, workdir)


def test_what_a_command_leaves_running_dies_with_it(sandbox: Sandbox, workdir: Path) -> None:
    daemon = "setsid bash -c 'trap \"\" TERM HUP; while :; do :; done' & echo started"
    result = sandbox.run(["bash", "-c", daemon], workdir)
    assert (result.exit_code, result.output, result.blocked_reason) == (0, "started\n", None)
    assert_recovered(sandbox, workdir)


async def test_concurrent_sandboxes_have_their_own_process_budget(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    dirs = [tmp_path / f"task{i}" for i in range(3)]
    for d in dirs:
        d.mkdir()
    box = Sandbox(config(wall_timeout_s=2))
    forker = (
        "import os, signal\n"
        "for _ in range(20):\n"
        "    if os.fork() == 0:\n"
        "        signal.pause()\n"
        "print(os.getuid(), 'forked', flush=True)\n"
        "signal.pause()\n"
    )
    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    results = await asyncio.gather(
        asyncio.to_thread(box.run, py(bomb), dirs[0]),
        asyncio.to_thread(box.run, py(forker), dirs[1]),
        asyncio.to_thread(box.run, py(forker), dirs[2]),
    )
    assert results[0].killed_by == "process_limit"
    for result in results[1:]:
        assert result.timed_out and result.output.endswith(" forked\n"), result.output
    if AS_ROOT:  # both forkers ran the whole 2 s at once, so they held different uids
        uids = {int(r.output.split()[0]) for r in results[1:]}
        assert len(uids) == 2 and uids <= set(CONFIG.uids)
    assert_recovered(sandbox, dirs[0])


# -- refusing, local execution, configuration -----------------------------------------------------


def test_policy_executor_refuses_to_run_unsandboxed() -> None:
    broken = SandboxConfig(python=Path("/nonexistent/bin/python"))
    with pytest.raises(SandboxUnavailable, match="not executable"):
        policy_executor(broken, environ={})
    with pytest.raises(SandboxUnavailable):
        policy_executor(broken, environ={ALLOW_UNSANDBOXED_ENV: "yes"})
    assert isinstance(policy_executor(broken, environ={ALLOW_UNSANDBOXED_ENV: "1"}), LocalExecutor)
    assert isinstance(policy_executor(CONFIG, environ={ALLOW_UNSANDBOXED_ENV: "1"}), Sandbox)


def test_local_executor_has_the_same_shape_and_still_has_limits(workdir: Path) -> None:
    local: Executor = LocalExecutor(config(wall_timeout_s=1, max_output_bytes=1000))
    ran = local.run(["sh", "-c", "cat; echo err >&2; pwd; exit 4"], workdir, stdin="in\n")
    assert ran == ExecResult(4, f"in\nerr\n{workdir}\n", False, False, None, None, ran.duration_s)

    hung = local.run(["sh", "-c", "sleep 100 & echo $!; wait"], workdir)
    assert hung.timed_out and hung.killed_by == "wall_timeout"
    assert was_killed(int(hung.output))  # the background child too: it was in the group

    flood = local.run(py("print('y' * 10**6)"), workdir)
    assert flood.truncated and flood.output == "y" * 1000 and flood.killed_by == "output_limit"
    assert local.run(["no-such-command"], workdir).exit_code == 127

    hog = local.run(py("b = bytearray(8 * 2**30)"), workdir)  # RLIMIT_AS applies here too
    assert hog.exit_code == 1 and hog.blocked_reason and "memory limit" in hog.blocked_reason


def test_bad_configs_and_task_dirs_are_refused(sandbox: Sandbox, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_processes"):
        SandboxConfig(max_processes=0)
    with pytest.raises(ValueError, match="python"):
        SandboxConfig(python=Path("python"))
    with pytest.raises(SandboxError, match="overlaps"):
        sandbox.run(["true"], Path(sys.prefix))
    with pytest.raises(SandboxError, match="overlaps"):
        sandbox.run(["true"], Path("/"))
    with pytest.raises(SandboxError, match="does not exist"):
        sandbox.run(["true"], tmp_path / "missing")
    with pytest.raises(ValueError, match="disk_bytes"):
        SandboxConfig(disk_bytes=0)
    big = tmp_path / "big"
    big.mkdir()
    (big / "data").write_bytes(b"x" * 2 * MiB)
    with pytest.raises(SandboxError, match="does not fit"):
        Sandbox(config(disk_bytes=MiB)).run(["true"], big)
    assert os.listdir(big) == ["data"] and (big / "data").stat().st_size == 2 * MiB


# -- non-root mode (a container's USER) -----------------------------------------------------------

NON_ROOT_SCRIPT = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
sys.path.append(sys.argv[2])
from aios_rl.envs.shell.sandbox import Sandbox, SandboxConfig
box = Sandbox(SandboxConfig(python=Path(sys.executable), max_processes=16, wall_timeout_s=10))
box.check()
work = Path(sys.argv[3])
write = box.run(["sh", "-c", "id -u; touch ok; touch /etc/nope || echo refused"], work)
bomb = box.run(["python3", "-c", "import os\\nwhile True:\\n  try: os.fork()\\n  except OSError: pass"], work)
print(json.dumps({"write": write.output, "bomb": bomb.killed_by}))
"""


@pytest.mark.skipif(not AS_ROOT, reason="needs root to become another user")
def test_non_root_mode_uses_a_user_namespace(tmp_path: Path) -> None:
    system_python = shutil.which("python3", path="/usr/bin")
    if system_python is None:
        pytest.skip("no /usr/bin/python3 for an unprivileged user")
    nobody = pwd.getpwnam("nobody")
    work = Path(tempfile.mkdtemp(prefix="aios-sandbox-nonroot-"))
    try:
        os.chown(work, nobody.pw_uid, nobody.pw_gid)
        site = next(Path(sys.prefix).glob("lib/python3*/site-packages"))  # for structlog
        proc = subprocess.run(
            [
                "setpriv",
                f"--reuid={nobody.pw_uid}",
                f"--regid={nobody.pw_gid}",
                "--clear-groups",
                system_python,
                "-c",
                NON_ROOT_SCRIPT,
                str(REPO),
                str(site),
                str(work),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        lines = report["write"].splitlines()
        assert (lines[0], lines[-1]) == (str(nobody.pw_uid), "refused"), report
        assert (work / "ok").exists()
        assert report["bomb"] == "process_limit"
    finally:
        shutil.rmtree(work)


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    yield
    assert sandbox_processes() == []
