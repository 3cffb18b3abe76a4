"""Entry point: ``python -m services.teacher_cli --cli claude|codex|gemini|opencode`` (or
``AIOS_CLI``; ``python -m services.teacher_cli.<cli>`` sets it)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence

from aios_rl.bus import Bus, Service, load_settings, run_service
from contracts import TeacherRequest, TeacherSignal

from . import __version__
from .handlers import CliTeacher
from .settings import CliTeacherSettings


def build(bus: Bus, settings: CliTeacherSettings) -> tuple[Service, CliTeacher]:
    """The ``teacher-<cli>`` service on ``bus`` (not yet running) and its state."""
    teacher = CliTeacher(bus, settings)
    svc = Service(
        bus,
        name=f"teacher-{settings.cli}",
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description=f"Teacher: the {settings.cli} CLI judges episodes (subprocess per request).",
    )
    svc.endpoint(
        "judge",
        bus.names.teacher_request(settings.cli),
        TeacherRequest,
        teacher.answer,
        concurrency=settings.concurrency,
        reply=TeacherSignal,
    )
    svc.stats(teacher.stats)
    return svc, teacher


def main(argv: Sequence[str] | None = None, *, default_cli: str | None = None) -> None:
    """Run the service; ``default_cli`` names the CLI unless the command line does."""
    args = list(sys.argv[1:] if argv is None else argv)
    if default_cli is not None:
        args = ["--cli", default_cli, *args]
    settings = load_settings(CliTeacherSettings, args, prog="aios-rl-teacher-cli")
    if shutil.which(settings.program) is None:
        sys.exit(
            f"aios-rl-teacher-cli: error: {settings.program!r} is not an executable on PATH; "
            f"install the {settings.cli} CLI or point --executable at it."
        )
    run_service(f"teacher-{settings.cli}", settings, lambda bus: build(bus, settings)[0].run())
