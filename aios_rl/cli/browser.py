"""``aios-rl browser benchmark-generate | train | eval``: the browser environment's commands,
declared as every environment's (:mod:`.environments`; ``train`` / ``eval`` run on
``--nats-url``'s stack or an embedded one)."""

from __future__ import annotations

import argparse

from . import environments

__all__ = ["add"]


def add(subparsers: argparse._SubParsersAction) -> None:
    environments.add_group(subparsers, "browser")
