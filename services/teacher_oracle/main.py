"""Entry point: ``python -m services.teacher_oracle``."""

from __future__ import annotations

from collections.abc import Sequence

from aios_rl.bus import Bus, Service, load_settings, run_service
from contracts import TeacherRequest, TeacherSignal

from . import __version__
from .handlers import Oracle
from .logic import BACKEND
from .settings import OracleSettings

NAME = f"teacher-{BACKEND}"
"""The service's name at full accuracy (``teacher-noisy-oracle`` below it)."""


def build(bus: Bus, settings: OracleSettings) -> tuple[Service, Oracle]:
    """The oracle teacher on ``bus`` (not yet running) and its state."""
    oracle = Oracle(bus, settings)
    noisy = settings.backend != BACKEND
    svc = Service(
        bus,
        name=f"teacher-{settings.backend}",
        version=__version__,
        shutdown_grace_s=settings.shutdown_grace_s,
        description=(
            f"Fallible teacher: the oracle's answers, each hint and verdict wrong with "
            f"probability {1 - settings.accuracy:g}."
            if noisy
            else "Teacher from ground truth: hints the true fix of generated shell tasks."
        ),
    )
    svc.endpoint(
        "judge",
        bus.names.teacher_request(settings.backend),
        TeacherRequest,
        oracle.answer,
        concurrency=settings.concurrency,
        reply=TeacherSignal,
    )
    svc.stats(oracle.stats)
    return svc, oracle


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(OracleSettings, argv, prog="aios-rl-teacher-oracle")
    run_service(f"teacher-{settings.backend}", settings, lambda bus: build(bus, settings)[0].run())
