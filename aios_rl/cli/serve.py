"""``aios-rl serve SERVICE``: one service of the stack, in the foreground, against a NATS server
(or cluster) somewhere else — a runner pool on a CPU host, the sampler and trainer on a GPU host
(``docs/deploy.md``). The process becomes the service (``exec``): signals reach it directly, and
its logs go to the terminal (readable) or as JSON lines when piped. ``--service-args`` passes
the service's own settings (``--service-args '--max-batch 64'``).

Credentials: ``--creds FILE`` (the JSON file ``aios-rl up`` writes per user under
``<store>/auth/``; a host gets only its own services' files), else ``NATS_USER`` /
``NATS_PASSWORD``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from ..stack import SERVICES
from ..stack.services import by_name
from ._common import CliError

__all__ = ["add", "command_for"]


def add(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser(
        "serve", help="run one service in the foreground against a NATS server elsewhere"
    )
    serve.add_argument(
        "service",
        metavar="SERVICE",
        help=f"one of: {', '.join(s.name for s in SERVICES)}",
    )
    serve.add_argument(
        "--nats-url",
        required=True,
        help="the server, or a cluster's members comma-separated (any member will do)",
    )
    serve.add_argument("--namespace", default="", help="namespace of the stack")
    serve.add_argument(
        "--creds",
        type=Path,
        default=None,
        metavar="FILE",
        help="this service's credentials (<store>/auth/<service>.json from aios-rl up)",
    )
    serve.add_argument(
        "--env",
        default=None,
        metavar="NAME",
        help="a runner for this environment (serve runner --env NAME; shell-runner etc. imply it)",
    )
    serve.add_argument(
        "--service-args",
        default="",
        metavar="'FLAGS'",
        help="the service's own flags, quoted (--service-args '--max-batch 64')",
    )
    serve.set_defaults(run=_run)


def command_for(service: str, env: str | None, extra: list[str]) -> list[str]:
    """The command line of ``service`` (``runner`` with ``env`` for an environment of one's
    own). Raises ``CliError`` for an unknown service or a runner without an environment."""
    entries = by_name()
    if service == "runner":
        if not env:
            raise CliError("serve runner needs --env NAME (or serve shell-runner, ...)")
        return [sys.executable, "-m", "services.runner", "--env", env, *extra]
    entry = entries.get(service)
    if entry is None:
        raise CliError(
            f"no service {service!r}; choose one of {', '.join(sorted(entries))} or runner --env"
        )
    if env and "--env" in entry.args:
        raise CliError(f"{service} runs --env {entry.args[-1]}; for another use serve runner --env")
    return [sys.executable, "-m", entry.module, *entry.args, *extra]


def _run(args: argparse.Namespace) -> int:
    extra = shlex.split(args.service_args)
    cmd = command_for(args.service, args.env, extra)
    env = {**os.environ, "NATS_URL": args.nats_url, "AIOS_NAMESPACE": args.namespace}
    if args.creds is not None:
        if not args.creds.is_file():
            raise CliError(f"no credentials file {args.creds}")
        env["AIOS_CREDENTIALS"] = str(args.creds.resolve())
        env.pop("NATS_USER", None)
        env.pop("NATS_PASSWORD", None)
    sys.stdout.flush()
    os.execvpe(cmd[0], cmd, env)
    return 0  # not reached
