"""Entry point: ``python -m services.teacher_openai`` (``--base-url``, ``--model``; the key from
``AIOS_API_KEY`` or ``OPENAI_API_KEY``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from aios_rl.bus import Bus, Service, load_settings, run_service
from contracts import TeacherRequest, TeacherSignal

from . import __version__
from .handlers import OpenAITeacher
from .logic import BACKEND
from .settings import OpenAITeacherSettings

NAME = f"teacher-{BACKEND}"


def build(bus: Bus, settings: OpenAITeacherSettings) -> tuple[Service, OpenAITeacher]:
    """The OpenAI-compatible teacher on ``bus`` (not yet running) and its state; ``settings``
    must be :meth:`~OpenAITeacherSettings.resolved`."""
    teacher = OpenAITeacher(bus, settings)
    svc = Service(
        bus,
        name=NAME,
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description="Teacher: an OpenAI-compatible chat-completions server in JSON mode.",
    )
    svc.endpoint(
        "judge",
        bus.names.teacher_request(BACKEND),
        TeacherRequest,
        teacher.answer,
        concurrency=settings.concurrency,
        reply=TeacherSignal,
    )
    svc.stats(teacher.stats)
    return svc, teacher


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(OpenAITeacherSettings, argv, prog="aios-rl-teacher-openai")
    try:
        settings = settings.resolved(os.environ)
    except ValueError as exc:
        sys.exit(f"aios-rl-teacher-openai: error: {exc}")
    run_service(NAME, settings, lambda bus: build(bus, settings)[0].run())
