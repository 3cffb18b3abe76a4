"""Child processes that die with their parent.

``aios-rl up`` (and the embedded stacks of ``demo`` / ``shell train``) start every service and
the nats-server as children in sessions of their own (so Ctrl-C reaches only the supervisor,
which stops them in order). A supervisor that is SIGKILLed cannot stop them: on Linux each child
asks the kernel for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``), so nothing is orphaned.
The signal follows the *thread* that started the child: start children from the main thread,
or with :func:`popen_owned`, which starts one from a thread that lives exactly as long as the
child (for code that runs in worker threads, such as ``asyncio.to_thread``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

__all__ = ["die_with_parent", "popen_owned"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive ``sig`` when this process dies (``None``
    where the platform has no such thing). Made in the parent, so the child can tell that the
    parent died before the request took effect (then it exits at once)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl
            os._exit(1)

    return preexec


def popen_owned(argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, **kwargs)`` for a child that must not outlive this process,
    whichever thread asks. ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child
    ends, so a child started from an executor thread would get the signal when that thread is
    retired. The child is started from a daemon thread of its own that waits for it: the thread
    ends when the child does, or when this process dies, and then the child gets SIGTERM."""
    started: list[subprocess.Popen[bytes] | BaseException] = []
    ready = threading.Event()

    def own() -> None:
        try:
            proc = subprocess.Popen(argv, preexec_fn=die_with_parent(), **kwargs)  # type: ignore[call-overload]
        except BaseException as exc:  # handed to the caller
            started.append(exc)
            ready.set()
            return
        started.append(proc)
        ready.set()
        proc.wait()

    threading.Thread(target=own, name=f"owner-{os.path.basename(argv[0])}", daemon=True).start()
    ready.wait()
    if isinstance(started[0], BaseException):
        raise started[0]
    return started[0]
