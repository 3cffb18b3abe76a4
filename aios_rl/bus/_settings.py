"""Service settings: one dataclass, a docstring per field, filled from the environment and argv.

Each field ``foo_bar`` reads ``AIOS_FOO_BAR`` (``NATS_URL`` for ``nats_url``) and ``--foo-bar``;
the command line wins. The docstring under a field is its ``--help`` text.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import os
import sys
import textwrap
import typing
from collections.abc import Sequence
from typing import Any, TypeVar

__all__ = ["ServiceSettings", "explain_settings", "field_docs", "load_settings"]

S = TypeVar("S", bound="ServiceSettings")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServiceSettings:
    """Settings every service shares."""

    nats_url: str = "nats://127.0.0.1:4222"
    """NATS server URL (env ``NATS_URL``)."""
    namespace: str = ""
    """Prefix for every subject, stream and bucket, so stacks can share one server."""
    log_format: str = "auto"
    """``auto`` (JSON unless a terminal), ``json`` or ``console``."""
    log_level: str = "info"
    """``debug``, ``info``, ``warning`` or ``error``."""
    shutdown_grace_s: float = 10.0
    """On SIGTERM, how long in-flight work may run before it is handed back (nak)."""


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> the docstring written under it, for ``cls`` and its dataclass bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, nxt in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def _env_name(name: str) -> str:
    return "NATS_URL" if name == "nats_url" else f"AIOS_{name.upper()}"


def _converter(tp: Any, name: str):
    origin = typing.get_origin(tp)
    if tp is bool:

        def to_bool(text: str) -> bool:
            low = text.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"{name} takes true or false, not {text!r}")

        return to_bool
    if tp in (int, float, str):
        return tp
    if origin in (list, tuple):
        (inner,) = typing.get_args(tp)[:1]
        return lambda text: [inner(part) for part in text.split(",") if part]
    raise TypeError(f"setting {name} has a type the loader does not know: {tp!r}")


def _parser(cls: type, prog: str | None) -> argparse.ArgumentParser:
    """A parser with ``--<field>`` for every field of ``cls`` (values as strings, default
    ``None``: not given)."""
    docs = field_docs(cls)
    parser = argparse.ArgumentParser(
        prog=prog, description=(cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else None
    )
    for f in dataclasses.fields(cls):
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else None  # type: ignore[misc]
            )
        )
        help_text = f"{docs.get(f.name, '')} [env {_env_name(f.name)}; default {default!r}]"
        parser.add_argument(
            f"--{f.name.replace('_', '-')}", dest=f.name, type=str, default=None, help=help_text
        )
    return parser


def _from_environ(cls: type, environ: typing.Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    """Field -> (value, ``env NAME``) for every field the environment sets. Raises
    ``ValueError`` (one line) for a value that does not convert."""
    hints = typing.get_type_hints(cls)
    out: dict[str, tuple[Any, str]] = {}
    for f in dataclasses.fields(cls):
        env = _env_name(f.name)
        raw = environ.get(env)
        if raw is not None:
            try:
                out[f.name] = (_converter(hints[f.name], f.name)(raw), f"env {env}")
            except ValueError as exc:
                raise ValueError(f"environment {env}={raw!r}: {exc}") from None
    return out


def _from_args(cls: type, args: argparse.Namespace) -> dict[str, tuple[Any, str]]:
    """Field -> (value, ``flag --name``) for every field the command line sets. Raises
    ``ValueError`` (one line) for a value that does not convert."""
    hints = typing.get_type_hints(cls)
    out: dict[str, tuple[Any, str]] = {}
    for f in dataclasses.fields(cls):
        raw = getattr(args, f.name)
        if raw is not None:
            flag = f"--{f.name.replace('_', '-')}"
            try:
                out[f.name] = (_converter(hints[f.name], f.name)(raw), f"flag {flag}")
            except ValueError as exc:
                raise ValueError(f"{flag} {raw!r}: {exc}") from None
    return out


def load_settings(cls: type[S], argv: Sequence[str] | None = None, *, prog: str | None = None) -> S:
    """Build ``cls`` from environment variables and ``argv``.

    A bad value ends the process with a one-line message (argparse's exit 2)."""
    parser = _parser(cls, prog)

    def bad_value(message: str) -> typing.NoReturn:
        # parser.error() would print the whole usage first; a bad value needs one line.
        parser.exit(2, f"{parser.prog}: error: {message}\n")

    try:
        given = _from_environ(cls, os.environ)
    except ValueError as exc:
        bad_value(str(exc))
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        given |= _from_args(cls, args)
        return cls(**{name: value for name, (value, _) in given.items()})
    except (TypeError, ValueError) as exc:
        bad_value(str(exc))


def explain_settings(
    cls: type[S], argv: Sequence[str] = (), environ: typing.Mapping[str, str] | None = None
) -> tuple[S, dict[str, str]]:
    """``cls`` as :func:`load_settings` builds it from ``environ`` (default ``os.environ``) and
    ``argv``, and where each field's value came from: ``default``, ``env AIOS_X`` or
    ``flag --x``. Raises ``ValueError`` (one line) for a bad value or an unknown flag."""
    parser = _parser(cls, cls.__name__)
    given = _from_environ(cls, os.environ if environ is None else environ)
    args, unknown = parser.parse_known_args(list(argv))
    if unknown:
        raise ValueError(f"{cls.__name__} has no setting {unknown[0]}")
    given |= _from_args(cls, args)
    settings = cls(**{name: value for name, (value, _) in given.items()})
    sources = {
        f.name: given[f.name][1] if f.name in given else "default" for f in dataclasses.fields(cls)
    }
    return settings, sources
