"""Child processes that die with their parent.

``aios-rl up`` (and the embedded stacks of ``demo`` / ``shell train``) start every service and
the nats-server as children in sessions of their own (so Ctrl-C reaches only the supervisor,
which stops them in order). A supervisor that is SIGKILLed cannot stop them: on Linux each child
asks the kernel for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``), so nothing is orphaned.
The signal follows the *thread* that started the child: start children from the main thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable

__all__ = ["die_with_parent"]

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
