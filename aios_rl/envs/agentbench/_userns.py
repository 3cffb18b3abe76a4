"""Helper process of :class:`~.machine.Machine` (run as ``python -m``, single-threaded): make a
user namespace, say ``ready`` (with its pid) on stdout, wait for ``go`` on
stdin (the host has then written the full uid/gid map), become root of the namespace and exec the
command given. The map cannot be written by the process itself (it maps uids it does not own),
and ``unshare(1)`` would exec before the map exists, which drops every capability."""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWUSER = 0x10000000


def main() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUSER) != 0:
        err = ctypes.get_errno()
        sys.exit(f"unshare: {os.strerror(err)}")
    os.write(1, f"ready {os.getpid()}\n".encode())
    if os.read(0, 16).strip() != b"go":
        sys.exit("no uid map")
    os.setresgid(0, 0, 0)
    os.setgroups([])
    os.setresuid(0, 0, 0)
    os.execv(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
