"""NATS users for a stack: one per service and the admin, with passwords generated once and kept
under ``<data_dir>/auth/`` (a 0700 folder, 0600 files), and the nats-server config that gives
each user the permissions ``contracts.access`` derives for it.

:func:`render_config` is pure (tested without a server); :func:`ensure_credentials` and
:func:`write_config` are the thin file handling. Passwords never go to a log: services get theirs
in the environment (``NATS_USER`` / ``NATS_PASSWORD``), the command line reads the admin's file.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from contracts import ENVIRONMENTS, Names
from contracts.access import ADMIN, Access, Permissions, access, answerers, permissions
from contracts.subjects import runner_name, topology

from .tls import TlsFiles, ensure_tls

__all__ = [
    "AUTH_DIR",
    "Credentials",
    "StackAuth",
    "admin_credentials",
    "credentials_env",
    "ensure_credentials",
    "existing",
    "load_credentials",
    "prepare",
    "render_config",
    "write_config",
]

AUTH_DIR = "auth"
"""The folder under a data dir that holds the users' credentials and the server config."""

CONFIG_NAME = "nats-server.conf"


class Credentials(NamedTuple):
    """One NATS user's name and password. Its ``repr`` hides the password."""

    user: str
    password: str

    def __repr__(self) -> str:
        return f"Credentials(user={self.user!r}, password='***')"


def credentials_env(creds: Credentials | None) -> dict[str, str]:
    """The environment a process connects with (``NATS_USER`` / ``NATS_PASSWORD``); empty values
    (no credentials) for ``None``, so nothing is inherited."""
    if creds is None:
        return {"NATS_USER": "", "NATS_PASSWORD": ""}
    return {"NATS_USER": creds.user, "NATS_PASSWORD": creds.password}


def _quote(text: str) -> str:
    """A nats-server config string (JSON quoting is valid there)."""
    return json.dumps(text)


def _list(items: Iterable[str]) -> str:
    return "[" + ", ".join(_quote(i) for i in items) + "]"


def render_config(
    users: Mapping[str, tuple[str, Permissions | None]], *, tls: TlsFiles | None = None
) -> str:
    """The ``authorization`` block of a nats-server config: user -> (password, permissions);
    ``None`` permissions: unrestricted (the admin). With ``tls``, a ``tls`` block too (every
    client must then speak TLS). Pure."""
    lines = []
    if tls is not None:
        lines += [
            "tls {",
            f"  cert_file: {_quote(str(tls.cert))}",
            f"  key_file: {_quote(str(tls.key))}",
            "}",
        ]
    lines += ["authorization {", "  users = ["]
    for user, (password, perms) in sorted(users.items()):
        entry = f"    {{user: {_quote(user)}, password: {_quote(password)}"
        if perms is not None:
            entry += (
                ", permissions: {"
                f"publish: {{allow: {_list(perms.publish_allow)}, deny: {_list(perms.publish_deny)}}}, "
                f"subscribe: {{allow: {_list(perms.subscribe_allow)}"
                + (f", deny: {_list(perms.subscribe_deny)}" if perms.subscribe_deny else "")
                + "}"
                + (
                    f', allow_responses: {{max: 1, expires: "{perms.response_window_s:g}s"}}'
                    if perms.allow_responses
                    else ""
                )
                + "}"
            )
        lines.append(entry + "}")
    lines += ["  ]", "}", ""]
    return "\n".join(lines)


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (never world-readable, not even
    for a moment)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def load_credentials(data_dir: str | os.PathLike[str], user: str) -> Credentials | None:
    """``user``'s credentials kept under ``data_dir``, ``None`` when there are none."""
    path = Path(data_dir) / AUTH_DIR / f"{user}.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return Credentials(str(doc["user"]), str(doc["password"]))


def admin_credentials(data_dir: str | os.PathLike[str]) -> Credentials | None:
    """The admin's credentials under ``data_dir`` (what the command line connects with)."""
    return load_credentials(data_dir, ADMIN)


def ensure_credentials(
    data_dir: str | os.PathLike[str], users: Iterable[str]
) -> dict[str, Credentials]:
    """The credentials of ``users`` and the admin, generating (and keeping, 0600 in a 0700
    folder) a random password for each user that has none yet."""
    folder = _private_dir(Path(data_dir) / AUTH_DIR)
    out: dict[str, Credentials] = {}
    for user in dict.fromkeys([ADMIN, *users]):
        creds = load_credentials(data_dir, user)
        if creds is None:
            creds = Credentials(user, secrets.token_urlsafe(24))
            _write_private(
                folder / f"{user}.json", json.dumps({"user": user, "password": creds.password})
            )
        out[user] = creds
    return out


def write_config(
    data_dir: str | os.PathLike[str],
    names: Names,
    services: Iterable[str],
    *,
    grants: Mapping[str, Access] | None = None,
    environments: tuple[str, ...] = ENVIRONMENTS,
    tls: TlsFiles | None = None,
) -> tuple[Path, dict[str, Credentials]]:
    """Write the server config for ``services`` (names of ``grants``, by default every built-in
    declaration of ``contracts.access`` and a runner for each of ``environments``) under
    ``names``, with their credentials and the admin's.
    Returns the config's path and the credentials. Raises ``ValueError`` for a service that
    declares no access."""
    grants = dict(grants or access(names, environments))
    topo = topology(names, environments)
    wanted = list(dict.fromkeys(services))
    unknown = [s for s in wanted if s not in grants]
    if unknown:
        raise ValueError(
            f"no access is declared for {', '.join(unknown)}: add an Access in contracts/access.py"
        )
    # Every declared service gets a user, so one started later (``up --only``) can connect too.
    creds = ensure_credentials(data_dir, [*grants, *wanted])
    users: dict[str, tuple[str, Permissions | None]] = {ADMIN: (creds[ADMIN].password, None)}
    replies = answerers(grants)
    for user, grant in grants.items():
        users[user] = (
            creds[user].password,
            permissions(names, grant, topo, answers=replies.get(user, ())),
        )
    path = Path(data_dir) / AUTH_DIR / CONFIG_NAME
    _write_private(path, render_config(users, tls=tls))
    return path, creds


class StackAuth(NamedTuple):
    """What a stack started here runs with: the server config, the admin's credentials, and
    each service's environment (its ``NATS_USER`` / ``NATS_PASSWORD``)."""

    config: Path
    admin: Credentials
    service_env: dict[str, dict[str, str]]
    ca: Path | None = None
    """The CA clients must trust when the server speaks TLS."""


def prepare(
    data_dir: str | os.PathLike[str],
    names: Names,
    services: Iterable[str],
    *,
    tls: bool = False,
    environments: Iterable[str] = (),
) -> StackAuth:
    """Credentials for ``services`` and the admin under ``data_dir`` (generated the first time)
    and the server config giving each its permissions under ``names``; with ``tls``, certificates
    too (``stack.tls``) and ``NATS_CA`` in each service's environment. ``environments`` beyond
    the built-in ones get a runner user each (``<env>-runner``, with ``runner_access``), for a
    user's own environment whose runner is started outside the stack. Raises ``ValueError`` for
    a service that declares no access, ``TlsError`` when the certificates cannot be made."""
    extra = tuple(e for e in environments if e not in ENVIRONMENTS)
    wanted = [*services, *(runner_name(e) for e in extra)]
    files = ensure_tls(Path(data_dir) / AUTH_DIR / "tls") if tls else None
    config, creds = write_config(
        data_dir, names, wanted, environments=(*ENVIRONMENTS, *extra), tls=files
    )
    ca = files.ca.resolve() if files else None
    return StackAuth(
        config=config,
        admin=creds[ADMIN],
        service_env={
            s: {**credentials_env(creds[s]), **({"NATS_CA": str(ca)} if ca else {})} for s in wanted
        },
        ca=ca,
    )


def existing(data_dir: str | os.PathLike[str], services: Iterable[str]) -> StackAuth | None:
    """The credentials kept under ``data_dir`` for a stack whose server runs elsewhere (``up
    --nats-url``), ``None`` when there are no admin credentials there. A service without its own
    credentials connects with none."""
    admin = admin_credentials(data_dir)
    if admin is None:
        return None
    env = {s: credentials_env(load_credentials(data_dir, s)) for s in services}
    return StackAuth(config=Path(data_dir) / AUTH_DIR / CONFIG_NAME, admin=admin, service_env=env)
