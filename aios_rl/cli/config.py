"""``aios-rl config``: the settings every service of an embedded stack would run with, and where
each value comes from; and the campaign the training options describe.

A service's settings are its dataclass (``services/<name>/settings.py``), filled from the
environment (``AIOS_<FIELD>``) and its command line (``load_settings``). The sources shown:

- ``default``: the dataclass's default;
- ``env AIOS_X``: your environment (services inherit it);
- ``stack``: what the embedded stack sets for every service (its server, namespace, log format)
  or the registry's arguments of that service (a runner's ``--env``);
- ``flag --student`` (an ``aios-rl`` option): what the training options give the service.

The same options as ``train`` (``--student``, ``--model-path``, ``--teacher``, ``--algorithm``...)
show what they change without starting anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from rich.table import Table

from ..bus import ServiceSettings, explain_settings
from ..stack.services import SERVICES, ServiceEntry, by_name
from ._common import CliError, bus_args, make_console, training_args, url
from ._training import (
    ServiceFlag,
    agent_runner,
    campaign_spec,
    check_student,
    embedded_options,
    service_flags,
)

__all__ = ["add", "campaign_rows", "service_settings", "settings_class"]

CAMPAIGN_OPTIONS: dict[str, tuple[str, ...]] = {
    "algorithm": ("trainer", "algorithm"),
    "learning_rate": ("trainer", "learning_rate"),
    "group_size": ("group_size",),
    "tasks_per_epoch": ("tasks_per_epoch",),
    "epochs": ("epochs",),
    "split": ("split",),
    "strategy": ("rollout_strategy",),
    "seed": ("seed",),
}
"""``aios-rl`` option -> the campaign spec field it sets (a path into the spec)."""


def add(subparsers: argparse._SubParsersAction) -> None:
    config = subparsers.add_parser(
        "config",
        help="the effective settings of every service and where each value comes from "
        "(default, environment, flag); with train's options, what they change",
    )
    config.add_argument(
        "--service",
        action="append",
        choices=[s.name for s in SERVICES],
        metavar="NAME",
        help="only this service (repeatable)",
    )
    training_args(config, epochs=5)
    bus_args(config)
    config.set_defaults(run=_run)


def settings_class(entry: ServiceEntry) -> tuple[type[ServiceSettings], list[str]]:
    """The settings dataclass of a registry entry and the arguments its entry point adds
    (a runner's ``--env``, a CLI teacher's ``--cli``)."""
    args = list(entry.args)
    if entry.module == "services.runner":
        from ..envs import registry

        env = args[args.index("--env") + 1]
        return registry.get(env).settings, args
    package = entry.module
    if package.startswith("services.teacher_cli."):  # python -m services.teacher_cli.<cli>
        package, cli = package.rsplit(".", 1)
        args = ["--cli", cli, *args]
    module = importlib.import_module(f"{package}.settings")
    found = [
        c
        for c in vars(module).values()
        if isinstance(c, type)
        and dataclasses.is_dataclass(c)
        and issubclass(c, ServiceSettings)
        and c.__module__ == module.__name__
    ]
    if len(found) != 1:
        raise CliError(f"{module.__name__} declares {len(found)} settings classes, not one")
    return found[0], args


def service_settings(
    entry: ServiceEntry,
    flags: Sequence[ServiceFlag],
    stack_env: Mapping[str, str],
    environ: Mapping[str, str],
) -> list[tuple[str, Any, str]]:
    """(setting, value, source) for every setting of ``entry`` as an embedded stack would start
    it: ``environ`` and ``stack_env`` (the stack's wins) as its environment, the registry's
    arguments and ``flags`` (its own among them) on its command line. Raises ``CliError`` for a
    value the service would refuse."""
    cls, implied = settings_class(entry)
    own = [f for f in flags if f.service == entry.name]
    argv = [*implied, *(x for f in own for x in (f.flag, f.value))]
    try:
        settings, sources = explain_settings(cls, argv, {**environ, **stack_env})
    except ValueError as exc:
        raise CliError(f"{entry.name} would not start: {exc}") from None
    by_flag = {f.flag: f.option for f in own}
    rows = []
    for name, source in sources.items():
        kind, _, what = source.partition(" ")
        if kind == "env" and what in stack_env:
            source = "stack"
        elif kind == "flag":
            source = f"flag {by_flag[what]}" if what in by_flag else "stack"
        rows.append((name, getattr(settings, name), source))
    return rows


def campaign_rows(args: argparse.Namespace, parser_defaults: Mapping[str, Any]) -> list[tuple]:
    """(field, value, source) of the campaign spec fields the training options set."""
    spec = msgspec.to_builtins(campaign_spec(args, "config", {"shell": 1.0}))
    rows = []
    for option, path in CAMPAIGN_OPTIONS.items():
        value: Any = spec
        for part in path:
            value = value[part]
        given = getattr(args, option) != parser_defaults.get(option)
        source = f"flag --{option.replace('_', '-')}" if given else "default"
        rows.append((".".join(path), value, source))
    return rows


def _run(args: argparse.Namespace) -> int:
    check_student(args)
    flags = service_flags(args)
    stack_env = {"NATS_URL": url(args), "AIOS_NAMESPACE": args.namespace, "AIOS_LOG_FORMAT": "json"}
    registry = by_name()
    entries = [registry[n] for n in args.service] if args.service else list(SERVICES)
    # --agent-cmd: the runner gets a new agent token each run (never shown): a stand-in here.
    extra = {r: {"AIOS_AGENT_TOKEN": "<a new token each run>"} for r in [agent_runner(args)] if r}
    per_service = {
        e.name: service_settings(e, flags, {**stack_env, **extra.get(e.name, {})}, os.environ)
        for e in entries
    }
    campaign = campaign_rows(args, _training_defaults())
    if args.json:
        doc = {
            "services": {
                name: {k: {"value": v, "source": src} for k, v, src in rows}
                for name, rows in per_service.items()
            },
            "campaign": {k: {"value": v, "source": src} for k, v, src in campaign},
        }
        sys.stdout.write(msgspec.json.encode(doc).decode() + "\n")
        return 0
    console = make_console()
    console.print(
        "sources: default; env (your environment); stack (what the stack sets: NATS_URL is "
        "--nats-url's server when one answers, else the embedded one's on a free port); "
        "flag (an aios-rl option)"
    )
    started = embedded_options(args)["scale"]
    for entry in entries:
        runs = entry.replicas or started.get(entry.name)  # type: ignore[union-attr]
        note = "" if runs else " (not started unless asked for)"
        table = Table(title=f"{entry.name}{note}", title_justify="left")
        for col in ("setting", "value", "source"):
            table.add_column(col)
        for name, value, source in per_service[entry.name]:
            table.add_row(name, repr(value), source, style=None if source == "default" else "bold")
        console.print(table)
    table = Table(title="campaign (train / mixed / demo)", title_justify="left")
    for col in ("field", "value", "source"):
        table.add_column(col)
    for field, value, source in campaign:
        table.add_row(field, repr(value), source, style=None if source == "default" else "bold")
    console.print(table)
    return 0


def _training_defaults() -> dict[str, Any]:
    probe = argparse.ArgumentParser()
    training_args(probe, epochs=5)
    return {option: probe.get_default(option) for option in CAMPAIGN_OPTIONS}
