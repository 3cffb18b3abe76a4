"""``aios-rl shell``: ``benchmark-generate``, ``train`` and ``eval`` (declared for every
environment in :mod:`.environments`, run by :mod:`.engine`), and users' bugs as tasks: ``import``
and ``mine`` (:mod:`.shell_import`).

``benchmark-generate`` verifies every task it makes (test runs are cached on disk, so this is slow
once) and can also write them to a directory (``--out``). ``train`` and ``eval`` run on the stack
at ``--nats-url`` when it answers, else on an embedded one on the store (``--store``).
"""

from __future__ import annotations

import argparse

from . import environments, shell_import

__all__ = ["add"]


def add(subparsers: argparse._SubParsersAction) -> None:
    sub = environments.add_group(subparsers, "shell")
    shell_import.add(sub)
