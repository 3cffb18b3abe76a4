"""``aios-rl auth``: NATS users for the compose stack (``docker-compose.yml``).

``aios-rl auth compose`` runs on the host before ``docker compose up``: it generates (once, and
reuses later) a password for the admin and for every service, with the same code as ``aios-rl
up`` (``stack.auth``), under ``--out`` (default ``.aios/compose``):

- ``auth/<user>.json`` (0600): each user's credentials; ``auth/admin.json`` is what the command
  line on the host connects with (``--credentials .aios/compose/auth/admin.json``);
- ``auth/nats-server.conf`` (0600): the server config, one user per service with the permissions
  ``contracts.access`` declares, under the namespace given (``--namespace`` / ``AIOS_NAMESPACE``);
  compose bind-mounts it read-only into the ``nats`` container;
- ``env/<service>.env`` (0600): that service's ``NATS_USER`` / ``NATS_PASSWORD`` and nothing else,
  read by compose (``env_file:``) for that service's containers only; ``env/admin.env`` is the
  ``provision`` container's.

``--insecure`` (or ``AIOS_INSECURE=1``) writes a server config without users and env files with
empty credentials instead: development only, anyone who reaches the port can do anything.

``aios-rl auth agent-token NAME`` makes a token for an agent of yours to call the agent
gateway's OpenAI-compatible endpoint with (``OPENAI_API_KEY``): printed once, only its digest kept
in ``<store>/auth/agents.json``, which the gateway reads (``docs/agents.md``).

``aios-rl auth provision`` is the compose stack's one-shot ``provision`` service: it connects as
the admin (``NATS_USER`` / ``NATS_PASSWORD`` from ``env/admin.env``) and provisions the topology,
so the services, which may not create streams, find it there.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from contracts import Names
from contracts.access import ADMIN

from ..agents.tokens import AGENTS_FILE, add_agent, write_agents
from ..bus import BusError, ConnectError, connect, provision
from ..stack import SERVICES
from ..stack.auth import (
    AUTH_DIR,
    CONFIG_NAME,
    Credentials,
    _private_dir,
    _write_private,
    write_config,
)
from ._common import CliError, bus_args, store_arg, url

__all__ = ["ENV_DIR", "NAMESPACE_VAR", "add", "write_compose"]

ENV_DIR = "env"
"""The folder under ``--out`` that holds one env file per service (and the admin's)."""

NAMESPACE_VAR = "AIOS_AUTH_NAMESPACE"
"""Kept in ``env/admin.env``: the namespace the server config was rendered for, which ``auth
provision`` checks against the stack's ``AIOS_NAMESPACE``."""

INSECURE_CONFIG = (
    "# No authorization: written by `aios-rl auth compose --insecure` (development only; anyone\n"
    "# who reaches the port can do anything). See docs/security.md.\n"
)


def add(subparsers: argparse._SubParsersAction) -> None:
    auth = subparsers.add_parser("auth", help="NATS users for the compose stack")
    sub = auth.add_subparsers(dest="auth_command", metavar="SUBCOMMAND", required=True)

    compose = sub.add_parser(
        "compose",
        help="generate the compose stack's credentials, env files and nats-server config "
        "(before docker compose up)",
    )
    compose.add_argument(
        "--out",
        default=os.environ.get("AIOS_COMPOSE_AUTH", ".aios/compose"),
        help="where to write them (env AIOS_COMPOSE_AUTH, which docker-compose.yml reads too; "
        "default .aios/compose)",
    )
    compose.add_argument(
        "--namespace",
        default=os.environ.get("AIOS_NAMESPACE", ""),
        help="namespace the stack runs under (env AIOS_NAMESPACE): permissions name its subjects",
    )
    compose.add_argument(
        "--insecure",
        action="store_true",
        default=os.environ.get("AIOS_INSECURE", "") == "1",
        help="no NATS users or permissions, empty credentials (env AIOS_INSECURE=1; development "
        "only; see docs/security.md)",
    )
    compose.set_defaults(run=_compose)

    token = sub.add_parser(
        "agent-token",
        help="a token for one of your agents to call the agent gateway with (printed once)",
    )
    token.add_argument("name", help="the agent's name (letters, digits, '-' or '_')")
    store_arg(token)
    token.set_defaults(run=_agent_token)

    prov = sub.add_parser(
        "provision",
        help="provision the topology as the admin (the compose stack's one-shot provision service)",
    )
    bus_args(prov)
    prov.set_defaults(run=lambda args: asyncio.run(_provision(args)))


def _env_text(creds: Credentials | None, extra: dict[str, str] | None = None) -> str:
    values = {
        "NATS_USER": creds.user if creds else "",
        "NATS_PASSWORD": creds.password if creds else "",
        **(extra or {}),
    }
    return "".join(f"{k}={v}\n" for k, v in values.items())


def write_compose(
    out: str | os.PathLike[str], names: Names, *, insecure: bool = False
) -> tuple[Path, Path]:
    """Write the compose stack's server config and one env file per service (and the admin)
    under ``out``; credentials are generated the first time and reused later. Returns the
    config's path and the env files' folder."""
    env_dir = _private_dir(Path(out) / ENV_DIR)
    services = [s.name for s in SERVICES]
    if insecure:
        config = _private_dir(Path(out) / AUTH_DIR) / CONFIG_NAME
        _write_private(config, INSECURE_CONFIG)
        creds: dict[str, Credentials] = {}
    else:
        config, creds = write_config(out, names, services)
    for user in [ADMIN, *services]:
        extra = {NAMESPACE_VAR: names.namespace} if user == ADMIN else None
        _write_private(env_dir / f"{user}.env", _env_text(creds.get(user), extra))
    # The config holds no secret without users; the nats container must read it whatever its uid.
    config.chmod(0o644 if insecure else 0o600)
    # The agent gateway's token file (no agent yet): compose bind-mounts it, so it must exist.
    agents = Path(out) / AUTH_DIR / AGENTS_FILE
    if not agents.exists():
        write_agents(agents, {})
    return config, env_dir


def _compose(args: argparse.Namespace) -> int:
    try:
        config, env_dir = write_compose(args.out, Names(args.namespace), insecure=args.insecure)
    except OSError as exc:
        raise CliError(f"cannot write under {args.out}: {exc}") from exc
    ns = f"namespace {args.namespace!r}" if args.namespace else "no namespace"
    if args.insecure:
        print(f"{config}: no users (--insecure, development only); empty credentials in {env_dir}/")
    else:
        print(f"{config}: one user per service, {ns}; credentials in {env_dir}/*.env (0600)")
        print(
            f"admin (host command line): --credentials {Path(args.out) / AUTH_DIR / 'admin.json'}"
        )
    return 0


def _agent_token(args: argparse.Namespace) -> int:
    auth_dir = Path(args.store) / AUTH_DIR
    try:
        token = add_agent(auth_dir, args.name)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    except OSError as exc:
        raise CliError(f"cannot write {auth_dir / AGENTS_FILE}: {exc.strerror}") from exc
    print(f"agent {args.name}: its token (shown once; {auth_dir / AGENTS_FILE} keeps a digest):")
    print(f"OPENAI_API_KEY={token}")
    return 0


async def _provision(args: argparse.Namespace) -> int:
    rendered = os.environ.get(NAMESPACE_VAR)
    if rendered is not None and rendered != args.namespace:
        raise CliError(
            f"the server config was generated for namespace {rendered!r}, the stack runs under "
            f"{args.namespace!r}: run `aios-rl auth compose --namespace {args.namespace!r}` again"
        )
    try:
        async with connect(
            url(args), name="aios-rl-provision", names=Names(args.namespace), connect_deadline=60.0
        ) as bus:
            topo = await provision(bus)
    except ConnectError as exc:
        raise CliError(f"no NATS server answers at {url(args)}: {exc}") from exc
    except BusError as exc:
        raise CliError(f"cannot provision the topology: {exc}") from exc
    print(
        f"provisioned {len(topo.streams)} streams, {len(topo.consumers)} consumers, "
        f"{len(topo.buckets)} buckets, {len(topo.object_stores)} object stores"
    )
    return 0
