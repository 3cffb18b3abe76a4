"""Keeping a backend's raw output for diagnosis, in the Object Store ``evidence``."""

from __future__ import annotations

import hashlib

import msgspec

from contracts import Names, TeacherSignal
from contracts.subjects import OBJECTS_EVIDENCE

from ..bus import Bus, BusError, get_logger
from ._normalize import RAW_INLINE_CHARS

__all__ = ["keep_raw"]


async def keep_raw(bus: Bus, signal: TeacherSignal, raw: str) -> TeacherSignal:
    """``signal`` with ``raw_ref`` naming the stored raw output, when the signal is unusable
    (status other than ``ok``) and the output is longer than the rationale keeps
    (:data:`RAW_INLINE_CHARS`); else ``signal`` unchanged.

    Objects are named by the output's digest, so the same output is stored once. When the Object
    Store refuses, the signal goes out without ``raw_ref`` and its rationale says why (the
    judgement matters more than its evidence)."""
    if signal.status == "ok" or len(raw) <= RAW_INLINE_CHARS:
        return signal
    data = raw.encode("utf-8", errors="replace")
    name = Names.object_teacher_raw(signal.backend, hashlib.sha256(data).hexdigest()[:32])
    try:
        await bus.put_object(bus.names.bucket(OBJECTS_EVIDENCE), name, data)
    except BusError as exc:
        get_logger(backend=signal.backend).warning("evidence.raw_not_stored", error=repr(exc))
        return msgspec.structs.replace(
            signal, rationale=f"{signal.rationale}\n[raw output not stored: {exc!r}]"
        )
    return msgspec.structs.replace(signal, raw_ref=name)
