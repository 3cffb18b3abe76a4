"""Settings of the runner: the environment's own settings class (``RunnerSettings`` or the
subclass its adapter declares), chosen by ``--env`` / ``AIOS_ENV`` before the rest is read."""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Sequence
from typing import Any

from aios_rl.bus import load_settings
from aios_rl.envs import registry
from aios_rl.envs.base import EnvSpec
from aios_rl.envs.runner import RunnerSettings

__all__ = ["RunnerSettings", "settings_for"]


def settings_for(
    argv: Sequence[str] | None, *, prog: str = "aios-rl-runner"
) -> tuple[EnvSpec[Any], RunnerSettings]:
    """The environment named by ``--env`` (or ``AIOS_ENV``) and its runner settings from the
    environment variables and ``argv``. A missing or unknown environment ends the process with
    a one-line message (exit 2), like any bad setting."""
    pre = argparse.ArgumentParser(prog=prog, add_help=False)
    pre.add_argument("--env", default=os.environ.get("AIOS_ENV", ""))
    pre.add_argument("--env-module", default=os.environ.get("AIOS_ENV_MODULE", ""))
    known, _ = pre.parse_known_args(argv)
    if known.env_module:
        try:
            importlib.import_module(known.env_module)
        except ImportError as exc:
            pre.exit(2, f"{prog}: error: cannot import --env-module {known.env_module}: {exc}\n")
    if not known.env:
        pre.exit(2, f"{prog}: error: --env is required (one of: {', '.join(registry.names())})\n")
    try:
        spec = registry.get(known.env)
    except registry.UnknownEnvironmentError as exc:
        pre.exit(2, f"{prog}: error: {exc}\n")
    settings = load_settings(spec.settings, argv, prog=prog)
    if settings.env != spec.name:  # a subclass's default, overridden: keep what was asked for
        raise SystemExit(f"{prog}: error: --env {known.env} but the settings say {settings.env}")
    return spec, settings
