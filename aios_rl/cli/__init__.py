"""The ``aios-rl`` command line: ``up``, ``services``, ``tap``, ``publish``, ``checkpoints``,
``shell``, ``campaign``, ``demo``, ``config``, ``auth``.

One module per command group: each adds its subparser (``add(subparsers)``) and names the
function that runs it (``set_defaults(run=...)``), which returns the exit code.

Every command that needs a bus takes ``--nats-url`` (default ``$NATS_URL``, else
``nats://127.0.0.1:4222``) and ``--namespace`` (default ``$AIOS_NAMESPACE``). The commands that
train, evaluate or read the user's work also take ``--store`` (default ``$AIOS_STORE``, else
``.aios/stack``): with no server at the URL they run on that one store (``stack.embedded``). A
bad argument, an unreachable server or any other error aios-rl raises (an ``AiosError``: the bus
kit's, the state room's, the stack's, ...) gives a one-line message and a non-zero exit, never a
traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from .. import __version__
from ..bus import configure_logging
from ..errors import AiosError
from ..stack.supervisor import PlanError
from . import (
    agentbench,
    auth,
    browser,
    campaign,
    checkpoints,
    config,
    dashboard,
    demo,
    environments,
    mixed,
    orchestrator,
    publish,
    rail,
    serve,
    services,
    shell,
    tap,
    up,
)
from ._common import use_credentials

__all__ = ["build_parser", "main"]

COMMANDS = (
    up,
    serve,
    services,
    tap,
    publish,
    checkpoints,
    shell,
    browser,
    orchestrator,
    mixed,
    environments,
    campaign,
    rail,
    dashboard,
    demo,
    config,
    auth,
    agentbench,
)
"""The command groups, in the order ``aios-rl --help`` lists them."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the message and where to look, not the whole usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="aios-rl",
        description="aios-rl: one student policy, trained by RL across environments on NATS.",
    )
    parser.add_argument("--version", action="version", version=f"aios-rl {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Run one command and exit: 0 when it went well, 1 for an error it reports in one line,
    2 for a bad argument, 130 when interrupted."""
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(
        "aios-rl",
        fmt=os.environ.get("AIOS_LOG_FORMAT", "console"),
        level=os.environ.get("AIOS_LOG_LEVEL", "warning"),
    )
    kept = {name: os.environ.get(name) for name in _CREDENTIAL_VARIABLES}
    try:
        use_credentials(args)
        code = args.run(args)
    except (PlanError, ValueError) as exc:
        parser.exit(2, f"aios-rl {args.command}: error: {exc}\n")
    except AiosError as exc:  # CliError, BusError, StateError, StackError, ...: one line
        parser.exit(1, f"aios-rl {args.command}: error: {exc}\n")
    except KeyboardInterrupt:  # the embedded stack, if any, was stopped on the way out
        parser.exit(130, f"aios-rl {args.command}: interrupted\n")
    finally:
        # A command run in process (a test, a notebook) must not hand its credentials to
        # whatever runs next in that process, nor to the processes it starts later.
        for name, value in kept.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    sys.exit(code)


_CREDENTIAL_VARIABLES = ("NATS_USER", "NATS_PASSWORD", "NATS_CA")
"""What ``use_credentials`` may set for the command's connections."""
